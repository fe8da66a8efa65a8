"""Per-partition idempotent-producer state: validate producer id / epoch / sequence per batch.

Owns, for one partition, the state of every producer id that wrote to it: its current epoch,
the metadata of its last 5 batches, and the timestamp of its last write. The partition leader
asks `ProducerStateManager.check` before appending a batch and reports the append with
`on_append`; a restart loads a snapshot and replays the log tail with `replay`.

It works purely on `BatchHeader` values and an injected clock, never on log reads, so the
classic produce path and the diskless commit path (where the leader sees only headers and
coordinates) share it.

Rules (Apache Kafka 3.x/4.x: `ProducerAppendInfo.checkProducerEpoch` / `checkSequence`,
`ProducerStateEntry.findDuplicateBatch` / `addBatch`, `UnifiedLog.analyzeAndValidateProducerState`,
`ProducerStateManager.isProducerExpired` / `readSnapshot` / `truncateAndReload`):

1. A batch without a producer id (producer_id -1) is not checked and leaves no state:
   only idempotent/transactional producers have sequences to check.
2. Unknown producer id (no state): accept any epoch and any sequence, never
   UNKNOWN_PRODUCER_ID. Since KIP-360 (Kafka 2.5) the broker cannot tell "new producer"
   from "state expired or deleted by retention", so it accepts and lets the producer go on.
3. Duplicate check runs first: same epoch as the state and a (first_seq, last_seq) exactly
   equal to one of the retained batches -> `DuplicateBatch` with that batch's ORIGINAL offsets
   and timestamp, answered with error NONE and not appended. A retry whose response was lost
   must get the offsets the records really have.
4. Epoch lower than the state's -> INVALID_PRODUCER_EPOCH (since 2.7 this replaced
   PRODUCER_FENCED in produce responses): a zombie with an old epoch must be fenced.
5. Epoch higher than the state's (bump): the first sequence must be 0, else
   OUT_OF_ORDER_SEQUENCE_NUMBER; a bumped epoch restarts the sequence space. If the state has
   no epoch (-1) any sequence is accepted (rule 2 in another form).
6. Same epoch: base_sequence must follow the last retained batch's last sequence
   (last + 1, or 0 after 2**31 - 1), else OUT_OF_ORDER_SEQUENCE_NUMBER. Gaps mean lost
   batches; a retry older than the 5 retained batches also lands here, as in Kafka.
   With a known epoch but no retained batch (e.g. after a marker cleared them) the expected
   sequence is 0.
7. Sequences wrap at 2**31: ``last_seq = (base_seq + last_offset_delta) mod 2**31`` (Kafka's
   `DefaultRecordBatch.incrementSequence`), so a batch may span the wrap.
8. Applying a batch whose epoch differs from the state's clears the retained batches and adopts
   the new epoch (`maybeUpdateProducerEpoch`); then the batch is added and the oldest of more
   than 5 dropped (`NUM_BATCHES_TO_RETAIN = 5`): 5 is the client's max in-flight requests per
   connection with idempotence, so every batch a client may still retry is retained.
9. `replay` applies without validation (Kafka's REPLICATION/log-recovery origin): the log was
   validated when written, and rejecting on reload would lose state.
10. A producer expires when ``now - last_timestamp >= producer.id.expiration.ms`` (default
    86400000); ``last_timestamp`` is the batch's max_timestamp as written to the log (Kafka uses
    the batch timestamp, not broker time). Expired producers are also dropped when a snapshot
    is loaded. Expiry bounds the state; a producer that comes back is accepted by rule 2.
11. Control batches (transaction markers, written only by the coordinator path): `check` does
    the epoch check only (TV0/1: lower epoch -> INVALID_PRODUCER_EPOCH); applying one adopts
    its epoch (clearing batches if it changed) and its timestamp but adds no batch metadata.

Transactions (`ProducerAppendInfo.appendDataBatch` / `appendEndTxnMarker`,
`ProducerStateManager.firstUnstableOffset` / `lastStableOffset` / `onHighWatermarkUpdated`):

12. A transactional data batch (attributes 0x10) opens the producer's transaction at its
    first offset when none is open (``current_txn_first_offset``), and continues it
    otherwise. A non-transactional batch while the producer's transaction is open ->
    INVALID_TXN_STATE.
13. A transaction marker (a control batch with a producer id, `EndTxn`) is checked by
    `check_marker`: producer epoch lower than the state's -> INVALID_PRODUCER_EPOCH,
    coordinator epoch lower than the last one seen for the producer ->
    TRANSACTION_COORDINATOR_FENCED. Applying it closes the open transaction (a marker of a
    producer with none open completes nothing, as in Kafka) and records the coordinator
    epoch; the closed transaction (`CompletedTxn`, with the last stable offset right after
    it, for the aborted-transaction index) stays "unreplicated" until the high watermark
    passes its marker (`on_high_watermark`).
14. ``first_unstable_offset``: the first offset of the oldest open transaction or of a
    completed one whose marker is not yet below the high watermark; the partition's last
    stable offset is min(that, high watermark). Open transactions are kept in first-offset
    order (a dict in append order), so this is O(1) plus the few unreplicated ones.
15. A producer with an open transaction never expires (Kafka's `isProducerExpired`).
16. Snapshots (version 2) keep each producer's coordinator epoch and open transaction's first
    offset; a version-1 snapshot reads as "none open" (it was written before transactions).

Transaction verification (KIP-890 part 1, `transaction.partition.verification.enable`):

17. A transactional data batch that would open a transaction (the producer has none open
    here) is accepted from a client only with a *permit*: the transaction coordinator grants
    (producer id, epoch) for this partition once AddPartitionsToTxn has made it part of the
    producer's ongoing transaction (`grant`). Without one the batch is refused with a
    retriable NOT_ENOUGH_REPLICAS, as Kafka answers a produce whose verification did not
    succeed yet; the coordinator grants again when the partition's leader changes. A marker
    for the producer withdraws its permit, so a late retry of a batch of a transaction that
    has ended cannot open a new one that nobody will ever end (a hanging transaction).
    Permits live in the leader's memory only (at most `max_permits`,
    `transaction.partition.verification.max.permits`, oldest dropped first:
    such a producer's next batch is refused until the coordinator grants again).

Not implemented: TV2 marker rules (WriteTxnMarkers v2, KIP-890 part 2) and the
transaction-verification rule "no state and sequence != 0 -> OUT_OF_ORDER" which Kafka applies
only to verified TV2 transactional appends.

Serialization contract for callers (one partition = one sequential actor):
- ``check`` never mutates. For every batch, in partition order, the caller runs
  ``check(h)`` and, if it returned None, assigns offsets and calls ``on_append(h, base_offset)``
  BEFORE the next ``check`` for the same partition. Several batches of one request/commit are
  checked one after another this way, each seeing the state left by the previous one.
- No other ``check`` for the partition may interleave between a ``check`` and its
  ``on_append``: run them in one partition task or under one per-partition lock, without
  yielding in between. Otherwise a retry racing its original would be checked against state
  that does not yet hold the original and be appended twice.
- Call ``on_append`` when offsets are assigned and the entry is in the log's tail (before
  waiting for fsync or replication, as Kafka does). If that tail is later truncated (failed
  write, leader change), call ``truncate_and_reload`` and replay the surviving tail.
- A ``DuplicateBatch`` answer is an append at those offsets for acks purposes: with acks=all
  answer only once the high watermark is above ``last_offset``.
- Call ``on_append`` for non-idempotent batches too (it only advances ``map_end_offset``),
  so truncation can tell whether the in-memory state is still in step with the log.
"""

