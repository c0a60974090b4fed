"""A large pool split a window at a time gives what json.loads gives, at any window size,
handing its records out before the file is scanned whole; where the file turns out, at
its end, not to be what they were taken for, it says so, and a read that streams equals
one that reads the file whole."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import genesis_fp16_infrastructure.data.pool_stream as pool_stream
import genesis_fp16_infrastructure.data.sources as sources
from genesis_fp16_infrastructure.data.pool_stream import PoolSplitRefused, split_pool
from genesis_fp16_infrastructure.data.readers import read_trajectories
from genesis_fp16_infrastructure.data.synthetic import generate_pool

# Strings that look like structure: quotes, runs of backslashes, brackets, commas, colons.
_TRICKY = st.text(alphabet='"\\{}[],: ab\n\u00e9\U0001f600', max_size=12)
_VALUE = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | _TRICKY,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_TRICKY, inner, max_size=3),
    max_leaves=8,
)
_POOL = st.fixed_dictionaries(
    {"trajectories": st.dictionaries(_TRICKY, _VALUE, max_size=6)},
    optional={
        "agent_name": _TRICKY,
        "success_threshold": st.floats(0.5, 1.0),
        "notes": st.dictionaries(_TRICKY, _VALUE, max_size=2),
        "history": st.lists(_VALUE, max_size=2),
    },
)


def _split(path: Path, window: int) -> Any:
    """None (not split), the thresholds and entries, or the refusal's reason (a str)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(pool_stream, "WINDOW", window)
        out = split_pool(path)
        if out is None:
            return None
        try:
            return out[0], [(k, json.loads(v)) for window in out[1] for k, v in window]
        except PoolSplitRefused as exc:
            return str(exc)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    pool=_POOL,
    trajectories_last=st.booleans(),
    indent=st.sampled_from([None, 0, 2]),
    ascii_only=st.booleans(),
    window=st.integers(1, 64),
)
def test_the_split_gives_what_json_loads_gives_at_any_window(
    tmp_path: Path,
    pool: dict[str, Any],
    trajectories_last: bool,
    indent: int | None,
    ascii_only: bool,
    window: int,
) -> None:
    """Keys, values and their order, and the header's thresholds, with the windows cut
    anywhere: inside strings, between backslashes, between a backslash and its quote. A
    header after the records that changes their thresholds is refused at the end (the
    records were labelled by the header before them), and only that."""
    if trajectories_last:
        pool = {k: v for k, v in pool.items() if k != "trajectories"} | {
            "trajectories": pool["trajectories"]
        }
    path = tmp_path / "pool.json"
    path.write_text(json.dumps(pool, indent=indent, ensure_ascii=ascii_only), encoding="utf-8")
    got = _split(path, window)
    after = list(pool)[list(pool).index("trajectories") + 1 :]
    if "success_threshold" in after and pool["success_threshold"] != 0.7:
        assert got == "the header after the records changes their thresholds"
        return
    assert got is not None and not isinstance(got, str)
    thresholds, entries = got
    assert thresholds[0] == pool.get("success_threshold", 0.7)
    assert entries == list(json.loads(path.read_text())["trajectories"].items())


_CLOSE = "the trajectories object does not close"
_NOT_KEY_VALUE = "a trajectories entry is not key: value"
# Files the split does not read as a parser does: what it says, at once (None: before
# any record) or at the end of its records (the reason); the whole-document read then
# says what is wrong with the file, or reads it as a parser does.
_REFUSED = [
    ("[1, 2]", None),
    ('{"agent_name": "a"}', None),
    ('{"trajectories": []}', None),
    ('{"success_threshold": 7, "trajectories": {}}', None),
    ('{"trajectories": {"a": {}}', "unbalanced brackets or strings"),
    ('{"trajectories": {"a": {}}}}', "unbalanced brackets or strings"),
    ('{"trajectories": {"a": {}}}}]{', "more closing brackets than opening ones"),
    ('{"trajectories": {"a": "}', _CLOSE),
    ('{"trajectories": {"a" {}}}', "the trajectories object holds no entry, but is not empty"),
    ('{"trajectories": {"a": {}, }}', _NOT_KEY_VALUE),
    ('{"trajectories": {"a": {}, "b"}}', _NOT_KEY_VALUE),
    ('{"trajectories": {"a": {}, b: {}}}', "JSON is malformed: invalid character ..."),
    ('{"trajectories": {"a": {}', _CLOSE),
    ('{"trajectories": {"a": {}}, "x": [}', "unbalanced brackets or strings"),
    ('{"trajectories": {"a": {"n": 1}, "b": {}, "a": {"n": 3}}}', "the key 'a' is given twice"),
    ('{"trajectories": {"a": {}}, "trajectories": {"b": {}}}', "a second trajectories object"),
    ('{"trajectories": {"a": {}}, "success_threshold": 0.9}',
     "the header after the records changes their thresholds"),
    ('{"trajectories": {"a": {}}, "success_threshold": 7}', "1 validation error for ..."),
]  # fmt: skip


