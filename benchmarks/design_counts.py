"""Issues 40's and 53's structural figures of a source tree, counted from its syntax (no import).

Issue 40 says the house has no single owner for precision or for the run's fields, and
that some files do too much. This script counts those claims the same way in any tree, so
that the tree when the issue was filed and the tree now can be put side by side::

    python benchmarks/design_counts.py OLD_TREE NEW_TREE --lists

prints one Markdown column per tree (default: the repository this file lives in), and
with ``--lists`` the places behind each figure, folded in ``<details>`` blocks.

What is counted, in *product code*: every ``.py`` file under ``genesis_fp16/`` (the
daemon, the coordinating room), ``agents/`` and ``infrastructure/``, leaving out any file
with a folder named ``tests``, ``benchmarks`` or ``__pycache__``, or starting with a dot
(``.venv``), on its path. A file's room is its top folder; paths are relative to the tree.

1. *Places that choose a precision.* A place is a function or method, named by its
   qualified name (``Class.method``, ``outer.<locals>.inner``) and file; code outside any
   function (a module's or a class body's) is one place per file, ``<module>``. A node
   belongs to the innermost function around it. A place counts when its code:

   - compares by ``==``, ``!=``, ``in`` or ``not in`` a value with a precision name
     (``"fp32"``, ``"bf16"``, ``"fp16"``, ``"auto"``) written as a string literal, or with
     a tuple, list, set or dict literal holding such a name (as element or key);
   - subscripts, or calls ``.get`` on, a dict literal keyed by such a name;
   - or writes a dict literal that maps such a name to a torch dtype (``torch.float16``,
     ``torch.bfloat16``, ``torch.float32`` and their aliases, written ``torch.<dtype>``).

   ``"auto"`` is also the CUDA graph's and the device's own word, so a test whose only
   precision name is ``"auto"`` counts only when one side's source text names a precision
   (contains ``precision``, ``requested``, ``used``, ``preset`` or ``floor``): the rule of
   ``tests/infrastructure/training/precision/test_decide.py::test_auto_is_decided_only_by_decide``.
   Any of ``"fp32"``, ``"bf16"``, ``"fp16"`` counts without it.

   Also counted apart: the functions that test ``== "auto"`` or ``!= "auto"`` on such a
   precision-named value (the same rule) outside the file that defines ``decide`` at its
   top level (``precision/decide.py``). Unlike the test, this does not leave out
   ``precision_names.py`` nor the test's list of allowed places, nor count ``in``: it
   shows all of them, and the results say which the test allows.

2. *Types that declare run fields.* A record type is a class decorated with
   ``dataclass`` (``@dataclass``, ``@dataclass(...)``, ``@dataclasses.dataclass``), or one
   whose bases include ``BaseModel``, ``BaseSettings``, ``NamedTuple``, ``TypedDict`` or
   ``Struct`` (msgspec), or a class of this tree that is one of the latter (by its name,
   followed through the tree). It counts when its own body declares an annotated
   attribute (not ``ClassVar``) named one of the run fields: the fields of the class
   ``RunSpec`` in ``infrastructure/**/training/run/spec.py`` of one fixed tree
   (``--fields-from``, default this repository), its bases' fields first, bases followed
   inside that tree. The same list of names serves every tree counted.

3. *Files over 450 lines*: product files with more than 450 physical lines.

4. *Product lines*: physical lines (``str.splitlines``) of all product files, blank and
   comment lines included.

5. *Calls of ``torch.load``*: call sites written ``torch.load(...)`` (``torch`` or the
   name it is imported as) or as ``load(...)`` after ``from torch import load``. A static
   stand-in: how often one run reads a checkpoint is measured by
   ``tests/genesis_fp16/jobs/test_checkpoint_reads.py``.

Issue 53's figures:

6. *``TrainResult`` fields typed ``Mapping[str, Any]``*: the annotated fields of the class
   ``TrainResult`` in a file named ``train_result.py`` (``contract/reports.py`` since
   issue 70 merged them) whose annotation holds
   ``Mapping[str, Any]`` (or ``dict[str, Any]``): alone, optional, or as a sequence's
   element (``demotions: Sequence[Mapping[str, Any]]``).

7. *State-file reads outside the agent folder's owner*: the read sites of the agent's
   state files outside the owner package ``agent_folder/``, raw or through the hardened
   reader, as ``state_reads.py``'s docstring defines them.

8. *Precision names typed as ``str``*: annotations of fields and variables
   (``name: str``), parameters and function returns whose name says precision (its last
   ``_``-separated word is ``precision``, ``precisions``, ``requested``, ``used``,
   ``floor`` or ``ran``, and no word names another choice: ``execution``, ``device``,
   ``graph``, ``compile``, ``bytes``, ``memory``, ``tools``) typed ``str``, ``str |
   None`` or a sequence or set of ``str``. Files whose name says ``execution`` are left
   out: their ``requested`` and ``used`` are the CUDA graph's own names.

9. *Lines of the rlhf_ppo package*: physical lines of the product files under
   ``agents/genesis_fp16_agents/rlhf_ppo/``.

Issue 58's figures, 10 to 13, are defined and counted in ``seam_counts.py``: the library
modules and names the daemon imports, the daemon modules importing a recipe, the reads of
``.extra`` in the daemon, and the worst cyclomatic complexity (radon's rules).

Issue 68's figure 14, *product files spelling an outcome string* (a verdict's or a run's
outcome written as a string literal, not as a member of the one ``Outcome`` enum), is
defined and counted in ``outcome_strings.py``.
"""

