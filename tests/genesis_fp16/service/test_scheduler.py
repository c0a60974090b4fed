"""The scheduler's triggers: a schedule string becomes an interval or a cron trigger."""

from __future__ import annotations

from typing import Any

from apscheduler.triggers.cron import CronTrigger

from genesis_fp16.service.scheduler import build_trigger


def test_a_cron_line_builds_a_cron_trigger_with_each_field_in_its_place() -> None:
    """'5 */2 * * 1-5': minute 5, every second hour, Monday to Friday."""
    trigger = build_trigger("5 */2 * * 1-5", 0)
    assert isinstance(trigger, CronTrigger)
    fields = {field.name: str(field) for field in trigger.fields}
    assert (fields["minute"], fields["hour"], fields["day"]) == ("5", "*/2", "*")
    assert (fields["month"], fields["day_of_week"]) == ("*", "1-5")


def test_sync_schedules_reschedules_only_a_changed_schedule_and_removes_the_rest() -> None:
    """A new agent is scheduled, a changed schedule rescheduled (an unchanged one left
    alone, the same interval spelt otherwise too), a disabled or uninstalled agent removed."""
    from genesis_fp16.config.agent_settings import AgentSettings
    from genesis_fp16.config.settings import Settings
    from genesis_fp16.service.scheduler import AgentScheduler

    def settings(schedule: str, enabled: bool = True) -> Settings:
        return Settings(agents={"a": AgentSettings(schedule=schedule, enabled=enabled)})

    plugins: dict[str, Any] = {"a": object(), "b": object()}
    scheduler = AgentScheduler(settings("60"), lambda agent, plugin: None, lambda: None)
    scheduler.start(settings("60"), {})
    try:
        assert scheduler.sync(settings("60"), plugins) == [
            "a: scheduled every 60",
            f"b: scheduled every {Settings().schedule}",
        ]
        assert scheduler.sync(settings("60.0"), plugins) == []
        assert scheduler.sync(settings("*/5 * * * *"), plugins) == ["a: rescheduled to */5 * * * *"]
        assert scheduler.sync(settings("*/5 * * * *"), plugins) == []
        assert scheduler.sync(settings("60", enabled=False), plugins) == ["a: disabled"]
        assert scheduler.sync(settings("60"), {"a": plugins["a"]}) == [
            "b: unscheduled (uninstalled)",
            "a: scheduled every 60",
        ]
        assert scheduler.scheduled_agents() == ["a"]
    finally:
        scheduler.shutdown()