@pytest.mark.parametrize(("text", "said"), _REFUSED)
def test_what_the_split_cannot_read_as_a_parser_is_refused(
    tmp_path: Path, text: str, said: str | None
) -> None:
    """Not an object, no trajectories object, a header pydantic refuses: None, before any
    record. Unbalanced, a missing colon or key, a key or a ``trajectories`` given twice,
    a header after the records that changes or breaks them: the split refuses at the end
    of its records, saying why."""
    path = tmp_path / "pool.json"
    path.write_text(text)
    got = _split(path, 5)
    if said is not None and said.endswith("..."):
        assert isinstance(got, str) and got.startswith(said[:-3])
    else:
        assert got == said


@pytest.mark.parametrize(("text", "said"), [case for case in _REFUSED if case[1] is not None])
def test_a_refused_split_is_read_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
    text: str, said: str,
) -> None:  # fmt: skip
    """Whatever the split handed out before it refused is dropped: the read equals the
    whole-document read (a key given twice: its first place, its last value, as a parser
    keeps it), quarantine word for word, and one warning says why."""
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "good.json").write_text(json.dumps(generate_pool(20, seed=1)))
    (tmp_path / "d" / "pool.json").write_text(text)

    def read(name: str) -> tuple[Any, ...]:
        quarantine = tmp_path / f"{name}.jsonl"
        data = read_trajectories(tmp_path / "d", quarantine)
        lines = quarantine.read_text() if quarantine.exists() else ""
        return data.pool.entries, data.quarantined, lines

    whole = read("whole")
    monkeypatch.setattr(sources, "STREAM_ABOVE", 0)
    monkeypatch.setattr(pool_stream, "WINDOW", 5)
    with caplog.at_level("WARNING"):
        assert read("streamed") == (whole[0], whole[1], whole[2].replace("whole", "streamed"))
    assert f"cannot be split a window at a time ({said.removesuffix('...')}" in caplog.text


def test_records_are_handed_out_before_the_file_is_scanned_whole(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first record comes after the windows that hold it, not after the last one:
    a read shares the records while the rest of the file is scanned."""
    pool = generate_pool(200, seed=3)
    path = tmp_path / "pool.json"
    path.write_text(json.dumps(pool))
    monkeypatch.setattr(pool_stream, "WINDOW", 4096)
    scanned: list[int] = []
    more = pool_stream._Stream.more
    monkeypatch.setattr(pool_stream._Stream, "more", lambda self: scanned.append(1) or more(self))
    split = split_pool(path)
    assert split is not None
    first = next(split[1])
    assert first[0][0] == next(iter(pool["trajectories"]))
    windows = -(-path.stat().st_size // 4096)
    assert len(scanned) <= 3 < windows
    assert sum(len(window) for window in split[1]) + len(first) == len(pool["trajectories"])
    assert len(scanned) == windows + 1  # and the last read, empty, that ends the file


def test_a_streamed_read_equals_a_whole_read(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Generated records and bad ones (a record not JSON-valid for pydantic, an empty
    key, a list for a record): examples, lineage, counts and quarantine word for word."""
    pool = generate_pool(300, seed=4)
    pool["trajectories"].update({"bad": {"generation": -1}, "": {"status": "success"}, "l": [1]})
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "pool.json").write_text(json.dumps(pool))

    def read(name: str) -> tuple[Any, ...]:
        quarantine = tmp_path / f"{name}.jsonl"
        data = read_trajectories(tmp_path / "d", quarantine)
        return (
            [(e.trajectory_id, e.attempt, e.label) for e in data.examples],
            data.pool.entries,
            (data.quarantined, data.duplicates, data.unlabelled),
            quarantine.read_text(),
        )

    whole = read("whole")
    monkeypatch.setattr(sources, "STREAM_ABOVE", 0)
    monkeypatch.setattr(pool_stream, "WINDOW", 4096)
    split_calls = []
    monkeypatch.setattr(sources, "split_pool", lambda f: split_calls.append(f) or split_pool(f))
    assert read("streamed") == whole
    assert split_calls and whole[2][0] == 3