from __future__ import annotations

import argparse
import ast
import subprocess
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # its sibling modules
from design_syntax import (
    MODULE,
    ROOMS,
    Place,
    SourceFile,
    class_defs,
    field_names,
    function_defs,
    product_files,
    scoped_nodes,
    simple_name,
)
from outcome_strings import outcome_strings
from seam_counts import SeamFigures, seam_figures
from state_reads import state_reads

REPO = Path(__file__).resolve().parents[1]
PRECISIONS = {"fp32", "bf16", "fp16", "auto"}
# The words that make a comparison with "auto" one about precision (test_decide's list).
SUBJECT_WORDS = ("precision", "requested", "used", "preset", "floor")
TORCH_DTYPES = {"float16", "half", "bfloat16", "float32", "float", "float64", "double"}
RECORD_BASES = {"BaseModel", "BaseSettings", "NamedTuple", "TypedDict", "Struct"}
LONG_FILE = 450


@dataclass
class Figures:
    """Everything counted in one tree; the lists say where each figure comes from."""

    files: list[SourceFile]
    choosers: list[Place] = field(default_factory=list)
    auto_tests: list[Place] = field(default_factory=list)
    run_types: list[Place] = field(default_factory=list)
    loads: list[Place] = field(default_factory=list)
    result_mappings: list[Place] = field(default_factory=list)
    state_reads: list[Place] = field(default_factory=list)
    precision_strs: list[Place] = field(default_factory=list)
    outcome_strings: list[Place] = field(default_factory=list)
    seam: SeamFigures = field(default_factory=SeamFigures)

    @property
    def lines(self) -> int:
        return sum(f.lines for f in self.files)

    @property
    def rlhf_ppo_lines(self) -> int:
        return sum(f.lines for f in self.files if f.rel.startswith(RLHF_PPO))

    def long_files(self) -> list[SourceFile]:
        return [f for f in self.files if f.lines > LONG_FILE]


def _names_in(node: ast.AST) -> set[str]:
    """The precision names ``node`` writes: a string literal, or a container literal's
    elements (a dict's keys)."""
    if isinstance(node, ast.Constant):
        return {node.value} & PRECISIONS if isinstance(node.value, str) else set()
    if isinstance(node, ast.Tuple | ast.List | ast.Set):
        items: Sequence[ast.AST | None] = node.elts
    elif isinstance(node, ast.Dict):
        items = node.keys
    else:
        return set()
    return {name for item in items if item is not None for name in _names_in(item)}


def _about_precision(names: set[str], sides: Iterable[ast.AST]) -> bool:
    """Whether a test of ``names`` against ``sides`` is one about a precision: any name but
    ``auto`` is; ``auto`` only when a side's text names a precision."""
    if names - {"auto"}:
        return True
    text = " ".join(ast.unparse(side) for side in sides)
    return bool(names) and any(word in text for word in SUBJECT_WORDS)


