"""Reading an SE-Darwin pool for a run, refused first when it would not fit in memory."""

from __future__ import annotations

from pathlib import Path

from genesis_fp16_infrastructure.contract.plugin_api import TrainRequestError
from genesis_fp16_infrastructure.contract.train_request import TrainRequest
from genesis_fp16_infrastructure.data.readers import (
    DataTooLarge,
    ReadResult,
    read_trajectories,
)
from genesis_fp16_infrastructure.data.record_cache import RecordCache
from genesis_fp16_infrastructure.machine_memory import machine_memory_bytes
from genesis_fp16_infrastructure.recipes.retrain.options import TaskOptions

# What a run costs in resident memory per byte of pool file, at its peak, with room to
# spare. Measured since a training read keeps its records as columns, no object per
# record (issue 36): a generated 1,000,000-record pool (one 1,510 MB file) peaked at
# 1,407 MiB in a first one-epoch `train` (0.98x, ~235 MiB of it the imports) and at
# 1,389 MiB after it grew by 1% (0.96x), reached while the task is built or trained
# (benchmarks/results/pool_scale_cpu-amd-epyc-2-cores.md, "peak RSS as each phase
# ended"); 2,230 and 2,186 MiB one version before, 6,262 MiB (4.3x) before issue 36,
# when the factor was 7. Memory follows the number of records more than their bytes (a
# record holds ~1.2 KB at the peak whatever its text): a pool of records a third the
# size of the generated ~1.5 KB ones would peak near 3x its bytes, so the factor stays 3
# rather than following the measured 1x down. The default max_pool_bytes is the run's
# memory limit (or the machine's memory) divided by it.
POOL_MEMORY_FACTOR = 3
# Named in the refusal, so that an operator sees where the factor comes from.
MEASURED_PEAK = (
    "0.98x on a generated 1,000,000-record pool (1,407 MiB for 1,510 MB, ~1.2 KB a "
    "record), benchmarks/results/pool_scale_cpu-amd-epyc-2-cores.md"
)


def max_pool_setting(agent: str) -> str:
    """The daemon's setting of ``agent``'s ``max_pool_bytes`` option, named in a refusal.

    >>> max_pool_setting("se_darwin")
    'GENESIS_FP16_AGENTS__SE_DARWIN__OPTIONS__MAX_POOL_BYTES'
    """
    return f"GENESIS_FP16_AGENTS__{agent.upper()}__OPTIONS__MAX_POOL_BYTES"


def read_pool(
    request: TrainRequest,
    options: TaskOptions,
    quarantine: Path | None,
    cache: RecordCache | None,
) -> ReadResult:
    """The pool at ``request.data_path``, size-checked first against the options'
    ``max_pool_bytes`` (unset: derived from the request's ``memory_limit_bytes``, or the
    machine's memory); a pool over it is one :class:`TrainRequestError` line naming its
    size, the limit and the setting of the request's agent (train exits 2, the daemon
    logs one line)."""
    assert request.data_path is not None
    path, memory_limit, agent = Path(request.data_path), request.memory_limit_bytes, request.agent
    limit = options.max_pool_bytes
    if limit is None:
        memory = machine_memory_bytes() if memory_limit is None else memory_limit
        limit = memory // POOL_MEMORY_FACTOR
        whose = (
            "the run's memory limit (GENESIS_FP16_RUN_MEMORY_LIMIT_BYTES)"
            if memory_limit is not None
            else "this machine's memory (or its cgroup limit)"
        )
        source = f"{whose}, {memory / 2**20:,.0f} MiB, / {POOL_MEMORY_FACTOR}"
    else:
        source = max_pool_setting(agent)
    try:
        # keep_text=False: the run needs each record's numbers, not its change's text
        return read_trajectories(
            path, quarantine=quarantine, max_bytes=limit or None, cache=cache, keep_text=False
        )
    except DataTooLarge as exc:
        raise TrainRequestError(
            f"{exc} (the limit is {source}); a run peaks at about {POOL_MEMORY_FACTOR}x its "
            f"pool's bytes in resident memory (measured {MEASURED_PEAK}). "
            f"Raise {max_pool_setting(agent)} (the {agent} option max_pool_bytes; 0: no limit) "
            "on a machine with the memory, or train on part of the pool"
        ) from None
