"""What README.md and docs/*.md say about the program is what it does: the commands and
flags they name exist and the Commands block lists them all, the files they cite are in
the repository, and the figures they quote are the committed results' own."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from doc_blocks import DOC_FILES, ROOT, all_blocks, install_plugin

from genesis_fp16.bench.report import markdown_table
from genesis_fp16.cli import build_parser

DOCS = {path.relative_to(ROOT).as_posix(): path.read_text() for path in DOC_FILES}
FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")


def cli_commands() -> dict[tuple[str, ...], set[str]]:
    """Each command of the parser that runs (``('train',)``, ``('model', 'list')``) and
    the flags its ``--help`` shows (hidden ones, such as the daemon's ``--request``, not)."""
    found: dict[tuple[str, ...], set[str]] = {}

    def walk(parser: argparse.ArgumentParser, path: tuple[str, ...]) -> None:
        flags, has_actions = set(), False
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                has_actions = True
                for name, sub in action.choices.items():
                    walk(sub, (*path, name))
            elif action.help != argparse.SUPPRESS:
                flags |= {o for o in action.option_strings if o.startswith("--")} - {"--help"}
        if path and not has_actions:
            found[path] = flags

    walk(build_parser(), ())
    return found


COMMANDS = cli_commands()


def named_commands(text: str) -> list[tuple[list[tuple[str, ...]], set[str], str]]:
    """Each ``genesis-fp16 COMMAND [ACTION|ACTION] ...`` in ``text``: the command paths it
    names (an unknown one as it is written), the flags it names, and the text itself."""
    named = []
    for found in re.finditer(r"(?:^|(?<=[\s/]))genesis-fp16 ([a-z][\w-]*)([^`#\n]*)", text, re.M):
        command, rest = found.group(1), found.group(2)
        actions = sorted({path[1] for path in COMMANDS if path[0] == command and len(path) > 1})
        if actions:
            word = (rest.split() or [""])[0]
            paths = [(command, action) for action in word.split("|")]
        else:
            paths = [(command,)]
        named.append((paths, set(FLAG.findall(rest)), found.group(0)))
    return named


def _synopsis_entries(block: str) -> list[str]:
    """A synopsis block's commands, each with its continuation lines, comments dropped."""
    entries: list[str] = []
    for line in block.splitlines():
        line = re.sub(r"\s#.*", "", line)
        if line.startswith("genesis-fp16 "):
            entries.append(line)
        elif line.strip() and entries:
            entries[-1] += " " + line.strip()
    return entries


def _commands_block() -> str:
    """The synopsis: docs/commands.md's first shell block (the README's until issue 60)."""
    return re.search(r"```sh\n(.*?)```", DOCS["docs/commands.md"], flags=re.S).group(1)


def test_the_commands_block_names_every_command_and_flag() -> None:
    """Every command of the parser, and every flag its --help shows, is in docs/commands.md's
    synopsis, and the synopsis names no command or flag the parser lacks."""
    listed: dict[tuple[str, ...], set[str]] = {}
    for entry in _synopsis_entries(_commands_block()):
        for paths, flags, _ in named_commands(entry):
            for path in paths:
                assert path in COMMANDS, f"the synopsis names {' '.join(path)!r}: no such command"
                unknown = flags - set().union(*(COMMANDS.get(p, set()) for p in paths))
                assert not unknown, f"{entry!r}: {sorted(unknown)} are no flags of it"
                listed.setdefault(path, set()).update(flags & COMMANDS[path])
    missing = {" ".join(p): sorted(COMMANDS[p] - listed.get(p, set())) for p in COMMANDS}
    missing = {command: flags for command, flags in missing.items() if flags}
    absent = [" ".join(p) for p in COMMANDS if p not in listed]
    assert not absent, f"commands missing from docs/commands.md's synopsis: {absent}"
    assert not missing, f"flags missing from docs/commands.md's synopsis: {missing}"


def test_the_commands_check_sees_a_left_out_command_and_flag() -> None:
    """The synopsis before issue 52 (no new-agent, check-agent or model; no --checkpoint-steps)
    misses commands and flags, so the completeness check can fail."""
    old = "genesis-fp16 train AGENT [--steps N]\ngenesis-fp16 agents [--json]\n"
    listed = {
        tuple(p) for e in _synopsis_entries(old) for ps, _, _ in named_commands(e) for p in ps
    }
    assert ("new-agent",) in set(COMMANDS) - listed and ("model", "list") in set(COMMANDS) - listed
    flags = {f for e in _synopsis_entries(old) for _, fs, _ in named_commands(e) for f in fs}
    assert "--checkpoint-steps" in COMMANDS[("train",)] - flags


SHELL = ("sh", "bash", "console", "text", "", "indented")


def _code_and_inline(name: str, text: str) -> str:
    """The parts of a Markdown text that name commands: code spans and shell blocks."""
    spans = re.findall(r"`([^`\n]+)`", re.sub(r"```.*?```", "", text, flags=re.S))
    blocks = [b.text for b in all_blocks() if b.file == name and b.language in SHELL]
    return "\n".join(spans + blocks)


@pytest.mark.parametrize("name", sorted(DOCS))
def test_every_command_the_docs_name_exists(name: str) -> None:
    """Each `genesis-fp16 COMMAND ...` a doc writes (inline or in a block) is a command the
    program has, with its action where it takes one, and flags that command has."""
    text = _code_and_inline(name, DOCS[name])
    for paths, flags, written in named_commands(text):
        for path in paths:
            assert path in COMMANDS, f"{name}: `{written.strip()}`: no command {' '.join(path)!r}"
        unknown = flags - set().union(*(COMMANDS[p] for p in paths))
        assert not unknown, f"{name}: `{written.strip()}`: {sorted(unknown)} are no flags of it"


def test_a_command_without_its_action_is_caught() -> None:
    """`genesis-fp16 data` on its own (docs/operations.md before issue 52) names no command."""
    text = _code_and_inline("docs/operations.md", "look at them (`genesis-fp16 data` on the pool)")
    ((paths, _, _), *_) = named_commands(text)
    assert paths == [("data", "")] and ("data", "") not in COMMANDS


@pytest.mark.slow
def test_the_minimal_plugin_of_se_darwin_md_trains(tmp_path: Path) -> None:
    """docs/se-darwin.md's minimal third-party package, installed by its entry point, is
    listed, and the doc's own `train` line for it runs as written."""
    text = DOCS["docs/se-darwin.md"]
    section = text[text.index("## Plugin interface") :]
    toml = re.search(r"```toml\n(.*?)```", section, flags=re.S).group(1)
    source = re.search(r"```python\n(.*?)```", section, flags=re.S).group(1)
    name = install_plugin(tmp_path / "site", toml, source)
    (line,) = re.findall(rf"`(genesis-fp16 train {name}[^`]*)`", section)
    env = {k: v for k, v in os.environ.items() if not k.startswith("GENESIS_FP16_")}
    env |= {
        "PYTHONPATH": str(tmp_path / "site"),
        "PATH": f"{Path(sys.prefix) / 'bin'}{os.pathsep}{env.get('PATH', '')}",
    }

    def shell(command: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["bash", "-ec", command],
            cwd=tmp_path,
            env=env,
            capture_output=True,
            text=True,
            timeout=600,
        )

    agents = shell("genesis-fp16 agents --json")
    assert agents.returncode == 0, agents.stderr
    assert {a["name"]: a["state"] for a in json.loads(agents.stdout)}[name] == "loaded"
    trained = shell(line)
    assert trained.returncode == 0, trained.stderr[-3000:]


def test_the_minimal_plugin_of_se_darwin_md_imports_only_the_plugin_door() -> None:
    """Issue 92: docs/se-darwin.md's third-party plugin imports genesis-fp16 only from
    genesis_fp16.plugin_api, as docs/plugins.md says a plugin does (it took fit from
    genesis_fp16_infrastructure.training)."""
    section = DOCS["docs/se-darwin.md"][DOCS["docs/se-darwin.md"].index("## Plugin interface") :]
    source = re.search(r"```python\n(.*?)```", section, flags=re.S).group(1)
    modules = re.findall(r"^(?:from|import) (genesis_fp16\S*)", source, flags=re.M)
    assert modules and set(modules) == {"genesis_fp16.plugin_api"}, modules


# Where files the docs cite live; a path under another first folder is a run's (state/...).
TRACKED = (
    "benchmarks/",
    "docs/",
    "deploy/",
    "tests/",
    "genesis_fp16/",
    "agents/",
    "infrastructure/",
)


def cited_paths(name: str, text: str) -> list[str]:
    """Repository files a doc cites: Markdown links, and code spans that are paths."""
    folder = (ROOT / name).parent
    found = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if not re.match(r"[a-z]+:|#", target):
            found.append(os.path.relpath(folder / target.split("#")[0], ROOT))
    for span in re.findall(r"`([^`\s]+)`", text):
        placeholder = re.search(r"[<>*{}]|\.\.\.", span)
        if span.startswith("../") or (span.startswith(TRACKED) and not placeholder):
            found.append(span)
    return found


def test_every_file_the_docs_cite_is_in_the_repository() -> None:
    """Each file a doc links or names (`benchmarks/results/...`) exists in the checkout;
    none lies outside it (`../shared/gpu/...` did)."""
    outside, missing = [], []
    for name, text in DOCS.items():
        for path in cited_paths(name, text):
            if path.startswith("../"):
                outside.append(f"{name}: {path}")
            elif not (ROOT / path.split("::")[0].rstrip(".,;:")).exists():
                missing.append(f"{name}: {path}")
    assert not outside, f"cited outside the repository: {outside}"
    assert not missing, f"cited but not in the repository: {missing}"


def test_the_citation_check_sees_a_path_outside_the_repository() -> None:
    """The README's evidence path before issue 52 is caught as outside the repository."""
    assert cited_paths("README.md", "(`../shared/gpu/h100-2026-11-22.md`, a graph)") == [
        "../shared/gpu/h100-2026-11-22.md"
    ]


def test_every_committed_cuda_result_is_named_in_the_results_and_benchmarks_docs() -> None:
    """A CUDA results file in benchmarks/results is cited where GPU results are discussed
    (docs/results.md: the README's until issue 60), and no doc says there is none."""
    results = sorted((ROOT / "benchmarks" / "results").glob("bench_cuda-*.md"))
    assert results, "no CUDA results file is committed: this test then checks nothing"
    for doc in ("docs/results.md", "docs/benchmarks.md"):
        for path in results:
            assert f"benchmarks/results/{path.name}" in DOCS[doc], (
                f"{doc} does not cite {path.name}"
            )
        assert not re.search(r"no CUDA results file", DOCS[doc], flags=re.I), doc


def _table_rows(text: str) -> list[list[str]]:
    return [
        [cell.strip() for cell in line.strip().strip("|").split("|")]
        for line in text.splitlines()
        if line.startswith("|") and not line.startswith("| ---")
    ]


def test_the_quoted_bench_rows_are_the_committed_results_as_the_tool_marks_them() -> None:
    """Each row docs/results.md quotes (the README's until issue 60) is a row of the results
    file it links, cell for cell, and a row that ran another precision carries the mark
    the bench's table writes."""
    text = DOCS["docs/results.md"]
    section = text[text.index("## Benchmarks\n") :]
    section = section[: section.index("\n## ", 1)]
    links = re.findall(r"\]\(\.\./(benchmarks/results/bench_cpu[^)]+\.md)\)", section)
    (results,) = set(links)
    committed = {
        (row[0], row[1], row[2], row[3], row[4])
        for row in _table_rows((ROOT / results).read_text())
    }
    quoted = [row for row in _table_rows(section) if row[0] != "size"]
    assert quoted
    size = ""
    for row in quoted:
        size = row[0].split()[0] if row[0] else size
        assert (size, *row[1:5]) in committed, f"docs/results.md's row {row} is not in {results}"
    dishonest = {"size": "s", "runner": "r", "precision_requested": "fp16", "precision_ran": "fp32"}
    mark = re.search(r"\| (\*\*fp32\*\*[^|]*) \|", markdown_table([{**dishonest, "honest": False}]))
    marked = [row[3] for row in quoted if "**" in row[3]]
    assert marked and all(cell.endswith(mark.group(1).removeprefix("**fp32**")) for cell in marked)


def test_bench_without_its_extra_names_the_line_the_install_doc_gives(tmp_path: Path) -> None:
    """`bench --tiny` where the bench extra is missing (make run's venv) stops in one line
    naming the extra; docs/install.md installs that extra, with the pins, and the extra
    brings what bench imports (tests/genesis_fp16/bench/test_bench.py runs it with them)."""
    hide = "import sys\nfor name in ('matplotlib', 'accelerate', 'lightning_fabric'):\n"
    hide += "    sys.modules[name] = None\nfrom genesis_fp16.cli import main\nsys.exit(main())\n"
    done = subprocess.run(
        [sys.executable, "-c", hide, "bench", "--tiny", "--out-dir", str(tmp_path / "out")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    (line,) = done.stderr.strip().splitlines()
    assert done.returncode == 2 and "matplotlib is not installed" in line, done.stderr
    assert "'.[bench]'" in line and not (tmp_path / "out").exists()
    (block,) = [b.text for b in all_blocks() if b.file == "docs/install.md" and "bench" in b.text]
    assert block.split("\n")[0].strip() == ".venv/bin/pip install -c constraints.txt -e '.[bench]'"
    with (ROOT / "pyproject.toml").open("rb") as file:
        extra = tomllib.load(file)["project"]["optional-dependencies"]["bench"]
    named = {re.split(r"[<>=!~\[ ]", requirement)[0] for requirement in extra}
    assert {"matplotlib", "accelerate", "lightning-fabric"} <= named


API_CLAIM = re.compile(r"`API_VERSION = (\d+)`|\bAPI(?: version)? (\d+)\)")


def api_version_claims(text: str) -> list[int]:
    """The plugin API versions a text states as the current one: `API_VERSION = N`, and
    "(API N)" / "(API version N)" headings and asides."""
    return [int(a or b) for a, b in API_CLAIM.findall(text)]


def test_every_documented_api_version_is_the_codes() -> None:
    """Where a doc states the plugin API version (`API_VERSION = N`, "(API N)"), it is
    contract/plugin_api.py's API_VERSION (docs/plugins.md said 2 while the code said 3)."""
    from genesis_fp16.plugin_api import API_VERSION

    stale = [
        f"{name}: {n}"
        for name, text in DOCS.items()
        for n in api_version_claims(text)
        if n != API_VERSION
    ]
    assert not stale, f"documented API versions that are not {API_VERSION}: {stale}"


def test_the_api_version_check_sees_a_stale_version() -> None:
    """docs/plugins.md's line before issue 69 states version 2, which the check reads."""
    line = "`genesis_fp16.plugin_api.AgentPlugin`\n(`API_VERSION = 2`): ..."
    assert api_version_claims(line) == [2]


def model_list_samples(text: str) -> list[list[str]]:
    """The columns of each `model list` table a text shows: a line starting `ID ` and
    naming STATE, split into words."""
    return [line.split() for line in text.splitlines() if re.match(r"ID +STATE ", line)]


def test_every_model_list_sample_has_the_codes_columns() -> None:
    """Each `model list` table a doc shows has the columns the command prints, in order
    (the README's sample lacked GATE)."""
    from genesis_fp16.commands.model import HEADER

    stale = [
        f"{name}: {columns}"
        for name, text in DOCS.items()
        for columns in model_list_samples(text)
        if columns != HEADER.split()
    ]
    assert any(model_list_samples(text) for text in DOCS.values())
    assert not stale, f"model list samples whose columns are not {HEADER.split()}: {stale}"
