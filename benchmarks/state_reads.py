"""Issue 53's seventh figure: the reads of the agent's state files outside their owner.

``design_counts.py`` prints it beside the others, as figure 7; this module finds the
reads, from the syntax of a tree's product files (``design_syntax.py``).

The state files are the names of ``STATE_FILES`` (issue 53's list: ``served.json``,
``data_manifest.json``, ...), the same list in every tree; the owner is every file with
a folder ``agent_folder`` on its path (none in a tree before issue 53). A *read* is a
call that opens a file to read it: ``X.read_text()``, ``X.read_bytes()``, ``X.open()``
and ``open(X)`` / ``io.open(X)`` without a mode that writes (``w``, ``a``, ``x``,
``+``), ``os.open(X, O_RDONLY ...)`` (a lock's ``O_RDWR | O_CREAT`` is not a read),
``torch.load(X)`` (or ``numpy``'s, ``json``'s, ``pickle``'s, a bare ``load``), all
*raw*, and ``read_state_text(X, ...)``, the hardened reader (``atomic.py``), whose own
body is not counted. It counts when ``X`` may be a state file's path, followed through
the syntax, each name by its name across the tree:

- a string literal that is a state file's name (or ends in ``/`` and one);
- a module's or class's constant assigned one (``POINTER_NAME = "served.json"``);
- ``self.x`` assigned one, or a record type's field given one by keyword at a call
  (``PrecisionRequest(cache=paths.calibration_path)``), read as ``.x`` (a positional
  field is not followed: ``StateFile("served.json", ...)`` would make every ``.name``
  one);
- a top-level function, method or property that returns one (``loss_scale_path``),
  called or (a property) read;
- a local assigned one; ``/``, ``+``, f-strings, ``or``, ``if``-expressions and the calls
  that keep a path (``Path``, ``str``, ``os.path.join``, ``.resolve()``, ...); a literal
  given to any call (``folder.joinpath("served.json")``); a method called on one
  (``SERVED.at(folder)``); not what a read returns;
- and into a function's parameters from its call sites, when the tree has one
  function of that name (not a dunder): ``read_json(folder / CANDIDATE_META)`` makes
  the read inside ``read_json`` one. Parameter-borne paths never make a constant,
  a return or a field: a helper that returns its argument is not a carrier.

Each read site is listed with its kind (raw or hardened) and the state files that
reach it. Not seen: a path handed over outside Python's syntax (the child reads
``run_request.json`` from its ``--request`` argument), a name built from parts.
"""

from __future__ import annotations

import ast
from collections.abc import Sequence
from dataclasses import dataclass, field

from design_syntax import (
    MODULE,
    Place,
    SourceFile,
    class_defs,
    field_names,
    function_defs,
    scoped_nodes,
    simple_name,
)

# The files of an agent's state folder (issue 53's list; the same list for every tree).
STATE_FILES = (
    "served.json",
    "candidate.json",
    "verdict.json",
    "data_manifest.json",
    "precision_calibration.json",
    "captured_step_verified.json",
    "probe_result.json",
    "loss_scale.json",
    "precision_state.json",
    "last_success.json",
    "last_run.json",
    "run_request.json",
    "quarantine.jsonl",
    ".generated",
)
OWNER = "/agent_folder/"  # the owner package's folder, on a product file's path
HARDENED = {"read_state_text"}  # the hardened reader: its calls are reads, its body is not
RAW_READS = {"read_text", "read_bytes"}
LOADERS = {"torch", "numpy", "np", "json", "pickle", "load"}  # torch.load(path), ...
# Calls whose result is the path they are given (or its text).
PATH_KEEPERS = {"Path", "PurePath", "str", "fspath", "join", "resolve", "absolute", "expanduser"}


def _state_names(text: str) -> set[str]:
    return {n for n in STATE_FILES if text == n or text.endswith("/" + n)}


def _writes(mode: ast.AST | None) -> bool:
    return isinstance(mode, ast.Constant) and any(c in str(mode.value) for c in "wax+")


def _mode(call: ast.Call, position: int) -> ast.AST | None:
    given = [k.value for k in call.keywords if k.arg == "mode"]
    return given[0] if given else (call.args[position] if len(call.args) > position else None)


