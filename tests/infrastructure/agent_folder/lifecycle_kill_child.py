"""A child process for test_lifecycle_kill: run one transition of the served model's
owner the way its caller does, and SIGKILL itself right after its Nth durable step.

    python lifecycle_kill_child.py ROLES_JSON SCENARIO N

A durable step is a call of ``os.fsync``, ``os.replace``, ``os.rename``, ``os.unlink``,
``os.remove`` or ``os.rmdir``: every write of the agent folder (agent_folder.files, its
atomic writes: the temporary file's fsync, its rename, the folder's fsync) and every
removal (prune's rename and ``shutil.rmtree``) goes through them. ``N`` = 0 kills
nothing: the child prints how many steps the transition took, and its report.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

STEPS = ("fsync", "replace", "rename", "unlink", "remove", "rmdir")
AGENT = "se_darwin"
COLUMN = {"records": 300, "served_loss": 0.9, "previous_loss": 0.3, "difference": 0.6,
          "lower": 0.4, "upper": 0.8, "margin": 0.01, "alpha": 0.05,
          "regression": True}  # fmt: skip
REGRESSION = {
    "against": None,
    "records": 300,
    "new_records": 300,
    "alpha": 0.05,
    "primary": "log_loss",
    "metrics": {"log_loss": COLUMN},
    "regression": True,
}


def _count_steps(kill_after: int) -> list[int]:
    """Wrap each step of ``os``: counted, and the process killed after step ``kill_after``."""
    done = [0]
    for name in STEPS:
        real = getattr(os, name)

        def step(*args: Any, _real: Callable[..., Any] = real, **kwargs: Any) -> Any:
            result = _real(*args, **kwargs)
            done[0] += 1
            if done[0] == kill_after:
                os.kill(os.getpid(), signal.SIGKILL)
            return result

        setattr(os, name, step)
    return done


def _scenarios(ck: Path, roles: dict[str, str], name: str) -> dict[str, Callable[[], Any]]:
    """Each transition as its caller runs it (imports done before the steps are counted;
    the CLI's and the watch's, which are slow, only for the scenario ``name`` that runs)."""
    from genesis_fp16_infrastructure.agent_folder import (
        candidates,
        repair,
        transaction,
        transitions,
    )
    from genesis_fp16_infrastructure.agent_folder.lifecycle_records import Verdict

    def main(argv: list[str]) -> int:
        from genesis_fp16.cli import main as cli

        return cli(argv)

    def decide() -> Any:
        from genesis_fp16_infrastructure.judging import watch

        return lambda: watch.decide_live(ck, AGENT, roles["served"], REGRESSION)

    if name.startswith("operator"):
        import genesis_fp16.cli  # noqa: F401
    watch_rollback = decide() if name == "watch_rollback" else None

    fresh = ck / "candidates" / roles["fresh"]
    checkpoint = fresh / "ckpt-0000000005.pt"
    promoted = {"outcome": "promoted", "reason": "better", "checkpoint": checkpoint.name}

    def gate_promotes() -> bool:  # promotion.judge: the verdict goes with the pointer
        entry = candidates.candidate_entry(ck, fresh, checkpoint, Verdict.from_json(promoted))
        return transitions.serve(ck, entry, "gate", unless_pinned=True, verdict=promoted)

    def gate_rejects() -> None:  # judging.run._decide: the verdict in the gate's transaction
        with transaction.transaction(ck) as tx:
            tx.verdict(fresh, {"outcome": "rejected"})

    return {
        "gate_promote": gate_promotes,
        "gate_reject": gate_rejects,
        "watch_rollback": lambda: watch_rollback() if watch_rollback else None,
        "operator_promote": lambda: main(["model", "promote", AGENT, roles["old_rejected"]]),
        "operator_rollback": lambda: main(["model", "rollback", AGENT]),
        "operator_unpin": lambda: main(["model", "unpin", AGENT]),
        "repair": lambda: [str(x) for x in repair.set_aside_unusable(ck)],
        "operator_repair": lambda: main(["model", "rollback", AGENT]),
        "prune": lambda: [p.name for p in candidates.prune(ck, 1, 7.0)[0]],
    }


def main() -> None:
    roles = json.loads(Path(sys.argv[1]).read_text())
    scenario, kill_after = sys.argv[2], int(sys.argv[3])
    ck = Path(roles["checkpoints"])
    run = _scenarios(ck, roles, scenario)[scenario]
    done = _count_steps(kill_after)
    report = run()
    print(json.dumps({"steps": done[0], "report": report}, default=_json))


def _json(value: Any) -> Any:
    """A transition's return as JSON: a typed record (the watch's LiveReport) as its own."""
    return value.to_json() if hasattr(value, "to_json") else str(value)


if __name__ == "__main__":
    main()
