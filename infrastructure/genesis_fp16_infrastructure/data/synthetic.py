"""Synthetic trajectory pools with learnable structure, for demos, tests and benchmarks.

Each attempt's success score comes from a hidden logit built from what is known before it
runs, plus Gaussian noise:

* the operator (refinement and recombination beat revision, which beats a fresh baseline);
* the generation (later generations do slightly better);
* the parents' recorded scores (good parents, good children);
* the size of the planned change (about 20 lines is best; large rewrites fail more often;
  many modified files hurt);
* the tools used (running tests helps, rewriting blindly hurts) and the reasoning pattern;
* which files it touches (changing tests alongside code helps, changing configuration
  hurts) and what kind of change it is (a diff that mostly adds lines does better than
  one that mostly removes them);
* its lineage beyond the parents: a hidden "promise" handed down from parents to
  children (so grandparents' scores and how earlier siblings fared say something the
  parents' own scores do not), and the parents' operators (a child of a fresh baseline
  is on shakier ground);
* the agent that wrote it: a base rate of its own (``AGENT_EFFECT``; 0 for se_darwin),
  which shows when pools of several agents are merged.

The post-hoc fields (status, test results, metrics, failure reasons, execution time and
cost) are then filled in consistently with the score, as Genesis fills them in. A few
records are made the way real pools are: 3% carry a status that disagrees with their
score, 2% are still pending or executing, 1% were pruned, and optional fields are
sometimes missing. The output depends only on ``count``, ``seed`` and ``agent``.

>>> pool = generate_pool(100, seed=0)
>>> len(pool["trajectories"]), pool["success_threshold"]
(100, 0.7)
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from genesis_fp16_infrastructure.agent_folder.files import write_atomic
from genesis_fp16_infrastructure.data.schema import (
    FAILURE_THRESHOLD,
    SUCCESS_THRESHOLD,
    outcome_for_score,
)

OPERATOR_EFFECT = {"baseline": -0.8, "revision": 0.0, "recombination": 0.4, "refinement": 0.6}
TOOL_EFFECT = {
    "pytest": 0.7,
    "static_analyzer": 0.4,
    "debugger": 0.3,
    "profiler": 0.1,
    "linter": 0.1,
    "grep": 0.0,
    "web_search": -0.35,
    "llm_rewrite": -0.6,
}
PATTERN_EFFECT = {
    "decomposition": 0.35,
    "chain_of_thought": 0.2,
    "reflection": 0.1,
    "analogy": -0.1,
    "trial_and_error": -0.45,
}
NOISE_STD = 0.6
FILE_KIND_EFFECT = {"test": 0.4, "config": -0.45, "docs": 0.0, "code": 0.0}
ADDED_SHARE_EFFECT = 1.2  # per unit of (share of added lines - 0.5)
PROMISE_STD, PROMISE_INHERITED = 0.5, 0.8  # the lineage's hidden promise
BASELINE_PARENT_EFFECT = -0.4  # per share of parents that were fresh baselines
AGENT_EFFECT = {"se_darwin": 0.0, "builder": 0.5, "qa": -0.6, "support": -0.2, "analyst": 0.3}
# Every pool spans the same generations, its parents drawn from the same share of the
# attempts before them, whatever its size: pools of any size and seed (the daemon's
# sample, a pool made with `data generate --count 600`, a later batch) come from one
# distribution over the time-like features (generation, lineage depth, siblings,
# grandparents) and pass the drift check against each other (issue 92). Before, a pool
# had count // 150 generations (4 at 600 records, 13 at 2,000, 60 from 9,000) and a
# window of the last 600 attempts, so a 600-record pool dropped beside the 2,000-record
# sample was flagged on 14 features (log_generation 0.696). 13 generations and 30% are
# what the 2,000-record sample had: its pools are as they were, byte for byte.
GENERATIONS = 13
PARENT_WINDOW = 0.3
# Kinds of change, as the share of added lines in the diff (before noise).
_CHANGE_KINDS = {"feature": 0.85, "fix": 0.6, "refactor": 0.5, "removal": 0.15}
_BASE_TIME = datetime(2025, 1, 6, 9, 0, tzinfo=UTC)
_OPERATOR_WEIGHTS = {"baseline": 0.1, "revision": 0.35, "recombination": 0.25, "refinement": 0.3}
_FAILURES = (
    "tests failed: assertion mismatch",
    "timeout while running benchmark",
    "import error after refactor",
    "regression in edge-case handling",
    "syntax error in generated code",
)
_DIAGNOSES = (
    "Edge cases in input parsing are not handled",
    "The retry loop hides the original exception",
    "Benchmark shows quadratic behaviour on large inputs",
    "State leaks between test cases",
    "The tool call result is not validated",
)
_STRATEGIES = (
    "Add explicit validation and targeted tests",
    "Replace the nested loop with an index lookup",
    "Isolate state in fixtures and reset between runs",
    "Combine the parents' error handling with the faster path",
    "Rewrite the module from the task description",
)
_FILES = ("agent.py", "tools.py", "parser.py", "planner.py", "memory.py", "eval.py", "utils.py")
_OTHER_FILES = {
    "tests/test_agent.py": "test",
    "tests/test_tools.py": "test",
    "config.yaml": "config",
    "settings.toml": "config",
    "docs/README.md": "docs",
}


def _clip(x: float, low: float = 0.0, high: float = 1.0) -> float:
    return min(high, max(low, x))


@dataclass(frozen=True)
class _Past:
    """What the generator remembers of an earlier attempt."""

    trajectory_id: str
    score: float | None  # None while pending or executing
    operator: str
    promise: float


@dataclass(frozen=True)
class _Plan:
    generation: int
    operator: str
    parents: list[_Past]
    lines: int
    files: list[str]
    added_share: float
    tools: list[str]
    pattern: str
    promise: float


def _mean_logit(plan: _Plan, agent: str) -> float:
    """The hidden logit before its noise: what the attempt's plan, its lineage's promise
    and its agent make of its chances."""
    logit = OPERATOR_EFFECT[plan.operator] + 0.02 * min(plan.generation, 40) - 0.3
    known = [p.score for p in plan.parents if p.score is not None]
    if known:
        logit += 3.0 * (sum(known) / len(known) - 0.5)
    if plan.parents:
        baseline = sum(p.operator == "baseline" for p in plan.parents) / len(plan.parents)
        logit += BASELINE_PARENT_EFFECT * baseline
    logit -= 0.6 * abs(math.log(plan.lines / 20.0)) + 0.12 * (len(plan.files) - 1)
    kinds = {_OTHER_FILES.get(f, "code") for f in plan.files}
    logit += sum(FILE_KIND_EFFECT[k] for k in kinds)
    logit += ADDED_SHARE_EFFECT * (plan.added_share - 0.5)
    logit += sum(TOOL_EFFECT[t] for t in plan.tools) + PATTERN_EFFECT[plan.pattern]
    return logit + (plan.promise + AGENT_EFFECT.get(agent, 0.0))  # summed as before


# A score rounds to 4 decimals (``_record``): it is a success from this sigmoid up.
_SUCCESS_LOGIT = math.log((SUCCESS_THRESHOLD - 5e-5) / (1 - SUCCESS_THRESHOLD + 5e-5))


@dataclass(frozen=True)
class Truth:
    """What the generator knew of one attempt before it ran: its hidden logit before the
    noise (``logit``), of which ``promise`` is its lineage's hidden promise."""

    logit: float
    promise: float

    @property
    def probability(self) -> float:
        """Its chance of being labelled a success (:func:`success_probability`)."""
        return success_probability(self.logit)


