"""Helpers for the status tests: a hostile agent seeded in a state folder, the page's
rows read back out of its HTML (or a browser's DOM), and the text's rows out of its lines."""

from __future__ import annotations

import json
import re
import struct
import zlib
from dataclasses import replace
from html.parser import HTMLParser
from pathlib import Path

import numpy as np

from genesis_fp16_infrastructure.agent_folder.run_history import append_run
from genesis_fp16_infrastructure.agent_folder.run_records import GateMark, RunEntry
from genesis_fp16_infrastructure.folder import AgentFolder

# An agent name cannot carry markup ([a-z][a-z0-9_]{0,63}: genesis_fp16/config/agent_names.py);
# a folder beside the agents' named with some is no agent's, and the report leaves it out.
# Headless Chromium with nothing of its own on the network: the page's tests' browser.
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
HOSTILE_AGENT = "hostile_agent"
STRAY_FOLDER = "<img src=x onerror=alert(1)>"
HOSTILE_REASON = '<script>alert(1)</script> & "quoted"'
HOSTILE_MODEL = "<b>bold</b>"
Sections = list[tuple[str, list[tuple[str, str]]]]


def seed_hostile_agent(state_dir: Path) -> Path:
    """An agent folder with a hostile name, a last run with a hostile reason and a served
    pointer with a hostile id, live figures and a pin (fields the pointer may carry)."""
    root = state_dir / "agents" / HOSTILE_AGENT
    (root / "checkpoints").mkdir(parents=True)
    (state_dir / "agents" / STRAY_FOLDER).mkdir()
    (root / "last_run.json").write_text(
        json.dumps(
            {
                "version": 1,
                "outcome": "failed",
                "precision": None,
                "precision_requested": None,
                "finished_at": 1_700_000_000.0,
                "duration_seconds": 2.0,
                "reason": HOSTILE_REASON,
                "source": "daemon",
                "steps": 0,
            }
        )
    )
    served = {
        "id": HOSTILE_MODEL,
        "checkpoint": "candidates/x/ckpt-0000000001.pt",
        "precision": "fp16",
        "how": "promoted",
        "served_at": "2026-11-25T06:00:00Z",
        "scores": {"auc": 0.9113, "log_loss": 0.31},
        "live": {"auc": 0.87, "window": {"records": 412}},
    }
    rollback = {"seq": 1, "kind": "rollback", "at_s": 1_700_000_100.0, "served": HOSTILE_MODEL,
                "dropped": HOSTILE_REASON, "reason": HOSTILE_REASON}  # fmt: skip
    pin = {"by": HOSTILE_REASON, "at": "2026-11-25T07:00:00Z"}
    pointer = {"version": 1, "served": served, "history": [], "pinned": pin, "sequence": 1,
               "journal": [rollback]}  # fmt: skip
    (root / "checkpoints" / "served.json").write_text(json.dumps(pointer))
    _seed_hostile_history(AgentFolder.at(root))
    return root


def _seed_hostile_history(folder: AgentFolder) -> None:
    """A run in the history with a hostile reason, candidate id and drift warning."""
    run = replace(
        RunEntry.of_error("failed", HOSTILE_REASON, 2.0, "daemon").run,
        precision_reason=HOSTILE_REASON,
    )
    scores = ({"auc": 0.6}, {"auc": 0.7})
    gate = GateMark("rejected", HOSTILE_REASON, "auc", *scores, HOSTILE_MODEL, HOSTILE_MODEL)
    append_run(folder.root, RunEntry(replace(run, finished_at=1_700_000_000.0), gate=gate,
                               drift=HOSTILE_REASON))  # fmt: skip


class _Rows(HTMLParser):
    """Collects each section's ``h2`` title and its status table's (th, td) rows (the
    runs table below them is not the text's)."""

    def __init__(self) -> None:
        super().__init__()
        self.sections: Sections = []
        self.tags: list[str] = []  # every element seen: an escaped value adds none
        self._cell: str | None = None
        self._text = ""
        self._row: list[str] = []
        self._in_status = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        if tag == "table":
            self._in_status = ("class", "status") in attrs
        if tag == "h2" or (self._in_status and tag in ("th", "td")):
            self._cell, self._text = tag, ""

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self._in_status = False
        if tag != self._cell:
            return
        self._cell = None
        if tag == "h2":
            self.sections.append((self._text, []))
        else:
            self._row.append(self._text)
            if tag == "td":
                self.sections[-1][1].append((self._row[0], self._row[1]))
                self._row = []

    def handle_data(self, data: str) -> None:
        if self._cell is not None:
            self._text += data


