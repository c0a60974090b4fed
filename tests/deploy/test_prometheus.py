"""deploy/prometheus/: rules and config checked by promtool, rule unit tests run by promtool."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import yaml
from promql_names import exported_series_names, selectors

ROOT = Path(__file__).resolve().parents[2]
PROMETHEUS = ROOT / "deploy" / "prometheus"
RULES = PROMETHEUS / "rules.yml"
RULE_TESTS = PROMETHEUS / "tests" / "rules_test.yml"
RUNBOOK = ROOT / "docs" / "operations.md"
# Series Prometheus itself makes, which rules may use beside the daemon's own.
PROMETHEUS_SERIES = {"up"}


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


def test_rule_unit_tests_pass(promtool: str) -> None:
    """promtool test rules runs the rule unit tests, and they pass."""
    result = _promtool(promtool, "test", "rules", str(RULE_TESTS.relative_to(PROMETHEUS)))
    assert result.returncode == 0, result.stdout + result.stderr


def test_rule_unit_tests_catch_a_changed_threshold(promtool: str, tmp_path: Path) -> None:
    """The unit tests fail against a copy of the rules with a loosened threshold."""
    (tmp_path / "tests").mkdir()
    shutil.copy(RULE_TESTS, tmp_path / "tests" / RULE_TESTS.name)
    loosened = RULES.read_text().replace("genesis_fp16_overflow_rate > 0.05", "x > 0.5")
    assert loosened != RULES.read_text()
    (tmp_path / "rules.yml").write_text(loosened)
    result = _promtool(promtool, "test", "rules", f"tests/{RULE_TESTS.name}", cwd=tmp_path)
    assert result.returncode != 0
    assert "GenesisFp16HighOverflowRate" in result.stdout + result.stderr


def test_every_alert_is_tested_firing() -> None:
    """Each alert in rules.yml has a unit test in which it fires."""
    fired = {
        case["alertname"]
        for test in yaml.safe_load(RULE_TESTS.read_text())["tests"]
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
    exported = exported_series_names() | PROMETHEUS_SERIES
    for alert in _alerts():
        used = {selector.metric for selector in selectors(alert["expr"])}
        assert used, alert["alert"]
        assert used <= exported, f"{alert['alert']}: {sorted(used - exported)} not exported"
