"""Every contract type has one import path (issue 70): the library's own code imports it
from the module that defines it, and everyone else (the daemon, the agents, benchmarks,
the daemon's tests, the docs' code) from its one door.

A contract type is a public class or alias defined under the library's ``contract/``, or
one the plugin door takes from the daemon's door when it loads (``PrecisionRequest``:
the request's precision). Its door is ``genesis_fp16.plugin_api`` when the plugin door
gives it, else ``genesis_fp16_infrastructure.api`` when the daemon's door gives it, else
the defining module. The library is ``infrastructure/`` and its tests,
``tests/infrastructure/``; the plugin door itself takes its names from the daemon's door.
Imports are read with ``ast`` (``from M import T``, at any depth, in doctests and in
Markdown ``python`` blocks too), so nothing is imported.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIBRARY = ROOT / "infrastructure" / "genesis_fp16_infrastructure"
PLUGIN_DOOR = "genesis_fp16.plugin_api"
DAEMON_DOOR = "genesis_fp16_infrastructure.api"
PLUGIN_DOOR_FILE = ROOT / "genesis_fp16" / "plugin_api.py"
DAEMON_DOOR_FILE = LIBRARY / "api.py"
ROOMS = ("genesis_fp16", "agents", "infrastructure", "benchmarks", "tests")
LIBRARY_SIDE = ("infrastructure/", "tests/infrastructure/")
DOCTEST = re.compile(r"^\s*(?:>>>|\.\.\.) ?(.*)$")
MARKDOWN_BLOCK = re.compile(r"^```(?:python|py)\n(.*?)^```", re.MULTILINE | re.DOTALL)


def _module_name(path: Path) -> str:
    parts = path.relative_to(LIBRARY.parent).with_suffix("").parts
    return ".".join(parts).removesuffix(".__init__")


def _defined(tree: ast.Module) -> Iterator[str]:
    """The public classes and aliases (``Name = a | b``, ``Name: TypeAlias = ...``) a module
    defines at its top level."""
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            yield node.name
        elif isinstance(node, ast.Assign) and isinstance(node.value, ast.BinOp | ast.Subscript):
            names = [t.id for t in node.targets if isinstance(t, ast.Name)]
            yield from (n for n in names if n[:1].isupper() and not n.isupper())
        elif (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and ast.unparse(node.annotation).endswith("TypeAlias")
        ):
            yield node.target.id


def _imported_from(path: Path, module: str) -> set[str]:
    """The names ``path`` imports from ``module`` when it loads (its top-level imports;
    the plugin door's training names, loaded on first use, are not the contract's)."""
    tree = ast.parse(path.read_text())
    return {
        alias.name
        for node in tree.body
        if isinstance(node, ast.ImportFrom) and node.module == module
        for alias in node.names
    }


def contract_types() -> dict[str, str]:
    """Each contract type -> the module of the library that defines it."""
    defining: dict[str, str] = {}
    for path in sorted((LIBRARY / "contract").glob("*.py")):
        for name in _defined(ast.parse(path.read_text())):
            if not name.startswith("_"):
                defining[name] = _module_name(path)
    plugin_types = _imported_from(PLUGIN_DOOR_FILE, DAEMON_DOOR) - set(defining)
    for path in sorted(LIBRARY.rglob("*.py")):
        for name in set(_defined(ast.parse(path.read_text()))) & plugin_types:
            defining[name] = _module_name(path)
    return defining


def doors(types: dict[str, str]) -> dict[str, str]:
    """Each contract type -> its one path outside the library."""
    plugin = _imported_from(PLUGIN_DOOR_FILE, DAEMON_DOOR)
    daemon = {
        alias.name
        for node in ast.parse(DAEMON_DOOR_FILE.read_text()).body
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING"
        for imp in node.body
        if isinstance(imp, ast.ImportFrom)
        for alias in imp.names
    }
    return {
        name: PLUGIN_DOOR if name in plugin else DAEMON_DOOR if name in daemon else module
        for name, module in types.items()
    }


def _code(text: str, markdown: bool) -> Iterator[tuple[int, ast.Module]]:
    """(first line, parsed code) of a file's code: the file itself and each doctest
    example, or each ``python`` block of a Markdown file."""
    if markdown:
        for block in MARKDOWN_BLOCK.finditer(text):
            yield text.count("\n", 0, block.start()) + 2, ast.parse(block.group(1))
        return
    yield 1, ast.parse(text)
    for number, line in enumerate(text.splitlines(), 1):
        example = DOCTEST.match(line)
        if example and example.group(1).lstrip().startswith("from "):
            try:
                yield number, ast.parse(example.group(1).strip())
            except SyntaxError:  # the first line of a multi-line import: not read
                continue


def wrong_paths(root: Path, files: list[Path]) -> list[str]:
    """``file:line: T from M (its path there: P)`` for each import of a contract type by
    any path but its own, for ``files`` under ``root``."""
    types = contract_types()
    door = doors(types)
    offenders = []
    for path in files:
        rel = path.relative_to(root).as_posix()
        markdown = path.suffix == ".md"
        for first, tree in _code(path.read_text(), markdown):
            for node in ast.walk(tree):
                if not (isinstance(node, ast.ImportFrom) and node.module and node.level == 0):
                    continue
                for alias in node.names:
                    if alias.name not in types:
                        continue
                    if path == PLUGIN_DOOR_FILE:
                        allowed = DAEMON_DOOR
                    elif rel.startswith(LIBRARY_SIDE):
                        allowed = types[alias.name]
                    else:
                        allowed = door[alias.name]
                    if node.module != allowed:
                        line = first + node.lineno - 1
                        offenders.append(
                            f"{rel}:{line}: {alias.name} from {node.module}"
                            f" (its path there: {allowed})"
                        )
    return offenders


def _sources() -> list[Path]:
    files = [
        path
        for room in ROOMS
        for path in sorted((ROOT / room).rglob("*.py"))
        if "__pycache__" not in path.parts
    ]
    return [*files, ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def test_every_contract_type_is_imported_by_its_one_path() -> None:
    """No source, test, benchmark or doc block imports a contract type by a second path."""
    assert wrong_paths(ROOT, _sources()) == []


def test_the_contract_types_and_their_doors_are_found() -> None:
    """The scan knows the contract's types and doors, so the test above checks something."""
    types = contract_types()
    door = doors(types)
    assert types["TrainResult"] == "genesis_fp16_infrastructure.contract.reports"
    assert types["PrecisionRequest"].endswith("training.precision.precision_request")
    assert "OptionValue" in types  # an alias
    assert door["TrainRequest"] == PLUGIN_DOOR
    assert door["GateReport"] == DAEMON_DOOR
    assert door["DataReport"] == types["DataReport"]