from __future__ import annotations

import itertools
import logging
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Mapping

from broker.clock import Clock
from broker.producers import snapshot as snap
from broker.protocol.batch import BatchHeader, NO_SEQUENCE
from broker.protocol.errors import ErrorCode

log = logging.getLogger(__name__)

NUM_BATCHES_TO_RETAIN = 5
NO_PRODUCER_EPOCH = -1
NO_OFFSET = -1
NO_COORDINATOR_EPOCH = -1
NO_TIMESTAMP = -1
INT32_MAX = (1 << 31) - 1
DEFAULT_PRODUCER_ID_EXPIRATION_MS = 86_400_000  # producer.id.expiration.ms
MAX_PERMITS = 10_000  # transaction.partition.verification.max.permits: permits per partition (rule 17)


@dataclass(slots=True, frozen=True)
class BatchMetadata:
    """One retained batch of a producer: enough to recognise and answer a retry."""

    first_seq: int
    last_seq: int
    first_offset: int
    last_offset: int
    timestamp_ms: int


@dataclass(slots=True, frozen=True)
class DuplicateBatch:
    """Answer for a retried batch: do not append; respond NONE with these original values."""

    base_offset: int
    last_offset: int
    timestamp_ms: int


@dataclass(frozen=True, slots=True)
class EndTxn:
    """A transaction marker's content: how the transaction ended, and the coordinator epoch."""

    commit: bool
    coordinator_epoch: int


