"""Does a run's child forked by the run worker see CUDA normally? (genesis_fp16/commands/zygote.py)

Daemon-free: this process does what the worker does before it serves (imports
``zygote.PRELOAD``, checks one thread and no CUDA context, forks the CUDA probe child,
``gc.freeze()``), then forks a child that creates a CUDA context, runs a tiny op and a tiny
AdamW step on the GPU and prints what it saw; then forks a second child that does the same
(a later run), and checks the worker still has no CUDA context. Whether the driver library
is mapped in the worker is printed, as information: a CUDA build of torch maps it at import,
and that alone does not stop a child. Exits 0 when both children saw CUDA and the worker
stayed clean, 1 otherwise, 2 where there is no GPU.
Well under a minute (torch's import is most of it)::

    python benchmarks/run_worker_cuda.py
"""

from __future__ import annotations

import gc
import json
import os
import sys
import time


def _child() -> int:
    import torch

    if not torch.cuda.is_available():
        print("no CUDA device here", file=sys.stderr)
        return 2
    started = time.perf_counter()
    x = torch.arange(4.0, device="cuda")
    model = torch.nn.Linear(4, 1).cuda()
    optimizer = torch.optim.AdamW(model.parameters())
    model(x).sum().backward()
    optimizer.step()
    torch.cuda.synchronize()
    seen = {
        "pid": os.getpid(),
        "device": torch.cuda.get_device_name(0),
        "sum": float((x * 2).sum().item()),
        "first_cuda_s": round(time.perf_counter() - started, 3),
    }
    print(json.dumps(seen), flush=True)
    return 0 if seen["sum"] == 12.0 else 1


def main() -> int:
    # The environment the daemon starts its worker with (run_worker.WORKER_ENV), set
    # before anything imports numpy: OpenBLAS reads it once, when it loads.
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    from genesis_fp16.commands import zygote

    ready = zygote._preload()
    print(json.dumps(ready), flush=True)
    if "ready" not in ready:
        return 1
    import torch

    gc.freeze()
    codes = []
    for _ in range(2):  # two runs from the same worker
        pid = os.fork()
        if pid == 0:
            os._exit(_child())
        codes.append(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))
    after = {
        "children_exit": codes,
        "worker_cuda_initialized": torch.cuda.is_initialized(),
        "worker_cuda_driver_loaded": zygote.cuda_driver_loaded(),
    }
    print(json.dumps(after), flush=True)
    if 2 in codes:
        return 2
    return 0 if codes == [0, 0] and not after["worker_cuda_initialized"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
