"""deploy/grafana/: the dashboard's structure, its queries against the daemon's real metric
names, and every panel query run through a real Prometheus scraping a real daemon.

No Grafana server is available to the tests, so the JSON and the provisioning files are
checked structurally; the queries themselves are checked by a real Prometheus.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from promql_names import COUNTER_FUNCTIONS, exported_series_names, is_counter_series, selectors

ROOT = Path(__file__).resolve().parents[2]
GRAFANA = ROOT / "deploy" / "grafana"
DASHBOARD = GRAFANA / "genesis-fp16.json"
sys.path.insert(0, str(ROOT / "tests" / "genesis_fp16"))
from daemon_harness import FIXTURE_PLUGINS, DaemonProcess, start_daemon  # noqa: E402
from webhook_receiver import Receiver  # noqa: E402

# The fixture agent of the daemon tests: it really trains (autocast forward, scaled
# backward, optimizer step on the CPU) and takes milliseconds per run. rlhf_ppo runs one
# PPO iteration once, for the RL diagnostics panels; probe_toy (a probe-only test agent,
# whose runs fail) is probed once before its bf16 run, for the probe panels;
# fixture_fault overflows in fp16 from step 12 of its one run, and the precision guard
# demotes it to bf16, for the demotion panel.
AGENT = "fixture_good"
AGENTS = f"{AGENT}|rlhf_ppo|probe_toy|fixture_fault"
# For the plugins panel: fixture_broken fails its import (a load failure), and HANG,
# installed once the daemon runs, sleeps in its import past the 30 s deadline (stuck).
HANG = "hang_agent"
ALLOWLIST = f"{AGENTS.replace('|', ',')},fixture_broken,{HANG}"
HANG_SOURCE = "import time\n\ntime.sleep(600)  # far past the test\nplugin = None\n"
IMPORT_DEADLINE = 10.0
PROBE_PLUGIN = ROOT / "tests" / "genesis_fp16" / "probe_plugin"
GUARD_PLUGINS = ROOT / "tests" / "fixtures" / "guard_plugins"
SCRAPE_SECONDS = 1
# Grafana's $__rate_interval is at least four scrape intervals; 15 s leaves margin.
RATE_INTERVAL = "15s"
# Panels that have no data in a clean CPU run, and why.
EXPECTED_EMPTY = (
    {}
    if torch.cuda.is_available()
    else {"GPU memory (peak per run)": "the daemon exports it only where a GPU is used"}
)
# Only fit()'s measured auto exports it: the fixture agents build their own policy and
# rlhf_ppo picks a preset, so the daemon below never times a step, whatever the device
# (tests/genesis_fp16/metrics/test_daemon_metrics.py covers the series).
EXPECTED_EMPTY["auto: measured step time per precision"] = "no agent here calibrates"


# Only se_darwin reports a held-out AUC and early stopping; the scraped daemon below runs
# the fixture agents and rlhf_ppo (tests/genesis_fp16/metrics/test_daemon_metrics.py covers them).
EXPECTED_EMPTY["Eval AUC with its 95% interval"] = "only se_darwin reports it"
EXPECTED_EMPTY["Early stopping: served step"] = "only se_darwin reports it"
# What each model learned: only agents that report their data (se_darwin's extra.data).
EXPECTED_EMPTY["Time since the model last learned new data"] = "only se_darwin reports it"
EXPECTED_EMPTY["Records the model has learned"] = "only se_darwin reports it"
EXPECTED_EMPTY["Seconds per phase of the last run"] = "only se_darwin reports it"
# The promotion gate and the drift report: only se_darwin judges candidates.
EXPECTED_EMPTY["Served and candidate quality"] = "only se_darwin reports it"
EXPECTED_EMPTY["Candidate rejected, label shift flagged, pin, unusable pointer"] = (
    "only se_darwin reports it"
)
EXPECTED_EMPTY["Label shift and drifted features"] = "only se_darwin reports it"
# The live watch: only se_darwin keeps a served model and its predecessor.
EXPECTED_EMPTY["Live log-loss difference from the predecessor"] = "only se_darwin reports it"
EXPECTED_EMPTY["Live quality of the served model and its predecessor"] = "only se_darwin"
EXPECTED_EMPTY["Live records, regressions and rollbacks"] = "only se_darwin reports it"
EXPECTED_EMPTY["Live watch: segments, self-test, not watching"] = "no watched pair here"
# Exported once a tracked run ends: the scraped daemon below writes no curves.
EXPECTED_EMPTY["Lost curve writes (tracking)"] = "no GENESIS_FP16_TRACKING_DIR here"
# Counted from the served-model pointer's journal and the gate's verdicts: the fixture
# agents and rlhf_ppo keep no served model (tests/genesis_fp16/metrics/
# test_promotion_metrics.py and the se_darwin daemon tests cover both series).
EXPECTED_EMPTY["Promotions and gate verdicts"] = "only se_darwin judges candidates"
# NVIDIA's dcgm-exporter series, joined to ours on the GPU UUID: no GPU or exporter here.
EXPECTED_EMPTY["GPU utilisation (DCGM)"] = "no dcgm-exporter is scraped"
EXPECTED_EMPTY["GPU memory used (DCGM)"] = "no dcgm-exporter is scraped"
# Metrics of other exporters that panels may join to the daemon's.
DCGM_METRICS = {"DCGM_FI_DEV_GPU_UTIL", "DCGM_FI_DEV_FB_USED"}


def _dashboard() -> dict[str, Any]:
    return dict(json.loads(DASHBOARD.read_text()))


def _panels() -> list[dict[str, Any]]:
    return [panel for panel in _dashboard()["panels"] if panel["type"] != "row"]


def _queries() -> list[tuple[str, str]]:
    """(panel title, expression) of every panel query."""
    return [(panel["title"], target["expr"]) for panel in _panels() for target in panel["targets"]]


def _problems(expr: str, exported: set[str]) -> list[str]:
    """What is wrong with one dashboard query: unknown metrics, counters used raw."""
    found = []
    for selector in selectors(expr):
        if selector.metric not in exported:
            found.append(f"{selector.metric} is not exported by the daemon")
        if is_counter_series(selector.metric) and selector.function not in COUNTER_FUNCTIONS:
            found.append(f"{selector.metric} is a counter used outside rate()/increase()")
    return found


def test_dashboard_has_stable_uid_schema_and_variables() -> None:
    """uid and schemaVersion are set; `datasource` and `agent` variables exist as required."""
    dashboard = _dashboard()
    assert dashboard["uid"] == "genesis-fp16"
    assert isinstance(dashboard["schemaVersion"], int) and dashboard["schemaVersion"] >= 36
    variables = {item["name"]: item for item in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    agent = variables["agent"]
    assert agent["query"]["query"] == "label_values(genesis_fp16_optimizer_steps_total, agent)"
    assert agent["datasource"]["uid"] == "${datasource}"


def test_panel_ids_are_unique() -> None:
    """No two panels (rows included) share an id: Grafana keys links, edits and repeats by it."""
    ids = [panel["id"] for panel in _dashboard()["panels"]]
    assert sorted(ident for ident in set(ids) if ids.count(ident) > 1) == []


def test_every_panel_has_a_unit_and_uses_the_datasource_variable() -> None:
    """Each panel and query reads from ${datasource}, and each panel sets a unit."""
    for panel in _panels():
        assert panel["fieldConfig"]["defaults"].get("unit"), panel["title"]
        assert panel["datasource"]["uid"] == "${datasource}", panel["title"]
        for target in panel["targets"]:
            assert target["datasource"]["uid"] == "${datasource}", panel["title"]


def test_dashboard_shows_the_required_panels() -> None:
    """Loss scale, skips/overflow, throughput, losses, precision, runs, GPU memory, demotions,
    per agent when its model last learned new data, its records and its quality, and the
    modules closest to fp16's overflow and underflow."""
    titles = {panel["title"] for panel in _panels()}
    assert titles >= {
        "Loss scale",
        "Skipped steps",
        "Overflow rate",
        "Throughput",
        "Losses",
        "Precision per agent",
        "Run outcomes",
        "Run duration",
        "GPU memory (peak per run)",
        "Precision demotions",
        "Step execution per agent",
        "Time since the model last learned new data",
        "Records the model has learned",
        "Eval AUC with its 95% interval",
        "Closest to fp16 overflow / underflow",
    }
    duration = next(panel for panel in _panels() if panel["title"] == "Run duration")
    assert all(
        "histogram_quantile(" in t["expr"] and "_bucket" in t["expr"] for t in duration["targets"]
    )