@dataclass(frozen=True, slots=True)
class CompletedTxn:
    """A transaction closed by a marker (Kafka's CompletedTxn): its first offset, the marker's
    offset (`last_offset`), and the last stable offset right after it (Kafka's
    `lastStableOffset(completedTxn)`: the first offset of the next open transaction of
    another producer, else `last_offset + 1`), which the aborted-transaction index keeps."""

    producer_id: int
    first_offset: int
    last_offset: int
    aborted: bool
    last_stable_offset: int


@dataclass(slots=True)
class ProducerEntry:
    """State of one producer id on this partition."""

    producer_id: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    last_timestamp_ms: int = NO_TIMESTAMP
    batches: deque[BatchMetadata] = field(default_factory=lambda: deque(maxlen=NUM_BATCHES_TO_RETAIN))
    coordinator_epoch: int = NO_COORDINATOR_EPOCH
    current_txn_first_offset: int = NO_OFFSET  # first offset of the open transaction, -1: none

    @property
    def last_seq(self) -> int:
        return self.batches[-1].last_seq if self.batches else NO_SEQUENCE

    def find_duplicate(self, header: BatchHeader) -> BatchMetadata | None:
        """Kafka's findDuplicateBatch: same epoch and exactly the same sequence range."""
        if header.producer_epoch != self.producer_epoch:
            return None
        first, last = header.base_sequence, header.last_sequence
        for batch in self.batches:
            if batch.first_seq == first and batch.last_seq == last:
                return batch
        return None


def in_sequence(last_seq: int, next_seq: int) -> bool:
    """``next_seq`` directly follows ``last_seq``, wrapping from 2**31 - 1 to 0."""
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


