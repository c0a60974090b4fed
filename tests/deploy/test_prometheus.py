"""deploy/prometheus/: rules and config checked by promtool, rule unit tests run by promtool."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml
from prometheus_client import CollectorRegistry, ProcessCollector
from promql_names import exported_series_names, selectors

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS = ROOT / "deploy" / "prometheus"
RULES = PROMETHEUS / "rules.yml"
# Every rule unit test file: rules_test.yml and first_scrape_test.yml (first scrapes).
RULE_TEST_FILES = sorted((PROMETHEUS / "tests").glob("*_test.yml"))
RUNBOOK = ROOT / "docs" / "operations.md"
# Series Prometheus itself makes, which rules may use beside the daemon's own.
PROMETHEUS_SERIES = {"up"}
# The born-counter clauses' first-scrape guard (rules.yml's header).
FIRST_SCRAPE_GUARD = re.compile(
    r"\s*unless on \(job, instance\)\s*\(time\(\) - process_start_time_seconds[^)]*\)"
)


def _alerts() -> list[dict[str, Any]]:
    groups = yaml.safe_load(RULES.read_text())["groups"]
    return [rule for group in groups for rule in group["rules"] if "alert" in rule]


def _promtool(tool: str, *args: str, cwd: Path = PROMETHEUS) -> subprocess.CompletedProcess[str]:
    return subprocess.run([tool, *args], capture_output=True, text=True, timeout=120, cwd=cwd)


def test_rules_pass_promtool_check(promtool: str) -> None:
    """promtool check rules accepts rules.yml and reports no lint findings."""
    result = _promtool(promtool, "check", "rules", "--lint=all", "--lint-fatal", "rules.yml")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS" in result.stdout


def test_prometheus_config_passes_promtool_check(promtool: str) -> None:
    """promtool check config accepts prometheus.yml and the rule file it loads."""
    result = _promtool(promtool, "check", "config", "prometheus.yml")
    assert result.returncode == 0, result.stdout + result.stderr


def _test_files() -> list[str]:
    return [f"tests/{path.name}" for path in RULE_TEST_FILES]


def _rule_test_cases() -> list[dict[str, Any]]:
    """Every test group of every rule unit test file."""
    return [test for path in RULE_TEST_FILES for test in yaml.safe_load(path.read_text())["tests"]]


def test_rule_unit_tests_pass(promtool: str) -> None:
    """promtool test rules runs the rule unit tests, and they pass."""
    assert {"first_scrape_test.yml", "rules_test.yml"} <= {p.name for p in RULE_TEST_FILES}
    result = _promtool(promtool, "test", "rules", *_test_files())
    assert result.returncode == 0, result.stdout + result.stderr


def _checks(group: dict[str, Any], alerts: set[str], instance: str | None) -> bool:
    """Whether a rule unit test group checks one of ``alerts`` (on a series of
    ``instance``, when given)."""
    series = [s["series"] for s in group.get("input_series", [])]
    return any(t["alertname"] in alerts for t in group.get("alert_rule_test", [])) and (
        instance is None or any(f'instance="{instance}"' in s for s in series)
    )


def _rule_tests_against(
    promtool: str, tmp_path: Path, rules: str, alerts: set[str], instance: str | None = None
) -> str:
    """promtool's output for the rule unit tests of ``alerts`` (every test group that
    checks one of them, on ``instance`` when given, from every file) run against ``rules``
    (a changed copy), after they pass on the rules as they are. The whole files take
    promtool about 20 s of CPU, mostly in groups of other alerts and instances, which
    test_rule_unit_tests_pass runs."""
    assert rules != RULES.read_text()
    (tmp_path / "tests").mkdir()
    names = []
    for path in RULE_TEST_FILES:
        spec = yaml.safe_load(path.read_text())
        groups = [group for group in spec["tests"] if _checks(group, alerts, instance)]
        if groups:
            (tmp_path / "tests" / path.name).write_text(yaml.safe_dump({**spec, "tests": groups}))
            names.append(f"tests/{path.name}")
    assert names, f"no rule unit test checks {sorted(alerts)}"
    shutil.copy(RULES, tmp_path / "rules.yml")  # those groups pass on the rules as they are
    result = _promtool(promtool, "test", "rules", *names, cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    (tmp_path / "rules.yml").write_text(rules)
    result = _promtool(promtool, "test", "rules", *names, cwd=tmp_path)
    assert result.returncode != 0
    return result.stdout + result.stderr


def test_rule_unit_tests_catch_a_changed_threshold(promtool: str, tmp_path: Path) -> None:
    """The unit tests fail against a copy of the rules with a loosened threshold."""
    loosened = RULES.read_text().replace("genesis_fp16_overflow_rate > 0.05", "x > 0.5")
    alert = "GenesisFp16HighOverflowRate"
    assert f"alertname: {alert}, time:" in _rule_tests_against(
        promtool, tmp_path, loosened, {alert}
    )


def test_rule_unit_tests_catch_a_stall_rule_on_finished_runs(promtool: str, tmp_path: Path) -> None:
    """Counting finished runs (the rule that fired for a healthy agent) fails the tests at
    the first scrape that lands after the run's last step and before its count."""
    old = RULES.read_text().replace(
        "genesis_fp16_training_runs_started_total[1h]",
        'genesis_fp16_training_runs_total{outcome!="up_to_date"}[1h]',
    )
    stalled = {"GenesisFp16TrainingStalled"}
    output = _rule_tests_against(promtool, tmp_path, old, stalled, "after-last-step")
    assert 'alertname="GenesisFp16TrainingStalled", instance="after-last-step"' in output


