"""A real fit() run in its own process that SIGKILLs itself before a chosen rename.

``python last_step_child.py FOLDER STEPS KILL_AT``: a guarded-free run of ``STEPS`` steps
(checkpoint every 5) resumed from FOLDER. Every ``os.replace`` into FOLDER is printed
(its destination's name) as it is about to happen; the ``KILL_AT``-th (1-based) is never
reached: the process kills itself with SIGKILL first, as ``kill -9`` would, temp files
fsynced and all. ``KILL_AT`` 0 runs to the end and prints the result as JSON.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from guard_faults import FaultTask

from genesis_fp16_infrastructure.training import FitOptions, fit


def main() -> None:
    folder, steps, kill_at = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
    real_replace = os.replace
    count = 0

    def replace(src: object, dst: object) -> None:
        nonlocal count
        if Path(str(dst)).parent == folder:
            count += 1
            print(f"replace {count} {Path(str(dst)).name}", flush=True)
            if count == kill_at:
                os.kill(os.getpid(), signal.SIGKILL)
        real_replace(src, dst)  # type: ignore[arg-type]

    os.replace = replace  # type: ignore[assignment]
    options = FitOptions(
        precision="fp32", steps=steps, checkpoint_dir=folder, checkpoint_steps=5, resume=True
    )
    result = fit(FaultTask(None), options)
    print(
        "result "
        + json.dumps({"steps_run": result.steps_run, "temps_removed": result.temps_removed}),
        flush=True,
    )


if __name__ == "__main__":
    main()