@pytest.mark.parametrize("carried", [0, 1, 2])
def test_a_window_that_begins_with_a_quote_after_carried_backslashes(carried: int) -> None:
    """A window whose first byte is a quote, inside a string, after the last window ended
    with 0, 1 or 2 backslashes: the quote is escaped only after an odd run, and an escaped
    quote mid-window stays escaped (no stand-in byte for "no byte before", any numpy)."""
    scan = pool_stream._Scan()
    scan.in_string, scan.backslashes = True, carried
    data = np.frombuffer(b'"a\\"b', dtype=np.uint8)  # quotes at 0 and 3, one \ before 3
    quotes = np.flatnonzero(data == ord('"'))
    assert scan._escaped(data, quotes).tolist() == [carried % 2 == 1, True]
    scan.window(data, base=100)
    assert scan.in_string == (carried % 2 == 1)  # only an unescaped first quote closes it
    assert scan.backslashes == 0


@pytest.mark.parametrize("key", ["a", "a\\", 'a"', 'a\\"'])
def test_an_escape_at_the_end_of_the_last_window(tmp_path: Path, key: str) -> None:
    """The key's backslashes end one window and the quote after them begins the next
    (0, 2, 1 and 3 backslashes in the file): the split reads the key as json.loads does."""
    text = json.dumps({"trajectories": {key: {"n": 1}, "b": {"n": 2}}})
    path = tmp_path / "pool.json"
    path.write_text(text)
    start = text.index('"', len('{"trajectories": {"a'))  # the first quote after the 'a'
    run = len(text[:start]) - len(text[:start].rstrip("\\"))
    assert run == {"a": 0, "a\\": 2, 'a"': 1, 'a\\"': 3}[key]
    assert _split(path, start) == ((0.7, 0.3), [(key, {"n": 1}), ("b", {"n": 2})])


def test_a_key_given_twice_keeps_its_first_place_and_last_value(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As json.loads reads it, streamed or not: the split refuses the file at its end and
    the read whole keeps the key's first place and its last record."""
    records = list(generate_pool(3, seed=2)["trajectories"].values())
    named = zip(records, "aba", (0.1, 0.5, 0.9), strict=True)
    first, other, last = (
        json.dumps({**r, "trajectory_id": tid, "success_score": score}) for r, tid, score in named
    )
    (tmp_path / "d").mkdir()
    text = f'{{"trajectories": {{"a": {first}, "b": {other}, "a": {last}}}}}'
    (tmp_path / "d" / "pool.json").write_text(text)
    monkeypatch.setattr(sources, "STREAM_ABOVE", 0)
    monkeypatch.setattr(pool_stream, "WINDOW", 64)
    data = read_trajectories(tmp_path / "d", tmp_path / "q.jsonl")
    assert list(data.pool.entries) == ["a", "b"]
    assert data.pool.scores == {"a": 0.9, "b": 0.5}


def test_a_pool_removed_while_split_is_read_through_its_handle(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The split reads on through the file it opened: a pool removed (or replaced by
    its writer's rename) after its first window gives every record it held."""
    pool = generate_pool(60, seed=5)
    path = tmp_path / "pool.json"
    path.write_text(json.dumps(pool))
    monkeypatch.setattr(pool_stream, "WINDOW", 4096)
    split = split_pool(path)
    assert split is not None
    first = next(split[1])
    path.unlink()
    rest = [entry for window in split[1] for entry in window]
    assert [key for key, _ in first + rest] == list(pool["trajectories"])
    assert json.loads(rest[-1][1]) == list(pool["trajectories"].values())[-1]
