"""The served model as a judged run sees it (:class:`Served`): its pointer and checkpoint,
its losses on the records the run needs, every current record, the ids it knew and those
it trained on (its checkpoint's list: ``judging.trained_ids``); and
:func:`held_out_check`, whether a candidate's list lets it be judged. Its losses are the
plugin's scoring of a private copy of its checkpoint (``judging.scoring_copy.losses_of``,
issue 69), as every model the run scores.
"""

from __future__ import annotations

import itertools
import logging
import time
from collections.abc import Collection, Iterator, Sequence
from dataclasses import replace
from functools import cached_property
from pathlib import Path
from typing import TypeVar

import numpy as np

from genesis_fp16_infrastructure.agent_folder.layout import QUARANTINE_LOG
from genesis_fp16_infrastructure.agent_folder.lifecycle_records import ServedEntry
from genesis_fp16_infrastructure.agent_folder.pointer import ServedPointer, checkpoint_of
from genesis_fp16_infrastructure.agent_folder.transaction import (
    Committed,
    Transaction,
    transaction,
)
from genesis_fp16_infrastructure.contract.judging import (
    JudgedPlugin,
    ListsRecords,
    records_are_training_data,
)
from genesis_fp16_infrastructure.contract.listed_rows import at_rows
from genesis_fp16_infrastructure.contract.plugin_api import TrainRequestError
from genesis_fp16_infrastructure.contract.record_losses import (
    RecordIds,
    RecordLosses,
    RecordLossesError,
)
from genesis_fp16_infrastructure.contract.split import HELD_OUT, ScoreOnly
from genesis_fp16_infrastructure.contract.train_request import TrainRequest
from genesis_fp16_infrastructure.data import schema
from genesis_fp16_infrastructure.errors import ServedPointerError
from genesis_fp16_infrastructure.judging import stores
from genesis_fp16_infrastructure.judging.scoring_copy import losses_of
from genesis_fp16_infrastructure.judging.trained_ids import (
    TrainedIdsError,
    named_or_none,
    trained_ids,
)
from genesis_fp16_infrastructure.training import CheckpointManager
from genesis_fp16_infrastructure.training.checkpoint_load import (
    reusing_loads,
)

T = TypeVar("T")
LISTED = "listed ids"  # id_lookups' name (listed_known's, ranked's) of the listing's ids
logger = logging.getLogger(__name__)


