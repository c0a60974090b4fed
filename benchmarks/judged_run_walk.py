"""A judged run's walk, traced as it runs, in two cases the scheduled job's walk does not
reach: a run that trains and promotes over a served model, and a run whose candidate
phase has work (a candidate cut short to close, a kept inconclusive one to judge again).

``benchmarks/job_walk.py`` traces a scheduled job on a fresh state folder: its judged
run serves the first model, and its candidate phase only makes that first candidate.
This script uses the one-number plugin of ``tests/infrastructure/judging/test_run.py``
(no torch): a first run serves a model on 40 records, then

- ``promote``: a second run on 400 records trains a candidate and promotes it;
- ``close_and_judge_again``: a second run keeps an inconclusive candidate (0.08 off the
  served number, 50 records), a candidate cut short on another request is left in the
  folder, and the third run (traced) closes it and promotes the kept one without
  training, as that test file's
  ``test_a_close_and_a_kept_candidate_judged_again_are_one_commit`` does;
- ``listed_and_kept``: that file's listing plugin (``Listing``: it lists its records, and
  its checkpoints name those they trained on) in a process that keeps what runs read
  (``keep_in_memory_bytes``, as a resident run process does): a first model on 300
  records, a second run on 600, and the third (traced) on 900, whose served model's
  listing is looked up against its known ids through what the second run kept;
- ``reject``: a second run trains a candidate worse on the same records, rejected (its
  verdict and its own event: the served model stays), as that file's
  ``test_a_worse_candidate_is_rejected_and_not_trained_again`` does.

::

    python benchmarks/judged_run_walk.py --tree /work/wt/base31

The tree's roots must come first on ``PYTHONPATH``. What is traced is ``job_walk``'s:
every call of a product file of the tree (``sys.setprofile``), from ``run_plugin`` to its
return; the figures are its ``count_walk``'s (stops: file changes between consecutive
calls), with the pointer's locks taken, the transactions begun and the outbox's locks
taken. One JSON line a case.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
KEEP = 64 * 2**20  # the listed case's keep_in_memory_bytes, a resident process's budget
sys.path.insert(0, str(HERE))
from job_walk import Tracer, count_walk  # noqa: E402


def _traced(tree: Path, run: Callable[[], Any]) -> tuple[Tracer, Any]:
    """``run`` traced (no stop code: the whole call)."""
    tracer = Tracer(stop_code=_traced.__code__, tree=tree)
    result: list[Any] = []
    tracer.trace(lambda: result.append(run()))
    return tracer, result[0]


def _cases(case: Any, root: Path) -> dict[str, Callable[[], Any]]:
    """Each case's traced call, its folder prepared (the first model served)."""
    from genesis_fp16_infrastructure.agent_folder.candidates import new_candidate
    from genesis_fp16_infrastructure.agent_folder.pointer import read_pointer
    from genesis_fp16_infrastructure.judging.run import run_plugin

    def served(folder: Path) -> Any:
        plugin = case.OneNumber()
        run_plugin(plugin, case._request(folder, case._coin_data(folder / "d.json", 40)))
        return plugin

    def promote() -> Callable[[], Any]:
        folder = root / "promote"
        folder.mkdir()
        plugin = served(folder)
        request = case._request(folder, case._coin_data(folder / "d.json", 400))
        return lambda: run_plugin(plugin, request)

    def close_and_judge_again() -> Callable[[], Any]:
        folder = root / "again"
        folder.mkdir()
        plugin = served(folder)
        pointer = read_pointer(folder / "checkpoints")
        assert pointer is not None
        value = json.loads((folder / "checkpoints" / pointer.served.checkpoint).read_text())
        plugin.fixed = value["value"] + 0.08
        kept = run_plugin(plugin, case._request(folder, case._coin_data(folder / "d.json", 50)))
        assert kept.gate is not None and kept.gate.outcome == "inconclusive"
        meta = {"continues": kept.gate.candidate_id, "seed": 99}
        new_candidate(folder / "checkpoints", meta)  # cut short on another request
        request = case._request(folder, case._coin_data(folder / "d.json", 4050))
        return lambda: run_plugin(plugin, request)

    def listed_and_kept() -> Callable[[], Any]:
        folder = root / "listed"
        folder.mkdir()
        plugin, keep = case.Listing(), {"keep_in_memory_bytes": KEEP}
        for n, label in enumerate((0.3, 0.5)):
            data = case._data(folder / f"d{n}.json", label, range(300 * (n + 1)))
            run_plugin(plugin, case._request(folder, data, **keep))
        request = case._request(folder, case._data(folder / "d2.json", 0.5, range(900)), **keep)
        return lambda: run_plugin(plugin, request)

    def reject() -> Callable[[], Any]:
        folder = root / "reject"
        folder.mkdir()
        plugin = case.OneNumber()
        run_plugin(plugin, case._on(folder, 0.3, range(40)))
        plugin.fixed = 0.9
        request = case._on(folder, 0.3, range(40, 80))
        return lambda: run_plugin(plugin, request)

    return {
        "promote": promote(),
        "close_and_judge_again": close_and_judge_again(),
        "listed_and_kept": listed_and_kept(),
        "reject": reject(),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, default=HERE.parent)
    tree = parser.parse_args().tree.resolve()
    sys.path[:0] = [str(tree / "tests"), str(tree / "tests" / "infrastructure" / "judging")]
    import test_run as case  # the tree's own plugin and request

    for name, run in _cases(case, Path(tempfile.mkdtemp())).items():
        tracer, result = _traced(tree, run)
        expected = "rejected" if name == "reject" else "promoted"
        assert result.gate is not None and result.gate.outcome == expected, name
        walk, names = count_walk(tracer.files), [f.split(":")[0] for f in tracer.functions]
        figures = {
            "case": name,
            "tree": str(tree),
            "calls": walk.calls,
            "stops": walk.stops,
            "files": walk.files,
            "pointer_locks": names.count("pointer_lock"),
            "transactions": names.count("_begin"),
            "outbox_locks": names.count("outbox_lock"),
        }
        print(json.dumps(figures))


if __name__ == "__main__":
    main()
