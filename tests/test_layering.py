"""Checks the one direction of imports: infrastructure <- agents <- genesis_fp16."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# What each room may import, besides the standard library.
ALLOWED = {
    "infrastructure": {"torch", "pydantic", "numpy", "msgspec", "genesis_fp16_infrastructure"},
    "agents": {
        "torch",
        "pydantic",
        "numpy",
        "msgspec",
        "genesis_fp16_infrastructure",
        "genesis_fp16_agents",
    },
}
# The one daemon module a room may import: the plugin authors' door, which imports only
# the library (agents/ are plugins, and import the contract through it).
DOORS = {"agents": frozenset({"genesis_fp16.plugin_api"})}
FORBIDDEN_CALLS = {"os.environ", "os.getenv", "logging.basicConfig", "logging.config"}


def _imports(path: Path, doors: frozenset[str] = frozenset()) -> set[str]:
    """The top-level packages ``path`` imports, leaving out imports of a module in ``doors``."""
    tree = ast.parse(path.read_text(), filename=str(path))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names.update(a.name.split(".")[0] for a in node.names if a.name not in doors)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.update(node.module.split(".")[:1] if node.module not in doors else [])
    return names


def _sources(room: str) -> list[Path]:
    return sorted((ROOT / room).rglob("*.py"))


@pytest.mark.parametrize("room", sorted(ALLOWED))
def test_room_imports_only_what_it_may(room: str) -> None:
    """infrastructure/ and agents/ import no daemon packages (prometheus, structlog, ...);
    agents/ import of the daemon only its plugin door, genesis_fp16.plugin_api."""
    import sys

    stdlib = set(sys.stdlib_module_names)
    offenders = {
        f"{path.relative_to(ROOT)}: {name}"
        for path in _sources(room)
        for name in _imports(path, DOORS.get(room, frozenset()))
        if name not in stdlib and name not in ALLOWED[room]
    }
    assert not offenders, sorted(offenders)


def test_infrastructure_reads_no_environment_and_configures_no_logging() -> None:
    """The library takes typed config objects; only the daemon reads the environment."""
    offenders = [
        str(path.relative_to(ROOT))
        for path in _sources("infrastructure") + _sources("agents")
        for call in FORBIDDEN_CALLS
        if call in path.read_text()
    ]
    assert not offenders, offenders


def test_layering_check_catches_a_forbidden_import(tmp_path: Path) -> None:
    """The import scanner sees a daemon import, so the tests above can fail; the agents'
    door lets through genesis_fp16.plugin_api alone."""
    bad = tmp_path / "bad.py"
    bad.write_text("import prometheus_client\nfrom structlog import get_logger\n")
    assert {"prometheus_client", "structlog"} <= _imports(bad)
    door = tmp_path / "door.py"
    door.write_text("from genesis_fp16.plugin_api import TrainResult\nimport genesis_fp16.config\n")
    assert _imports(door, DOORS["agents"]) == {"genesis_fp16"}  # the door only, not the daemon


# Import name -> its folder (the folder is the name, under a source root).
PACKAGES = {
    "genesis_fp16": "genesis_fp16",
    "genesis_fp16_agents": "agents/genesis_fp16_agents",
    "genesis_fp16_infrastructure": "infrastructure/genesis_fp16_infrastructure",
}


def _modules(root: Path, packages: dict[str, str]) -> dict[str, Path]:
    """Every module of ``packages`` under ``root``, by dotted name."""
    modules = {}
    for name, folder in packages.items():
        for path in sorted((root / folder).rglob("*.py")):
            parts = path.relative_to(root / folder).with_suffix("").parts
            modules[".".join((name, *parts)).removesuffix(".__init__")] = path
    return modules


def _module_edges(
    name: str, path: Path, modules: dict[str, Path], deferred: bool = False
) -> set[str]:
    """The modules ``name`` imports when it loads, ``if TYPE_CHECKING:`` blocks included,
    and with ``deferred`` those it imports inside a function or class too.

    Without ``deferred``, imports inside functions are left out: they run later, and a
    cycle through one is how a late import breaks a cycle at load time (the daemon's
    commands import their library late, to start fast). With it, such a cycle counts: the
    two modules still need each other. ``from pkg import mod`` is an edge to the
    submodule, not to the package.
    """
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()

    def visit(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names if alias.name in modules)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    up = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*up, base] if base else up)
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    found.add(sub if sub in modules else base)
            elif isinstance(node, ast.If | ast.Try):
                visit(node.body)

    tree = ast.parse(path.read_text(), filename=str(path))
    # Deferred: every import statement, at any depth (a function, a class, an except).
    visit(
        [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]
        if deferred
        else tree.body
    )
    return {edge for edge in found if edge in modules and edge != name}


def _import_cycles(root: Path, packages: dict[str, str], deferred: bool = False) -> list[list[str]]:
    """The groups of modules that import each other, directly or around a loop (with
    ``deferred``, through imports inside functions too)."""
    modules = _modules(root, packages)
    graph = {name: _module_edges(name, path, modules, deferred) for name, path in modules.items()}
    reach = {name: _reach(graph, name) for name in graph}  # a small graph: cheap enough
    cycles: list[list[str]] = []
    for name in graph:
        group = sorted(other for other in reach[name] if name in reach[other])
        if group and group not in cycles:
            cycles.append(group)
    return cycles


def _reach(graph: dict[str, set[str]], start: str) -> set[str]:
    """Every module ``start`` loads, directly or through others."""
    seen: set[str] = set()
    frontier = list(graph[start])
    while frontier:
        node = frontier.pop()
        if node not in seen:
            seen.add(node)
            frontier.extend(graph[node])
    return seen


def test_no_import_cycles() -> None:
    """No module imports, at load time, a module that imports it back (issue 30's target: 0)."""
    assert _import_cycles(ROOT, PACKAGES) == []


# No cycle through a deferred import either (issue 94, item 3): a FaultBundle replays
# itself (bundle -> replay, inside FaultBundle.replay), so the replay imports no bundle; the
# step the recorder saves and the replay runs again (its batches as plain data, the step
# with its losses read) is flight.recorded_step's, which imports neither.


def test_no_library_import_cycles_deferred_included() -> None:
    """No module (of the library, the agents or the daemon) imports a module that imports
    it back, counting imports inside functions and ``TYPE_CHECKING`` blocks."""
    assert _import_cycles(ROOT, PACKAGES, deferred=True) == []


def test_cycle_check_catches_a_cycle_hidden_behind_type_checking(tmp_path: Path) -> None:
    """Two modules importing each other, one only for the checker, are a cycle to the check."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "fit.py").write_text("from pkg.calibration import calibrate\n")
    (pkg / "calibration.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import fit\n"
    )
    (pkg / "late.py").write_text("def f():\n    from pkg import fit\n")
    assert _import_cycles(tmp_path, {"pkg": "pkg"}) == [["pkg.calibration", "pkg.fit"]]


def test_deferred_cycle_check_catches_a_cycle_through_a_function(tmp_path: Path) -> None:
    """A module importing another inside a method, which imports it back at load time, is
    a cycle once deferred imports count, and not before."""
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "bundle.py").write_text(
        "class Bundle:\n    def replay(self):\n        from pkg.replay import replay\n"
    )
    (pkg / "replay.py").write_text("from pkg.bundle import Bundle\n")
    assert _import_cycles(tmp_path, {"pkg": "pkg"}) == []
    assert _import_cycles(tmp_path, {"pkg": "pkg"}, deferred=True) == [["pkg.bundle", "pkg.replay"]]


# The daemon's floors, bottom up: a package imports from its own floor and those below.
# settings (config) -> record (metrics) -> start processes (launch) -> one job walked plan,
# execute, record (jobs) -> the service and its status report, and the commands on top.
DAEMON_FLOORS = (
    {"plugin_api", "scaffold", "testing"},
    {"config"},
    {"metrics"},
    {"launch"},
    {"jobs", "events"},
    {"service", "status"},
    {"commands", "bench", "cli", "__main__"},
)
# The training library's: precision and the typed records a run reports (a demotion, a
# calibration: each uses the other's names), then the modules shared by a step and a run
# (checkpoint format, RNG state, the process group, the fields every step shares), then
# one step, then a whole run and its flight recorder (which re-runs a run's steps; fit()
# calls it).
TRAINING_FLOORS = (
    {"precision", "reports"},
    {
        "checkpoint_keys",
        "checkpoint_files",
        "checkpoint_arrays",
        "checkpoint_load",
        "checkpoint",
        "rng",
        "distributed",
        "step_spec",
    },
    {"step"},
    {"run", "flight"},
)


def _floor_offenders(root: Path, package: str, floors: tuple[set[str], ...]) -> list[str]:
    """``path: part -> part`` for each import of ``package`` (whose folder is ``root``) that
    goes up a floor; a part is a subpackage or a top-level module."""
    floor = {name: level for level, names in enumerate(floors) for name in names}
    depth = package.count(".") + 1
    offenders: set[str] = set()
    for path in sorted(root.rglob("*.py")):
        own = path.relative_to(root).parts[0].removesuffix(".py")
        if own == "__init__":
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            names: list[str] = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module] + [f"{node.module}.{a.name}" for a in node.names]
            for name in names:
                parts = name.split(".")
                if ".".join(parts[:depth]) != package or len(parts) <= depth:
                    continue
                target = parts[depth]
                if target in floor and own in floor and floor[target] > floor[own]:
                    offenders.add(f"{path.relative_to(root)}: {own} -> {target}")
    return sorted(offenders)


def test_floors_name_every_part() -> None:
    """Every subpackage and top-level module of both packages sits on a floor."""
    for root, floors in (
        (ROOT / "genesis_fp16", DAEMON_FLOORS),
        (ROOT / "infrastructure" / "genesis_fp16_infrastructure" / "training", TRAINING_FLOORS),
    ):
        parts = {p.name.removesuffix(".py") for p in root.iterdir() if p.name != "__pycache__"}
        assert parts - {"__init__"} == set().union(*floors), root


def test_daemon_packages_import_only_their_floor_and_below() -> None:
    """config imports no metrics, jobs or service; launch no jobs; jobs no service."""
    assert _floor_offenders(ROOT / "genesis_fp16", "genesis_fp16", DAEMON_FLOORS) == []


def test_training_packages_import_only_their_floor_and_below() -> None:
    """precision imports nothing else of training; a step imports no run."""
    root = ROOT / "infrastructure" / "genesis_fp16_infrastructure" / "training"
    package = "genesis_fp16_infrastructure.training"
    assert _floor_offenders(root, package, TRAINING_FLOORS) == []


def test_floor_check_catches_an_import_from_above(tmp_path: Path) -> None:
    """A config module that imports the jobs is an offender, also inside a function."""
    (tmp_path / "config").mkdir()
    (tmp_path / "config" / "settings.py").write_text(
        "def later():\n    from genesis_fp16.jobs.agent_job import run_agent_job\n"
    )
    offenders = _floor_offenders(tmp_path, "genesis_fp16", DAEMON_FLOORS)
    assert offenders == ["config/settings.py: config -> jobs"]


# The library's layers, bottom up: the root's utilities, the agent folder's owner (the one
# reader, atomic writer and lock that every other component's files go through), the
# other components, the agent folder's typed face (folder: AgentFolder reads and writes
# the records of the components below it; checkpoints_folder: a checkpoints folder's
# served models, AgentFolder.checkpoints), the contract
# (what a plugin and the daemon exchange), judging/ (the judged run every plugin that
# scores its records gets: it runs a plugin through the contract, so the contract imports
# none of it), the recipes, and on top the daemon's door (api: it gives the daemon names of
# every layer, and no module of the library imports it). A component names no agent.
LIBRARY_LAYERS = (
    {
        "config_bounds",
        "errors",
        "kept_in_memory",
        "lazy_exports",
        "machine_memory",
        "precision_names",
        "record_codec",
    },
    {"agent_folder"},
    {"training", "data", "world_model", "rl", "probe"},
    {"folder", "checkpoints_folder"},
    {"contract"},
    {"judging"},
    {"recipes"},
    {"api"},
)
# No import points up (issue 94, item 3): the lifecycle's and the runs' records name the
# precisions, whose vocabulary (precision_names) sits with the root's utilities, beneath the
# agent folder; the request and the guard's config that use it stay training's.
LIBRARY = ROOT / "infrastructure" / "genesis_fp16_infrastructure"
AGENT_NAMES = re.compile(r"se_darwin|SE-Darwin|rlhf_ppo|RLHF-PPO", re.IGNORECASE)


def test_library_layers_name_every_part() -> None:
    """Every top-level module and subpackage of the library sits in one layer."""
    parts = {p.name.removesuffix(".py") for p in LIBRARY.iterdir() if p.name != "__pycache__"}
    assert parts - {"__init__"} == set().union(*LIBRARY_LAYERS)


def test_library_layers_import_only_their_layer_and_below() -> None:
    """No component imports the contract or a recipe; the contract imports no judged run
    and no recipe; no other import points up, deferred (in a function) and
    ``TYPE_CHECKING`` ones included."""
    offenders = _floor_offenders(LIBRARY, "genesis_fp16_infrastructure", LIBRARY_LAYERS)
    assert offenders == []


def test_components_name_no_agent() -> None:
    """The components are the toolkit: no agent's name in their code or docstrings
    (synthetic data names the agents its made-up records come from: data/synthetic.py)."""
    offenders = [
        f"{path.relative_to(LIBRARY)}:{number}"
        for part in sorted(LIBRARY_LAYERS[1] | LIBRARY_LAYERS[2])
        for path in sorted((LIBRARY / part).rglob("*.py"))
        if path.name != "synthetic.py"
        for number, line in enumerate(path.read_text().splitlines(), 1)
        if AGENT_NAMES.search(line)
    ]
    assert offenders == []


def test_library_layer_check_catches_a_component_importing_a_recipe(tmp_path: Path) -> None:
    """A component that imports a recipe or the contract, or the contract importing the
    judged run in a function, is an offender, so the check above can fail."""
    (tmp_path / "world_model").mkdir()
    (tmp_path / "world_model" / "predict.py").write_text(
        "from genesis_fp16_infrastructure.recipes.retrain import served\n"
    )
    (tmp_path / "training").mkdir()
    (tmp_path / "training" / "fit.py").write_text(
        "from genesis_fp16_infrastructure.contract.train_request import TrainRequest\n"
    )
    (tmp_path / "contract").mkdir()
    (tmp_path / "contract" / "judging.py").write_text(
        "def hashes():\n    from genesis_fp16_infrastructure.judging.split import id_hashes\n"
    )
    assert _floor_offenders(tmp_path, "genesis_fp16_infrastructure", LIBRARY_LAYERS) == [
        "contract/judging.py: contract -> judging",
        "training/fit.py: training -> contract",
        "world_model/predict.py: world_model -> recipes",
    ]


def _recipe_importers(root: Path) -> list[str]:
    """The modules under ``root`` that import a library recipe (by absolute import)."""
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
            if any(name.startswith("genesis_fp16_infrastructure.recipes") for name in names):
                found.append(str(path.relative_to(root)))
                break
    return found


def test_the_daemon_imports_no_recipe() -> None:
    """The daemon reaches the served model through the agent folder's owner
    (agent_folder/transitions.py) and the contract, never through an agent's recipe."""
    assert _recipe_importers(ROOT / "genesis_fp16") == []


def test_recipe_import_check_catches_one(tmp_path: Path) -> None:
    """A daemon module importing a recipe, either way, is found, so the check above can fail."""
    (tmp_path / "a.py").write_text("from genesis_fp16_infrastructure.recipes.retrain import gate\n")
    (tmp_path / "b.py").write_text("from genesis_fp16_infrastructure import recipes\n")
    (tmp_path / "c.py").write_text("import genesis_fp16_infrastructure.recipes.retrain.run\n")
    assert _recipe_importers(tmp_path) == ["a.py", "b.py", "c.py"]