def _is_dtype(node: ast.AST | None) -> bool:
    return (
        isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "torch"
        and node.attr in TORCH_DTYPES
    )


def precision_test(node: ast.AST) -> str | None:
    """What kind of precision choice ``node`` makes, or None (see the module docstring)."""
    if isinstance(node, ast.Compare):
        sides = [node.left, *node.comparators]
        for op, left, right in zip(node.ops, sides, sides[1:], strict=False):
            if not isinstance(op, ast.Eq | ast.NotEq | ast.In | ast.NotIn):
                continue
            if _about_precision(_names_in(left) | _names_in(right), (left, right)):
                return "compares"
    if (
        isinstance(node, ast.Subscript)
        and isinstance(node.value, ast.Dict)
        and _about_precision(_names_in(node.value), [node.slice])
    ):
        return "looks up"
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "get"
        and isinstance(node.func.value, ast.Dict)
        and _about_precision(_names_in(node.func.value), node.args)
    ):
        return "looks up"
    if isinstance(node, ast.Dict) and any(
        _names_in(key) - {"auto"} and _is_dtype(value)
        for key, value in zip(node.keys, node.values, strict=True)
        if key is not None
    ):
        return "maps to dtypes"
    return None


def _tests_auto(node: ast.AST) -> bool:
    """Whether ``node`` is ``X == "auto"`` or ``X != "auto"`` with X named a precision."""
    if not isinstance(node, ast.Compare):
        return False
    sides = [node.left, *node.comparators]
    return any(
        isinstance(op, ast.Eq | ast.NotEq)
        and any(isinstance(s, ast.Constant) and s.value == "auto" for s in (left, right))
        and _about_precision({"auto"}, (left, right))
        for op, left, right in zip(node.ops, sides, sides[1:], strict=False)
    )


def _defines_decide(module: ast.Module) -> bool:
    return any(isinstance(n, ast.FunctionDef) and n.name == "decide" for n in module.body)


def count_precision(files: Iterable[SourceFile], figures: Figures) -> None:
    """Fill ``figures.choosers`` and ``figures.auto_tests``: one entry per place, its
    kinds of choice joined."""
    for source in files:
        kinds: dict[str, set[str]] = {}
        auto: set[str] = set()
        outside_decide = not _defines_decide(source.module)
        for scope, node in scoped_nodes(source.module):
            if kind := precision_test(node):
                kinds.setdefault(scope, set()).add(kind)
            if outside_decide and _tests_auto(node):
                auto.add(scope)
        for scope in sorted(kinds):
            figures.choosers.append(Place(source.rel, scope, ", ".join(sorted(kinds[scope]))))
        figures.auto_tests += [Place(source.rel, s, '== / != "auto"') for s in sorted(auto)]


def _classes(files: Iterable[SourceFile]) -> Iterator[tuple[SourceFile, str, ast.ClassDef]]:
    """Every class of ``files``, with its file and qualified name."""
    for source in files:
        for name, cls in class_defs(source.module):
            yield source, name, cls


def record_types(files: Sequence[SourceFile]) -> set[tuple[str, str]]:
    """The record types among ``files``' classes, as (file, qualified name): see the module
    docstring. A base of this tree is matched by its name alone."""
    classes = list(_classes(files))
    bases = {cls.name: {simple_name(b) for b in cls.bases} for _, _, cls in classes}
    inherited = set(RECORD_BASES)
    while grown := {name for name, its in bases.items() if its & inherited} - inherited:
        inherited |= grown
    return {
        (source.rel, name)
        for source, name, cls in classes
        if cls.name in inherited or any(simple_name(d) == "dataclass" for d in cls.decorator_list)
    }


def run_field_names(root: Path) -> tuple[str, ...]:
    """The fields of ``RunSpec`` in ``root``'s ``infrastructure/**/training/run/spec.py``,
    its bases' (found in ``infrastructure/`` by name) first, as a dataclass orders them."""
    files = [f for f in product_files(root) if f.room == "infrastructure"]
    by_name = {name: cls for _, name, cls in _classes(files)}
    spec = [
        cls
        for source, name, cls in _classes(files)
        if name == "RunSpec" and source.rel.endswith("training/run/spec.py")
    ]
    if len(spec) != 1:
        raise SystemExit(f"{root}: expected one RunSpec in training/run/spec.py, found {len(spec)}")

    def with_bases(cls: ast.ClassDef) -> list[str]:
        inherited = [
            n for b in cls.bases if (base := by_name.get(simple_name(b))) for n in with_bases(base)
        ]
        return inherited + [n for n in field_names(cls) if n not in inherited]

    return tuple(with_bases(spec[0]))