class Served:
    """The served model as this run sees it: pointer, checkpoint, losses, known ids. The
    pointer is ``committed``, as a transaction of this run left it (the watch's rollback:
    no file read), else the one the job's plan read (``request.snapshot``: a run's child
    opens no state file to find it), else read in the run's first transaction
    (:func:`_pointer`)."""

    given_asked: bool | None = None  # set by a scoring that asked by rows (_scored)
    _asked_rows: np.ndarray | None = None  # and its rows (``asked.at``), as an array
    _listed_held: np.ndarray | None = None  # per listed record, whether it is held out

    def __init__(
        self,
        plugin: JudgedPlugin,
        request: TrainRequest,
        committed: Committed | None = None,
    ) -> None:
        folder = Path(request.checkpoint_dir)
        try:
            self.pointer: ServedPointer | None = (
                _pointer(request) if committed is None else committed.after
            )
            self.checkpoint = None if self.pointer is None else checkpoint_of(folder, self.pointer)
        except ServedPointerError as exc:
            raise TrainRequestError(str(exc).replace("AGENT", request.agent)) from None
        self.plugin = plugin
        self.losses: RecordLosses | None = None
        # Every current record, as the plugin lists them (ListsRecords), else as scored.
        self.records: RecordLosses | RecordIds = RecordIds(())
        self.known: np.ndarray | None = None
        # The sorted id hashes of the records its checkpoint says it trained on (None:
        # it names none).
        self.named: np.ndarray | None = None
        # Seconds of the plugin's listing, the run's first read of its data (run._phases).
        self.read_seconds = 0.0
        # What its scoring asked for by rows of the listing (ScoreOnly.of_rows), if it did,
        # and whether it was given exactly those records, in that order (None: not known).
        self.asked: ScoreOnly | None = None
        if self.checkpoint is not None:
            # The run's first read of the data: the plugin keeps what it quarantines (a run
            # that takes no step reads nothing else; its count is the run's).
            kept = request.quarantine_path or QUARANTINE_LOG.at(folder)
            reading = replace(request, quarantine_path=kept)
            with reusing_loads():  # the checkpoint unpickled once for both
                # A list it cannot read (served before the judged run refused one) is
                # said in one warning and taken as naming none: the records it knew
                # stand for it, else every record.
                who = f"{request.agent}: served model {self.id}"
                self.named = named_or_none(self.checkpoint, who)
                self.losses, self.records = self._scored(plugin, request, reading)

    def _scored(
        self, plugin: JudgedPlugin, request: TrainRequest, reading: TrainRequest
    ) -> tuple[RecordLosses, RecordLosses | RecordIds]:
        """Its losses on the records the run needs, and every current record. A plugin
        that lists them (ListsRecords; then the run's first read is the listing's) is
        asked for the held-out ones and those the model did not know (the gate's and the
        watch's) alone, unless it knew them all (an up-to-date run reports its loss on
        all); any other scores every one. The ids it knew are read here, with the
        listing's lookup among them (``stores.read_known``)."""
        assert self.checkpoint is not None
        try:  # a listing that cannot be made refuses the run in one line, as a scoring would
            started = time.monotonic()
            listed = plugin.record_ids(reading) if isinstance(plugin, ListsRecords) else None
            self.read_seconds = time.monotonic() - started if listed is not None else 0.0
            if listed is not None and not isinstance(listed, RecordIds):
                raise RecordLossesError(
                    f"record_ids returned a {type(listed).__name__}, not RecordIds or None"
                )
            if listed is not None:  # checked again here, on a copy of its own, as losses are
                listed = RecordIds.copy_of(listed)
        except (OSError, ValueError) as exc:
            raise TrainRequestError(f"{reading.agent}: cannot list its records: {exc}") from None
        hashes = None if listed is None else listed.id_hashes
        # The ids it knew, and the listing's ids looked up among them, in one ask of the
        # store: the last run's answer for its records taken where it holds (checked) and
        # the new ones searched alone (a grown pool's): ``knew`` is this one's (the data
        # check's).
        budget, at = request.keep_in_memory_bytes, None if hashes is None else (LISTED, hashes)
        self.known, knew = stores.read_known(self.checkpoint.parent, budget, at)
        new = None
        if knew is not None:
            self.knew, new = knew, ~knew
        if listed is None or hashes is None or new is None or not new.any():
            losses = losses_of(plugin, self.checkpoint, reading if listed is None else request)
            return losses, losses if listed is None else listed
        self._listed_held = HELD_OUT.of_hashes(hashes)  # drawn once: the gate's are these
        rows = np.flatnonzero(self._listed_held | new)
        # Asked by their rows in the listing: a plugin's rows of the same ids need no lookup
        self.asked = ScoreOnly.of_rows(listed.ids, rows)
        self._asked_rows = rows
        losses = losses_of(plugin, self.checkpoint, request, self.asked)
        # Whether it was given those records alone, in that order: by its rows where it
        # scored them as rows of this listing (no tuple of the ~20,000 ids asked at 100,000
        # records), else by its ids. Then their hashes are the listing's at those rows
        # (the gate's records are asked by rows: judged_asked, no second compare).
        given = losses.listed_at(listed.ids, rows)
        if given is None:
            given = losses.ids == at_rows(listed.ids, rows.tolist())
        if given:
            taken = hashes[rows]
            taken.flags.writeable = False
            vars(losses).setdefault("id_hashes", taken)
        self.given_asked = given
        return losses, listed

    @cached_property
    def knew(self) -> np.ndarray:
        """Per current record (``records``), whether it knew it (none, when it keeps no
        list): its listing's, worked out with its scoring (:meth:`_scored`)."""
        if self.known is None:
            return np.zeros(len(self.records.ids), dtype=bool)
        return schema.known(self.records.id_hashes, self.known)

    @cached_property
    def judged(self) -> RecordLosses:
        """Its ``losses`` on the records the gate judges on when judging on held-out
        records (:func:`held_out_unknown`): taken once, for their ids and the gate."""
        assert self.losses is not None
        return self.losses.take(self._judged_rows)

    @cached_property
    def _judged_rows(self) -> np.ndarray:
        assert self.losses is not None
        return held_out_unknown(self, self.losses)

    @property
    def judged_asked(self) -> ScoreOnly | tuple[str, ...]:
        """:attr:`judged`'s records, for the candidate's scoring: by their rows in the
        listing where :meth:`rows_asked` can name them so, else their ids."""
        asked = None if self.losses is None else self.rows_asked(self._judged_rows)
        return self.judged.ids if asked is None else asked

    def rows_asked(self, rows: np.ndarray) -> ScoreOnly | None:
        """The records of :attr:`losses` at ``rows`` (ascending), for another model's
        scoring (the gate's candidate, the watch's predecessor), by their rows in the
        listing: where its own scoring asked by rows and was given those records alone, in
        that order (a plugin's rows of the same ids then need no lookup; by ids, a plugin
        finds them with a set lookup of every listed id, 41 ms at 1,000,000 records).
        None: not so (ask by their ids). Whether it was given those alone is
        :meth:`_scored`'s compare (``given_asked``), else made here (a tuple of the asked
        ids, ~20,000 at 100,000 records)."""
        asked, losses = self.asked, self.losses  # its ids read where returned alone
        if asked is None or asked.among is None or asked.at is None or losses is None:
            return None
        given = self.given_asked
        if given is None:
            given = losses.ids == at_rows(asked.among, asked.at.tolist())
        if not given:  # it scored more
            return None
        at = asked.at if self._asked_rows is None else self._asked_rows
        return ScoreOnly.of_rows(asked.among, at[rows])

    @cached_property
    def scored_knew(self) -> np.ndarray | None:
        """Per record of ``losses``, whether it knew it: its listing's lookup (``knew``,
        per listing row) at the rows its scoring asked for, where it was given exactly
        those records, in that order (``given_asked``); None: not known so (look them up
        in ``known``). No search of the known ids again (the watch's and the gate's)."""
        rows, knew = self._asked_rows, vars(self).get("knew")
        if rows is None or knew is None or not self.given_asked or self.losses is None:
            return None
        # Counted by a column's array: a record of rows of the listing takes no ids to
        # count them, and keeps its columns as arrays (no tuple of ~20,000 floats made)
        if len(rows) != len(self.losses.column_array()) or len(knew) != len(self.records.ids):
            return None  # not the listing its rows are of
        return np.asarray(knew[rows])

    def held_of(self, losses: RecordLosses) -> np.ndarray:
        """Per record of ``losses``, whether it is held out: where they are its own scored
        records, given exactly as asked (``given_asked``), its listing's draw at the rows
        asked (drawn once a run); else drawn of their hashes."""
        rows, held = self._asked_rows, self._listed_held
        own = losses is self.losses and self.given_asked and rows is not None
        if own and held is not None and len(held) == len(self.records.ids):
            assert rows is not None
            if len(rows) == len(losses.column_array()):  # counted so, as scored_knew counts
                return held[rows]
        return HELD_OUT.of_hashes(losses.id_hashes)

    @property
    def judged_knew(self) -> np.ndarray | None:
        """Per record of :attr:`judged`, whether it knew it (:attr:`scored_knew` there)."""
        scored = self.scored_knew
        return None if scored is None else scored[self._judged_rows]

    @cached_property
    def names_held_out(self) -> bool:
        """Whether a record its checkpoint names (``named``) is held out: one served
        through the gate names none (:func:`held_out_check`), an older or adopted one may."""
        return self.named is not None and bool(HELD_OUT.of_hashes(self.named).any())

    @property
    def trained(self) -> np.ndarray | None:
        """The records it may have trained on: those it names, else every one it knew;
        None: unknown, every record may have been."""
        return self.known if self.named is None else self.named

    @property
    def id(self) -> str | None:
        return None if self.pointer is None else str(self.pointer.served.id)


