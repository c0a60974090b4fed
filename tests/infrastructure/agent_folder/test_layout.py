"""The layout names every file of the agent folder once, and nothing else spells one."""

from __future__ import annotations

import ast
from pathlib import Path

from genesis_fp16_infrastructure.agent_folder.files import agent_of, parse_aside
from genesis_fp16_infrastructure.agent_folder.layout import LAYOUT

ROOT = Path(__file__).resolve().parents[3]
ROOMS = ("genesis_fp16", "agents", "infrastructure")


def _docstrings(tree: ast.AST) -> set[int]:
    kinds = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    return {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, kinds)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }


def spelled_names(source: str) -> list[tuple[int, str]]:
    """Each string literal (not a docstring) that is, or ends in, a layout file's name."""
    tree = ast.parse(source)
    docs = _docstrings(tree)
    names = {f.name for f in LAYOUT}
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docs
        and (node.value in names or any(node.value.endswith("/" + n) for n in names))
    ]


def test_no_product_file_spells_a_name_the_layout_owns() -> None:
    """Outside agent_folder/, code takes a state file's name from the layout, never as a
    literal: a second spelling is how a reader bypasses the owner."""
    found = [
        f"{path.relative_to(ROOT)}:{line}: {name!r}"
        for room in ROOMS
        for path in sorted((ROOT / room).rglob("*.py"))
        if "agent_folder" not in path.parts
        for line, name in spelled_names(path.read_text())
    ]
    assert found == []


def test_the_check_finds_a_spelled_name() -> None:
    """The check above can fail: a literal name is found, a docstring's is not."""
    source = '"""Reads served.json."""\npath = folder / "served.json"\n'
    assert spelled_names(source) == [(2, "served.json")]


def test_names_are_unique_and_found_back() -> None:
    """Each name once; a set-aside name maps back to its file; a path names its agent."""
    assert len({f.name for f in LAYOUT}) == len({f.label for f in LAYOUT}) == len(LAYOUT)
    assert all((parse_aside(f.name + ".unusable") or ("",))[0] == f.name for f in LAYOUT)
    assert (
        agent_of(Path("/s/agents/se_darwin/checkpoints/candidates/c/verdict.json")) == "se_darwin"
    )
    assert agent_of(Path("/s/other/x.json")) is None


def test_each_agent_folder_is_listed_by_name_and_nothing_else(tmp_path: Path) -> None:
    """AgentFolder.each: the agents' folders under <state>/agents by name; a file, or a
    folder whose name is no agent name, is not one; no agents folder: none."""
    from genesis_fp16_infrastructure.folder import AgentFolder

    assert AgentFolder.each(tmp_path) == []
    agents = tmp_path / "agents"
    for name in ("zeta", "alpha", ".hidden", "has space"):
        (agents / name).mkdir(parents=True)
    (agents / "a_file").write_text("")
    found = AgentFolder.each(tmp_path)
    assert [f.agent for f in found] == ["alpha", "zeta"]
    assert found[0].root == agents / "alpha" and found[0].state_dir == tmp_path


def test_an_agents_checkpoints_folder_is_one_face_of_its_served_models(tmp_path: Path) -> None:
    """AgentFolder.checkpoints: the served models of its checkpoint folder; it holds
    models once a candidate, a pointer or one set aside is there, and its repair hint
    names the agent."""
    from genesis_fp16_infrastructure.agent_folder.candidates import new_candidate
    from genesis_fp16_infrastructure.folder import AgentFolder

    models = AgentFolder(tmp_path, "alpha").checkpoints
    assert models.path == AgentFolder(tmp_path, "alpha").checkpoint_dir
    assert not models.holds_models() and models.candidates_dir.parent == models.path
    models.path.mkdir(parents=True)
    assert models.newest_checkpoint() is None
    candidate = new_candidate(models.path, {"records": 3})
    assert models.holds_models() and models.candidates() == [candidate]
    assert candidate.parent == models.candidates_dir
    assert models.verdict(models.candidates()[0]).outcome is None  # training: no verdict
    assert "model rollback alpha" in models.repair_hint()