def test_a_second_path_is_an_offender(tmp_path: Path) -> None:
    """A daemon file, a doctest and a doc block that take a type from a second path each
    fail, and the library may not take it from a door."""
    (tmp_path / "genesis_fp16").mkdir()
    daemon = tmp_path / "genesis_fp16" / "job.py"
    daemon.write_text(
        '"""\n>>> from genesis_fp16_infrastructure.api import TrainResult\n"""\n'
        "from genesis_fp16.plugin_api import TrainResult\n"
        "def f():\n    from genesis_fp16_infrastructure.contract.reports import GateReport\n"
    )
    (tmp_path / "infrastructure").mkdir()
    library = tmp_path / "infrastructure" / "x.py"
    library.write_text("from genesis_fp16_infrastructure.api import GateReport\n")
    doc = tmp_path / "doc.md"
    doc.write_text(
        "text\n\n```python\nfrom genesis_fp16_infrastructure.api import AgentPlugin\n```\n"
    )
    assert wrong_paths(tmp_path, [daemon, library, doc]) == [
        "genesis_fp16/job.py:6: GateReport from genesis_fp16_infrastructure.contract.reports"
        " (its path there: genesis_fp16_infrastructure.api)",
        "genesis_fp16/job.py:2: TrainResult from genesis_fp16_infrastructure.api"
        " (its path there: genesis_fp16.plugin_api)",
        "infrastructure/x.py:1: GateReport from genesis_fp16_infrastructure.api"
        " (its path there: genesis_fp16_infrastructure.contract.reports)",
        "doc.md:4: AgentPlugin from genesis_fp16_infrastructure.api"
        " (its path there: genesis_fp16.plugin_api)",
    ]
