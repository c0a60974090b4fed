"""Issue 53's two figures of a typed contract, counted from a tree's syntax (no import)::

    python benchmarks/contract_counts.py OLD_TREE NEW_TREE --lists

1. *Untyped fields of TrainResult*: the fields of the class ``TrainResult`` (wherever it
   is defined under ``infrastructure/``) whose annotation names ``Mapping[str, Any]``
   or ``dict[str, Any]``, alone or inside another type (``Sequence[Mapping[str, Any]]``).

2. *Precision names typed as str*, in product code (the files ``design_counts`` reads):
   an annotated place whose annotation is ``str``, ``str | None``, or a ``tuple``,
   ``list``, ``Sequence`` or ``set`` of ``str``, and whose name says it holds a
   precision. A place is a field (an annotated name in a class body), a parameter, or a
   function's return. A name says so when one of its ``_``-separated words is
   ``precision``, ``precisions``, ``floor`` or ``chosen``, or it is
   ``demoted_from``/``demoted_to``, or ``ladder`` typed as a sequence (a ``str``
   ladder is a setting's text, ``fp16,bf16,fp32``); ``requested`` and ``used`` count
   in a class or function whose name names a precision (``Precision``, ``precision``, ``Scale``,
   ``floor``, ``decide``, ``Demotion``), and ``from_``/``to`` in ``Demotion``. Names
   with ``reason``, ``detail``, ``warning``, ``path``, ``file`` or ``text`` are no
   precision (``precision_reason``). A return counts when the function's name says so.
"""

from __future__ import annotations

import argparse
import ast
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from design_counts import REPO, SourceFile, product_files

WORDS = {"precision", "precisions", "floor", "chosen"}
WHOLE = {"demoted_from", "demoted_to"}
CONTEXT = re.compile(r"Precision|precision|Scale|floor|decide|Demotion")
NOT_A_NAME = re.compile(r"reason|detail|warning|path|file|text")
STR_TYPES = re.compile(
    r"^(str|str \| None|None \| str|(tuple|list|set|Sequence)\[str(, \.\.\.)?\])$"
)
UNTYPED = re.compile(r"(Mapping|dict)\[str, Any\]")


def _names_precision(name: str, context: str) -> bool:
    if NOT_A_NAME.search(name):
        return False
    if name in WHOLE or WORDS & set(name.split("_")) or "ladder" in name.split("_"):
        return True
    if name in ("requested", "used"):
        return bool(CONTEXT.search(context))
    return name in ("from_", "to") and "Demotion" in context


def precision_strs(source: SourceFile) -> list[str]:
    """``path: place: annotation`` for each precision name typed ``str`` in ``source``."""
    found: list[str] = []

    def visit(node: ast.AST, owner: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, child.name)
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                where = f"{owner}.{child.name}" if owner else child.name
                args = child.args
                for arg in (*args.posonlyargs, *args.args, *args.kwonlyargs):
                    _check(arg.arg, arg.annotation, f"{where}({arg.arg})", where)
                _check(child.name, child.returns, f"{where} ->", where)
                visit(child, "")
            elif isinstance(child, ast.AnnAssign) and isinstance(child.target, ast.Name):
                if owner:  # a field: an annotated name in a class body
                    name = child.target.id
                    _check(name, child.annotation, f"{owner}.{name}", owner)
            else:
                visit(child, owner)

    def _check(name: str, annotation: ast.expr | None, place: str, context: str) -> None:
        if annotation is None or not _names_precision(name, context):
            return
        text = ast.unparse(annotation)
        if "ladder" in name.split("_") and text == "str":  # a setting's text: "fp16,bf16,fp32"
            return
        if STR_TYPES.match(text):
            found.append(f"`{source.rel}`: `{place}`: `{text}`")

    visit(source.module, "")
    return found


def untyped_result_fields(sources: list[SourceFile]) -> list[str]:
    """The ``Mapping[str, Any]`` fields of ``TrainResult``."""
    found = []
    for source in sources:
        for node in ast.walk(source.module):
            if isinstance(node, ast.ClassDef) and node.name == "TrainResult":
                for item in node.body:
                    if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                        text = ast.unparse(item.annotation)
                        if UNTYPED.search(text):
                            found.append(f"`{source.rel}`: `{item.target.id}`: `{text}`")
    return found


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("trees", nargs="*", type=Path, default=[REPO])
    parser.add_argument("--lists", action="store_true", help="the places behind each figure")
    args = parser.parse_args(argv)
    counted = []
    for tree in args.trees:
        sources = product_files(tree)
        strs = [line for source in sources for line in precision_strs(source)]
        counted.append((tree, untyped_result_fields(sources), strs))
    print("| figure | " + " | ".join(f"`{tree}`" for tree, _, _ in counted) + " |")
    print("|---|" + "---:|" * len(counted))
    print("| `Mapping[str, Any]` fields in TrainResult | "
          + " | ".join(str(len(u)) for _, u, _ in counted) + " |")  # fmt: skip
    print("| precision names typed as `str` | "
          + " | ".join(str(len(s)) for _, _, s in counted) + " |")  # fmt: skip
    if args.lists:
        for tree, untyped, strs in counted:
            print(f"\n<details><summary>{tree}</summary>\n")
            print("\n".join(f"- {line}" for line in (*untyped, *strs)))
            print("\n</details>")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