class KnownSegments(Collection[str]):
    """The distinct ``segments`` of the records where ``knew``, read as they are asked
    for: ``name in`` it reads the records in order, in chunks that double, until one it
    knew has that segment (a grown pool's segments are all among its first records: a
    few hundred read, not every one of 100,000, where a set of them all took ~1.3 ms);
    iterated or counted, all are read. The gate asks whether each segment it judges is
    one (``gate.Segments.of``).

    >>> known = KnownSegments(("a", "b", "a", "c"), np.array([True, True, False, False]))
    >>> "a" in known, "c" in known, sorted(known), len(known)
    (True, False, ['a', 'b'], 2)
    """

    def __init__(self, segments: Sequence[str], knew: np.ndarray) -> None:
        if len(knew) != len(segments):
            raise ValueError(f"{len(knew)} flags for {len(segments)} segments")
        self._segments, self._knew = segments, knew
        self._found: set[str] = set()
        self.read = 0  # the records read so far
        self._chunk = 256

    def _more(self) -> bool:
        """The next chunk of records read; False: none was left."""
        start = self.read
        if start >= len(self._segments):
            return False
        end = min(start + self._chunk, len(self._segments))
        flags = self._knew[start:end].tolist()
        self._found.update(itertools.compress(self._segments[start:end], flags))
        self.read, self._chunk = end, self._chunk * 2
        return True

    def __contains__(self, name: object) -> bool:
        while name not in self._found:
            if not self._more():
                return False
        return True

    def __iter__(self) -> Iterator[str]:
        while self._more():
            pass
        return iter(self._found)

    def __len__(self) -> int:
        while self._more():
            pass
        return len(self._found)