def count_run_types(files: Sequence[SourceFile], names: Sequence[str], figures: Figures) -> None:
    """Fill ``figures.run_types``: each record type declaring a run field, with those fields."""
    records = record_types(files)
    for source, name, cls in _classes(files):
        declared = [n for n in field_names(cls) if n in names]
        if (source.rel, name) in records and declared:
            figures.run_types.append(Place(source.rel, name, ", ".join(declared)))


def count_loads(files: Iterable[SourceFile], figures: Figures) -> None:
    """Fill ``figures.loads``: each ``torch.load`` call site, with its line."""
    for source in files:
        modules, functions = set(), set()
        for node in ast.walk(source.module):
            if isinstance(node, ast.Import):
                modules |= {a.asname or a.name for a in node.names if a.name == "torch"}
            elif isinstance(node, ast.ImportFrom) and node.module == "torch":
                functions |= {a.asname or a.name for a in node.names if a.name == "load"}
        for scope, node in scoped_nodes(source.module):
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            if (
                isinstance(func, ast.Attribute)
                and func.attr == "load"
                and isinstance(func.value, ast.Name)
                and func.value.id in modules
            ) or (isinstance(func, ast.Name) and func.id in functions):
                figures.loads.append(Place(source.rel, scope, f"line {node.lineno}"))


# --- Issue 53's figures ---------------------------------------------------------------

# A name says precision when its last word is one of these (precision_used, requested,
# floor), unless a word names another choice (the CUDA graph's requested, a device's).
PRECISION_WORDS = {"precision", "precisions", "requested", "used", "floor", "ran"}
OTHER_CHOICES = {"execution", "device", "devices", "graph", "compile", "bytes", "memory", "tools"}
STR_TYPES = {"str", "str | None", "None | str", "Optional[str]"}
STR_CONTAINERS = {"Sequence", "list", "tuple", "set", "frozenset", "Iterable", "Collection"}
RLHF_PPO = "agents/genesis_fp16_agents/rlhf_ppo/"


def _mapping_any(annotation: ast.AST) -> bool:
    text = ast.unparse(annotation).replace("typing.", "")
    return any(f"{m}[str, Any]" in text for m in ("Mapping", "dict", "Dict", "MutableMapping"))


def count_result_mappings(files: Iterable[SourceFile], figures: Figures) -> None:
    """Fill ``figures.result_mappings``: the fields of ``TrainResult`` (the class of that
    name in a file named ``train_result.py``, or ``contract/reports.py``) whose annotation
    holds ``Mapping[str, Any]`` (or ``dict[str, Any]``), alone, optional or as a sequence's
    element."""
    for source in files:
        if not source.rel.endswith(("/train_result.py", "/contract/reports.py")):
            continue
        for name, cls in class_defs(source.module):
            if name != "TrainResult":
                continue
            for stmt in cls.body:
                if (
                    isinstance(stmt, ast.AnnAssign)
                    and isinstance(stmt.target, ast.Name)
                    and _mapping_any(stmt.annotation)
                ):
                    why = f"line {stmt.lineno}: {ast.unparse(stmt.annotation)}"
                    figures.result_mappings.append(Place(source.rel, stmt.target.id, why))


def says_precision(name: str) -> bool:
    """Whether a field's, parameter's or function's name says it holds a precision name.

    >>> [says_precision(n) for n in ("precision_used", "requested", "precision_reason")]
    [True, True, False]
    """
    words = name.lower().strip("_").split("_")
    return words[-1] in PRECISION_WORDS and not set(words) & OTHER_CHOICES


def _plain_str(annotation: ast.AST | None) -> bool:
    """``str``, ``str | None``, or a sequence or set of ``str`` (quoted or not)."""
    if annotation is None:
        return False
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        return annotation.value.strip() in STR_TYPES
    text = ast.unparse(annotation)
    if text in STR_TYPES:
        return True
    return (
        isinstance(annotation, ast.Subscript)
        and simple_name(annotation.value) in STR_CONTAINERS
        and ast.unparse(annotation.slice) in {"str", "(str, ...)"}
    )


