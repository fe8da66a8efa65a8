"""One hosted partition: its log, its idempotent-producer state, and the append path.

What a produce request's batches must satisfy, and how they are stored, is log_validator's:
the diskless representatives run the same checks on batches they never store locally.
"""

from __future__ import annotations

import asyncio
import bisect
import heapq
import itertools
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from .clock import Clock
from .log import EntryKind, OffsetOutOfRangeError, PartitionLog, RemoteRetention
from .log.markers import RemoteSegmentEvent, decode_marker, encode_marker
from .log.open_files import OpenFiles
from .log.modes import ModeChange, ModeEvent, ModeHistory, decode_mode_marker, encode_mode_marker
from .log.remote_segments import RemoteSegments
from .log.txn_index import AbortedTxn, TxnIndex
from .log.txn_markers import TxnMarker, decode_txn_marker, encode_txn_marker, is_txn_marker
from .metadata.records import NO_LEADER, PartitionStateRecord
from .partition_ids import TopicPartition
from .producers import CompletedTxn, DuplicateBatch, EndTxn, ProducerStateManager
from .producers.snapshot import decode_snapshot_at, encode_snapshot
from .producers.state import MAX_PERMITS
from .producers.barriers import DEFAULT_MAX_BARRIERS, Barrier, SequenceBarriers
from .representation_fence import Admission, RepresentationFence
from . import log_validator
from .log.coordinates import WalRef, encode_ref
from .protocol.batch import BatchHeader, parse_header
from .protocol.errors import ApiError, ErrorCode
from .log.epochs import CHECKPOINT_FILE as EPOCH_CHECKPOINT_FILE
from .log.epochs import LeaderEpochCache, TornEpochCheckpointError
from .leader_state import LeaderState
from .topic_config import TopicSettings
from .wal_references import WalReferences
from .wire_errors import LOG_STORAGE_FAILURES, wire_error

log = logging.getLogger(__name__)


@dataclass(slots=True)
class AppendOutcome:
    base_offset: int
    log_append_time_ms: int
    log_start_offset: int
    appended_bytes: int
    end_offset: int  # after the request's last batch (a duplicate's own): acks=all waits for the high watermark here


def _end_txn(header: BatchHeader, data: memoryview | bytes | bytearray) -> EndTxn | None:
    """The content of a transaction marker entry (None for any other entry)."""
    if not is_txn_marker(header):
        return None
    marker = decode_txn_marker(data)
    return EndTxn(marker.commit, marker.coordinator_epoch)


def _recovered_epochs(name: str, directory: Path, log_: PartitionLog) -> LeaderEpochCache:
    """The partition's leader-epoch cache with what a power loss may have cost it taken back
    from the log: from where the log's recovery verified after an unclean stop, from the log
    start when the file is torn (epochs.py)."""
    report = log_.last_recovery
    try:
        epochs = LeaderEpochCache.open(directory)
        if report.clean_shutdown:
            return epochs
        rebuild_from = report.verified_from
    except TornEpochCheckpointError as e:
        log.warning("%s: %s; rebuilding it from the log", name, e)
        epochs, rebuild_from = LeaderEpochCache(directory / EPOCH_CHECKPOINT_FILE), 0
    epochs.rebuild(
        rebuild_from, ((e.header.partition_leader_epoch, e.base_offset) for e in log_.iter_entries(rebuild_from))
    )
    return epochs