def page_rows(document: str) -> tuple[Sections, list[str]]:
    """The page's sections (title, rows) and the names of every element in it."""
    parser = _Rows()
    parser.feed(document)
    parser.close()
    return parser.sections, parser.tags


def text_rows(text: str) -> Sections:
    """``genesis-fp16 status``'s sections: a title line, then ``  label: value`` lines."""
    sections: Sections = []
    for line in text.splitlines():
        if not line.startswith("  "):
            sections.append((line, []))
            continue
        label, _, value = line.strip().partition(":")
        sections[-1][1].append((label, value.strip()))
    return sections


_RELATIVE = re.compile(r" \((in \d[^)]*|\d[^)]* ago)\)")


def steady(sections: Sections) -> Sections:
    """The rows without what moves between two reads: relative times and the uptime."""
    return [
        (title, [(label, _RELATIVE.sub("", value)) for label, value in rows if label != "up"])
        for title, rows in sections
    ]


def png_pixels(path: Path) -> np.ndarray:
    """A PNG screenshot's pixels as an (height, width, channels) uint8 array: the
    8-bit, non-interlaced RGB or RGBA that Chromium writes, its row filters undone."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path}: not a PNG"
    pos, idat, header = 8, [], b""
    while pos < len(data):
        (size,) = struct.unpack(">I", data[pos : pos + 4])
        kind, body = data[pos + 4 : pos + 8], data[pos + 8 : pos + 8 + size]
        header = body if kind == b"IHDR" else header
        idat += [body] if kind == b"IDAT" else []
        pos += 12 + size
    width, height, depth, colour, _, _, interlace = struct.unpack(">IIBBBBB", header)
    assert (depth, interlace, colour in (2, 6)) == (8, 0, True), f"{path}: an unusual PNG"
    channels = 3 if colour == 2 else 4
    raw = np.frombuffer(zlib.decompress(b"".join(idat)), np.uint8)
    rows = raw.reshape(height, width * channels + 1)
    out = np.zeros((height, width * channels), np.uint8)
    previous = np.zeros(width * channels, np.uint8)
    for index in range(height):
        out[index] = _unfilter(int(rows[index, 0]), rows[index, 1:], previous, channels)
        previous = out[index]
    return out.reshape(height, width, channels)


def _unfilter(kind: int, row: np.ndarray, up: np.ndarray, bpp: int) -> np.ndarray:
    """One row of PNG filter ``kind`` (None, Sub, Up, Average, Paeth) undone."""
    if kind == 0:
        return row
    if kind == 2:
        return row + up  # uint8: wraps modulo 256, as PNG's arithmetic
    if kind == 1:  # Sub: each byte adds the one bpp before it, a running sum per channel
        lanes = row.reshape(-1, bpp).astype(np.uint32).cumsum(axis=0) % 256
        return lanes.astype(np.uint8).reshape(-1)
    line, above = row.tolist(), up.tolist()
    done = [0] * len(line)
    for i, value in enumerate(line):
        left = done[i - bpp] if i >= bpp else 0
        corner = above[i - bpp] if i >= bpp else 0
        if kind == 3:
            done[i] = (value + (left + above[i]) // 2) & 255
            continue
        p = left + above[i] - corner
        pa, pb, pc = abs(p - left), abs(p - above[i]), abs(p - corner)
        best = left if pa <= pb and pa <= pc else above[i] if pb <= pc else corner
        done[i] = (value + best) & 255
    return np.array(done, np.uint8)


def colour_count(pixels: np.ndarray, colour: str) -> int:
    """How many pixels are exactly ``colour`` (``#rrggbb``)."""
    rgb = [int(colour[i : i + 2], 16) for i in (1, 3, 5)]
    return int((pixels[..., :3] == np.array(rgb, np.uint8)).all(axis=-1).sum())