def count_precision_strs(files: Iterable[SourceFile], figures: Figures) -> None:
    """Fill ``figures.precision_strs``: each annotation typing a precision-named field,
    variable, parameter or function return as ``str`` (see :func:`says_precision`)."""
    for source in files:
        if "execution" in source.rel.rsplit("/", 1)[-1]:
            continue  # the CUDA graph's own requested and used
        for scope, node in scoped_nodes(source.module):
            if isinstance(node, ast.AnnAssign) and _plain_str(node.annotation):
                target = node.target
                name = target.attr if isinstance(target, ast.Attribute) else simple_name(target)
                if says_precision(name):
                    why = f"{name}: {ast.unparse(node.annotation)}, line {node.lineno}"
                    figures.precision_strs.append(Place(source.rel, scope, why))
        for name, fn in function_defs(source.module):
            arguments = fn.args
            every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
            for arg in every:
                if says_precision(arg.arg) and _plain_str(arg.annotation):
                    why = f"{arg.arg}: {ast.unparse(arg.annotation)}"
                    figures.precision_strs.append(Place(source.rel, name, why))
            if says_precision(fn.name) and _plain_str(fn.returns):
                why = f"returns {ast.unparse(fn.returns)}"
                figures.precision_strs.append(Place(source.rel, name, why))


def count(root: Path, names: Sequence[str]) -> Figures:
    """All the figures of the tree ``root``, run fields named by ``names``."""
    figures = Figures(product_files(root))
    count_precision(figures.files, figures)
    count_run_types(figures.files, names, figures)
    count_loads(figures.files, figures)
    count_result_mappings(figures.files, figures)
    figures.state_reads = state_reads(figures.files)
    count_precision_strs(figures.files, figures)
    figures.seam = seam_figures(figures.files)
    figures.outcome_strings = outcome_strings(figures.files)
    return figures


def _in_files(places: Sequence[Place]) -> str:
    files = len({p.rel for p in places})
    return f"{len(places)} in {files} file{'' if files == 1 else 's'}"


def rows(figures: Figures) -> list[tuple[str, str]]:
    """The table's rows for one tree: (figure, value)."""
    by_room = {room: sum(f.lines for f in figures.files if f.room == room) for room in ROOMS}
    choosers = [p for p in figures.choosers if p.name != MODULE]
    many = [p for p in figures.run_types if len(p.why.split(", ")) >= 3]
    return [
        ("Product files (.py)", str(len(figures.files))),
        ("1. Places that choose a precision: functions", _in_files(choosers)),
        ("... and module-level code", _in_files([p for p in figures.choosers if p.name == MODULE])),
        (
            '... functions testing == / != "auto" outside decide\'s file',
            _in_files(figures.auto_tests),
        ),
        ("2. Types that declare a run field", _in_files(figures.run_types)),
        ("... of which declare 3 or more", _in_files(many)),
        (f"3. Files over {LONG_FILE} lines", str(len(figures.long_files()))),
        ("4. Product lines (physical)", f"{figures.lines:,}"),
        (
            "... genesis_fp16 / agents / infrastructure",
            " / ".join(f"{by_room[r]:,}" for r in ROOMS),
        ),
        ("5. torch.load call sites", _in_files(figures.loads)),
        ("6. TrainResult fields typed Mapping[str, Any]", str(len(figures.result_mappings))),
        ("7. State-file reads outside the agent folder's owner", _in_files(figures.state_reads)),
        (
            "... raw / through the hardened reader",
            " / ".join(
                str(sum(p.why.startswith(k) for p in figures.state_reads))
                for k in ("raw", "hardened")
            ),
        ),
        ("8. Precision names typed as str", _in_files(figures.precision_strs)),
        ("9. Lines of the rlhf_ppo package", f"{figures.rlhf_ppo_lines:,}"),
        *seam_rows(figures.seam),
        ("14. Product files spelling an outcome string", _files_of(figures.outcome_strings)),
    ]


def _files_of(places: Sequence[Place]) -> str:
    files = len({p.rel for p in places})
    return f"{files} ({len(places)} string{'' if len(places) == 1 else 's'})"


