"""Delivery to a real receiver on loopback: signed, keyed by the event id, in order per
agent, retried with a capped backoff through a receiver down for ten (simulated) minutes,
one agent's refused events holding no other agent's, a hung receiver cut by the timeout."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import structlog.testing
from webhook_receiver import RawReceiver, Receiver

from genesis_fp16.events import delivery, posting
from genesis_fp16.events.delivery import Deliverer, DeliveryConfig
from genesis_fp16_infrastructure.agent_folder import outbox

SECRET = b"test-secret"


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    found = Receiver()
    yield found
    found.close()


class Clock:
    """The backoff's clock, moved by the test: ten minutes pass without waiting them."""

    def __init__(self) -> None:
        self.now = 1_000_000.0

    def __call__(self) -> float:
        return self.now


def _record(state: Path, agent: str, count: int) -> list[str]:
    folder = state / "agents" / agent
    return [outbox.record(folder, "promote", {"n": n}) for n in range(count)]


def _deliverer(state: Path, url: str, clock: Clock | None = None, **config: float) -> Deliverer:
    settings = DeliveryConfig(state, (url,), SECRET, **config)  # type: ignore[arg-type]
    if clock is None:
        return Deliverer(lambda: settings)
    return Deliverer(lambda: settings, monotonic=clock, rand=lambda: 1.0)


def test_events_arrive_signed_keyed_and_logged(tmp_path: Path, receiver: Receiver) -> None:
    """Each event arrives once, its body verifiable with the secret (and not with another),
    its id as the idempotency key, in order; its file logs the attempt: delivered, 200."""
    ids = _record(tmp_path, "a", 3)
    deliverer = _deliverer(tmp_path, receiver.url)
    assert deliverer.step() is None
    assert [r.event["id"] for r in receiver.received] == ids
    for got in receiver.received:
        assert got.signed_by(SECRET) and not got.signed_by(b"another")
        assert got.headers[posting.IDEMPOTENCY_HEADER] == got.event["id"]
        assert got.headers[posting.EVENT_HEADER] == "promote" and got.event["agent"] == "a"
    events = outbox.read_events(tmp_path / "agents" / "a")
    assert [e.status for e in events] == ["delivered"] * 3
    assert events[0].attempts[-1].code == 200 and events[0].attempts[-1].error is None
    deliverer.step()
    assert len(receiver.received) == 3  # delivered events are not sent again


def test_a_receiver_down_ten_minutes_gets_every_event_in_order_after(
    tmp_path: Path, receiver: Receiver
) -> None:
    """Down (connections refused) for 600 simulated seconds while two agents' events pile
    up: retries back off (1, 2, 4 ... s, capped at 60 s), so a dozen attempts, not
    hundreds; once up, every event arrives within one capped wait, in order per agent."""
    receiver.down()
    clock = Clock()
    deliverer = _deliverer(tmp_path, receiver.url, clock, backoff_max=60.0)
    ids = {"a": _record(tmp_path, "a", 2), "b": _record(tmp_path, "b", 1)}
    start, gaps = clock.now, []
    while clock.now - start < 600:
        wait = deliverer.step()
        assert wait is not None and wait > 0
        gaps.append(wait)
        clock.now += wait
        ids["a"].append(outbox.record(tmp_path / "agents" / "a", "reject", {}))
    failed = outbox.read_events(tmp_path / "agents" / "a")[0].attempts
    assert [a.status for a in failed] == ["failed"] * len(failed)
    assert "refused" in str(failed[0].error).lower()
    assert 8 <= len(failed) <= 20  # doubling to the cap, then each minute
    assert max(gaps) <= 60.0
    receiver.up()
    clock.now += 60.0  # at most one capped wait after it is back
    deliverer.step()
    got = receiver.events()
    for agent, expected in ids.items():
        assert [e["id"] for e in got if e["agent"] == agent] == expected
    assert not any(e.undelivered for e in outbox.read_events(tmp_path / "agents" / "a"))


def test_one_agents_refused_event_holds_only_that_agent(tmp_path: Path, receiver: Receiver) -> None:
    """The receiver answers 500 to agent a: a's second event waits behind its first (order),
    b's events are delivered in the same pass; a's go once the receiver takes them."""
    receiver.answer = lambda event: 500 if event["agent"] == "a" else 200
    clock = Clock()
    deliverer = _deliverer(tmp_path, receiver.url, clock)
    first_a = _record(tmp_path, "a", 2)
    ids_b = _record(tmp_path, "b", 2)
    deliverer.step()
    assert [e["id"] for e in receiver.events()] == ids_b
    events_a = outbox.read_events(tmp_path / "agents" / "a")
    assert [len(e.attempts) for e in events_a] == [1, 0]  # the second never tried before the first
    assert events_a[0].attempts[0].code == 500
    receiver.answer = lambda event: 200
    clock.now += 2.0
    deliverer.step()
    assert [e["id"] for e in receiver.events()] == ids_b + first_a