def read_of(call: ast.Call) -> tuple[str, ast.AST] | None:
    """(``raw`` or ``hardened``, the expression read) when ``call`` reads a file: see
    the module docstring; None for anything else, a write or ``os.open`` included."""
    func, args = call.func, call.args
    name = simple_name(func)
    if isinstance(func, ast.Attribute) and name in RAW_READS:
        return "raw", func.value
    if isinstance(func, ast.Attribute) and name == "open" and simple_name(func.value) == "os":
        flags = ast.unparse(args[1]) if len(args) > 1 else ""
        reads = "O_RDONLY" in flags and not any(f in flags for f in ("WR", "CREAT", "APPEND"))
        return ("raw", args[0]) if reads else None
    if isinstance(func, ast.Attribute) and name == "open":
        if simple_name(func.value) == "io":
            return ("raw", args[0]) if args and not _writes(_mode(call, 1)) else None
        return None if _writes(_mode(call, 0)) else ("raw", func.value)
    if isinstance(func, ast.Name) and name == "open" and args:
        return None if _writes(_mode(call, 1)) else ("raw", args[0])
    if name == "load" and args and simple_name(getattr(func, "value", func)) in LOADERS:
        return "raw", args[0]
    if name in HARDENED and args:
        return "hardened", args[0]
    return None


@dataclass
class _Carriers:
    """What carries a state file's path (see the module docstring): ``names`` (module and
    class constants), ``attrs`` (``self.x`` attributes, record fields: read as ``.x``
    only) and ``returns`` (functions and properties) by name across the tree, from
    literals only; ``named`` and ``passed``,
    each function's locals, from literals and from its parameters."""

    names: dict[str, set[str]] = field(default_factory=dict)
    attrs: dict[str, set[str]] = field(default_factory=dict)
    returns: dict[str, set[str]] = field(default_factory=dict)
    named: dict[tuple[str, str], dict[str, set[str]]] = field(default_factory=dict)
    passed: dict[tuple[str, str], dict[str, set[str]]] = field(default_factory=dict)
    properties: set[str] = field(default_factory=set)
    grew: bool = False

    def add(self, table: dict[str, set[str]], key: str, found: set[str]) -> None:
        if found - table.get(key, set()):
            table.setdefault(key, set()).update(found)
            self.grew = True


def _taint(expr: ast.AST, local: dict[str, set[str]], carriers: _Carriers) -> set[str]:
    """The state files whose path ``expr`` may be built from, ``local`` naming locals:
    through names, ``/`` and ``+``, f-strings, ``or`` and ``if``-expressions, the calls
    that keep a path (``Path``, ``str``, ``os.path.join``, ``.resolve()``, ...), and the
    string literals any call is given (``folder.joinpath("served.json")``)."""
    if isinstance(expr, ast.Constant):
        return _state_names(expr.value) if isinstance(expr.value, str) else set()
    if isinstance(expr, ast.Name):
        return local.get(expr.id, set()) | carriers.names.get(expr.id, set())
    if isinstance(expr, ast.Attribute):
        attr = expr.attr
        return (
            carriers.names.get(attr, set())
            | carriers.attrs.get(attr, set())
            | (carriers.returns.get(attr, set()) if attr in carriers.properties else set())
        )
    parts: list[ast.AST] = []
    found: set[str] = set()
    if isinstance(expr, ast.BinOp):
        parts = [expr.left, expr.right]
    elif isinstance(expr, ast.JoinedStr | ast.BoolOp):
        parts = list(expr.values)
    elif isinstance(expr, ast.FormattedValue | ast.Await):
        parts = [expr.value]
    elif isinstance(expr, ast.IfExp):
        parts = [expr.body, expr.orelse]
    elif isinstance(expr, ast.Call) and read_of(expr) is None:  # a read gives content
        name = simple_name(expr.func)
        found = set(carriers.returns.get(name, set()))
        if name in PATH_KEEPERS:
            parts = [*expr.args, *(k.value for k in expr.keywords)]
        else:
            parts = [a for a in expr.args if isinstance(a, ast.Constant)]
        if isinstance(expr.func, ast.Attribute):  # a method of a path: LAYOUT_FILE.at(folder)
            parts.append(expr.func.value)
    for part in parts:
        found |= _taint(part, local, carriers)
    return found


Signatures = dict[str, list[tuple[tuple[str, str], list[str]]]]