class ProducerStateManager:
    """Idempotent-producer state of one partition (see the module docstring for the rules)."""

    def __init__(
        self, clock: Clock, expiration_ms: int = DEFAULT_PRODUCER_ID_EXPIRATION_MS, max_permits: int = MAX_PERMITS
    ) -> None:
        if expiration_ms <= 0:
            raise ValueError(f"producer.id.expiration.ms must be > 0, got {expiration_ms}")
        self._clock = clock
        self._expiration_ms = expiration_ms
        self._max_permits = max_permits
        self._producers: dict[int, ProducerEntry] = {}
        self._map_end_offset = 0
        # Open transactions, producer id -> first offset, in first-offset order (appends come
        # in offset order; a snapshot load inserts them sorted).
        self._ongoing: dict[int, int] = {}
        # Completed transactions whose marker is not yet below the high watermark.
        self._unreplicated: list[CompletedTxn] = []
        # Rule 17: producer id -> the epoch the coordinator verified, oldest grant first.
        self._permits: dict[int, int] = {}

    # --- queries ------------------------------------------------------------------------------

    @property
    def producer_count(self) -> int:
        return len(self._producers)

    @property
    def map_end_offset(self) -> int:
        """Offset after the last batch applied: the state reflects every batch below it."""
        return self._map_end_offset

    def entry(self, producer_id: int) -> ProducerEntry | None:
        return self._producers.get(producer_id)

    def active_producers(self) -> Mapping[int, ProducerEntry]:
        """Read-only view of the state (do not mutate the entries)."""
        return MappingProxyType(self._producers)

    def ongoing_transactions(self) -> Mapping[int, int]:
        """Open transactions: producer id -> first offset, oldest first (read-only)."""
        return MappingProxyType(self._ongoing)

    def first_unstable_offset(self) -> int | None:
        """The first offset of the oldest transaction not yet decided and replicated (rule 14),
        None when there is none: the last stable offset is then the high watermark."""
        first = next(iter(self._ongoing.values()), None)
        for txn in self._unreplicated:
            if first is None or txn.first_offset < first:
                first = txn.first_offset
        return first

    def last_stable_offset(self, high_watermark: int) -> int:
        """min(first unstable offset, high watermark): what read_committed consumers may read."""
        first = self.first_unstable_offset()
        return high_watermark if first is None else min(first, high_watermark)

    def on_high_watermark(self, high_watermark: int) -> None:
        """Forget completed transactions whose marker is now below the high watermark."""
        if self._unreplicated:
            self._unreplicated = [t for t in self._unreplicated if t.last_offset >= high_watermark]

    # --- validation ---------------------------------------------------------------------------

    @property
    def permit_count(self) -> int:
        return len(self._permits)

    def continues(self, header: BatchHeader) -> bool:
        """`header`'s batch directly follows its producer's last one here, in the same epoch:
        nothing of that producer is missing before it."""
        entry = self._producers.get(header.producer_id)
        return (
            entry is not None
            and entry.producer_epoch == header.producer_epoch
            and in_sequence(entry.last_seq, header.base_sequence)
        )

    def check(self, header: BatchHeader, verify_txn: bool = False) -> ErrorCode | DuplicateBatch | None:
        """Validate one batch against the current state without changing it.

        None: append it, then call `on_append`. DuplicateBatch: do not append; answer NONE with
        its offsets. ErrorCode: reject the batch with that code. `verify_txn`: a client's
        batch, which may open a transaction only with a permit (rule 17).
        """
        if not header.has_producer_id:
            return None
        entry = self._producers.get(header.producer_id)
        if entry is None:
            return self._check_permit(header) if verify_txn else None  # rule 2 (KIP-360)
        epoch = header.producer_epoch
        if header.is_control:
            return ErrorCode.INVALID_PRODUCER_EPOCH if epoch < entry.producer_epoch else None
        duplicate = entry.find_duplicate(header)
        if duplicate is not None:
            return DuplicateBatch(duplicate.first_offset, duplicate.last_offset, duplicate.timestamp_ms)
        if epoch < entry.producer_epoch:
            return ErrorCode.INVALID_PRODUCER_EPOCH
        if epoch != entry.producer_epoch:
            if header.base_sequence != 0 and entry.producer_epoch != NO_PRODUCER_EPOCH:
                return ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        elif entry.producer_epoch != NO_PRODUCER_EPOCH and not in_sequence(entry.last_seq, header.base_sequence):
            return ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER
        if entry.current_txn_first_offset != NO_OFFSET:
            if not header.is_transactional:
                return ErrorCode.INVALID_TXN_STATE  # rule 12: a plain write inside an open transaction
            return None
        return self._check_permit(header) if verify_txn else None

    def _check_permit(self, header: BatchHeader) -> ErrorCode | None:
        """Rule 17, for a batch of a producer with no transaction open here."""
        if not header.is_transactional or header.is_control:
            return None
        if self._permits.get(header.producer_id) == header.producer_epoch:
            return None
        return ErrorCode.NOT_ENOUGH_REPLICAS

    def grant(self, producer_id: int, producer_epoch: int) -> None:
        """The coordinator verified that this partition is in the producer's ongoing
        transaction (rule 17)."""
        self._permits.pop(producer_id, None)
        self._permits[producer_id] = producer_epoch
        while len(self._permits) > self._max_permits:
            del self._permits[next(iter(self._permits))]

    def check_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int) -> ErrorCode | None:
        """Validate a transaction marker before it is appended (rule 13); never mutates."""
        entry = self._producers.get(producer_id)
        if entry is None:
            return None
        if producer_epoch < entry.producer_epoch:
            return ErrorCode.INVALID_PRODUCER_EPOCH
        if coordinator_epoch < entry.coordinator_epoch:
            return ErrorCode.TRANSACTION_COORDINATOR_FENCED
        return None

    # --- updates ------------------------------------------------------------------------------

    def on_append(
        self, header: BatchHeader, base_offset: int, timestamp_ms: int | None = None, end_txn: EndTxn | None = None
    ) -> CompletedTxn | None:
        """Record a batch that `check` (or `check_marker`) accepted and that now has offsets.

        ``timestamp_ms`` is the batch's max timestamp as written to the log (after any
        LogAppendTime stamping); it defaults to ``header.max_timestamp``. Passing what the log
        holds keeps `replay` after a restart identical to never restarting. ``end_txn`` is the
        content of a transaction marker (a control batch with a producer id); the transaction
        it closes, if any, is returned.
        """
        return self._apply(header, base_offset, header.max_timestamp if timestamp_ms is None else timestamp_ms, end_txn)

    def replay(self, header: BatchHeader, base_offset: int, end_txn: EndTxn | None = None) -> CompletedTxn | None:
        """Apply a log entry without validation (rebuilding after `load_latest_snapshot`).

        Entries below `map_end_offset` are already in the state and are skipped, so replaying
        from anywhere at or before the snapshot offset is safe.
        """
        if base_offset + header.last_offset_delta < self._map_end_offset:
            return None
        return self._apply(header, base_offset, header.max_timestamp, end_txn)

    def _apply(
        self, header: BatchHeader, base_offset: int, timestamp_ms: int, end_txn: EndTxn | None
    ) -> CompletedTxn | None:
        last_offset = base_offset + header.last_offset_delta
        if last_offset + 1 > self._map_end_offset:
            self._map_end_offset = last_offset + 1
        if not header.has_producer_id:
            return None
        entry = self._producers.get(header.producer_id)
        if entry is None:
            entry = self._producers[header.producer_id] = ProducerEntry(header.producer_id)
        if entry.producer_epoch != header.producer_epoch:
            entry.batches.clear()
            entry.producer_epoch = header.producer_epoch
        entry.last_timestamp_ms = timestamp_ms
        if header.is_control:
            if end_txn is None:
                return None
            self._permits.pop(entry.producer_id, None)  # rule 17: the transaction has ended here
            return self._end_txn(entry, base_offset, end_txn)
        if header.is_transactional and entry.current_txn_first_offset == NO_OFFSET:
            entry.current_txn_first_offset = base_offset
            self._ongoing[entry.producer_id] = base_offset
        entry.batches.append(
            BatchMetadata(
                header.base_sequence,
                header.last_sequence,
                base_offset,
                last_offset,
                timestamp_ms,
            )
        )
        return None

    def _end_txn(self, entry: ProducerEntry, marker_offset: int, end_txn: EndTxn) -> CompletedTxn | None:
        first = entry.current_txn_first_offset
        entry.coordinator_epoch = end_txn.coordinator_epoch
        if first == NO_OFFSET:
            return None  # an empty transaction: nothing to complete (Kafka emits no CompletedTxn)
        following = next((o for pid, o in self._ongoing.items() if pid != entry.producer_id), None)
        completed = CompletedTxn(
            entry.producer_id,
            first,
            marker_offset,
            not end_txn.commit,
            marker_offset + 1 if following is None else following,
        )
        entry.current_txn_first_offset = NO_OFFSET
        self._ongoing.pop(entry.producer_id, None)
        self._unreplicated.append(completed)
        return completed

    # --- expiry -------------------------------------------------------------------------------

    def is_expired(self, entry: ProducerEntry, now_ms: int) -> bool:
        if entry.current_txn_first_offset != NO_OFFSET:
            return False  # rule 15: never expire a producer with an open transaction
        return now_ms - entry.last_timestamp_ms >= self._expiration_ms

    def expire(self, now_ms: int | None = None) -> int:
        """Drop producers idle for at least ``expiration_ms``; returns how many were dropped."""
        now = self._clock.now_ms() if now_ms is None else now_ms
        expired = [pid for pid, entry in self._producers.items() if self.is_expired(entry, now)]
        for pid in expired:
            del self._producers[pid]
        return len(expired)

    # --- snapshots ----------------------------------------------------------------------------

    def take_snapshot(self, directory: Path, offset: int) -> Path:
        """Write the state as the snapshot for ``offset`` (state must cover every batch below it).

        ``offset`` may not be below `map_end_offset`: a snapshot holding batches at or above
        its own offset would apply them twice on replay.
        """
        if offset < self._map_end_offset:
            raise ValueError(
                f"snapshot offset {offset} is below map_end_offset {self._map_end_offset}: "
                "the state already includes batches at or above it"
            )
        self._map_end_offset = offset
        producers = [
            snap.SnapshotProducer(
                entry.producer_id,
                entry.producer_epoch,
                entry.last_timestamp_ms,
                [
                    snap.SnapshotBatch(b.first_seq, b.last_seq, b.first_offset, b.last_offset, b.timestamp_ms)
                    for b in entry.batches
                ],
                entry.coordinator_epoch,
                entry.current_txn_first_offset,
            )
            for entry in self._producers.values()
        ]
        return snap.write_snapshot(directory, snap.Snapshot(offset=offset, producers=producers))

    def load_latest_snapshot(self, directory: Path, max_offset: int, keep_newer: bool = False) -> int:
        """Replace the state with the newest snapshot at or below ``max_offset``.

        Snapshots above ``max_offset`` are deleted (they are ahead of a truncated log). A
        corrupt snapshot is deleted and the next older one tried, as Kafka does: the log replay
        rebuilds what it held. A snapshot of an unknown format version raises
        UnknownSnapshotVersionError and is left in place. Returns the loaded snapshot's
        offset, 0 when none; the caller then replays log entries from there. With
        ``keep_newer`` the snapshots above ``max_offset`` are kept (a rebuild of an index from
        further back, the log itself not truncated).
        """
        self._producers.clear()
        self._ongoing.clear()
        self._unreplicated.clear()
        self._map_end_offset = 0
        snap.remove_stray_tmp_files(directory)
        now = self._clock.now_ms()
        for offset, path in reversed(snap.list_snapshots(directory)):
            if offset > max_offset:
                if not keep_newer:
                    path.unlink(missing_ok=True)
                continue
            try:
                loaded = snap.read_snapshot(path)
            except snap.CorruptSnapshotError as e:
                log.warning("deleting corrupt producer snapshot: %s", e)
                path.unlink(missing_ok=True)
                continue
            for p in loaded.producers:
                entry = ProducerEntry(p.producer_id, p.producer_epoch, p.last_timestamp_ms)
                entry.batches.extend(
                    BatchMetadata(b.first_seq, b.last_seq, b.first_offset, b.last_offset, b.timestamp_ms)
                    for b in p.batches
                )
                entry.coordinator_epoch = p.coordinator_epoch
                entry.current_txn_first_offset = p.current_txn_first_offset
                if not self.is_expired(entry, now):
                    self._producers[p.producer_id] = entry
            ongoing = sorted(
                (e.current_txn_first_offset, pid)
                for pid, e in self._producers.items()
                if e.current_txn_first_offset != NO_OFFSET
            )
            self._ongoing = {pid: first for first, pid in ongoing}
            self._map_end_offset = offset
            return offset
        return 0

    def delete_snapshots_before(self, directory: Path, offset: int) -> None:
        """Delete snapshots with an offset below ``offset`` (e.g. below the log start offset)."""
        for snap_offset, path in snap.list_snapshots(directory):
            if snap_offset < offset:
                path.unlink(missing_ok=True)

    def state_at(self, offset: int, ended: Iterable[tuple[int, int, int]]) -> snap.Snapshot:
        """The state a replica starting over at ``offset`` (this leader's log start, below
        `map_end_offset`) must begin with, so that replaying the log from ``offset`` leaves
        it with exactly this state: each producer's epochs and timestamp, its batches below
        ``offset``, and the transactions open at ``offset``: still open, ended by a marker
        not yet below the high watermark, or aborted by a marker at or above ``offset``
        (``ended``: (producer id, first offset, marker offset) of the aborted-transaction
        index, which holds every marker from the log start on). Not the past state itself: a
        transaction open there whose COMMIT is already replicated is left out; the replica
        sees it begin at its first batch from ``offset`` on and end in a commit all the same,
        and reads nothing too early (it is decided), indexes nothing for it (a commit)."""
        open_at = {pid: first for pid, first in self._ongoing.items() if first < offset}
        for pid, first, last in itertools.chain(
            ((t.producer_id, t.first_offset, t.last_offset) for t in self._unreplicated), ended
        ):
            if first < offset <= last:
                open_at[pid] = first
        producers = [
            snap.SnapshotProducer(
                entry.producer_id,
                entry.producer_epoch,
                entry.last_timestamp_ms,
                [
                    snap.SnapshotBatch(b.first_seq, b.last_seq, b.first_offset, b.last_offset, b.timestamp_ms)
                    for b in entry.batches
                    if b.last_offset < offset
                ],
                entry.coordinator_epoch,
                open_at.pop(entry.producer_id, NO_OFFSET),
            )
            for entry in self._producers.values()
        ]
        producers += [  # expired here since their abort: only the transaction is known
            snap.SnapshotProducer(pid, NO_PRODUCER_EPOCH, NO_TIMESTAMP, [], NO_COORDINATOR_EPOCH, first)
            for pid, first in open_at.items()
        ]
        return snap.Snapshot(offset=offset, producers=producers)

    def start_over(self, directory: Path, offset: int, snapshot: snap.Snapshot | None) -> None:
        """The log was emptied to continue at ``offset`` (a follower behind its leader's log
        start, Kafka's `truncateFullyAndStartAt`): the state becomes ``snapshot``, the
        leader's `state_at` that offset (kept as this replica's snapshot there), or nothing
        (a leader that sent none). Without it a transaction open at ``offset`` would be
        unknown here: its marker would end nothing, and no aborted-transaction entry would
        be written."""
        if snapshot is not None and snapshot.offset != offset:
            raise ValueError(f"the producer snapshot is at offset {snapshot.offset}, not at {offset}")
        for _offset, path in snap.list_snapshots(directory):
            path.unlink(missing_ok=True)
        if snapshot is not None:
            snap.write_snapshot(directory, snapshot)
        self.load_latest_snapshot(directory, offset)
        self._map_end_offset = offset

    def truncate_and_reload(self, directory: Path, log_start_offset: int, log_end_offset: int) -> int:
        """Bring the state back in step with a log now spanning [log_start_offset, log_end_offset).

        Deletes snapshots outside that range; if the state is not exactly at
        ``log_end_offset``, reloads the newest snapshot. Returns the offset from which the
        caller must `replay` the log up to ``log_end_offset`` (== log_end_offset: nothing to do).
        """
        for snap_offset, path in snap.list_snapshots(directory):
            if snap_offset > log_end_offset or snap_offset < log_start_offset:
                path.unlink(missing_ok=True)
        if self._map_end_offset == log_end_offset:
            return log_end_offset
        loaded = self.load_latest_snapshot(directory, log_end_offset)
        start = max(loaded, log_start_offset)
        self._map_end_offset = start
        return start
