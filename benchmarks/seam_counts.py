"""Issue 58's figures of the seam between the daemon and the library, and of the worst
function's complexity, counted from a tree's syntax (nothing imported)::

    python benchmarks/design_counts.py OLD_TREE NEW_TREE

prints them as figures 10 to 13 beside the older ones. Product files are
``design_syntax.product_files``'; the daemon's are those of the room ``genesis_fp16``.

10. *Library modules the daemon imports / distinct names*: every ``from M import a, b``
    (at any depth: in a function, under ``TYPE_CHECKING``) in a daemon file whose ``M``
    is ``genesis_fp16_infrastructure`` or under it counts ``M`` as a module and ``a``,
    ``b`` as names; ``import M`` counts ``M`` and the name ``M``. A name is counted once
    however many modules give it (``TrainResult`` from ``plugin_api`` and from
    ``train_result`` is one name, two modules). A name that is itself a module
    (``from pkg import mod``) counts under ``pkg``.

10c. *The daemon's names in use, counted through module objects too* (issue 94): figure
    10's names, and each attribute the daemon reads through a library module it imports
    as a name (``from genesis_fp16_infrastructure.api import files`` then ``files.read_json``
    counts ``read_json``), so a module handed out whole hides none of the names it lets
    through. A name is a module when the tree holds a file for it, followed through the
    imports of the module it is imported from (``api`` re-exports ``agent_folder.files``).
    A name is counted once, however it is reached.

11. *Daemon modules importing a recipe*: daemon files with an import of a module under
    ``genesis_fp16_infrastructure.recipes``.

12. *Reads of ``.extra`` in the daemon*: attributes named ``extra`` that are read (not
    assigned), and calls ``getattr(x, "extra", ...)``, in daemon files. A keyword
    argument ``extra=`` is no read.

10b. *Library modules that define the names the daemon imports* (issue 70): each name of
    figure 10, taken from the module the daemon imports it from (through
    ``genesis_fp16_infrastructure.api``), resolved to the library module that defines it:
    a class's or function's ``__module__``; a module is itself; a constant (anything else:
    a number, a tuple, a type alias, an instance) counts the module it is imported from
    (the module its import in that module names, or that module when it assigns it).
    This figure imports the library (:func:`defining_modules`, in the process that
    asks; ``python benchmarks/seam_counts.py TREE`` runs it on TREE's library). It counts
    files, so merging two lowers it and splitting one by concept raises it: it is printed
    for the record, and bounded no more (issue 94).

10d. *Library packages that define the names the daemon imports: the concepts it reaches*
    (issue 94): each defining module of figure 10b, taken as the package (folder) that
    holds it (:func:`concept_of`): ``training.precision`` for ``decide`` and
    ``precision_names`` alike, ``agent_folder`` for ``files`` and ``outbox``; a package's
    ``__init__`` is its own package, and the library root's modules (``errors``,
    ``folder``, ``machine_memory``: what every component shares) are one, the root. A
    package is one area of the library, so merging files inside it cannot lower the
    count and splitting a file by concept inside it cannot raise it; the count falls when
    the daemon stops reaching an area, and rises when it reaches a new one.

13. *Worst cyclomatic complexity*: McCabe's count of each function (1, plus one per
    ``if``/``elif``, conditional expression, ``for``/``while`` (and one more for its
    ``else``), ``except`` clause, ``try``'s ``else``, ``assert`` (as a whole), comprehension
    ``for`` and ``if``, ``match`` case, and each ``and``/``or`` beyond the first operand;
    ``with`` adds none), radon's rules for ``radon cc``; a nested function or class is its
    own block, not its parent's. The product's highest, with its place.

>>> seam_figures([]).extra_reads
[]
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import json
import os
import subprocess
import sys
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from design_syntax import Place, SourceFile, product_files

LIBRARY = "genesis_fp16_infrastructure"
RECIPES = f"{LIBRARY}.recipes"
DAEMON = "genesis_fp16"


@dataclass
class SeamFigures:
    """Figures 10 to 13 of one tree; each list says where its figure comes from."""

    imports: set[tuple[str, str]] = field(default_factory=set)  # (module, name)
    # (module object as imported, attribute read through it) in daemon files (figure 10c)
    through_modules: set[tuple[str, str]] = field(default_factory=set)
    recipe_importers: list[Place] = field(default_factory=list)
    extra_reads: list[Place] = field(default_factory=list)
    complexity: list[tuple[int, Place]] = field(default_factory=list)

    @property
    def modules(self) -> list[str]:
        return sorted({module for module, _ in self.imports})

    @property
    def names(self) -> list[str]:
        return sorted({name for _, name in self.imports})

    @property
    def names_in_use(self) -> list[str]:
        """Figure 10c: figure 10's names and those read through a module object."""
        return sorted(set(self.names) | {name for _, name in self.through_modules})

    def worst(self, many: int = 1) -> list[tuple[int, Place]]:
        """The ``many`` most complex functions, the worst first."""
        return sorted(self.complexity, key=lambda c: (-c[0], c[1].rel, c[1].name))[:many]