def success_probability(mean_logit: float) -> float:
    """The chance that an attempt whose hidden logit before its noise is ``mean_logit``
    is labelled a success (its score, the sigmoid of the logit with N(0, NOISE_STD) noise
    rounded to 4 decimals, at least SUCCESS_THRESHOLD): what knowing the generator's
    hidden state, the lineage's promise included, tells before the attempt runs.

    >>> round(success_probability(_SUCCESS_LOGIT), 6)
    0.5
    """
    return 0.5 * math.erfc((_SUCCESS_LOGIT - mean_logit) / (NOISE_STD * math.sqrt(2.0)))


def _attempt(rng: random.Random, index: int, count: int, history: list[_Past]) -> _Plan:
    generation = index * GENERATIONS // count
    operator = "baseline"
    parents: list[_Past] = []
    if generation > 0 and history:
        operator = rng.choices(list(_OPERATOR_WEIGHTS), list(_OPERATOR_WEIGHTS.values()))[0]
        window = min(len(history), max(1, int(count * PARENT_WINDOW)))
        wanted = {"baseline": 0, "revision": 1, "refinement": 1, "recombination": 2}[operator]
        # indices into the window, not a copy of it: the same picks as sampling the list
        picked = rng.sample(range(len(history) - window, len(history)), min(wanted, window))
        parents = [history[i] for i in picked]
    lines = int(_clip(rng.lognormvariate(math.log(20.0), 0.8), 1, 400))
    count_files = 1 + min(lines // 30, 6) + rng.randint(0, 2)
    files = rng.sample(_FILES, min(count_files, len(_FILES)))
    for name in _OTHER_FILES:  # each touched now and then, beside the code
        if rng.random() < 0.15:
            files.append(name)
    added_share = _clip(rng.choice(list(_CHANGE_KINDS.values())) + rng.gauss(0.0, 0.08))
    tools = rng.sample(list(TOOL_EFFECT), rng.randint(1, 4))
    pattern = rng.choice(list(PATTERN_EFFECT))
    inherited = sum(p.promise for p in parents) / len(parents) if parents else 0.0
    promise = PROMISE_INHERITED * inherited + rng.gauss(0.0, PROMISE_STD)
    return _Plan(generation, operator, parents, lines, files, added_share, tools, pattern, promise)


def _code_changes(rng: random.Random, lines: int, added_share: float) -> str:
    out = [f"@@ -{rng.randint(1, 300)},{lines} @@"]
    for j in range(lines):
        sign = "+" if rng.random() < added_share else "-"
        out.append(f"{sign} v{j}=f{rng.randint(0, 99)}(v{max(0, j - 1)})")
    return "\n".join(out)


def _record(
    rng: random.Random,
    index: int,
    count: int,
    agent: str,
    history: list[_Past],
    truth: dict[str, Truth] | None = None,
) -> dict[str, Any]:
    plan = _attempt(rng, index, count, history)
    mean = _mean_logit(plan, agent)
    logit = mean + rng.gauss(0.0, NOISE_STD)  # its noise drawn next, as before the id's bits
    generation, operator, parents, lines = plan.generation, plan.operator, plan.parents, plan.lines
    files = len(plan.files)
    trajectory_id = f"{agent}_gen{generation}_{rng.getrandbits(40):010x}"
    if truth is not None:
        truth[trajectory_id] = Truth(mean, plan.promise)
    score = round(1.0 / (1.0 + math.exp(-logit)), 4)  # the logit's sigmoid
    outcome = outcome_for_score(score)
    status = {"success": "success", "partial": "partial_success", "failure": "failure"}[outcome]
    roll = rng.random()
    if roll < 0.03:  # real pools: the status word disagrees with the score
        status = rng.choice([s for s in ("success", "partial_success", "failure") if s != status])
    elif roll < 0.05:
        status = rng.choice(("pending", "executing"))
    elif roll < 0.06:
        status = "pruned"
    record: dict[str, Any] = {
        "trajectory_id": trajectory_id,
        "generation": generation,
        "agent_name": agent,
        "parent_trajectories": [p.trajectory_id for p in parents],
        "operator_applied": operator,
        "code_changes": _code_changes(rng, lines, plan.added_share),
        "problem_diagnosis": rng.choice(_DIAGNOSES),
        "proposed_strategy": rng.choice(_STRATEGIES),
        "strategy_description": f"{operator} of {len(parents)} parent(s) touching {files} file(s)",
        "status": status,
        "tools_used": plan.tools,
        "reasoning_pattern": plan.pattern,
        "modified_files": plan.files,
        "created_at": (_BASE_TIME + timedelta(seconds=37 * index)).isoformat(),
    }
    if rng.random() < 0.9:
        record["plan_id"] = f"plan_{rng.getrandbits(24):06x}"
        record["key_insights"] = [f"insight about {rng.choice(_FILES)}"]
        record["assumptions_made"] = ["tests cover the changed paths"]
    if status in ("pending", "executing"):
        history.append(_Past(trajectory_id, None, operator, plan.promise))
        return record
    record.update(_post_hoc(rng, score, outcome, lines))
    history.append(_Past(trajectory_id, score, operator, plan.promise))
    return record


def _post_hoc(rng: random.Random, score: float, outcome: str, lines: int) -> dict[str, Any]:
    total = rng.randint(5, 20)
    passed = round(score * total)
    seconds = 4.0 + 0.35 * lines + rng.expovariate(1 / 20.0)
    return {
        "success_score": score,
        "test_results": {
            "tasks_total": total,
            "tasks_passed": passed,
            "tasks_failed": total - passed,
        },
        "metrics": {
            "accuracy": score,  # as in real pools
            "speed": round(_clip(0.8 - 0.001 * lines + rng.gauss(0, 0.1)), 4),
            "robustness": round(_clip(0.8 * score + rng.gauss(0, 0.08)), 4),
        },
        "failure_reasons": [] if outcome == "success" else rng.sample(_FAILURES, rng.randint(1, 2)),
        "code_after": None if rng.random() < 0.3 else f"# {lines} lines changed",
        "execution_time_seconds": round(seconds, 2),
        "cost_dollars": round(0.0004 * lines + 0.01 + rng.random() * 0.02, 4),
    }


def generate_pool(count: int, seed: int, agent: str = "se_darwin") -> dict[str, Any]:
    """A trajectory pool object with ``count`` records, the same for the same seed."""
    return generate_pool_with_truth(count, seed, agent)[0]


def generate_pool_with_truth(
    count: int, seed: int, agent: str = "se_darwin"
) -> tuple[dict[str, Any], dict[str, Truth]]:
    """:func:`generate_pool`'s pool, and each record's :class:`Truth` by its trajectory
    id: what a benchmark compares a model with (``Truth.probability``). The pool's
    records never hold it (a model could learn it from them).

    >>> pool, truth = generate_pool_with_truth(100, seed=0)
    >>> pool == generate_pool(100, seed=0), sorted(truth) == sorted(pool["trajectories"])
    (True, True)
    """
    if count < 1:
        raise ValueError(f"count must be at least 1, got {count}")
    rng = random.Random(seed)
    history: list[_Past] = []
    trajectories: dict[str, Any] = {}
    truth: dict[str, Truth] = {}
    for index in range(count):
        record = _record(rng, index, count, agent, history, truth)
        trajectories[record["trajectory_id"]] = record
    pruned = sum(1 for r in trajectories.values() if r["status"] == "pruned")
    pool = {
        "agent_name": agent,
        "max_trajectories": count,
        "success_threshold": SUCCESS_THRESHOLD,
        "failure_threshold": FAILURE_THRESHOLD,
        "total_added": count,
        "total_pruned": pruned,
        "saved_at": (_BASE_TIME + timedelta(seconds=37 * count)).isoformat(),
        "trajectories": trajectories,
    }
    return pool, truth


def write_pool(out: Path, count: int, seed: int, agent: str = "se_darwin") -> Path:
    """Write ``<out>/trajectory_pools/<agent>/trajectory_pool.json`` and return its path."""
    path = Path(out) / "trajectory_pools" / agent / "trajectory_pool.json"
    text = json.dumps(generate_pool(count, seed, agent))
    write_atomic(path, text.encode("utf-8"))
    return path


def generate_replay_records(
    count: int, seed: int, agent: str = "se_darwin"
) -> list[dict[str, Any]]:
    """The same attempts as :func:`generate_pool`, in the replay-buffer record shape."""
    out = []
    for record in generate_pool(count, seed, agent)["trajectories"].values():
        score = record.get("success_score")
        outcome = "unknown" if score is None else outcome_for_score(score)
        out.append(
            {
                "trajectory_id": record["trajectory_id"],
                "agent_id": agent,
                "task_description": record["problem_diagnosis"],
                "initial_state": {"files": record["modified_files"]},
                "steps": [
                    {
                        "timestamp": record["created_at"],
                        "tool_name": tool,
                        "tool_args": {},
                        "tool_result": None,
                        "agent_reasoning": record["reasoning_pattern"],
                    }
                    for tool in record["tools_used"]
                ],
                "final_outcome": outcome,
                "reward": score,
                "metadata": {
                    key: record[key]
                    for key in (
                        "operator_applied",
                        "generation",
                        "parent_trajectories",
                        "code_changes",
                        "modified_files",
                        "proposed_strategy",
                        "reasoning_pattern",
                    )
                },
                "created_at": record["created_at"],
                "duration_seconds": record.get("execution_time_seconds"),
                "failure_rationale": "; ".join(record.get("failure_reasons", [])) or None,
                "error_category": None,
                "fix_applied": None,
            }
        )
    return out


def write_replay_buffer(path: Path, count: int, seed: int, agent: str = "se_darwin") -> Path:
    """Write replay-buffer records as JSON lines to ``path`` and return it."""
    path = Path(path)  # write_atomic makes its folder
    lines = (json.dumps(r) for r in generate_replay_records(count, seed, agent))
    text = "\n".join(lines) + "\n"
    write_atomic(path, text.encode("utf-8"))
    return path