# The series the last row shows: the outbox, the plugins, the daemon's threads and jobs,
# run failures, promotions and quarantined records.
EVENTS_ROW_SERIES = {
    "genesis_fp16_events_undelivered",
    "genesis_fp16_events_dropped",
    "genesis_fp16_event_deliveries_total",
    "genesis_fp16_fault_bundles_total",
    "genesis_fp16_promotions_total",
    "genesis_fp16_gate_verdicts_total",
    "genesis_fp16_plugin_load_failures_total",
    "genesis_fp16_plugin_load_stuck",
    "genesis_fp16_plugin_names_refused_total",
    "genesis_fp16_thread_exceptions_total",
    "genesis_fp16_jobs_skipped_total",
    "genesis_fp16_runs_overdue",
    "genesis_fp16_run_failures_total",
    "genesis_fp16_records_quarantined_total",
}


def _row_metrics(title: str) -> set[str]:
    """The metrics queried by the panels under the row ``title`` (up to the next row)."""
    panels = _dashboard()["panels"]
    start = next(i for i, p in enumerate(panels) if p["type"] == "row" and p["title"] == title)
    found: set[str] = set()
    for panel in panels[start + 1 :]:
        if panel["type"] == "row":
            break
        found |= {s.metric for t in panel["targets"] for s in selectors(t["expr"])}
    return found