def library_imports(module: ast.Module) -> Iterator[tuple[str, str]]:
    """(module, name) for each library name a file imports (figure 10)."""
    for node in ast.walk(module):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and _is_library(node.module):
            for alias in node.names:
                yield str(node.module), alias.name
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if _is_library(alias.name):
                    yield alias.name, alias.name


def library_modules(files: Iterable[SourceFile]) -> dict[str, ast.Module]:
    """The library's modules of a tree by dotted name (a package by its ``__init__``)."""
    found = {}
    for source in files:
        parts = source.rel.removesuffix(".py").split("/")[1:]  # under infrastructure/
        if parts and parts[0] == LIBRARY:
            name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
            found[name] = source.module
    return found


def is_module(library: dict[str, ast.Module], module: str, name: str, depth: int = 8) -> bool:
    """Whether ``from module import name`` gives a module: a file of the tree, or a name
    ``module`` itself imports as one (at any depth: ``api``'s are under TYPE_CHECKING)."""
    if f"{module}.{name}" in library:
        return True
    if module not in library or depth == 0:
        return False
    for node in ast.walk(library[module]):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    return is_module(library, node.module, alias.name, depth - 1)
        elif isinstance(node, ast.Import) and any(
            alias.asname == name and alias.name in library for alias in node.names
        ):
            return True
    return False


def reads_through_modules(
    module: ast.Module, library: dict[str, ast.Module]
) -> Iterator[tuple[str, str]]:
    """(module object, attribute) for each attribute a file reads through a library module
    it imported as a name (figure 10c): ``from M import mod as m`` then ``m.x``."""
    bound = {}
    for node in ast.walk(module):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and _is_library(node.module):
            for alias in node.names:
                if is_module(library, str(node.module), alias.name):
                    bound[alias.asname or alias.name] = alias.name
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if _is_library(alias.name) and alias.asname:
                    bound[alias.asname] = alias.name
    for node in ast.walk(module):
        value = node.value if isinstance(node, ast.Attribute) else None
        if isinstance(value, ast.Name) and value.id in bound:
            assert isinstance(node, ast.Attribute)
            yield bound[value.id], node.attr


def _is_library(name: str | None) -> bool:
    return name is not None and (name == LIBRARY or name.startswith(LIBRARY + "."))


def extra_reads(source: SourceFile) -> list[Place]:
    """Each read of an attribute ``extra`` in ``source`` (figure 12), by line."""
    found: list[ast.expr] = []
    for node in ast.walk(source.module):
        read = isinstance(node, ast.Attribute) and node.attr == "extra"
        if (read and isinstance(node.ctx, ast.Load)) or _is_getattr_extra(node):
            assert isinstance(node, ast.expr)
            found.append(node)
    found.sort(key=lambda node: (node.lineno, node.col_offset))
    return [Place(source.rel, ast.unparse(node), f"line {node.lineno}") for node in found]


