"""Run now: ``genesis-fp16 run AGENT`` asks the daemon on a state folder to run an agent at
once, through files in that folder, never through an HTTP write.

The command creates an empty request file ``<state>/run_now/<agent>@<id>.json`` (``id``:
its pid and 8 random hex digits) and waits for ``<state>/run_now/answers/<id>.json``.
The daemon's main loop looks into the folder at every tick (at most every 0.5 s), removes
each request before it acts on it, so a request is taken once, and answers it:

- ``started``: the agent's scheduled job is brought forward to now (APScheduler wakes
  at once; an interval schedule counts on from this run). Requests for one agent taken
  in one look, or while a run asked for has not started yet, join that one run;
- ``refused`` in one line: the agent is running now, is not scheduled by this daemon
  (unknown, disabled, its plugin did not load), or the daemon is shutting down.

A request left by a command that died is taken and answered like any other (its answer
is removed after ``ANSWER_KEEP_SECONDS``); a name that is not ``AGENT@ID.json`` is
refused and logged once (a file removed, a folder left); requests are taken before
strays, so thousands of strays never delay one. ``run_now/`` and ``answers/`` must be
real folders: a link there is refused (logged; ``run`` exits 2), and nothing where it
points is touched. Anyone who can write the state folder can ask for a run, as they
can edit the ``.env`` file beside it: the folder is the daemon's own trust boundary.

>>> import tempfile
>>> folder = tempfile.TemporaryDirectory()
>>> state_dir = Path(folder.name)
>>> ident = new_request(state_dir, "se_darwin")  # the command
>>> take_requests(state_dir) == ({"se_darwin": [ident]}, [])  # the daemon, once
True
>>> write_answer(state_dir, ident, Answer("started", "se_darwin: starts its run now", 0.0))
>>> read_answer(state_dir, ident).outcome  # the command again
'started'
>>> folder.cleanup()
"""

from __future__ import annotations

import os
import re
import secrets
import stat
import time
from pathlib import Path
from typing import Literal

import msgspec

from genesis_fp16_infrastructure.api import is_agent_name, shown_name, write_json_atomic

RUN_NOW_FOLDER = "run_now"
ANSWERS_FOLDER = "answers"
ANSWER_KEEP_SECONDS = 300.0
# A look takes at most this many requests: a flood of files costs one bounded tick each.
MAX_REQUESTS_PER_LOOK = 100
ANSWER_BYTES = 4096
_IDENT = r"[0-9]{1,10}-[0-9a-f]{8}"
_REQUEST = re.compile(rf"([^@]+)@({_IDENT})\.json")  # and an agent name before the @
_ANSWER = re.compile(rf"{_IDENT}\.json")

Outcome = Literal["started", "refused"]


class Answer(msgspec.Struct, frozen=True):
    """The daemon's answer to one request: ``started`` or ``refused``, why, and when."""

    outcome: Outcome
    detail: str
    at: float


def requests_folder(state_dir: Path) -> Path:
    return Path(state_dir) / RUN_NOW_FOLDER


class NotAFolder(OSError):
    """``run_now/`` or its ``answers/`` is a link or not a folder: refused, nothing in it
    (or where it points) is touched. ``str()``: one line naming it."""


def real_folder(path: Path) -> Path:
    """``path`` when it is a real folder (not a link) or absent; else :class:`NotAFolder`."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return path
    if not stat.S_ISDIR(info.st_mode):
        what = "a link" if stat.S_ISLNK(info.st_mode) else "not a folder"
        raise NotAFolder(f"{path} is {what}; run-now needs a real folder there (remove it)")
    return path


def new_request(state_dir: Path, agent: str) -> str:
    """Create ``agent``'s request file (created whole: it is empty); returns its id.
    Raises :class:`NotAFolder` when the folder or its answers' is a link."""
    ident = f"{os.getpid()}-{secrets.token_hex(4)}"
    folder = requests_folder(state_dir)
    real_folder(folder)
    real_folder(folder / ANSWERS_FOLDER)
    (folder / ANSWERS_FOLDER).mkdir(parents=True, exist_ok=True)
    fd = os.open(folder / f"{agent}@{ident}.json", os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o600)
    os.close(fd)
    return ident


def withdraw(state_dir: Path, agent: str, ident: str) -> bool:
    """Remove a request the daemon has not taken; False when it took it already."""
    try:
        (requests_folder(state_dir) / f"{agent}@{ident}.json").unlink()
    except FileNotFoundError:
        return False
    return True