def seam_rows(seam: SeamFigures) -> list[tuple[str, str]]:
    """Issue 58's rows (seam_counts.py)."""
    (worst, place), *_ = seam.worst() or [(0, Place("", "none", ""))]
    return [
        (
            "10. Library modules the daemon imports / distinct names",
            f"{len(seam.modules)} / {len(seam.names)}",
        ),
        ("11. Daemon modules importing a recipe", str(len(seam.recipe_importers))),
        ("12. Reads of .extra in the daemon", _in_files(seam.extra_reads)),
        ("13. Worst cyclomatic complexity", f"{worst} (`{place.name}`, `{place.rel}`)"),
        ("... functions over 25", str(sum(c > 25 for c, _ in seam.complexity))),
    ]


def commit_of(root: Path) -> str:
    """The short commit ``root`` has checked out, or a note saying there is none."""
    done = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() if done.returncode == 0 else "no git commit"


def table(columns: Sequence[tuple[str, Figures]]) -> str:
    """The figures of each tree side by side, as a Markdown table."""
    heads = [head for head, _ in columns]
    lines = [f"| Figure | {' | '.join(heads)} |", "|---" * (len(heads) + 1) + "|"]
    all_rows = [rows(figures) for _, figures in columns]
    for i, (label, _) in enumerate(all_rows[0]):
        lines.append(f"| {label} | {' | '.join(r[i][1] for r in all_rows)} |")
    return "\n".join(lines)


def details(head: str, figures: Figures) -> str:
    """The places behind each figure of one tree, folded in ``<details>`` blocks."""
    parts = [
        ("Places that choose a precision", [str(p) for p in figures.choosers]),
        (
            'Functions testing == / != "auto" outside decide\'s file',
            [str(p) for p in figures.auto_tests],
        ),
        ("Types that declare a run field (the fields)", [str(p) for p in figures.run_types]),
        (f"Files over {LONG_FILE} lines", [f"`{f.rel}`: {f.lines}" for f in figures.long_files()]),
        ("torch.load call sites", [str(p) for p in figures.loads]),
        ("TrainResult fields typed Mapping[str, Any]", [str(p) for p in figures.result_mappings]),
        ("State-file reads outside the owner", [str(p) for p in figures.state_reads]),
        ("Precision names typed as str", [str(p) for p in figures.precision_strs]),
        (
            "Files of the rlhf_ppo package",
            [f"`{f.rel}`: {f.lines}" for f in figures.files if f.rel.startswith(RLHF_PPO)],
        ),
        ("Library modules the daemon imports", [f"`{m}`" for m in figures.seam.modules]),
        ("Daemon modules importing a recipe", [str(p) for p in figures.seam.recipe_importers]),
        ("Reads of .extra in the daemon", [str(p) for p in figures.seam.extra_reads]),
        (
            "Functions of complexity over 25",
            [f"{c}: `{p.rel}`: `{p.name}`" for c, p in figures.seam.worst(50) if c > 25],
        ),
        ("Outcome strings", [str(p) for p in figures.outcome_strings]),
    ]
    out = []
    for title, items in parts:
        listed = "\n".join(f"- {item}" for item in items) or "- (none)"
        out.append(
            f"<details><summary>{head}: {title} ({len(items)})</summary>\n\n{listed}\n\n</details>"
        )
    return "\n\n".join(out)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("trees", nargs="*", type=Path, default=[REPO], help="source trees")
    parser.add_argument(
        "--fields-from", type=Path, default=REPO, help="the tree whose RunSpec names the run fields"
    )
    parser.add_argument(
        "--lists", action="store_true", help="also list the places behind each figure"
    )
    args = parser.parse_args(argv)
    names = run_field_names(args.fields_from)
    columns = [(f"{tree} ({commit_of(tree)})", count(tree, names)) for tree in args.trees]
    origin = f"RunSpec of {args.fields_from} at {commit_of(args.fields_from)}"
    print(f"Run fields ({len(names)}, {origin}): " + ", ".join(f"`{n}`" for n in names))
    print()
    print(table(columns))
    if args.lists:
        for head, figures in columns:
            print()
            print(details(head, figures))


if __name__ == "__main__":
    main(sys.argv[1:])