def test_the_last_row_shows_events_plugins_threads_and_quarantined_records() -> None:
    """The bottom row holds a panel for each outbox, plugin, thread, job, failure,
    promotion and quarantine series, and its panels sit below every other panel."""
    title = "Events, plugins and the daemon's threads: what was announced, refused or lost"
    assert _row_metrics(title) >= EVENTS_ROW_SERIES
    panels = _dashboard()["panels"]
    row = next(p for p in panels if p["title"] == title)
    below = [p for p in panels if p["gridPos"]["y"] > row["gridPos"]["y"]]
    assert below == panels[panels.index(row) + 1 :]


def test_range_queries_use_rate_interval_and_the_agent_filter() -> None:
    """Every range is [$__rate_interval]; every per-agent query filters on $agent."""
    per_agent = exported_series_names() - {
        "genesis_fp16_scheduler_heartbeat_timestamp_seconds",
        "genesis_fp16_config_last_reload_successful",
        "genesis_fp16_config_reloads_total",
        "genesis_fp16_fp32_rollback",
        "genesis_fp16_build_info",
        "genesis_fp16_plugin_load_failures_total",
        "genesis_fp16_plugin_load_stuck",
        "genesis_fp16_plugin_names_refused_total",
        "genesis_fp16_thread_exceptions_total",
        "genesis_fp16_device_info",
    }
    for title, expr in _queries():
        ranges = re.findall(r"\[([^\]]*)\]", expr)
        assert all(value == "$__rate_interval" for value in ranges), (title, expr)
        if any(selector.metric in per_agent for selector in selectors(expr)):
            assert 'agent=~"$agent"' in expr, (title, expr)