def take_requests(state_dir: Path) -> tuple[dict[str, list[str]], list[str]]:
    """Each agent's request ids, their files removed (whoever removes a file owns the
    request), and the names of the entries that were no request (a file removed, a
    folder left). Requests come first: strays, however many, never delay one (a look
    takes at most MAX_REQUESTS_PER_LOOK of each). Raises :class:`NotAFolder` when
    ``run_now/`` is a link: nothing where it points is removed."""
    folder = requests_folder(state_dir)
    try:
        # O_NOFOLLOW: a link at the folder's name fails here, and every unlink below is
        # relative to this very folder (a rename meanwhile cannot redirect it).
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:  # no folder yet: nobody asked
        return {}, []
    except OSError:
        real_folder(folder)  # raises NotAFolder for a link or a file
        return {}, []  # unreadable: nobody's request can be taken
    try:
        # Every name but the answers' folder: a hostile ".x" is removed too (nothing
        # writes temporary files here; the answers' own are in their folder).
        names = [n for n in os.listdir(fd) if n != ANSWERS_FOLDER]
        requests = sorted(n for n in names if _request_of(n))
        others = sorted(n for n in names if not _request_of(n))
        taken: dict[str, list[str]] = {}
        strays: list[str] = []
        for name in requests[:MAX_REQUESTS_PER_LOOK] + others[:MAX_REQUESTS_PER_LOOK]:
            try:
                os.unlink(name, dir_fd=fd)
            except FileNotFoundError:
                continue  # withdrawn by its command meanwhile
            except OSError:  # a folder at that name: not a request, and not ours to remove
                strays.append(shown_name(name))
                continue
            found = _request_of(name)
            if found is None:
                strays.append(shown_name(name))
                continue
            taken.setdefault(found[0], []).append(found[1])
    finally:
        os.close(fd)
    return taken, strays


def _request_of(name: str) -> tuple[str, str] | None:
    """``(agent, id)`` of a request file's name; None: not a request's."""
    found = _REQUEST.fullmatch(name)
    return (found[1], found[2]) if found and is_agent_name(found[1]) else None


def write_answer(state_dir: Path, ident: str, answer: Answer) -> None:
    """Write the answer; :class:`NotAFolder` when the answers' folder is a link."""
    folder = real_folder(requests_folder(state_dir) / ANSWERS_FOLDER)
    write_json_atomic(folder / f"{ident}.json", msgspec.to_builtins(answer))


def read_answer(state_dir: Path, ident: str) -> Answer | None:
    """The daemon's answer to ``ident`` (None: not yet), removed once read; one that is
    not an answer (torn, not an object, a field missing or of the wrong type) is a
    refusal that names it, left for :func:`prune_answers`."""
    path = requests_folder(state_dir) / ANSWERS_FOLDER / f"{ident}.json"
    try:
        with path.open("rb") as handle:
            answer = msgspec.json.decode(handle.read(ANSWER_BYTES), type=Answer)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:  # msgspec's errors are ValueErrors
        return Answer("refused", f"the daemon's answer {path} is unreadable ({exc})", time.time())
    path.unlink(missing_ok=True)
    return answer


def prune_answers(state_dir: Path, now: float) -> None:
    """Remove answers nobody read (their command died) after ``ANSWER_KEEP_SECONDS``."""
    folder = requests_folder(state_dir) / ANSWERS_FOLDER
    try:
        entries = list(os.scandir(real_folder(folder)))  # a link: nothing removed there
    except OSError:
        return
    for entry in entries[:MAX_REQUESTS_PER_LOOK]:
        try:
            old = now - entry.stat(follow_symlinks=False).st_mtime > ANSWER_KEEP_SECONDS
            if old and _ANSWER.fullmatch(entry.name):
                os.unlink(entry.path)
        except OSError:
            continue


def not_scheduled(agent: str, scheduled: list[str], known: list[str]) -> str:
    """Why ``agent`` cannot run now: unknown, or known but not scheduled by the daemon."""
    if agent in known:
        return (
            f"{agent} is not scheduled by this daemon: disabled, not in "
            "GENESIS_FP16_PLUGIN_ALLOWLIST, or its plugin did not load (see `genesis-fp16 agents`)"
        )
    return f"unknown agent {agent!r}; this daemon schedules: {', '.join(scheduled) or 'none'}"