def test_a_hung_receiver_is_cut_by_the_timeout(tmp_path: Path, receiver: Receiver) -> None:
    """A receiver that does not answer fails the attempt at the timeout (logged as timed
    out), and the pass goes on; the event is retried later."""
    receiver.delay = 30.0  # released at teardown
    ids = _record(tmp_path, "a", 1)
    deliverer = _deliverer(tmp_path, receiver.url, timeout=0.3)
    assert deliverer.step() is not None  # a retry is due later
    event = outbox.read_events(tmp_path / "agents" / "a")[0]
    assert event.id == ids[0] and event.status == "pending"
    assert "timed out" in str(event.attempts[0].error)


def test_events_without_a_receiver_stay_unsent_and_a_removed_receiver_stops_holding(
    tmp_path: Path, receiver: Receiver
) -> None:
    """No URL configured: events are kept as ``unsent`` (not counted undelivered); a
    pending event whose receiver is unconfigured becomes ``dropped`` for it."""
    _record(tmp_path, "a", 1)
    waiting: dict[str, int] = {}
    none = DeliveryConfig(tmp_path)
    Deliverer(lambda: none, on_pass=lambda a, w, d: waiting.update({a: w})).step()
    assert outbox.read_events(tmp_path / "agents" / "a")[0].status == "unsent"
    assert waiting == {"a": 0}
    receiver.down()
    _record(tmp_path, "a", 1)
    _deliverer(tmp_path, receiver.url).step()
    assert outbox.read_events(tmp_path / "agents" / "a")[1].status == "pending"
    Deliverer(lambda: none, on_pass=lambda a, w, d: waiting.update({a: w})).step()
    assert outbox.read_events(tmp_path / "agents" / "a")[1].status == "dropped"
    assert waiting == {"a": 0}


@pytest.mark.parametrize(
    ("answer", "why"),
    [
        (b"HTTP/1.1 301 Moved\r\nLocation: /elsewhere\r\nContent-Length: 0\r\n\r\n", "HTTP 301"),
        (b"hello, I am not HTTP\r\n\r\n", "hello"),
    ],
    ids=["301", "not-http"],
)
def test_a_redirect_or_a_non_http_answer_is_a_failed_attempt_that_backs_off(
    tmp_path: Path, answer: bytes, why: str
) -> None:
    """A 301 is not followed (one POST, no GET) and not `delivered`; an answer that is
    not HTTP raises nothing out of the pass: both are failed attempts, logged in the
    event's file, and the next one waits for the backoff."""
    server = RawReceiver(answer)
    try:
        (ident,) = _record(tmp_path, "a", 1)
        wait = _deliverer(tmp_path, server.url, Clock()).step()
        assert wait is not None and wait > 0  # backing off, not retried at once
        assert server.lines == ["POST /hook HTTP/1.1"]
        (event,) = outbox.read_events(tmp_path / "agents" / "a")
        assert event.id == ident
        target = (event.targets or {})[server.url]
        assert target.status == "pending" and target.attempts == 1
        assert why in str(event.attempts[-1].error)
    finally:
        server.close()