def test_queries_use_only_exported_metrics_and_wrap_counters() -> None:
    """Every queried metric is registered by the daemon; counters sit in rate/increase."""
    exported = exported_series_names() | DCGM_METRICS
    problems = {f"{title}: {expr}": _problems(expr, exported) for title, expr in _queries()}
    assert not {query: found for query, found in problems.items() if found}


def test_query_checks_can_fail() -> None:
    """The same checks reject an unknown metric and a counter plotted raw."""
    exported = exported_series_names()
    assert _problems("genesis_fp16_samples_total", exported) == [
        "genesis_fp16_samples_total is a counter used outside rate()/increase()"
    ]
    assert _problems("rate(genesis_fp16_sample_total[5m])", exported) == [
        "genesis_fp16_sample_total is not exported by the daemon"
    ]


def test_provisioning_points_grafana_at_the_dashboard_and_prometheus() -> None:
    """A file dashboard provider and a default Prometheus data source, in Grafana's format."""
    provider = yaml.safe_load((GRAFANA / "provisioning/dashboards/genesis-fp16.yaml").read_text())
    assert provider["apiVersion"] == 1
    (entry,) = provider["providers"]
    assert entry["type"] == "file" and entry["options"]["path"].startswith("/")
    sources = yaml.safe_load((GRAFANA / "provisioning/datasources/prometheus.yaml").read_text())
    assert sources["apiVersion"] == 1
    (source,) = sources["datasources"]
    assert source["type"] == "prometheus" and source["url"].startswith("http")


# --- end to end: a real daemon, a real Prometheus, every panel query -----------------


def _prometheus_query(port: int, expr: str) -> list[dict[str, Any]]:
    url = f"http://127.0.0.1:{port}/api/v1/query?" + urllib.parse.urlencode({"query": expr})
    with urllib.request.urlopen(url, timeout=5) as response:
        body = json.load(response)
    assert body["status"] == "success", body
    return list(body["data"]["result"])


def _has_finite_value(result: list[dict[str, Any]]) -> bool:
    return any(math.isfinite(float(series["value"][1])) for series in result)


def _install_plugin(folder: Path, name: str, source: str) -> None:
    """Put plugin ``name`` on ``folder`` as pip would: its module, then its dist-info whole
    (renamed into place, so a rescan never reads half of it)."""
    (folder / f"{name}.py").write_text(source)
    info = folder.parent / "staging" / f"{name}-0.1.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[genesis_fp16.agents]\n{name} = {name}:plugin\n")
    info.rename(folder / info.name)