def _pointer(request: TrainRequest) -> ServedPointer | None:
    """The served model's pointer as the run starts: the plan's (``request.snapshot``),
    else read in one transaction that first settles what a writer killed midway left (the
    run reads its candidates after), adopting a folder from before the pointer (None:
    nothing to serve yet). ``ServedPointerError`` when it cannot be followed."""
    folder, snapshot = Path(request.checkpoint_dir), request.snapshot
    if snapshot is not None:
        if snapshot.pointer_error is not None:
            raise ServedPointerError(snapshot.pointer_error)
        if snapshot.pointer is not None:
            return snapshot.pointer
    with transaction(folder) as tx:
        return tx.before or adopt(folder, tx)


def adopt(folder: Path, tx: Transaction) -> ServedPointer | None:
    """A checkpoint folder written before the pointer existed: its newest valid
    checkpoint is what was served, and becomes the pointer's (staged in ``tx``; logged),
    so that no upgrade leaves the prediction API without a model while the first
    candidate trains; None when it holds none."""
    found = CheckpointManager(folder).load_latest() if folder.is_dir() else None
    if found is None:
        return None
    path = found[1]
    tx.serve(ServedEntry(id=f"adopted-{path.stem}", checkpoint=path.name), "adopted")
    logger.warning("no served.json in %s: serving its newest checkpoint %s", folder, path)
    return tx.pointer


def held_out_unknown(served: Served, losses: RecordLosses) -> np.ndarray:
    """Per record of ``losses``, whether it is held out and the served model did not
    train on it (module docstring)."""
    ids = losses.id_hashes
    keep = served.held_of(losses)
    # None: it may have trained on any (module docstring). A list it names that holds no
    # held-out record holds none of these: no search of it (~20,000 ids at 100,000).
    if served.trained is not None and (served.named is None or served.names_held_out):
        keep &= ~schema.known(ids, served.trained)
    return keep


def held_out_check(
    request: TrainRequest,
    served: Served,
    checkpoint: Path,
) -> tuple[bool, str | None]:
    """Whether the candidate is judged on held-out records (its checkpoint names the
    records it trained on), and why it cannot be judged at all (one line: its list is
    malformed, names a held-out record, or names none where the served model's did);
    None: it can."""
    if not records_are_training_data(served.plugin):
        return False, None  # evaluation episodes: it trained on none of them
    where = f"{request.agent}: candidate {checkpoint.parent.name}"
    try:
        trained = trained_ids(checkpoint)
    except TrainedIdsError as exc:  # not "names none": that would judge it on training data
        return False, f"{where}: {exc}"
    if trained is None:
        if served.checkpoint is None or served.named is None:
            return False, None  # judged on training data, and labelled so
        return False, (
            f"{where} names no records it trained on, where the served model did: the "
            "task's extra_state() must include trained_ids, the ids of the records it trains on"
        )
    held = int(HELD_OUT.of_hashes(trained).sum())
    if held:
        return True, (
            f"{where} trained on {held} held-out record(s) of {len(trained)}: train only "
            "on the rows request.training_rows(ids) keeps, which the gate does not judge on"
        )
    return True, None
