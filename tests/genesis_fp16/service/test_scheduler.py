"""The scheduler's triggers: a schedule string becomes an interval or a cron trigger."""

from __future__ import annotations

from apscheduler.triggers.cron import CronTrigger

from genesis_fp16.service.scheduler import build_trigger


def test_a_cron_line_builds_a_cron_trigger_with_each_field_in_its_place() -> None:
    """'5 */2 * * 1-5': minute 5, every second hour, Monday to Friday."""
    trigger = build_trigger("5 */2 * * 1-5", 0)
    assert isinstance(trigger, CronTrigger)
    fields = {field.name: str(field) for field in trigger.fields}
    assert (fields["minute"], fields["hour"], fields["day"]) == ("5", "*/2", "*")
    assert (fields["month"], fields["day_of_week"]) == ("*", "1-5")