@contextlib.contextmanager
def running_prometheus(binary: str, config: Path, tmp_path: Path, port: int) -> Iterator[None]:
    """A real Prometheus on ``config``, listening on loopback ``port``, its storage and log
    in ``tmp_path``; stopped (killed after 20 s) on leaving."""
    with (tmp_path / "prometheus.log").open("wb") as log:
        server = subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={tmp_path / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            yield
        finally:
            server.terminate()
            try:
                server.wait(timeout=20)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait()


@pytest.fixture
def scraped_daemon(
    prometheus_server: str, tmp_path: Path, free_port: int
) -> Iterator[tuple[DaemonProcess, int]]:
    """A daemon training every 2 s (rlhf_ppo, probe_toy, fixture_fault once), scraped every
    1 s, posting its events (fixture_fault's demotion) to a webhook receiver on loopback;
    a broken plugin, and one whose import hangs, installed once the daemon runs."""
    (tmp_path / "daemon").mkdir()
    hot = tmp_path / "hot"
    hot.mkdir()
    receiver = Receiver()
    daemon = start_daemon(
        tmp_path / "daemon",
        {
            # The caller's path kept after ours: the daemon runs the code under test.
            "PYTHONPATH": os.pathsep.join(
                [
                    str(FIXTURE_PLUGINS),
                    str(PROBE_PLUGIN),
                    str(GUARD_PLUGINS),
                    str(hot),
                    *filter(None, [os.environ.get("PYTHONPATH")]),
                ]
            ),
            "GENESIS_FP16_PLUGIN_ALLOWLIST": ALLOWLIST,
            # The hanging import is stuck this long after a rescan finds it, not the
            # default 30 s; the other plugins' imports (torch already loaded) take far less.
            "GENESIS_FP16_PLUGIN_IMPORT_DEADLINE_SECONDS": str(IMPORT_DEADLINE),
            "GENESIS_FP16_EVENTS_URLS": receiver.url,
            "GENESIS_FP16_EVENTS_SECRET": "dashboard-test-secret",
            "GENESIS_FP16_AGENTS__RLHF_PPO__STEPS": "4",
            # A bf16 rollout copy, so that no mismatch diagnostic is undefined (NaN) as it
            # is when trainer and rollout are both fp32 (auto on a CPU without bf16).
            "GENESIS_FP16_AGENTS__RLHF_PPO__PRECISION": "bf16",
            "GENESIS_FP16_AGENTS__RLHF_PPO__SCHEDULE": "3600",
            "GENESIS_FP16_AGENTS__PROBE_TOY__SCHEDULE": "3600",
            "GENESIS_FP16_AGENTS__PROBE_TOY__PRECISION": "bf16",
            "GENESIS_FP16_AGENTS__PROBE_TOY__PROBE_BEFORE_LOW_PRECISION": "true",
            "GENESIS_FP16_PROBE_STEPS": "2",
            "GENESIS_FP16_AGENTS__FIXTURE_FAULT__PRECISION": "fp16",
            "GENESIS_FP16_AGENTS__FIXTURE_FAULT__STEPS": "30",
            "GENESIS_FP16_AGENTS__FIXTURE_FAULT__SCHEDULE": "3600",
            "FIXTURE_FAULT_STEP": "12",
            "GENESIS_FP16_GUARD_CHECK_INTERVAL": "5",
            "GENESIS_FP16_GUARD_OVERFLOW_WINDOW": "5",
            "GENESIS_FP16_GUARD_OVERFLOW_WARMUP": "0",
            "GENESIS_FP16_STEPS_PER_RUN": "8",
            "GENESIS_FP16_LOG_INTERVAL": "2",
            "GENESIS_FP16_SAMPLE_COUNT": "64",
            "GENESIS_FP16_SCHEDULE": "2",
            "FIXTURE_STEP_SECONDS": "0.01",
        },
    )
    config = tmp_path / "prometheus.yml"
    config.write_text(
        yaml.safe_dump(
            {
                "global": {"scrape_interval": f"{SCRAPE_SECONDS}s"},
                "scrape_configs": [
                    {
                        "job_name": "genesis-fp16",
                        "static_configs": [{"targets": [f"127.0.0.1:{daemon.port}"]}],
                    }
                ],
            }
        )
    )
    try:
        with running_prometheus(prometheus_server, config, tmp_path, free_port):
            _install_plugin(hot, HANG, HANG_SOURCE)  # found by the daemon's next rescan
            yield daemon, free_port
    finally:
        daemon.stop()
        receiver.close()


@pytest.mark.slow
def test_every_panel_query_returns_data_from_a_real_prometheus(
    scraped_daemon: tuple[DaemonProcess, int],
) -> None:
    """After a few runs, each panel query (but the listed CPU exceptions) returns data."""
    daemon, port = scraped_daemon
    queries = [
        (title, expr.replace("$__rate_interval", RATE_INTERVAL).replace("$agent", AGENTS))
        for title, expr in _queries()
    ]
    assert {title for title, _ in queries} >= set(EXPECTED_EMPTY)
    # The hanging import is stuck IMPORT_DEADLINE s after a rescan finds it.
    deadline = time.monotonic() + 150
    missing: list[str] = []
    while time.monotonic() < deadline:
        missing = []
        for title, expr in queries:
            if title in EXPECTED_EMPTY:
                continue
            try:
                result = _prometheus_query(port, expr)
            except OSError as exc:  # Prometheus still starting
                result, expr = [], f"{expr} ({exc})"
            if not _has_finite_value(result):
                missing.append(f"{title}: {expr}")
        if not missing:
            break
        time.sleep(1)
    assert daemon.process.poll() is None, daemon.tail()
    assert not missing, "panel queries without data:\n" + "\n".join(missing)
    up = _prometheus_query(port, 'up{job="genesis-fp16"}')
    assert [series["value"][1] for series in up] == ["1"]


def test_dcgm_panels_join_on_the_uuid_of_the_daemons_own_gpus() -> None:
    """The GPU row shows step time beside DCGM utilisation and memory, joined by GPU UUID."""
    panels = {panel["title"]: panel for panel in _panels()}
    assert "genesis_fp16_step_seconds" in panels["Step time"]["targets"][0]["expr"]
    for title, metric in (
        ("GPU utilisation (DCGM)", "DCGM_FI_DEV_GPU_UTIL"),
        ("GPU memory used (DCGM)", "DCGM_FI_DEV_FB_USED"),
    ):
        (target,) = panels[title]["targets"]
        assert target["expr"].startswith(f"{metric} * on(UUID) group_left(pod, namespace)")
        assert '"UUID", "$1", "uuid"' in target["expr"]  # ours is snake_case
        assert "genesis_fp16_device_info" in target["expr"]


def _dcgm_join_test(tmp_path: Path, promtool: str, daemon_uuid: str) -> list[str]:
    """Run each DCGM panel query by promtool over two GPUs, one of them the daemon's.

    Returns the panel titles whose query did not give exactly the daemon GPU's sample.
    """
    panels = {panel["title"]: panel for panel in _panels()}
    gpu = 'UUID="{uuid}", gpu="{index}", Hostname="n1", pod="{pod}", namespace="ml"'
    ours, theirs = (
        gpu.format(uuid="GPU-a", index=0, pod="genesis-fp16-0"),
        gpu.format(uuid="GPU-b", index=1, pod="other"),
    )
    failed = []
    for title, metric in (
        ("GPU utilisation (DCGM)", "DCGM_FI_DEV_GPU_UTIL"),
        ("GPU memory used (DCGM)", "DCGM_FI_DEV_FB_USED"),
    ):
        (target,) = panels[title]["targets"]
        info = (
            f'uuid="{daemon_uuid}", gpu="0", hostname="n1", pod="genesis-fp16-0", '
            'namespace="ml", model_name="H100"'
        )
        test = {
            "rule_files": [],
            "tests": [
                {
                    "interval": "1m",
                    "input_series": [
                        {"series": f"{metric}{{{ours}}}", "values": "87 87"},
                        {"series": f"{metric}{{{theirs}}}", "values": "10 10"},
                        {
                            "series": f"genesis_fp16_device_info{{{info}}}",
                            "values": "1 1",
                        },
                    ],
                    "promql_expr_test": [
                        {
                            "expr": target["expr"],
                            "eval_time": "1m",
                            "exp_samples": [{"labels": f"{{{ours}}}", "value": 87}],
                        }
                    ],
                }
            ],
        }
        path = tmp_path / f"{metric}.yml"
        path.write_text(yaml.safe_dump(test))
        result = subprocess.run(
            [promtool, "test", "rules", str(path)], capture_output=True, text=True, timeout=60
        )
        if result.returncode != 0:
            failed.append(title)
    return failed


def test_dcgm_queries_keep_only_the_daemons_gpu(promtool: str, tmp_path: Path) -> None:
    """promtool evaluates both DCGM panel queries: the daemon's GPU only, with its pod."""
    assert _dcgm_join_test(tmp_path, promtool, daemon_uuid="GPU-a") == []


def test_dcgm_join_check_can_fail(promtool: str, tmp_path: Path) -> None:
    """With the daemon on another GPU's UUID, the same check fails for both panels."""
    assert len(_dcgm_join_test(tmp_path, promtool, daemon_uuid="GPU-z")) == 2