def test_rule_unit_tests_catch_born_counters_without_the_first_scrape_guard(
    promtool: str, tmp_path: Path
) -> None:
    """Without the guard, each born-counter alert fires on a new Prometheus's first scrape
    of a day-old daemon (instance "old"), and the tests say so for every one of them."""
    unguarded, count = FIRST_SCRAPE_GUARD.subn("", RULES.read_text())
    guarded = {a["alert"] for a in _alerts() if "process_start_time_seconds" in a["expr"]}
    assert count == len(guarded) >= 8
    output = _rule_tests_against(promtool, tmp_path, unguarded, guarded, "old")
    for alert in guarded:
        assert re.search(rf'alertname="{alert}".*instance="old"', output), alert


def test_rule_unit_tests_catch_an_events_dropped_rule_on_the_count_itself(
    promtool: str, tmp_path: Path
) -> None:
    """genesis_fp16_events_dropped counts since the outbox was made: a rule on the count
    alone fires on a new Prometheus's first scrape of an old outbox, and the tests say so."""
    rule = "genesis_fp16_events_dropped > min_over_time(genesis_fp16_events_dropped[1h])"
    assert rule in RULES.read_text()
    raw = RULES.read_text().replace(rule, "genesis_fp16_events_dropped > 0")
    output = _rule_tests_against(promtool, tmp_path, raw, {"GenesisFp16EventsDropped"}, "old")
    assert re.search(r'alertname="GenesisFp16EventsDropped".*instance="old"', output)


def test_every_counter_alert_has_a_first_scrape_test() -> None:
    """Each alert built on increase() is tested silent on a target first scraped after
    time 0 (its series start with missing samples), so a first scrape mid-run is covered."""
    late = set()
    for test in _rule_test_cases():
        first_scraped_late = {
            series["series"].split("{")[0]
            for series in test["input_series"]
            if series["values"].startswith("_")
        }
        for case in test.get("alert_rule_test", []):
            if case.get("exp_alerts") == []:
                late |= {(case["alertname"], name) for name in first_scraped_late}
    for alert in _alerts():
        counters = {s.metric for s in selectors(alert["expr"]) if s.function == "increase"}
        missing = {c for c in counters if (alert["alert"], c) not in late}
        assert not missing, f"{alert['alert']}: no first-scrape test of {sorted(missing)}"


def test_every_alert_is_tested_firing() -> None:
    """Each alert in rules.yml has a unit test in which it fires."""
    fired = {
        case["alertname"]
        for test in _rule_test_cases()
        for case in test.get("alert_rule_test", [])
        if case.get("exp_alerts")
    }
    assert {alert["alert"] for alert in _alerts()} <= fired


def test_alerts_cover_the_required_conditions() -> None:
    """The alerts the issue asks for all exist."""
    names = {alert["alert"] for alert in _alerts()}
    assert names >= {
        "GenesisFp16Down",
        "GenesisFp16TrainingStalled",
        "GenesisFp16HighOverflowRate",
        "GenesisFp16LossScaleAtFloor",
        "GenesisFp16NonFiniteLoss",
        "GenesisFp16TrainingRunsFailing",
        "GenesisFp16NoRecentSuccess",
        "GenesisFp16ConfigReloadFailed",
        "GenesisFp16PrecisionDemoted",
        "GenesisFp16PluginLoadStuck",
        "GenesisFp16DaemonThreadDied",
        "GenesisFp16EventsDropped",
    }


def _runbook_anchors() -> set[str]:
    """GitHub-style anchors of the headings in docs/operations.md."""
    anchors = set()
    for line in RUNBOOK.read_text().splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            anchors.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return anchors


def test_alerts_have_severity_and_an_existing_runbook_section() -> None:
    """Each alert has a severity and a runbook_url naming a real heading of the runbook."""
    anchors = _runbook_anchors()
    for alert in _alerts():
        assert alert["labels"]["severity"] in {"critical", "warning"}, alert["alert"]
        url = alert["annotations"]["runbook_url"]
        path, _, anchor = url.partition("#")
        assert path == "docs/operations.md", alert["alert"]
        assert anchor in anchors, f"{alert['alert']}: no heading for #{anchor} in {RUNBOOK}"


def test_rules_use_only_metrics_the_daemon_exports() -> None:
    """Every metric in an alert expression is registered by genesis_fp16.metrics.daemon_metrics."""
    exported = exported_series_names() | PROMETHEUS_SERIES | _process_series()
    for alert in _alerts():
        used = {selector.metric for selector in selectors(alert["expr"])}
        assert used, alert["alert"]
        assert used <= exported, f"{alert['alert']}: {sorted(used - exported)} not exported"


def _process_series() -> set[str]:
    """What prometheus_client's ProcessCollector exports here; the daemon registers it on
    its registry (genesis_fp16/service/daemon.py), and the first-scrape guard reads it."""
    registry = CollectorRegistry()
    ProcessCollector(registry=registry)
    return {family.name for family in registry.collect()}