def _is_getattr_extra(call: ast.AST) -> bool:
    if not isinstance(call, ast.Call):
        return False
    named = isinstance(call.func, ast.Name) and call.func.id == "getattr"
    key = call.args[1] if len(call.args) > 1 else None
    return named and isinstance(key, ast.Constant) and key.value == "extra"


def complexity(node: ast.AST) -> int:
    """McCabe's count of one function's own body (figure 13's rules)."""
    total = 1
    for child in _own_nodes(node):
        total += _branches(child)
    return total


def _branches(node: ast.AST) -> int:
    """The decisions one node adds (figure 13)."""
    if isinstance(node, ast.If | ast.IfExp | ast.Assert):
        return 1
    if isinstance(node, ast.For | ast.AsyncFor | ast.While):
        return 1 + bool(node.orelse)
    if isinstance(node, ast.Try | ast.TryStar):
        return len(node.handlers) + bool(node.orelse)
    if isinstance(node, ast.BoolOp):
        return len(node.values) - 1
    if isinstance(node, ast.comprehension):
        return 1 + len(node.ifs)
    if isinstance(node, ast.Match):
        return len(node.cases)
    return 0


def _own_nodes(node: ast.AST) -> Iterator[ast.AST]:
    """The nodes of a function's body, not those of the functions and classes in it."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            continue
        yield child
        if not isinstance(child, ast.Assert):  # radon counts an assert once, as a whole
            yield from _own_nodes(child)


def functions(node: ast.AST, prefix: str = "") -> Iterator[tuple[str, ast.AST]]:
    """Every function under ``node`` with its qualified name (``Class.method``)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
            yield prefix + child.name, child
            yield from functions(child, f"{prefix}{child.name}.<locals>.")
        elif isinstance(child, ast.ClassDef):
            yield from functions(child, f"{prefix}{child.name}.")
        else:
            yield from functions(child, prefix)


def seam_figures(files: Iterable[SourceFile]) -> SeamFigures:
    """Figures 10 to 13 of the product files ``files``."""
    figures = SeamFigures()
    files = list(files)
    library = library_modules(files)
    for source in files:
        for name, node in functions(source.module):
            figures.complexity.append((complexity(node), Place(source.rel, name, "")))
        if source.room != DAEMON:
            continue
        found = set(library_imports(source.module))
        figures.imports |= found
        figures.through_modules |= set(reads_through_modules(source.module, library))
        recipes = sorted({m for m, _ in found if m == RECIPES or m.startswith(RECIPES + ".")})
        if recipes:
            figures.recipe_importers.append(Place(source.rel, "<module>", ", ".join(recipes)))
        figures.extra_reads.extend(extra_reads(source))
    return figures


def seam_of(root: Path) -> SeamFigures:
    """Figures 10 to 13 of the tree ``root``."""
    return seam_figures(product_files(root))


def defining_module(module: str, name: str) -> str:
    """The library module that defines ``name`` as imported from ``module`` (figure 10b).

    >>> defining_module("genesis_fp16_infrastructure.api", "AgentFolder")
    'genesis_fp16_infrastructure.folder'
    >>> defining_module("genesis_fp16_infrastructure.api", "DEFAULT_STEPS")  # a constant
    'genesis_fp16_infrastructure.contract.train_request'
    """
    if name == module:  # ``import genesis_fp16_infrastructure.x``: the module itself
        return module
    value = getattr(importlib.import_module(module), name)
    if isinstance(value, ModuleType):
        return value.__name__
    if isinstance(value, type) or inspect.isroutine(value):
        defined = getattr(value, "__module__", None)
        if isinstance(defined, str) and _is_library(defined):
            return defined
    return _imported_from(module, name)