def _signatures(files: Sequence[SourceFile]) -> tuple[Signatures, dict[str, set[str]]]:
    """By simple name: each function's place (file, qualified name) and the parameters a
    call fills (a method's first left out); each class's annotated fields."""
    functions: Signatures = {}
    records: dict[str, set[str]] = {}
    for source in files:
        for qualname, fn in function_defs(source.module):
            args = [a.arg for a in [*fn.args.posonlyargs, *fn.args.args]]
            if args and args[0] in ("self", "cls"):
                args = args[1:]
            kwonly = [a.arg for a in fn.args.kwonlyargs]
            functions.setdefault(fn.name, []).append(((source.rel, qualname), args + kwonly))
        for _, cls in class_defs(source.module):
            records.setdefault(cls.name, set()).update(field_names(cls))
    return functions, records


def _propagate(files: Sequence[SourceFile]) -> _Carriers:
    """Follow state-file names through bindings, returns and calls to a fixed point."""
    functions, records = _signatures(files)
    scopes: list[tuple[tuple[str, str], list[ast.AST]]] = []
    for source in files:
        grouped: dict[str, list[ast.AST]] = {}
        for scope, node in scoped_nodes(source.module):
            grouped.setdefault(scope, []).append(node)
        scopes += [((source.rel, scope), nodes) for scope, nodes in grouped.items()]
    properties = {
        fn.name
        for source in files
        for _, fn in function_defs(source.module)
        if any(simple_name(d) in ("property", "cached_property") for d in fn.decorator_list)
    }
    carriers = _Carriers(properties=properties)
    first = True
    while first or carriers.grew:
        first, carriers.grew = False, False
        for place, nodes in scopes:
            for node in nodes:
                _carry(node, place, carriers, (functions, records), properties)
    return carriers


def _carry(
    node: ast.AST,
    place: tuple[str, str],
    carriers: _Carriers,
    signatures: tuple[Signatures, dict[str, set[str]]],
    properties: set[str],
) -> None:
    """One node's part of the propagation: a binding, a return, or a call's arguments."""
    scope = place[1]
    named = carriers.named.setdefault(place, {})
    passed = carriers.passed.setdefault(place, {})
    if isinstance(node, ast.Assign | ast.AnnAssign | ast.NamedExpr) and node.value is not None:
        found, reached = _taint(node.value, named, carriers), _taint(node.value, passed, carriers)
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        for target in targets:
            if isinstance(target, ast.Name) and scope == MODULE:
                carriers.add(carriers.names, target.id, found)
            elif isinstance(target, ast.Name):
                carriers.add(named, target.id, found)
                carriers.add(passed, target.id, found | reached)
            elif isinstance(target, ast.Attribute):
                carriers.add(carriers.attrs, target.attr, found)
    elif isinstance(node, ast.Return) and node.value is not None and scope != MODULE:
        name = scope.rsplit(".", 1)[-1]
        if name in properties or "<locals>" not in scope:
            carriers.add(carriers.returns, name, _taint(node.value, named, carriers))
    elif isinstance(node, ast.Call):
        functions, records = signatures
        name = simple_name(node.func)
        # A record type's field given a state file by keyword carries it (as ``.field``);
        # a function by a name only it has (not a dunder): its parameters, what is passed.
        for keyword in node.keywords:
            if keyword.arg in records.get(name, set()):
                carriers.add(carriers.attrs, keyword.arg, _taint(keyword.value, named, carriers))
        callees = functions.get(name, []) if not name.startswith("__") else []
        targets = [(carriers.passed.setdefault(p, {}), ps, passed) for p, ps in callees[:1]]
        if len(callees) > 1:
            targets = []
        for table, params, local in targets:
            pairs = [*zip(params, node.args, strict=False)]
            pairs += [(k.arg, k.value) for k in node.keywords if k.arg in params]
            for param, arg in pairs:
                carriers.add(table, param, _taint(arg, local, carriers))


def state_reads(files: Sequence[SourceFile]) -> list[Place]:
    """Each read of a state file's path outside the owner package, its kind (raw or
    through the hardened reader) and the state files that may reach it."""
    found_reads = []
    carriers = _propagate(files)
    for source in files:
        if OWNER in f"/{source.rel}":
            continue
        for scope, node in scoped_nodes(source.module):
            if not isinstance(node, ast.Call) or scope.rsplit(".", 1)[-1] in HARDENED:
                continue
            read = read_of(node)
            local = carriers.passed.get((source.rel, scope), {})
            if read and (found := _taint(read[1], local, carriers)):
                why = f"{read[0]}, line {node.lineno}: {', '.join(sorted(found))}"
                found_reads.append(Place(source.rel, scope, why))
    return found_reads
