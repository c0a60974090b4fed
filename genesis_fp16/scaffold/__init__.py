"""`genesis-fp16 new-agent NAME`: the files of a new agent plugin package.

:func:`write_agent` writes an installable package: ``pyproject.toml`` (build system,
version, the entry point in ``genesis_fp16.agents``), the agent (``agent_template.py``
with its name filled in), a test that runs the contract checker (standard-library
``unittest``: it runs in the daemon's venv, which has no pytest), and a README. Installed as
it is (``pip install -e ./my-agent``), the agent trains under the daemon with no flag and
no setting, a running daemon included: the daemon generates its sample data and the
request's default budget applies.

>>> print(write_agent("my_agent", Path(".")))
my-agent
>>> sorted(path.name for path in Path("my-agent").iterdir())
['README.md', 'my_agent', 'pyproject.toml', 'tests']
"""

from __future__ import annotations

import keyword
from pathlib import Path

from genesis_fp16_infrastructure.api import check_agent_name

_TEMPLATE = Path(__file__).with_name("agent_template.py")
# The template's own header says what it is to this repository; the written file starts
# at its docstring.
_TEMPLATE_BODY_START = '"""__AGENT__:'

PYPROJECT = """\
[build-system]
requires = ["setuptools>=68"]
build-backend = "setuptools.build_meta"

[project]
name = "__DIST__"
version = "0.1.0"
description = "__AGENT__: a genesis-fp16 agent plugin"
requires-python = ">=3.11"
dependencies = ["genesis-fp16", "torch"]

[project.entry-points."genesis_fp16.agents"]
__AGENT__ = "__AGENT__:plugin"

[tool.setuptools]
packages = ["__AGENT__"]

[tool.ruff]
line-length = 100

[tool.ruff.lint]
select = ["E", "F", "W", "I", "B", "UP", "SIM", "RUF"]

[tool.ruff.lint.isort]
known-first-party = ["__AGENT__"]
section-order = [
    "future", "standard-library", "third-party", "genesis", "first-party", "local-folder"
]

[tool.ruff.lint.isort.sections]
genesis = ["genesis_fp16"]
"""

TEST = '''\
"""__AGENT__ meets the plugin contract: every rule of genesis_fp16.testing.check_agent.

Runs with the standard library alone, from the package's folder: python -m unittest
(in the venv genesis-fp16 runs in); pytest runs it too.
"""

from __future__ import annotations

import unittest

from genesis_fp16.testing import check_agent

from __AGENT__ import plugin


class ContractTest(unittest.TestCase):
    def test_meets_the_plugin_contract(self) -> None:
        """Each rule runs for real; the report names any that fail."""
        report = check_agent(plugin)
        self.assertTrue(report.ok, report.summary())


if __name__ == "__main__":
    unittest.main()
'''

README = """\
# __DIST__

A genesis-fp16 agent plugin. Install it beside genesis-fp16 and the daemon finds it:

```sh
pip install -e ./__DIST__                  # editable: your edits apply at the next run
genesis-fp16 agents                        # __AGENT__: loaded
genesis-fp16 check-agent __AGENT__         # the plugin contract, one line a rule
(cd __DIST__ && python -m unittest)         # the same rules, as a test
genesis-fp16 train __AGENT__               # its sample data, the default budget
```

A running daemon loads it within a few seconds of the install (at its next tick, or at
once on SIGHUP: `systemctl reload genesis-fp16`) and trains it on its schedule.

Edit `__AGENT__/__init__.py`: `Task` is the model, its data and its loss; `Agent.train`
reads the request's data and calls `fit` on every record but the fifth genesis-fp16 holds
out to judge the model on (`request.training_rows`; keep that, and `trained_ids` in the
task's `extra_state`, or the judged run refuses the candidate).
"""

# The package's own lint settings, in its pyproject.toml: ruff uses the nearest file that
# has them, so the scaffold lints the same on its own and inside a checkout of this
# repository (whose settings make genesis_fp16 first-party and the agent third-party, the
# other order). genesis_fp16 gets its own import section, where this repository puts it.


class ScaffoldError(ValueError):
    """A name or folder new-agent cannot use: one line, the CLI's exit 2."""


def check_name(name: str) -> None:
    """Raise :class:`ScaffoldError` unless ``name`` can be a module and an agent name."""
    try:  # the agent name every command takes (its pattern and length)
        check_agent_name(name)
    except ValueError as exc:
        raise ScaffoldError(str(exc)) from None
    if keyword.iskeyword(name):
        raise ScaffoldError(f"agent name {name!r}: a Python keyword cannot name the package")


def agent_source(name: str) -> str:
    """The agent's ``__init__.py`` for ``name``."""
    text = _TEMPLATE.read_text()
    return text[text.index(_TEMPLATE_BODY_START) :].replace("__AGENT__", name)


def package_files(name: str) -> dict[str, str]:
    """Relative path -> text of every file of the package for agent ``name``."""
    check_name(name)
    dist = name.replace("_", "-")

    def fill(text: str) -> str:
        return text.replace("__AGENT__", name).replace("__DIST__", dist)

    return {
        "pyproject.toml": fill(PYPROJECT),
        f"{name}/__init__.py": agent_source(name),
        # A package, so that a plain `python -m unittest` in the folder finds the test
        # (its discovery enters packages only; without it: "Ran 0 tests", OK).
        "tests/__init__.py": "",
        f"tests/test_{name}.py": fill(TEST),
        "README.md": fill(README),
    }


def write_agent(name: str, out: Path) -> Path:
    """Write the package for agent ``name`` to ``out``/<name with dashes>; return that folder.

    Refuses (:class:`ScaffoldError`) a folder that already exists, so nothing is overwritten.
    """
    files = package_files(name)
    root = out / name.replace("_", "-")
    if root.exists():
        raise ScaffoldError(f"{root}: already exists; new-agent writes a new folder only")
    if out.exists() and not out.is_dir():
        raise ScaffoldError(f"--out {out}: exists and is not a folder")
    for relative, text in files.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root