def test_a_password_in_a_receiver_url_never_reaches_a_log_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A failed delivery to http://user:password@host/ logs the URL with the password
    replaced."""
    port = socket.create_server(("127.0.0.1", 0))
    url = f"http://hooks:s3cret-pass@127.0.0.1:{port.getsockname()[1]}/x"
    port.close()  # refused: a failed attempt, logged
    _record(tmp_path, "a", 1)
    with structlog.testing.capture_logs() as logs:
        _deliverer(tmp_path, url, Clock()).step()
    (failed,) = [entry for entry in logs if entry["event"] == "event not delivered"]
    assert "s3cret-pass" not in repr(logs) and failed["url"].startswith("http://hooks:***@")


TOKEN = "tok-5f0c1d2e9a"  # a receiver's token in its URL's query


def test_a_token_in_a_receiver_urls_query_never_reaches_a_log_line(tmp_path: Path) -> None:
    """Issue 92: a failed delivery to a URL with ?token=... logs it, and the event's file
    names it, with the token replaced as a password is."""
    port = socket.create_server(("127.0.0.1", 0))
    url = f"http://127.0.0.1:{port.getsockname()[1]}/x?team=ml&token={TOKEN}"
    port.close()  # refused: a failed attempt, logged
    folder = tmp_path / "agents" / "a"
    _record(tmp_path, "a", 1)
    with structlog.testing.capture_logs() as logs:
        _deliverer(tmp_path, url, Clock()).step()
    (failed,) = [entry for entry in logs if entry["event"] == "event not delivered"]
    assert TOKEN not in repr(logs) and failed["url"].endswith("/x?team=ml&token=***")
    files = list((folder / "outbox").rglob("*"))
    assert files and not any(TOKEN in f.read_text() for f in files if f.is_file())


def test_a_receiver_named_by_its_shown_url_gets_each_event_once(
    tmp_path: Path, receiver: Receiver
) -> None:
    """The event's file names the receiver with its token replaced, and the token still
    goes with the post: each event arrives once, with it; a file written before (the
    whole URL as its key) is renamed so, its event delivered once."""
    url = f"{receiver.url}?access_token={TOKEN}"
    folder = tmp_path / "agents" / "a"
    first, old = _record(tmp_path, "a", 2)
    outbox.update(folder, old, lambda e: replace(e, targets={url: outbox.Target(status="pending")}))
    deliverer = _deliverer(tmp_path, url)
    assert deliverer.step() is None and deliverer.step() is None
    assert [r.event["id"] for r in receiver.received] == [first, old]
    assert all(r.path == f"/hook?access_token={TOKEN}" for r in receiver.received)
    for event in outbox.read_events(folder):
        assert event.status == "delivered"
        assert list(event.targets or {}) == [f"{receiver.url}?access_token=***"]
    assert not any(TOKEN in f.read_text() for f in (folder / "outbox").rglob("*") if f.is_file())


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("https://h.example/x?token=abc", "https://h.example/x?token=***"),
        (
            "https://h.example/x?a=1&API_KEY=k;sig=s&b=",
            "https://h.example/x?a=1&API_KEY=***;sig=***&b=",
        ),
        (
            "https://u:pw@h.example/x?client_secret=z#f",
            "https://u:***@h.example/x?client_secret=***#f",
        ),
        ("https://h.example/x?team=ml&page=2", "https://h.example/x?team=ml&page=2"),
        ("https://h.example/x?token", "https://h.example/x?token"),
    ],
    ids=["token", "key-and-sig", "password-and-secret", "none", "no-value"],
)
def test_a_secret_looking_query_parameter_is_shown_replaced(url: str, shown: str) -> None:
    """shown_url replaces a password and the value of each query parameter whose name says
    it is a secret (token, key, secret, sig, ...); the rest is kept as written."""
    assert posting.shown_url(url) == shown


def test_every_logged_value_is_cut_to_a_bound(tmp_path: Path) -> None:
    """A receiver URL of 5,000 characters answered with a 3,000-character line that is
    not HTTP: each value of each log line is at most LOG_BOUND (300) characters and a
    count of the rest."""
    server = RawReceiver(b"x" * 3000 + b"\r\n\r\n")
    try:
        url = server.url + "/" + "p" * 5000
        _record(tmp_path, "a", 1)
        with structlog.testing.capture_logs() as logs:
            _deliverer(tmp_path, url, Clock()).step()
        assert any(entry["event"] == "event not delivered" for entry in logs)
        bound = delivery.LOG_BOUND + len("… (1000000 more characters)")
        for entry in logs:
            assert all(len(str(value)) <= bound for value in entry.values()), entry
    finally:
        server.close()


def test_a_slow_receiver_is_cut_by_a_deadline_for_the_whole_post(tmp_path: Path) -> None:
    """A receiver dripping a 200 a byte every 0.2 s (about 9 s in all) never trips a 1 s
    per-read timeout; the 1 s deadline for the whole post cuts it: a failed attempt
    that says so, where it was `delivered` after holding the thread the whole drip."""
    server = RawReceiver(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n", drip=0.2)
    try:
        _record(tmp_path, "a", 1)
        wait = _deliverer(tmp_path, server.url, Clock(), timeout=1.0).step()
        assert wait is not None and wait > 0
        (event,) = outbox.read_events(tmp_path / "agents" / "a")
        assert (event.targets or {})[server.url].status == "pending"
        assert "no whole answer within the 1 s deadline" in str(event.attempts[-1].error)
    finally:
        server.close()
