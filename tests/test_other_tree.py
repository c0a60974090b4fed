"""benchmarks/other_tree.py: another checkout's code loaded beside this tree's."""

from __future__ import annotations

from pathlib import Path

from script_module import load_script

ROOT = Path(__file__).resolve().parents[1]
CONTRACT = ("infrastructure", "genesis_fp16_infrastructure", "contract")


def _checkout(root: Path, files: dict[str, str]) -> Path:
    contract = root.joinpath(*CONTRACT)
    contract.mkdir(parents=True)
    for name, text in files.items():
        (contract / name).write_text(text)
    return root


def test_the_record_types_are_loaded_from_the_file_of_that_checkout_that_defines_them(
    tmp_path: Path,
) -> None:
    """A checkout from before the move defines them in contract/judging.py; one after, in
    contract/record_losses.py, whose judging.py only imports them: loading that judging.py
    would hand out this tree's classes, so the file that defines them is the one loaded."""
    other_tree = load_script(ROOT / "benchmarks" / "other_tree.py")
    before = _checkout(tmp_path / "before", {"judging.py": "class RecordLosses:\n    tree = 1\n"})
    after = _checkout(
        tmp_path / "after",
        {
            "judging.py": "from .record_losses import RecordLosses\n",
            "record_losses.py": "class RecordLosses:\n    tree = 2\n",
        },
    )
    assert other_tree.record_types_path(before).name == "judging.py"
    assert other_tree.record_types_path(after).name == "record_losses.py"
    for tree, number in ((before, 1), (after, 2)):
        path = other_tree.record_types_path(tree)
        assert other_tree.module_from(path, f"_record_types_{number}").RecordLosses.tree == number
    this = ROOT.joinpath(*CONTRACT, "record_losses.py")
    assert other_tree.record_types_path(ROOT) == this