def _imported_from(module: str, name: str) -> str:
    """The module whose ``from M import name`` brings ``name`` into ``module`` (at any
    depth: ``api``'s imports are under ``TYPE_CHECKING``), or ``module`` when none does."""
    spec = importlib.util.find_spec(module)
    assert spec is not None and spec.origin is not None, module
    tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if not (isinstance(node, ast.ImportFrom) and node.level == 0 and node.module):
            continue
        if any((alias.asname or alias.name) == name for alias in node.names):
            return node.module
    return module


def defining_modules(imports: Iterable[tuple[str, str]]) -> dict[str, str]:
    """Each (module, name) of figure 10 as ``"module:name"`` -> the module defining it."""
    return {f"{m}:{n}": defining_module(m, n) for m, n in sorted(imports)}


def concept_of(module: str, packages: Iterable[str]) -> str:
    """The package (folder) that holds the library module ``module`` (figure 10d):
    ``module`` itself when it is a package (``packages``, the tree's), else its parent;
    the library root's modules are the root.

    >>> concept_of("genesis_fp16_infrastructure.training.precision.decide", [])
    'genesis_fp16_infrastructure.training.precision'
    >>> concept_of("genesis_fp16_infrastructure.recipes", ["genesis_fp16_infrastructure.recipes"])
    'genesis_fp16_infrastructure.recipes'
    """
    return module if module in set(packages) else module.rpartition(".")[0]


def library_packages(root: Path) -> set[str]:
    """The library's packages in the tree ``root``, by dotted name (each folder with an
    ``__init__.py``)."""
    base = root / "infrastructure"
    return {
        ".".join(init.parent.relative_to(base).parts)
        for init in (base / LIBRARY).rglob("__init__.py")
    }


def concepts(defined: dict[str, str], packages: Iterable[str]) -> dict[str, list[str]]:
    """Figure 10d: each package that defines a name of figure 10b (``defined``'s values:
    ``"module:name"`` -> its defining module) -> its defining modules, sorted."""
    packages = set(packages)
    found: dict[str, set[str]] = {}
    for module in defined.values():
        found.setdefault(concept_of(module, packages), set()).add(module)
    return {package: sorted(modules) for package, modules in sorted(found.items())}


def defining_modules_of(root: Path) -> dict[str, str]:
    """Figure 10b of the tree ``root``: its library imported in a process of its own."""
    imports = sorted(seam_of(root).imports)
    path = [str(root / "infrastructure"), str(root), str(Path(__file__).parent)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    code = (
        "import json, sys; from seam_counts import defining_modules; "
        "print(json.dumps(defining_modules(json.load(sys.stdin))))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        input=json.dumps(imports),
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    found: dict[str, str] = json.loads(done.stdout)
    return found


def main(argv: list[str]) -> None:
    """``python benchmarks/seam_counts.py [TREE]``: figures 10 to 10d of TREE (this one)."""
    root = Path(argv[0]) if argv else Path(__file__).resolve().parents[1]
    figures = seam_of(root)
    defined = defining_modules_of(root)
    print(f"10. library modules / distinct names: {len(figures.modules)} / {len(figures.names)}")
    through = sorted(f"{m}.{n}" for m, n in figures.through_modules)
    print(f"10c. names in use, through module objects too: {len(figures.names_in_use)}")
    print(f"  read through a module object: {len(through)}: {', '.join(through)}")
    print(f"10b. defining modules (per file, for the record): {len(set(defined.values()))}")
    for module in sorted(set(defined.values())):
        names = sorted(k.split(":")[1] for k, v in defined.items() if v == module)
        print(f"  {module}: {len(names)}: {', '.join(names)}")
    areas = concepts(defined, library_packages(root))
    print(f"10d. defining packages (the concepts the daemon reaches): {len(areas)}")
    for package, modules in areas.items():
        shown = [m.removeprefix(package + ".") for m in modules]
        print(f"  {package}: {len(modules)}: {', '.join(shown)}")


if __name__ == "__main__":
    main(sys.argv[1:])
