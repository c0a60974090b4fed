"""`precision show|reset` print and forget a measured `auto`; `train` fills the cache."""

from __future__ import annotations

import json
import re
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from cli_fork import run_cli
from daemon_harness import daemon_env

from genesis_fp16.plugin_api import PrecisionRequest
from genesis_fp16_infrastructure import api
from genesis_fp16_infrastructure.agent_folder.files import newest_aside
from genesis_fp16_infrastructure.folder import AgentFolder
from genesis_fp16_infrastructure.training import TrainerConfig
from genesis_fp16_infrastructure.training.precision import choice, decide
from genesis_fp16_infrastructure.training.precision.decide import DeviceCapabilities
from genesis_fp16_infrastructure.training.reports import CACHE_VERSION
from genesis_fp16_infrastructure.training.run import calibration as cal

AGENT = "se_darwin"


def _cli(state: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = daemon_env({"GENESIS_FP16_STATE_DIR": str(state)}, fixtures=False)
    done = run_cli(
        [*args],
        cwd=state,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done


class _Tiny:
    """A two-batch regression task: enough for a real calibration."""

    def build_model(self) -> torch.nn.Module:
        torch.manual_seed(0)
        return torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.GELU(), torch.nn.Linear(32, 1))

    def build_optimizers(self, model: torch.nn.Module) -> list[torch.optim.Optimizer]:
        return [torch.optim.AdamW(model.parameters(), fused=True)]

    def build_schedulers(self, optimizers: object) -> tuple[()]:
        return ()

    def train_batches(self, epoch: int, seed: int) -> list[tuple[tuple[torch.Tensor, ...], int]]:
        g = torch.Generator().manual_seed(seed)
        return [((torch.randn(16, 8, generator=g), torch.randn(16, 1, generator=g)), 16)] * 2

    def loss(self, model: torch.nn.Module, batch: tuple[torch.Tensor, ...]) -> torch.Tensor:
        return torch.nn.functional.mse_loss(model(batch[0]).float(), batch[1])

    def evaluate(self, model: torch.nn.Module) -> dict[str, float]:
        return {}

    def extra_state(self) -> dict[str, object]:
        return {}


def test_show_prints_the_measurement_and_reset_forgets_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real measurement (bf16 taken as native) is shown as a table and reset deletes it."""
    caps = DeviceCapabilities("cpu", True, False, "test: bf16 taken as native")
    monkeypatch.setattr(decide, "detect_capabilities", lambda device: caps)
    path = AgentFolder(tmp_path, AGENT).calibration_path
    path.parent.mkdir(parents=True)
    found = cal.calibrate(
        _Tiny(), "cpu", 0, TrainerConfig(), PrecisionRequest(cache=path, budget_s=0.2)
    )
    assert found is not None

    shown = _cli(tmp_path, "precision", "show", AGENT).stdout
    assert f"auto: {found.reason}" in shown
    assert "fp32       eager" in shown and "bf16       eager" in shown and "<- chosen" in shown
    data = json.loads(_cli(tmp_path, "precision", "show", AGENT, "--json").stdout)
    assert data["demotion"] is None and data["calibration"]["chosen"] == found.chosen

    forgot = json.loads(_cli(tmp_path, "precision", "reset", AGENT, "--json").stdout)
    assert forgot == {
        "agent": AGENT,
        "forgot": {
            "calibration": True,
            "carried_loss_scale": False,
            "captured_step_verdicts": False,
            "demotion": None,
        },
    }
    assert not path.exists()
    assert "no precision demotion remembered" in _cli(tmp_path, "precision", "reset", AGENT).stdout
    # The command runs in its own process, on this host's real capabilities: without
    # native bf16 it says there is nothing to measure, else that nothing is cached.
    after = json.loads(_cli(tmp_path, "precision", "show", AGENT, "--json").stdout)
    assert after["calibration"] is None


def test_show_survives_a_corrupt_cache(tmp_path: Path) -> None:
    """A torn or malformed calibration file is reported in one line, not a traceback,
    and set aside (the agent folder's one policy): the next show finds none."""
    path = AgentFolder(tmp_path, AGENT).calibration_path
    path.parent.mkdir(parents=True)
    path.write_text('{"rows": [}')
    said = _cli(tmp_path, "precision", "show", AGENT).stdout
    assert "not JSON" in said and "set aside" in said
    assert newest_aside(path).read_text() == '{"rows": [}'  # type: ignore[union-attr]
    path.write_text('{"rows": []}')
    assert "not a precision_calibration record" in _cli(tmp_path, "precision", "show", AGENT).stdout
    assert not path.exists()


def test_show_of_an_unknown_agent_says_so(tmp_path: Path) -> None:
    """`precision show nosuch`: exit 2, "unknown agent 'nosuch'" with the known ones."""
    result = run_cli(
        ["precision", "show", "nosuch"],
        cwd=tmp_path,
        env=daemon_env({}, fixtures=False),
        timeout=60,
    )
    assert result.returncode == 2
    assert "unknown agent 'nosuch'; known agents:" in result.stderr and "se_darwin" in result.stderr


def test_reset_takes_turns_with_the_daemon_recording_a_demotion(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """While the daemon holds the precision state's lock (recording a run's demotions),
    `precision reset` waits for it, then clears what the daemon wrote: no stale read
    overwrites the other's write."""
    import threading

    from genesis_fp16.cli import main
    from genesis_fp16_infrastructure.training.precision.precision_memory import PrecisionMemory

    monkeypatch.setenv("GENESIS_FP16_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.chdir(tmp_path)
    folder = AgentFolder(tmp_path / "state", "se_darwin")
    path = folder.precision_state_path
    path.parent.mkdir(parents=True)
    done = threading.Event()
    reset = threading.Thread(
        target=lambda: (main(["precision", "reset", "se_darwin"]), done.set()), daemon=True
    )
    with folder.precision_memory_locked():  # the daemon's turn
        reset.start()
        assert not done.wait(1.0)  # reset is waiting for the lock
        demoted = PrecisionMemory(
            demoted_from="fp16",
            demoted_to="bf16",
            reason="test",
            step=10,
            rollback_step=5,
            at="2026-11-23T00:00:00Z",
        )
        folder.save_precision_memory(demoted)
    assert done.wait(120)
    assert folder.precision_memory() is None  # the reset came after, and cleared it


def test_precision_show_names_every_candidate_and_the_choice() -> None:
    """The measurement's table (Calibration.table, which show prints): each row with its
    ratio to fp32, the chosen row (precision and execution) marked once, and the
    precisions not timed with why."""
    from genesis_fp16.commands.precision import _describe_calibration
    from genesis_fp16_infrastructure.training.run import calibration as cal

    def row(precision: str, ms: float, execution: str = "eager") -> cal.Measured:
        return cal.Measured(precision, execution, ms, ms, ms, 3, ms * 0.9, ms * 1.2)

    rows = (row("fp32", 2.0), row("fp32", 1.0, "cuda_graph"), row("bf16", 0.5))
    calibration = cal.Calibration(
        "bf16", "r", rows, {"fp16": "no native fp16"}, {"candidates": "fp32,bf16"}, 0.1
    )
    table = calibration.table()
    assert _describe_calibration(table, None) == table
    assert table.count("<- chosen") == 1 and "bf16       eager" in table
    assert "4.00x  <- chosen" in table and "fp16       not timed: no native fp16" in table
    assert "fp32       eager           2.000   1.800-2.400" in table  # median, p10-p90


def test_show_promises_no_measurement_the_host_cannot_make(tmp_path: Path) -> None:
    """With nothing cached, a host without CUDA is told that CUDA graphs need a CUDA
    device, not that its captured step is "not verified yet"; --json says what the host has."""
    shown = _cli(tmp_path, "precision", "show", AGENT).stdout
    cuda = torch.cuda.is_available()
    assert ("CUDA graphs need a CUDA device" in shown) is not cuda, shown
    assert ("not verified on this host yet" in shown) is cuda, shown
    data = json.loads(_cli(tmp_path, "precision", "show", AGENT, "--json").stdout)
    assert data["host"]["cuda"] is cuda and data["captured_step_verdicts"] == []


def test_show_on_a_host_with_only_fp32_says_auto_has_nothing_to_measure(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """No CUDA and a CPU without native bf16/fp16: `auto` times nothing there, and show
    says auto runs fp32 instead of promising a measurement at the next run."""
    from genesis_fp16.cli import main

    plain = DeviceCapabilities("cpu", False, False, "test: fp32 only")
    monkeypatch.setattr(decide, "cpu_capabilities", lambda: plain)
    # The command reads it through the daemon's one door, which keeps a name once looked
    # up: an earlier test in this process may have looked it up already.
    monkeypatch.setattr(api, "cpu_capabilities", lambda: plain)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setenv("GENESIS_FP16_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.chdir(tmp_path)
    assert main(["precision", "show", AGENT]) == 0
    shown = capsys.readouterr().out
    assert "auto: nothing to measure on this host" in shown and "auto runs fp32" in shown
    assert "it is timed at the next auto run" not in shown


def _train_auto(state: Path) -> dict[str, Any]:
    """One foreground `train rlhf_ppo --precision auto --json` in ``state``: its result."""
    args = ("train", "rlhf_ppo", "--steps", "4", "--precision", "auto", "--json")
    found: dict[str, Any] = json.loads(_cli(state, *args).stdout.splitlines()[-1])
    return found


def _keep_with_spread(path: Path, spread: float) -> None:
    """Mark the kept measurement steady or loaded through its record: p10 = median,
    p90 = ``spread`` x the slowest median past 1 (every interval spans every median: a
    choice the noise could flip), else ``spread`` x its own (the machine's real load
    plays no part)."""
    data = json.loads(path.read_text())
    slowest = max(row["median_ms"] for row in data["rows"])
    for row in data["rows"]:
        high = slowest if spread > 1 else row["median_ms"]
        row["p10_ms"], row["p90_ms"] = row["median_ms"], high * spread
    path.write_text(json.dumps(data))


def test_train_names_every_timed_precision_and_times_a_loaded_measurement_again(
    tmp_path: Path,
) -> None:
    """The product path, rlhf_ppo's real data: `train --json` and `status` name each
    timed precision with its median and p10-p90; a kept measurement marked loaded is
    timed again by the next train, which says so; one marked steady has only its winner
    timed live, and is reused or (off by over 10%) measured again, as the train says."""
    caps = decide.cpu_capabilities()
    if not (caps.native_bf16 or caps.native_fp16):
        pytest.skip(f"auto times nothing on this CPU ({caps.source}); test_calibration.py has it")
    first = _train_auto(tmp_path)
    rows = first["precision_calibration"]["rows"]
    assert len(rows) >= 2
    for row in rows:
        said = rf"{row['precision']} eager [\d.]+ ms \([\d.]+-[\d.]+\)"
        assert re.search(said, first["precision_reason"]), (said, first["precision_reason"])
    path = AgentFolder(tmp_path, "rlhf_ppo").calibration_path
    _keep_with_spread(path, 2.0)
    second = _train_auto(tmp_path)
    assert (
        "the kept measurement was taken under load (fp32 eager p90/p10 "
        in (second["precision_reason"])
    )
    measured_at = second["precision_calibration"]["measured_at"]
    assert measured_at > first["precision_calibration"]["measured_at"]
    # Marked steady, it is not measured again for its spread: its winner is timed live
    # and it is reused within 10% of its median. On a loaded machine (this one beside
    # other test processes: +133% seen) the live timing can miss, and the train says so
    # and keeps the new one; test_daemon_calibration_reuse.py holds the reuse itself
    # (its tolerance widened), test_calibration_clock.py both branches (a fake clock).
    _keep_with_spread(path, 1.0)
    third = _train_auto(tmp_path)
    reason = third["precision_reason"]
    assert "the kept measurement was taken under load" not in reason, reason
    if "cached measurement" in reason:
        assert third["precision_calibration"]["measured_at"] == measured_at
    else:
        live = r"timed [\d.]+ ms live \([+-]\d+%, over 10%\): measured again"
        assert re.search(live, reason), reason
        assert third["precision_calibration"]["measured_at"] > measured_at
    shown = _cli(tmp_path, "status").stdout
    assert re.search(r"precision +.*timed, median \(p10-p90\): fp32 eager [\d.]+ ms", shown)


# Issue 92's attacks on the kept measurement, each through `train` (run here, in this
# process, so that a CPU's native precisions and the 10% check are the test's to set:
# REVALIDATE is widened so that this 2-core host's noise never decides which path runs).
NATIVE_BF16 = DeviceCapabilities("cpu", True, False, "test: bf16 native, no native fp16")


@pytest.fixture
def here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> Callable[..., dict[str, Any]]:
    """`genesis-fp16 ARGS` in this process on a CPU with native bf16 and no native fp16,
    the state folder ``tmp_path``: the last line of its stdout, as JSON (--json)."""
    from genesis_fp16.cli import main

    monkeypatch.setattr(decide, "detect_capabilities", lambda device: NATIVE_BF16)
    monkeypatch.setattr(cal, "REVALIDATE", 100.0)
    monkeypatch.setenv("GENESIS_FP16_STATE_DIR", str(tmp_path))
    monkeypatch.chdir(tmp_path)

    def command(*args: str) -> dict[str, Any]:
        assert main([*args, "--json"]) == 0
        out = capsys.readouterr().out.strip()
        # show prints one indented document; train, log lines and then its result's line
        found: dict[str, Any] = json.loads(out if args[0] == "precision" else out.splitlines()[-1])
        return found

    return command


def _train(here: Callable[..., dict[str, Any]]) -> dict[str, Any]:
    return here("train", "rlhf_ppo", "--steps", "2", "--precision", "auto")


def _edit_kept(path: Path, edit: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    data: dict[str, Any] = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))
    return data


def _row_at(row: dict[str, Any], median: float, low: float, high: float) -> None:
    """``row`` with ``median`` and p10-p90 ``low``-``high`` (its min and max around them)."""
    row.update(median_ms=median, min_ms=low, max_ms=high, p10_ms=low, p90_ms=high)


def test_train_times_again_the_row_it_would_train_in_not_the_records_choice(
    here: Callable[..., dict[str, Any]], tmp_path: Path
) -> None:
    """A kept row the record did not choose, edited to be 10x faster (its `chosen` left):
    the rows no longer choose what the record says, so `train` measures again and says
    why; it never trains in the edited row's precision on the record's word."""
    first = _train(here)
    path = AgentFolder(tmp_path, "rlhf_ppo").calibration_path
    chosen = first["precision_calibration"]["chosen"]

    def faster(data: dict[str, Any]) -> None:
        other = next(r for r in data["rows"] if r["precision"] != chosen)
        median = data["rows"][0]["median_ms"] / 10
        _row_at(other, median, median, median)

    edited = next(r for r in _edit_kept(path, faster)["rows"] if r["precision"] != chosen)
    second = _train(here)
    reason = second["precision_reason"]
    assert not second["precision_calibration"]["cached"], reason
    said = f"the kept rows choose {edited['precision']} eager, the record says {chosen} eager"
    assert f"{said}: measured again" in reason
    assert (
        second["precision_calibration"]["measured_at"]
        > first["precision_calibration"]["measured_at"]
    )


def _plant_fp16(data: dict[str, Any]) -> None:
    """An fp16 row 100x faster than the first row, added to the kept file, its real rows
    made steady (this host's load must not be why it is measured again)."""
    for row in data["rows"]:
        _row_at(row, row["median_ms"], row["median_ms"], row["median_ms"])
    fp16 = dict(data["rows"][0], precision="fp16")
    median = data["rows"][0]["median_ms"] / 100
    _row_at(fp16, median, median, median)
    data["rows"].append(fp16)


def test_a_planted_row_outside_the_candidates_decides_nothing_in_train_or_show(
    here: Callable[..., dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An fp16 row 100x faster planted in the kept file, on a CPU without native fp16:
    `precision show` marks it ignored and the row the next run trains in as chosen, and
    `train` reuses the measurement and trains in what its candidates' rows chose."""
    from genesis_fp16.cli import main

    first = _train(here)
    chosen = first["precision_calibration"]["chosen"]
    _edit_kept(AgentFolder(tmp_path, "rlhf_ppo").calibration_path, _plant_fp16)
    assert main(["precision", "show", "rlhf_ppo"]) == 0
    shown = capsys.readouterr().out
    lines = shown.splitlines()
    assert [line.split()[0] for line in lines if "<- chosen" in line] == [chosen], shown
    assert any(
        line.startswith("fp16") and "not among its candidates, fp32,bf16: ignored" in line
        for line in lines
    ), shown
    assert f"next auto run: times {chosen} eager again" in shown, shown

    second = _train(here)
    assert second["precision_calibration"]["cached"], second["precision_reason"]
    assert second["precision_used"] == chosen != "fp16"
    assert [r["precision"] for r in second["precision_calibration"]["rows"]] == ["fp32", "bf16"]


def test_a_record_of_a_newer_release_is_shown_as_such_and_kept_by_train(
    here: Callable[..., dict[str, Any]], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A kept file of a newer version: `precision show` says whose it is and what the next
    run does; `train` measures for itself, says why, and leaves the file byte for byte."""
    from genesis_fp16.cli import main

    path = AgentFolder(tmp_path, "rlhf_ppo").calibration_path
    path.parent.mkdir(parents=True)
    future = json.dumps({"version": CACHE_VERSION + 1, "chosen": "fp32", "rows": "new"})
    path.write_text(future)
    shown = here("precision", "show", "rlhf_ppo")
    assert shown["calibration_of_another_release"]["version"] == CACHE_VERSION + 1
    assert "does not write over a newer release's record" in shown["next_auto_run"]
    assert main(["precision", "show", "rlhf_ppo"]) == 0
    text = capsys.readouterr().out
    whose = f"is of version {CACHE_VERSION + 1}, a newer release's (this release reads"
    assert f"auto: the kept measurement at {path} {whose}" in text, text
    assert "no measurement of 'auto' cached" not in text
    ran = _train(here)
    assert (
        f"{whose} version {CACHE_VERSION}): measured again, not written over it"
        in (ran["precision_reason"])
    )
    assert path.read_text() == future
    assert _train(here)["precision_calibration"]["cached"] is False  # each run measures
    assert path.read_text() == future


def test_a_record_of_an_earlier_release_is_replaced_and_the_run_says_so(
    here: Callable[..., dict[str, Any]], tmp_path: Path
) -> None:
    """A kept file of an earlier version is shown as such, and `train` replaces it with
    this release's measurement, naming what it replaced."""
    path = AgentFolder(tmp_path, "rlhf_ppo").calibration_path
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"version": CACHE_VERSION - 1, "chosen": "fp32"}))
    shown = here("precision", "show", "rlhf_ppo")
    assert shown["next_auto_run"].startswith("next auto run: measures again and replaces it")
    ran = _train(here)
    assert f"is of version {CACHE_VERSION - 1}, an earlier release's" in ran["precision_reason"]
    assert json.loads(path.read_text())["version"] == CACHE_VERSION


def test_a_clear_decision_taken_under_load_is_reused_by_train(
    here: Callable[..., dict[str, Any]], tmp_path: Path
) -> None:
    """Issue 92's noisy host: the kept winner's p90/p10 is 1.71, past 1.5, but its p10-p90
    clears the runner-up's: `train` times the winner again and reuses the measurement;
    with the intervals overlapping it measures again, and says why."""
    first = _train(here)
    path = AgentFolder(tmp_path, "rlhf_ppo").calibration_path
    chosen = first["precision_calibration"]["chosen"]

    def noisy(overlap: bool) -> Callable[[dict[str, Any]], None]:
        def edit(data: dict[str, Any]) -> None:
            winner = next(r for r in data["rows"] if r["precision"] == chosen)
            median = winner["median_ms"]
            _row_at(winner, median, median / 1.71 * 1.105, median * 1.105)  # 1.99-2.21 at 2
            # Clear of the winner's p90 by more than MARGIN: the 2.49 (2.22-2.75)
            # against 2.0 holds for an fp32 winner, but a bf16 winner keeps its choice only
            # while fp32 (more robust) is not within MARGIN of it at those ends.
            clear = median * 1.105 * (1 + choice.MARGIN) * 1.02
            for row in data["rows"]:
                if row is not winner:
                    low = median * 0.9 if overlap else clear
                    _row_at(row, median * 1.245, low, median * 1.375)
            winner["median_ms"] = median

        return edit

    _edit_kept(path, noisy(overlap=False))
    shown = here("precision", "show", "rlhf_ppo")
    assert shown["next_auto_run"].startswith(f"next auto run: times {chosen} eager again")
    second = _train(here)
    reason = second["precision_reason"]
    assert second["precision_calibration"]["cached"], reason
    assert "but the choice holds across every row's p10-p90: kept" in reason

    _edit_kept(path, noisy(overlap=True))
    shown = here("precision", "show", "rlhf_ppo")
    assert shown["next_auto_run"].startswith("next auto run: measures again (the kept")
    third = _train(here)
    said = "and the choice does not hold across its rows' p10-p90: measured again"
    assert said in third["precision_reason"] and not third["precision_calibration"]["cached"]