class Partition:
    def __init__(
        self,
        topic: str,
        index: int,
        directory: Path,
        log_: PartitionLog,
        producers: ProducerStateManager,
        settings: TopicSettings,
        clock: Clock,
        on_append: Callable[["Partition"], None],
        max_barriers: int = DEFAULT_MAX_BARRIERS,
    ) -> None:
        self.topic = topic
        self.index = index
        self.key = TopicPartition(topic, index)
        self.topic_id = ""  # set by the replica manager: replication names partitions by topic id
        self.directory = directory
        self.log = log_
        self.wal_references = WalReferences(log_)  # asked only for diskless replicas
        self.remote_segments = RemoteSegments.open(directory)  # tiered segments (broker/tiering/)
        log_.truncation_listeners.append(self.remote_segments.on_truncate)
        self.modes = ModeHistory.open(directory, log_.log_end_offset)  # mode markers (log/modes.py)
        log_.truncation_listeners.append(self.modes.truncate_from)
        # Aborted transactions per segment (log/txn_index.py); rebuilt from `_txn_rebuild_from`
        # by the producer-state replay when a file was corrupt or missing.
        self.txn_index, self._txn_rebuild_from = TxnIndex.open(directory, log_.segment_base_offsets)
        log_.truncation_listeners.append(self._on_log_truncated)
        self.created_diskless = settings.diskless  # the mode without a marker: the topic's at creation
        self.producers = producers
        # The log end offset at which the producer snapshot on disk is exactly the state in
        # memory (loaded at open, nothing replayed, no truncation since): a close there
        # writes none, so stopping a broker costs nothing for its idle partitions (issue 28)
        self._snapshot_is_state_at: int | None = None
        # Producers whose batch failed to be written here: their later batches wait for its
        # retry (producers/barriers.py), as Kafka's would behind a log directory gone offline.
        self.barriers = SequenceBarriers(max_barriers, clock.monotonic)
        self.settings = settings
        self.epochs = _recovered_epochs(f"{topic}-{index}", directory, log_)
        log_.before_recovery_point_moves.append(self.epochs.sync)
        if self.epochs.latest_epoch < 0 and log_.log_end_offset > log_.log_start_offset:
            self.epochs.assign(0, log_.log_start_offset)  # written before epochs were tracked: all epoch 0
        self.leader_epoch = max(self.epochs.latest_epoch, 0)
        self.leader_id = NO_LEADER
        # As a follower: the leader epoch its leader last answered a replica fetch in (-1:
        # none yet), so that leader had taken the partition up (controlled shutdown waits
        # for it on the partitions it handed over).
        self.fetched_in_epoch = -1
        self.replicas: list[int] = []
        self.isr: list[int] = []
        self.state_revision = 0  # store revision of the partition state applied last
        self.leader_state: LeaderState | None = None  # follower progress, while this broker leads
        self.representation = RepresentationFence()  # whose diskless commits are stale, this epoch
        self._waits: list[tuple[int, int, asyncio.Future[ApiError | None]]] = []  # (end offset, seq, future)
        self._wait_seq = itertools.count()
        self._clock = clock
        self._on_append = on_append

    @classmethod
    def open(
        cls,
        topic: str,
        index: int,
        directory: Path,
        settings: TopicSettings,
        clock: Clock,
        producer_expiration_ms: int,
        on_append: Callable[["Partition"], None],
        max_barriers: int = DEFAULT_MAX_BARRIERS,
        max_permits: int = MAX_PERMITS,
        open_files: OpenFiles | None = None,
    ) -> "Partition":
        producers = ProducerStateManager(clock, producer_expiration_ms, max_permits)
        rolled: list[Callable[[int], None]] = []
        log_ = PartitionLog.open(
            directory, settings.log, clock, on_segment_roll=lambda offset: rolled[0](offset), open_files=open_files
        )
        partition = cls(topic, index, directory, log_, producers, settings, clock, on_append, max_barriers)
        rolled.append(partition._on_segment_roll)
        partition._rebuild_producer_state()
        partition._replay_markers()
        partition._finish_log_start()
        return partition

    def _on_segment_roll(self, offset: int) -> None:
        bases = self.log.segment_base_offsets
        if len(bases) > 1:
            self.txn_index.flush(bases[-2])  # sealed: durable before the snapshot that skips it
        self.txn_index.ensure(offset)
        self.producers.take_snapshot(self.directory, offset)
        if self.remote_segments.known:
            self.remote_segments.checkpoint_at(self.log.high_watermark)

    def _replay_markers(self) -> None:
        """Remote-segment markers the checkpoint may not hold yet (written after it)."""
        if not self.remote_segments.known:
            return
        for entry in self.log.iter_entries(max(self.remote_segments.applied_through, self.log.log_start_offset)):
            if entry.kind == EntryKind.REMOTE_SEGMENT:
                self.remote_segments.on_append(
                    entry.base_offset, entry.header.partition_leader_epoch, decode_marker(entry.data)
                )
        self.remote_segments.commit_through(self.log.high_watermark)

    def _finish_log_start(self) -> None:
        """A stop between the two steps of delete_records_before leaves the local log
        starting below the log start offset: move it there (Kafka's log load raises the local
        start, and the high watermark with it, to the checkpointed log start offset)."""
        start = min(self.remote_segments.log_start_offset, self.log.log_end_offset)
        if start > self.log.log_start_offset:
            self.log.update_high_watermark(start)
            self.log.delete_records_before(start)

    @property
    def log_start_offset(self) -> int:
        """Kafka's log start offset: the first offset in tiered segments or in the local log,
        never below where DeleteRecords moved it."""
        remote = self.remote_segments.start_offset
        local = self.log.log_start_offset
        return local if remote is None else min(remote, local)

    def delete_records_before(self, offset: int) -> int:
        """Move the log start offset up to `offset` across both tiers (DeleteRecords, or a
        follower learning its leader's; Kafka's maybeIncrementLogStartOffset); returns it.
        Tiered segments wholly below it stop being read at once and are deleted by the
        offload service; the local log drops what lies below it. OFFSET_OUT_OF_RANGE above
        the high watermark; below the log start offset nothing changes."""
        if offset > self.log.high_watermark or offset < 0:
            raise OffsetOutOfRangeError(offset, self.log_start_offset, self.log.high_watermark, "DeleteRecords offset")
        # Recorded first (durable once anything is tiered): a stop before the local log moves
        # is finished at open (_finish_log_start). Compared with the recorded offset, not
        # log_start_offset: that one is the local start while no tiered segment is known here
        # (a follower whose markers are not replicated yet), and a segment below `offset` known
        # later would then be served again.
        self.remote_segments.advance_log_start(offset)
        if offset > self.log.log_start_offset:
            self.log.delete_records_before(offset)
        return self.log_start_offset

    def remote_retention(self) -> RemoteRetention | None:
        """Local retention limits while tiered storage is on (None: plain retention)."""
        if not self.settings.remote_storage:
            return None
        return RemoteRetention(
            self.remote_segments.covered_end(self.log.log_start_offset),
            self.settings.local_retention_ms,
            self.settings.local_retention_bytes,
        )

    def append_marker(self, event: RemoteSegmentEvent) -> int:
        """Leader: append a remote-segment marker; returns its offset. It applies once the
        high watermark passes it (remote_segments.py)."""
        self.check_leader()
        data = encode_marker(event, self._clock.now_ms())
        header = parse_header(data)
        offset = self.log.log_end_offset  # the append assigns it (no await in between)
        # Pending before the append: the append may move the high watermark, which applies
        # what is pending and moves `applied_through` past this offset.
        self.remote_segments.on_append(offset, self.leader_epoch, event)
        try:
            outcome = self._append(EntryKind.REMOTE_SEGMENT, [(header, data)])
        except BaseException:
            self.remote_segments.on_truncate(offset)
            raise
        assert outcome.base_offset == offset, (outcome.base_offset, offset)
        self.remote_segments.commit_through(self.log.high_watermark)
        return offset

    # -- mode ---------------------------------------------------------------------------------
    @property
    def diskless(self) -> bool:
        """The mode the log is appended in now (the last mode marker's): the leader accepts
        only that mode's appends."""
        return self.modes.diskless(self.created_diskless)

    @property
    def may_reference_wal(self) -> bool:
        """Whether the log may hold COORDINATES entries: the WAL file manager must ask it."""
        return self.settings.diskless or self.modes.ever_diskless(self.created_diskless)

    def switch_mode(self, diskless: bool) -> int:
        """Leader: start appending in `diskless` mode (no-op when already in it). Seals the
        active segment, so the old mode's entries end a segment, and appends a mode marker;
        returns its offset, the first of the new mode. Atomic on the event loop: an append
        of either mode lands wholly before the marker or is refused after it."""
        self.check_leader()
        if diskless == self.diskless:
            return self.modes.boundary()
        self.log.roll()
        data = encode_mode_marker(ModeEvent(1, diskless, self.diskless), self._clock.now_ms())
        offset = self.log.log_end_offset
        self.modes.record(ModeChange(offset, diskless, self.leader_epoch))
        try:
            outcome = self._append(EntryKind.MODE, [(parse_header(data), data)])
        except BaseException:
            self.modes.truncate_from(offset)
            raise
        assert outcome.base_offset == offset, (outcome.base_offset, offset)
        log.info(
            "%s-%d: switched to %s at offset %d (epoch %d)",
            self.topic,
            self.index,
            "diskless" if diskless else "classic",
            offset,
            self.leader_epoch,
        )
        return offset

    def _check_mode(self, diskless: bool) -> None:
        """Refuse an append of the mode the partition is not in: retriable, and the client
        refreshes its metadata, which by then routes it to the new mode."""
        if diskless != self.diskless:
            raise ApiError(
                ErrorCode.NOT_LEADER_OR_FOLLOWER,
                f"{self.topic}-{self.index} is {'diskless' if self.diskless else 'classic'} now "
                f"(switched at offset {self.modes.boundary()}): refresh metadata and retry",
            )

    def _rebuild_producer_state(self) -> None:
        """Latest snapshot plus the log tail after it: cost is the tail, not the log. A
        transaction index to rebuild from further back starts the replay there."""
        leo = self.log.log_end_offset
        rebuild_from = self._txn_rebuild_from
        self._txn_rebuild_from = None
        if rebuild_from is None:
            loaded = self.producers.load_latest_snapshot(self.directory, leo)
        else:
            loaded = self.producers.load_latest_snapshot(self.directory, min(rebuild_from, leo), keep_newer=True)
        start = max(loaded, self.log.log_start_offset)
        self.txn_index.truncate_from(start)  # what the replay appends again
        replayed = 0
        for entry in self.log.iter_entries(start):
            self._replay(entry.header, entry.base_offset, entry.data)
            replayed += 1
        self.producers.on_high_watermark(self.log.high_watermark)
        self._snapshot_is_state_at = leo if loaded == leo and not replayed else None
        if replayed:
            log.info(
                "%s-%s: replayed %d entries from offset %d into producer state", self.topic, self.index, replayed, start
            )

    # -- transactions -------------------------------------------------------------------------
    def _replay(self, header: BatchHeader, offset: int, data: memoryview | bytes) -> None:
        """Apply one log entry to producer state (and the aborted-transaction index)."""
        self._index_completed(self.producers.replay(header, offset, _end_txn(header, data)))

    def _index_completed(self, completed: CompletedTxn | None) -> None:
        """An aborted transaction goes into the index of the segment holding its marker."""
        if completed is None or not completed.aborted:
            return
        bases = self.log.segment_base_offsets
        base = bases[max(bisect.bisect_right(bases, completed.last_offset) - 1, 0)]
        self.txn_index.append(
            base,
            AbortedTxn(
                completed.producer_id, completed.first_offset, completed.last_offset, completed.last_stable_offset
            ),
        )

    def _on_log_truncated(self, offset: int) -> None:
        self.txn_index.truncate_from(offset)
        bases = self.log.segment_base_offsets
        self.txn_index.retain(bases)
        self.txn_index.ensure(bases[-1])

    @property
    def last_stable_offset(self) -> int:
        """Kafka's LSO: min(first offset of an undecided transaction, high watermark). Every
        replica keeps its own from its producer state and its high watermark (a follower
        serves read_committed fetches with it, as Kafka's follower fetching does). Never below
        the log start offset (Kafka's updateFirstUnstableOffset): retention or DeleteRecords
        may drop the start of a transaction still open."""
        first = self.producers.first_unstable_offset()
        hw = self.log.high_watermark
        return hw if first is None else min(max(first, self.log_start_offset), hw)

    def aborted_transactions(self, fetch_offset: int, upper_bound_offset: int) -> list[AbortedTxn]:
        """The aborted transactions a read_committed fetch of [fetch_offset, upper_bound)
        must report."""
        self.txn_index.retain(self.log.segment_base_offsets)  # retention may have dropped segments
        return self.txn_index.collect(fetch_offset, upper_bound_offset)

    def append_txn_marker(self, producer_id: int, producer_epoch: int, coordinator_epoch: int, commit: bool) -> int:
        """Leader: end producer `producer_id`'s transaction with a COMMIT or ABORT control
        batch (WriteTxnMarkers). Returns the log end offset after it: the marker is committed
        once the high watermark reaches it. INVALID_PRODUCER_EPOCH for an older producer
        epoch, TRANSACTION_COORDINATOR_FENCED for an older coordinator epoch, as Kafka."""
        self.check_acks(-1)
        marker = TxnMarker(commit, coordinator_epoch)
        data = encode_txn_marker(producer_id, producer_epoch, marker, self._clock.now_ms())
        outcome = self._append(EntryKind.RECORDS, [(parse_header(data), data)], EndTxn(commit, coordinator_epoch))
        return outcome.end_offset

    @property
    def isr_size(self) -> int:
        return len(self.isr)

    # -- roles -------------------------------------------------------------------------------
    @property
    def _role_level(self) -> int:
        """Role changes of internal topics (`__consumer_offsets`' 50 partitions) at DEBUG: a
        fresh broker would otherwise log a line for each."""
        return logging.DEBUG if self.topic.startswith("__") else logging.INFO

    def make_leader(self, node_id: int, state: PartitionStateRecord, revision: int) -> None:
        """Lead from `state`: a new epoch starts at the log end offset; the same epoch only
        updates the ISR (a change this leader or the controller made)."""
        self.replicas, self.isr, self.state_revision = list(state.replicas), list(state.isr), revision
        self.leader_id = node_id
        if self.leader_state is None or state.leader_epoch != self.leader_epoch:
            self.leader_epoch = state.leader_epoch
            end = self.log.log_end_offset
            self.epochs.assign(state.leader_epoch, end)
            self.representation.clear()
            self.leader_state = LeaderState(
                leader_id=node_id,
                replicas=self.replicas,
                isr=self.isr,
                leader_epoch=state.leader_epoch,
                leader_epoch_start_offset=end,
                high_watermark=self.log.high_watermark,
                now_ms=self._clock.now_ms(),
            )
            log.log(
                self._role_level,
                "%s-%d: leader in epoch %d from offset %d, isr %s",
                self.topic,
                self.index,
                state.leader_epoch,
                end,
                self.isr,
            )
        else:
            self.leader_state.set_isr(self.isr)
        self.advance_high_watermark()

    def make_follower(self, state: PartitionStateRecord, revision: int) -> None:
        """Follow `state.leader` (or nobody, while the partition is offline)."""
        self.replicas, self.isr, self.state_revision = list(state.replicas), list(state.isr), revision
        self.leader_id = state.leader
        if self.leader_state is not None or state.leader_epoch != self.leader_epoch:
            log.log(
                self._role_level,
                "%s-%d: follower of %d in epoch %d",
                self.topic,
                self.index,
                state.leader,
                state.leader_epoch,
            )
        self.leader_epoch = state.leader_epoch
        if self.leader_state is not None:
            self.leader_state = None
            self._end_waits(
                ApiError(
                    ErrorCode.NOT_LEADER_OR_FOLLOWER,
                    f"leadership of {self.topic}-{self.index} moved to broker {state.leader}",
                )
            )

    def retire(self) -> None:
        """The partition is being deleted: neither lead nor follow any more."""
        self.leader_state, self.leader_id = None, NO_LEADER
        self._end_waits(ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"{self.topic}-{self.index} was deleted"))

    def check_leader(self) -> None:
        if self.leader_state is None:
            raise ApiError(
                ErrorCode.NOT_LEADER_OR_FOLLOWER,
                f"this broker is not the leader of {self.topic}-{self.index} (leader {self.leader_id})",
            )

    # -- high watermark and acks=all -----------------------------------------------------------
    def advance_high_watermark(self) -> None:
        """Leader: HW = smallest log end offset in the ISR; wakes acks=all waits and fetches."""
        if self.leader_state is None:
            return
        before = self.log.high_watermark
        hw = self.log.update_high_watermark(self.leader_state.high_watermark(self.log.log_end_offset))
        self.remote_segments.commit_through(hw)
        self.producers.on_high_watermark(hw)
        while self._waits and self._waits[0][0] <= hw:
            _, _, future = heapq.heappop(self._waits)
            if not future.done():
                future.set_result(None)
        if hw != before:
            self._on_append(self)

    async def wait_replicated(self, end_offset: int, timeout_s: float) -> None:
        """acks=all: return once the high watermark reaches `end_offset` with enough replicas
        in sync, else raise (REQUEST_TIMED_OUT, NOT_LEADER_OR_FOLLOWER,
        NOT_ENOUGH_REPLICAS_AFTER_APPEND), as Kafka's delayed produce does."""
        if self.leader_state is None:
            raise ApiError(
                ErrorCode.NOT_LEADER_OR_FOLLOWER,
                f"leadership of {self.topic}-{self.index} moved to broker {self.leader_id}",
            )
        if self.log.high_watermark < end_offset:
            future: asyncio.Future[ApiError | None] = asyncio.get_running_loop().create_future()
            heapq.heappush(self._waits, (end_offset, next(self._wait_seq), future))
            await asyncio.wait((future,), timeout=timeout_s)
            if not future.done():
                future.cancel()
                raise ApiError(
                    ErrorCode.REQUEST_TIMED_OUT,
                    f"{self.topic}-{self.index}: not replicated to the ISR {self.isr} in time",
                )
            error = future.result()
            if error is not None:
                raise error
        if self.isr_size < self.settings.min_insync_replicas:
            raise ApiError(
                ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND,
                f"in-sync replicas {self.isr_size} < min.insync.replicas={self.settings.min_insync_replicas}",
            )

    def _end_waits(self, error: ApiError) -> None:
        waits, self._waits = self._waits, []
        for _, _, future in waits:
            if not future.done():
                future.set_result(error)

    # -- follower side ------------------------------------------------------------------------
    def append_replicated(self, entries: Sequence[tuple[int, memoryview | bytes]], leader_high_watermark: int) -> int:
        """Append entries fetched from the leader, exactly as the leader holds them (offsets,
        epochs, payloads); returns the bytes appended."""
        appended = 0
        for kind, data in entries:
            header = parse_header(data)
            if header.base_offset != self.log.log_end_offset:
                self._start_at_batch_holding_log_start(header)
            epoch = header.partition_leader_epoch
            if epoch > self.epochs.latest_epoch:
                self.epochs.assign(epoch, header.base_offset)
            self.log.append(EntryKind(kind), header, data, epoch)
            self._replay(header, header.base_offset, data)
            if kind == EntryKind.REMOTE_SEGMENT:
                self.remote_segments.on_append(header.base_offset, epoch, decode_marker(data))
            elif kind == EntryKind.MODE:
                self.modes.record(ModeChange(header.base_offset, decode_mode_marker(data).diskless, epoch))
            appended += len(data)
        hw = self.log.update_high_watermark(min(leader_high_watermark, self.log.log_end_offset))
        self.remote_segments.commit_through(hw)
        self.producers.on_high_watermark(hw)
        if appended:
            self._on_append(self)
        return appended

    def _start_at_batch_holding_log_start(self, header: BatchHeader) -> None:
        """After `restart_at` a log start inside a batch (DeleteRecords put it there): the
        leader's first entry begins below it. The empty log restarts at that entry's base
        offset and keeps its log start offset, so nothing below it is served (Kafka's
        appendRecordsToFollowerOrFutureReplica restarts the log there too). The producer state
        from the leader leaves that batch out (`state_at` holds batches below the log start),
        so replaying it next is exact. Any other entry out of place is refused."""
        leo, last = self.log.log_end_offset, header.base_offset + header.last_offset_delta
        if not (leo == self.log.log_start_offset and header.base_offset < leo <= last):
            raise ValueError(
                f"{self.topic}-{self.index}: replicated entry at {header.base_offset}, log end offset is {leo}"
            )
        log.info(
            "%s-%d: the leader's log start %d lies inside the batch [%d, %d]: the log starts at %d, serving from %d",
            self.topic,
            self.index,
            leo,
            header.base_offset,
            last,
            header.base_offset,
            leo,
        )
        self.log.restart_at(header.base_offset, log_start_offset=leo)
        self.epochs.truncate_from_end(header.base_offset)
        self.epochs.sync()

    def truncate_to(self, offset: int) -> None:
        """Drop a divergent tail (follower, after comparing leader epochs with the leader).
        The epoch cache is cut even when the log is not: an epoch this replica started as
        leader but never wrote to begins at the log end, and would be reported to the new
        leader as the last fetched epoch round after round (divergence.py)."""
        if offset < self.log.log_end_offset:
            log.warning(
                "%s-%d: truncating divergent entries from offset %d (log end %d)",
                self.topic,
                self.index,
                offset,
                self.log.log_end_offset,
            )
            self.log.truncate_to(offset)
            self._reload_producers()
        self.epochs.truncate_from_end(offset)

    def restart_at(self, offset: int, producer_snapshot: bytes = b"") -> None:
        """Follower behind the leader's log start: drop everything and continue from there,
        with the leader's producer state at that offset (its snapshot file's bytes; empty:
        none known). SnapshotError, before anything changes, when they cannot be read."""
        state = (
            decode_snapshot_at(producer_snapshot, offset, source=f"{self.topic}-{self.index}: the leader's snapshot")
            if producer_snapshot
            else None
        )
        log.warning(
            "%s-%d: log end %d is below the leader's log start %d: starting over there (%s)",
            self.topic,
            self.index,
            self.log.log_end_offset,
            offset,
            "with the leader's producer state" if state is not None else "no producer state from the leader",
        )
        self._snapshot_is_state_at = None
        self.log.restart_at(offset)
        self.epochs.truncate_from_end(0)
        self.epochs.sync()  # the old log's entries lie below the new recovery point (epochs.py)
        self.producers.start_over(self.directory, offset, state)
        self.producers.on_high_watermark(self.log.high_watermark)

    def producer_state_at_log_start(self) -> bytes:
        """Leader: the producer state a follower starting over at the log start needs
        (`restart_at`), as snapshot bytes (producers/state.py `state_at`)."""
        ended = ((t.producer_id, t.first_offset, t.last_offset) for t in self.txn_index.all_entries())
        return encode_snapshot(self.producers.state_at(self.log.log_start_offset, ended))

    def install_leader_modes(self, snapshot: bytes, start_offset: int) -> None:
        """After `restart_at`: the leader's mode markers below its log start are ours too."""
        self.modes.install(snapshot, start_offset)

    def _reload_producers(self) -> None:
        self._snapshot_is_state_at = None
        start = self.producers.truncate_and_reload(self.directory, self.log.log_start_offset, self.log.log_end_offset)
        if start < self.log.log_end_offset:
            self.txn_index.truncate_from(start)  # what the replay appends again
        for entry in self.log.iter_entries(start):
            self._replay(entry.header, entry.base_offset, entry.data)
        self.producers.on_high_watermark(self.log.high_watermark)

    def append_records(
        self, records: memoryview, acks: int, verify_txn: bool = False, answer_within_s: float = 0.0
    ) -> AppendOutcome:
        """Validate, deduplicate and append a produce request's batches for this partition.
        `verify_txn`: a client's produce, whose batches open a transaction only with the
        coordinator's permit (KIP-890; the coordinator's own writes need none).
        `answer_within_s`: the request's timeout, how long a refusal may take to reach the
        client (producers/barriers.py)."""
        validated = log_validator.validate(records, self.settings, self._clock.now_ms())
        self._check_acks_for([v.header for v in validated], acks, answer_within_s)
        self._check_mode(diskless=False)
        return self._append(
            EntryKind.RECORDS,
            [(v.header, v.data) for v in validated],
            verify_txn=verify_txn,
            answer_within_s=answer_within_s,
        )

    def append_coordinates(
        self,
        batches_: list[tuple[bytes, WalRef]],
        acks: int,
        mode_offset: int,
        verify_txn: bool = False,
        admission: Admission | None = None,
        answer_within_s: float = 0.0,
    ) -> AppendOutcome:
        """Commit diskless batches: (61-byte header as the representative stamped it, where the
        batch lives). Same producer-state checks and offset assignment as append_records.
        `mode_offset`: the last mode marker the representative knew of when it accepted them;
        `admission`: how the representative took them, checked against newer
        representatives of the AZ and the leader epoch (representation_fence.py);
        `answer_within_s`: as for append_records."""
        items = [(parse_header(head), head + encode_ref(ref)) for head, ref in batches_]
        self._check_acks_for([header for header, _data in items], acks, answer_within_s)
        self._check_mode(diskless=True)
        self._check_accepted_since(mode_offset)
        if admission is not None:
            # Sequenced batches need no fence: the producer state keeps them in sequence order.
            self.representation.admit(admission, self.leader_epoch, refuse=items[0][0].producer_id < 0)
        return self._append(EntryKind.COORDINATES, items, verify_txn=verify_txn, answer_within_s=answer_within_s)

    def _check_accepted_since(self, mode_offset: int) -> None:
        """Refuse WAL batches accepted before the last switch to classic (diskless, classic,
        diskless again while their object was uploading): the classic range may already hold
        later batches of their producers, even ones sent after them on the same connection,
        and a Kafka leader handles a connection's requests in order. Refused, not appended,
        they are sent again after that range. The representative knew the markers up to
        `mode_offset` (recorded in the partition state only once committed, so every marker
        appended after it accepted the batches lies above it)."""
        switched = self.modes.last_switch_to_classic()
        if switched > mode_offset:
            raise ApiError(
                ErrorCode.NOT_LEADER_OR_FOLLOWER,
                f"{self.topic}-{self.index} switched to classic at offset {switched} after these batches were "
                f"accepted (their representative knew its mode up to offset {mode_offset}): refresh metadata and retry",
            )

    def grant_txn_permit(self, producer_id: int, producer_epoch: int) -> None:
        """The transaction coordinator's word that this partition is in the producer's
        ongoing transaction (producers/state.py rule 17); only a leader checks permits."""
        self.check_leader()
        self.producers.grant(producer_id, producer_epoch)

    def _check_acks_for(self, headers: list[BatchHeader], acks: int, answer_within_s: float) -> None:
        """check_acks; too few in-sync replicas or not (yet) the leader holds back the
        producers' later batches until they retry these: a later one would land once the ISR
        is back, leaving a gap, or be answered OUT_OF_ORDER_SEQUENCE_NUMBER once this broker
        leads, on which librdkafka bumps its epoch and sends every unacknowledged message of
        every partition again, possibly persisted ones too (librdkafka issue 4953)."""
        try:
            self.check_acks(acks)
        except ApiError as exc:
            if exc.code in (ErrorCode.NOT_ENOUGH_REPLICAS, ErrorCode.NOT_LEADER_OR_FOLLOWER):
                for header in headers:
                    self.barriers.failed(None, header, exc.code, answer_within_s=answer_within_s)
            raise

    def check_acks(self, acks: int) -> None:
        self.check_leader()
        if acks == -1 and self.isr_size < self.settings.min_insync_replicas:
            raise ApiError(
                ErrorCode.NOT_ENOUGH_REPLICAS,
                f"in-sync replicas {self.isr_size} < min.insync.replicas={self.settings.min_insync_replicas}",
            )

    def _append(
        self,
        kind: EntryKind,
        items: Sequence[tuple[BatchHeader, memoryview | bytearray | bytes]],
        end_txn: EndTxn | None = None,
        verify_txn: bool = False,
        answer_within_s: float = 0.0,
    ) -> AppendOutcome:
        """Deduplicate against producer state and append, all batches or none (as Kafka
        appends a partition's record set): if a later batch is refused or its write fails,
        the earlier ones are cut off again. A duplicate answers with its offsets.
        `end_txn`: the items are one transaction marker with this content."""
        first_offset = -1
        end_offset = 0  # after the last batch appended, or the last duplicate's original offsets
        appended = 0
        append_time = items[0][0].max_timestamp if self.settings.log_append_time and items else -1
        start = self.log.log_end_offset
        try:
            for header, data in items:
                if end_txn is None and self.barriers and (held := self._held_back(header)) is not None:
                    raise ApiError(
                        held.error,
                        f"{self.topic}-{self.index}: an earlier batch of producer {header.producer_id} "
                        f"(sequence {held.first_sequence}) failed here ({held.error.name}): retry it first",
                    )
                if end_txn is None:
                    verdict = self.producers.check(header, verify_txn)
                else:
                    verdict = self.producers.check_marker(
                        header.producer_id, header.producer_epoch, end_txn.coordinator_epoch
                    )
                if isinstance(verdict, DuplicateBatch):
                    if first_offset < 0:
                        first_offset = verdict.base_offset
                    end_offset = max(end_offset, verdict.last_offset + 1)
                    continue
                if verdict is not None:
                    raise ApiError(verdict, self._refusal(header, verdict))
                result = self.log.append(kind, header, data, self.leader_epoch)
                self._index_completed(
                    self.producers.on_append(header, result.base_offset, header.max_timestamp, end_txn)
                )
                if first_offset < 0:
                    first_offset = result.base_offset
                end_offset = self.log.log_end_offset
                appended += header.size
        except BaseException as exc:
            if self.log.log_end_offset > start:
                self._roll_back(start)
            if isinstance(exc, LOG_STORAGE_FAILURES):  # the disk, not the request: retriable, as Kafka says
                error = wire_error(
                    exc, f"{self.topic}-{self.index}: the log could not be written, nothing was appended"
                )
                for header, _data in items:
                    self.barriers.failed(None, header, error.code, answer_within_s=answer_within_s)
                raise error from exc
            raise
        if appended:
            self.advance_high_watermark()
            self._on_append(self)
        return AppendOutcome(first_offset, append_time, self.log.log_start_offset, appended, end_offset)

    def _held_back(self, header: BatchHeader) -> Barrier | None:
        """The barrier that refuses `header`'s batch, if its producer's failed batch is still
        missing: one that follows the producer's last batch here in sequence finds nothing
        missing (the failed one reached the log another way, typically replicated from the
        leader that took it after this broker had refused it as a follower)."""
        held = self.barriers.check(None, header)
        if held is not None and self.producers.continues(header):
            self.barriers.acknowledged(None, header)
            return None
        return held

    def _refusal(self, header: BatchHeader, verdict: ErrorCode) -> str:
        what = f"producer {header.producer_id} epoch {header.producer_epoch} sequence {header.base_sequence}"
        if verdict == ErrorCode.NOT_ENOUGH_REPLICAS:  # producers/state.py rule 17
            return (
                f"{what}: {self.topic}-{self.index} is not verified in the producer's ongoing transaction "
                "(AddPartitionsToTxn first; a retry succeeds once the coordinator has granted it)"
            )
        return f"{what}: {verdict.name}"

    def _roll_back(self, offset: int) -> None:
        """Cut off what a failed append wrote (nobody saw it: no await in between). If even
        that fails, the entries stay and are exposed like any append, so that the log, the
        high watermark and the waiters agree; the producer still gets the error."""
        try:
            self.log.truncate_to(offset)
            self._reload_producers()
        except Exception:
            log.exception("%s-%d: could not cut a failed append back to offset %d", self.topic, self.index, offset)
            self.advance_high_watermark()
            self._on_append(self)

    def update_settings(self, settings: TopicSettings) -> None:
        self.settings = settings
        self.log.update_config(settings.log)

    def close(self) -> None:
        self.close_durably()
        self.log.release_files()

    def close_durably(self) -> None:
        """Everything close() writes (see PartitionLog.close_durably), safe on a worker thread
        once nothing else uses the partition."""
        self.txn_index.flush(self.log.segment_base_offsets[-1])
        if self._snapshot_is_state_at != self.log.log_end_offset:  # else idle since its open: nothing to write
            self.producers.take_snapshot(self.directory, self.log.log_end_offset)
        self.log.close_durably()
