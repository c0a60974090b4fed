"""Before each run: is the agent's served-model pointer usable, and is it pinned?

An unreadable, wrong-version or dangling ``served.json`` is set aside as
``served.json.unusable-<UTC time>`` (agent_folder.repair), logged in one line
and counted in ``genesis_fp16_state_files_skipped_total{file="served_pointer"}``; while no
usable pointer replaces it the agent is degraded on ``/healthz``,
``genesis_fp16_served_pointer_unusable`` is 1 (alert GenesisFp16ServedPointerUnusable),
and its runs are refused in one line naming the repair (``genesis-fp16 model promote
AGENT ID`` or ``model rollback AGENT``). ``genesis_fp16_served_model_pinned`` says whether
an operator pinned the served model. Agents without a pointer (rlhf_ppo) are untouched.
"""

from __future__ import annotations

import structlog

from genesis_fp16.jobs.job_state import JobContext
from genesis_fp16_infrastructure.api import (
    AgentFolder,
    AgentSnapshot,
)

log = structlog.get_logger("genesis_fp16.jobs")


def check_served_pointer(ctx: JobContext, agent: str, snapshot: AgentSnapshot) -> None:
    """Set an unusable pointer aside (counted once), and export the pointer's state, as
    the run's plan read it (``snapshot``: the pointer is read again only to set it aside)."""
    home = AgentFolder(ctx.settings.state_dir, agent)
    models = home.checkpoints
    metrics = ctx.metrics.promotion
    if not any(p.exists() or p.is_symlink() for p in (models.pointer_path, models.aside_path)):
        ctx.unusable_pointer.pop(agent, None)  # none (rlhf_ppo; before the first model)
        metrics.pointer_unusable.labels(agent=agent).set(0)
        return
    if snapshot.pointer_error is None:  # usable, as the plan read it
        ctx.unusable_pointer.pop(agent, None)
        metrics.pointer_unusable.labels(agent=agent).set(0)
        pinned = snapshot.pointer is not None and snapshot.pointer.pinned is not None
        metrics.pinned.labels(agent=agent).set(float(pinned))
        return
    try:  # under the pointer's lock, read again: a repair since is not set aside
        why, moved = home.set_aside_unusable_pointer()
    except OSError as exc:  # not ours to rename: reported all the same, never followed
        why, moved = f"served-model pointer in {models.path} unusable: {exc}", None
    if moved is not None:
        # counted by the agent folder's owner, which set it aside
        log.error("unusable served-model pointer set aside", path=str(moved), error=why)
    if why is not None:
        ctx.unusable_pointer[agent] = why.replace("AGENT", agent)
        metrics.pointer_unusable.labels(agent=agent).set(1)
        metrics.pinned.labels(agent=agent).set(0)
        return
    ctx.unusable_pointer.pop(agent, None)  # repaired meanwhile: the next run looks again
    metrics.pointer_unusable.labels(agent=agent).set(0)
