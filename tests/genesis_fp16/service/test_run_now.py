"""The run-now files: a request taken once, hostile names removed, answers read once and
pruned when nobody reads them."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from genesis_fp16.service.run_now import (
    ANSWER_KEEP_SECONDS,
    ANSWERS_FOLDER,
    MAX_REQUESTS_PER_LOOK,
    Answer,
    NotAFolder,
    new_request,
    prune_answers,
    read_answer,
    requests_folder,
    take_requests,
    withdraw,
    write_answer,
)


def test_a_request_is_taken_once(tmp_path: Path) -> None:
    """Two requests of one agent and one of another: one look takes all three and removes
    their files; the next look finds nothing."""
    first = new_request(tmp_path, "se_darwin")
    second = new_request(tmp_path, "se_darwin")
    other = new_request(tmp_path, "rlhf_ppo")
    taken, strays = take_requests(tmp_path)
    assert taken == {"se_darwin": sorted([first, second]), "rlhf_ppo": [other]}
    assert strays == []
    assert take_requests(tmp_path) == ({}, [])


def test_no_folder_is_no_request(tmp_path: Path) -> None:
    """A state folder nobody asked in: nothing taken, nothing created."""
    assert take_requests(tmp_path) == ({}, [])
    assert not requests_folder(tmp_path).exists()


def test_names_that_are_no_request_are_removed_and_named(tmp_path: Path) -> None:
    """A path, a newline, a capital, a dot-name: removed, named escaped, never taken."""
    folder = requests_folder(tmp_path)
    (folder / ANSWERS_FOLDER).mkdir(parents=True)
    hostile = ["..@1-deadbeef.json", "a\n@1-deadbeef.json", "SE@1-deadbeef.json", ".x"]
    for name in hostile:
        (folder / name).write_text("")
    (folder / "a_folder@1-deadbeef.json").mkdir()  # not removable as a file: left, named
    taken, strays = take_requests(tmp_path)
    assert taken == {}
    assert sorted(strays) == sorted([*map(repr, hostile), repr("a_folder@1-deadbeef.json")])
    left = sorted(p.name for p in folder.iterdir())
    assert left == sorted([ANSWERS_FOLDER, "a_folder@1-deadbeef.json"])


def test_a_withdrawn_request_is_not_taken(tmp_path: Path) -> None:
    """The command's withdrawal wins when it comes first; after a look it finds nothing."""
    ident = new_request(tmp_path, "se_darwin")
    assert withdraw(tmp_path, "se_darwin", ident)
    assert take_requests(tmp_path) == ({}, [])
    assert not withdraw(tmp_path, "se_darwin", ident)


def test_an_answer_is_read_once(tmp_path: Path) -> None:
    """The daemon's answer reads back as written, and is gone after the read."""
    ident = new_request(tmp_path, "se_darwin")
    assert read_answer(tmp_path, ident) is None
    write_answer(tmp_path, ident, Answer("refused", "se_darwin is running now", 12.5))
    assert read_answer(tmp_path, ident) == Answer("refused", "se_darwin is running now", 12.5)
    assert read_answer(tmp_path, ident) is None


def test_an_unreadable_answer_is_a_refusal_that_says_so(tmp_path: Path) -> None:
    """Torn JSON or a list where an object belongs: refused, naming the file; no traceback."""
    answers = requests_folder(tmp_path) / ANSWERS_FOLDER
    answers.mkdir(parents=True)
    (answers / "1-deadbeef.json").write_text('{"outcome": "star')
    (answers / "2-deadbeef.json").write_text("[1, 2]")
    torn, listed = read_answer(tmp_path, "1-deadbeef"), read_answer(tmp_path, "2-deadbeef")
    assert torn is not None and torn.outcome == "refused" and "unreadable" in torn.detail
    assert listed is not None and listed.outcome == "refused" and "unreadable" in listed.detail
    assert "Expected `object`, got `array`" in listed.detail


def test_answers_nobody_read_are_pruned_when_old(tmp_path: Path) -> None:
    """An answer older than ANSWER_KEEP_SECONDS (its command died) is removed; a fresh
    one, and a file that is no answer, stay."""
    old, fresh = new_request(tmp_path, "se_darwin"), new_request(tmp_path, "se_darwin")
    for ident in (old, fresh):
        write_answer(tmp_path, ident, Answer("started", "starts its run now", 1.0))
    answers = requests_folder(tmp_path) / ANSWERS_FOLDER
    (answers / "notes.txt").write_text("")
    now = time.time()
    past = now - ANSWER_KEEP_SECONDS - 60
    for name in (f"{old}.json", "notes.txt"):
        os.utime(answers / name, (past, past))
    prune_answers(tmp_path, now)
    assert sorted(p.name for p in answers.iterdir()) == sorted([f"{fresh}.json", "notes.txt"])


def test_a_linked_folder_is_refused_and_nothing_there_is_touched(tmp_path: Path) -> None:
    """run_now/ or answers/ as a link to another folder: taking, asking, answering and
    pruning are refused (NotAFolder) and that folder's files all stay."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    old = time.time() - 2 * ANSWER_KEEP_SECONDS
    for name in ("keep.txt", "se_darwin@1-deadbeef.json", "1-deadbeef.json"):
        (elsewhere / name).write_text("mine")
        os.utime(elsewhere / name, (old, old))
    state = tmp_path / "state"
    state.mkdir()
    requests_folder(state).symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(NotAFolder, match="is a link"):
        take_requests(state)
    with pytest.raises(NotAFolder, match="is a link"):
        new_request(state, "se_darwin")
    requests_folder(state).unlink()
    (requests_folder(state)).mkdir()
    (requests_folder(state) / ANSWERS_FOLDER).symlink_to(elsewhere, target_is_directory=True)
    with pytest.raises(NotAFolder):
        write_answer(state, "2-deadbeef", Answer("started", "x", 0.0))
    prune_answers(state, time.time())
    assert sorted(p.name for p in elsewhere.iterdir()) == [
        "1-deadbeef.json",
        "keep.txt",
        "se_darwin@1-deadbeef.json",
    ]


def test_thousands_of_strays_never_delay_a_request(tmp_path: Path) -> None:
    """150 stray folders and 2,000 stray files that sort first: the first look takes the
    request, and each look removes at most MAX_REQUESTS_PER_LOOK strays."""
    folder = requests_folder(tmp_path)
    (folder / ANSWERS_FOLDER).mkdir(parents=True)
    for index in range(150):
        (folder / f"a{index:03d}").mkdir()
    for index in range(2000):
        (folder / f"b{index:04d}").write_text("")
    ident = new_request(tmp_path, "se_darwin")
    taken, strays = take_requests(tmp_path)
    assert taken == {"se_darwin": [ident]}
    assert len(strays) == MAX_REQUESTS_PER_LOOK  # the first folders, said by name
    assert len(os.listdir(folder)) == 1 + 150 + 2000  # answers/, folders, files: untouched
