"""The coordinator runtime: what any coordinator that keeps its state in an internal classic
topic needs, whatever that state is (consumer groups today; transactions and share groups
next). Modelled on Kafka's coordinator-common `CoordinatorRuntime`.

Each partition of the internal topic has one shard (a `CoordinatorShard` the coordinator
supplies) going through `lifecycle.ShardState`:

- **Load.** When this broker becomes the partition's leader a new shard replays the log from
  its log start, batch by batch, then serves (ACTIVE). Until the high watermark reaches the
  log end it loaded, reads answer COORDINATOR_LOAD_IN_PROGRESS: what a predecessor
  acknowledged may not be replicated here yet (`require_loaded_state_replicated`).
- **Write path: append, replicate, expose.** `append` writes a batch with acks=1 and tells
  the shard (its "latest" view); `replicated` waits, like an acks=all produce, until the ISR
  holds it, then `expose` hands the shard the high watermark so readers see only what a
  failover cannot lose.
- **Compaction by re-append.** Once a partition holds more than `compaction_min_records`
  superseded records (and more than twice its live ones), the shard's live state as
  appended so far is appended again; once that re-append is replicated the log start moves
  past the old records (replicate, then truncate: a follower that takes over in between
  still holds everything). No side files, so followers get the same history. A partition
  whose log holds records of a format no longer written is compacted as soon as it is
  loaded, which rewrites it in the current format (an upgrade's first leader does it).
- **Timers** (`timers.ShardTimers`) are keyed by shard and cancelled when it unloads.
- **Unload.** When leadership moves the shard answers what is parked and is dropped; the new
  leader replays the log.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Generic, Iterable, Protocol, TypeVar

from ..protocol.batch import parse_header
from ..protocol.errors import ApiError, ErrorCode
from .lifecycle import ShardState, on_leadership, transition
from .record_batches import Record, build_batch, marker_commits, read_batch
from .timers import ShardTimers

if TYPE_CHECKING:
    from ..partition import Partition

log = logging.getLogger(__name__)

COMPACTION_CHUNK_RECORDS = 1000  # records per batch when compaction re-appends the live state


class CoordinatorShard(Protocol):
    """The state machine of one internal partition, as the runtime drives it."""

    def replay(self, end_offset: int, records: list[Record]) -> None:
        """Apply one batch read back while loading; `end_offset` is the offset after it."""

    def replay_transactional(self, first_offset: int, end_offset: int, producer_id: int, records: list[Record]) -> None:
        """A transactional batch of `producer_id` (read back, or just appended): its records
        take effect when the producer's COMMIT marker comes (`replay_marker`)."""

    def replay_marker(self, end_offset: int, producer_id: int, commit: bool) -> None:
        """A transaction marker in the partition (read back, or just appended by WriteTxnMarkers)."""

    def compaction_floor(self) -> int | None:
        """The first offset compaction must keep (records of open transactions, and live
        records `live_records` leaves where they are), None: any."""

    def holds_legacy_records(self) -> bool:
        """The replayed log holds records in a format this broker reads but no longer writes:
        the runtime compacts right after the load, so that what is left is the current format."""

    def on_loaded(self) -> None:
        """Every batch is replayed: build what replay collected, arm timers."""

    def on_replicated(self, high_watermark: int) -> None:
        """Expose the changes appended below `high_watermark`."""

    def live_records(self) -> list[Record]:
        """The live state as records, as appended so far: what compaction re-appends."""

    def on_unloaded(self) -> None:
        """Leadership moved (or the broker stops): answer what is parked; the shard is dropped."""


S = TypeVar("S", bound=CoordinatorShard)


@dataclass(slots=True)
class _CompactionStats:
    live_keys: set[bytes] = field(default_factory=set)
    records_since_compaction: int = 0

    def count(self, records: Iterable[Record]) -> None:
        for key, value in records:
            self.records_since_compaction += 1
            (self.live_keys.add if value is not None else self.live_keys.discard)(key)


@dataclass(slots=True)
class _Slot(Generic[S]):
    """What the runtime keeps of one internal partition."""

    state: ShardState = ShardState.UNLOADED
    shard: S | None = None  # set while ACTIVE
    stats: _CompactionStats = field(default_factory=_CompactionStats)
    loaded_to: int = 0  # the log end offset when this broker loaded the partition
    truncation: asyncio.Task[None] | None = None  # the log start move after a compaction


class CoordinatorRuntime(Generic[S]):
    def __init__(
        self,
        topic: str,
        partition: Callable[[int], "Partition"],
        new_shard: Callable[[int], S],
        now_ms: Callable[[], int],
        *,
        write_timeout_ms: int,
        compaction_min_records: int,
        verify_txn: bool = False,
    ) -> None:
        self.topic = topic
        self._verify_txn = verify_txn  # a producer's batch opens a transaction only with a permit (KIP-890)
        self._partition = partition
        self._new_shard = new_shard
        self._now_ms = now_ms
        self._write_timeout_s = write_timeout_ms / 1000
        self._compaction_min_records = compaction_min_records
        self._slots: dict[int, _Slot[S]] = {}
        self.timers = ShardTimers(now_ms)
        self._timer_task: asyncio.Task[None] | None = None

    # -- lifecycle -------------------------------------------------------------------------
    def start(self) -> None:
        self._timer_task = asyncio.get_running_loop().create_task(self.timers.run())

    async def stop(self) -> None:
        tasks = [t for t in (self._timer_task, *(s.truncation for s in self._slots.values())) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for index, slot in list(self._slots.items()):
            if slot.state is not ShardState.UNLOADED:
                self._unload(index)

    def on_role_changed(self, partition: "Partition") -> None:
        """Load the shard of a partition this broker now leads, unload one it no longer leads."""
        if partition.topic != self.topic:
            return
        index = partition.index
        slot = self._slots.setdefault(index, _Slot())
        target = on_leadership(slot.state, partition.leader_state is not None)
        if target is ShardState.LOADING:
            self._load(index, slot)
            log.debug("coordinating %s-%d", self.topic, index)  # one per partition: 50 on a fresh broker
        elif target is ShardState.UNLOADED:
            was_active = slot.state is ShardState.ACTIVE
            self._unload(index)
            if was_active:
                log.debug("no longer coordinating %s-%d", self.topic, index)

    def shard(self, index: int) -> S | None:
        """The shard of partition `index` if it is ACTIVE here."""
        slot = self._slots.get(index)
        return slot.shard if slot is not None else None

    def shards(self) -> list[S]:
        """Every ACTIVE shard."""
        return [slot.shard for slot in self._slots.values() if slot.shard is not None]

    def _load(self, index: int, slot: _Slot[S]) -> None:
        slot.state = transition(slot.state, ShardState.LOADING)
        try:
            partition = self._partition(index)
            shard = self._new_shard(index)
            stats = _CompactionStats()
            for entry in partition.log.iter_entries(partition.log.log_start_offset):
                header = parse_header(entry.data)
                if header.is_control:
                    shard.replay_marker(entry.last_offset + 1, header.producer_id, marker_commits(entry.data))
                    continue
                batch = list(read_batch(entry.data))
                stats.count(batch)
                if header.is_transactional:
                    first = entry.last_offset + 1 - len(batch)  # coordinator batches: one offset per record
                    shard.replay_transactional(first, entry.last_offset + 1, header.producer_id, batch)
                else:
                    shard.replay(entry.last_offset + 1, batch)
            shard.on_replicated(partition.log.high_watermark)
            loaded_to = partition.log.log_end_offset
            shard.on_loaded()
        except BaseException:
            self.timers.cancel_shard(index)
            slot.state = transition(slot.state, ShardState.FAILED)
            raise
        slot.shard, slot.stats, slot.loaded_to = shard, stats, loaded_to
        slot.state = transition(slot.state, ShardState.ACTIVE)
        if shard.holds_legacy_records():
            log.info("%s-%d holds records of an older format: rewriting its live state", self.topic, index)
            self._compact(index, slot, shard)

    def _unload(self, index: int) -> None:
        slot = self._slots[index]
        self._slots[index] = _Slot(state=transition(slot.state, ShardState.UNLOADED))
        if slot.shard is not None:
            slot.shard.on_unloaded()
        self.timers.cancel_shard(index)
        if slot.truncation is not None:
            slot.truncation.cancel()

    # -- write path: append, replicate, expose ---------------------------------------------
    def append(
        self,
        index: int,
        records: list[Record],
        on_appended: Callable[[int], None],
        producer: tuple[int, int, int] | None = None,
    ) -> int:
        """Append `records` to partition `index` and return its log end offset after them.
        `on_appended(end_offset)` runs before compaction may re-append the live state, so
        that state includes these records. `producer` (id, epoch, base sequence) makes the
        batch a transactional one of that producer (which, with `verify_txn`, needs the
        transaction coordinator's permit to open a transaction here, as a client's would)."""
        slot = self._slots.get(index)
        if slot is None or slot.shard is None:
            raise ApiError(ErrorCode.NOT_COORDINATOR, f"{self.topic}-{index} is not loaded here")
        batch = build_batch(records, self._now_ms(), producer)
        verify = self._verify_txn and producer is not None
        end = self._partition(index).append_records(memoryview(batch), acks=1, verify_txn=verify).end_offset
        on_appended(end)
        slot.stats.count(records)
        threshold = max(self._compaction_min_records, 2 * len(slot.stats.live_keys))
        if slot.stats.records_since_compaction > threshold:
            self._compact(index, slot, slot.shard)
        return end

    async def replicated(self, index: int, end_offset: int) -> ErrorCode | None:
        """Wait until partition `index` replicated its log below `end_offset`, like any
        acks=all write, and expose what it replicated; the error code to answer if it did not."""
        try:
            await self._partition(index).wait_replicated(end_offset, self._write_timeout_s)
        except ApiError as exc:
            return (
                ErrorCode.NOT_COORDINATOR
                if exc.code == ErrorCode.NOT_LEADER_OR_FOLLOWER
                else ErrorCode.REQUEST_TIMED_OUT
            )
        finally:
            self.expose(index)
        return None

    def expose(self, index: int) -> None:
        """Hand the ACTIVE shard of partition `index` its high watermark."""
        shard = self.shard(index)
        if shard is not None:
            shard.on_replicated(self._partition(index).log.high_watermark)

    def require_loaded_state_replicated(self, index: int) -> None:
        """Refuse a read while what this leader loaded is not all known to be replicated (its
        high watermark came back from a checkpoint, or its followers are away): an answer now
        could miss what its predecessor acknowledged."""
        loaded_to = self._slots[index].loaded_to if index in self._slots else 0
        if self._partition(index).log.high_watermark < loaded_to:
            raise ApiError(
                ErrorCode.COORDINATOR_LOAD_IN_PROGRESS,
                f"{self.topic}-{index} is replicated up to {self._partition(index).log.high_watermark}"
                f" of the {loaded_to} offsets loaded; retry",
            )

    # -- compaction ------------------------------------------------------------------------
    def _compact(self, index: int, slot: _Slot[S], shard: S) -> None:
        """Append the shard's live state again (as appended so far: the change that
        triggered compaction included), then, once that is replicated, move the log start
        past the records it supersedes."""
        partition = self._partition(index)
        live = shard.live_records()
        start = partition.log.log_end_offset
        for i in range(0, len(live), COMPACTION_CHUNK_RECORDS):
            batch = build_batch(live[i : i + COMPACTION_CHUNK_RECORDS], self._now_ms())
            partition.append_records(memoryview(batch), acks=1)
        end = partition.log.log_end_offset
        slot.stats = _CompactionStats({key for key, _ in live})
        log.info("compacted %s-%d: %d live records re-appended at offset %d", self.topic, index, len(live), start)
        if slot.truncation is not None:
            slot.truncation.cancel()  # this compaction's start is later and covers it
            slot.truncation = None
        floor = shard.compaction_floor()
        if floor is not None and floor < start:
            start = floor  # open transactions' records stay until their marker
        if partition.log.high_watermark >= end:  # a lone replica: replicated already
            _truncate_before(partition, start)
            return
        task = asyncio.get_running_loop().create_task(
            self._truncate_when_replicated(partition, partition.leader_epoch, start, end)
        )
        slot.truncation = task

        def forget(done: asyncio.Task[None]) -> None:
            if slot.truncation is done:
                slot.truncation = None

        task.add_done_callback(forget)

    async def _truncate_when_replicated(self, partition: "Partition", epoch: int, start: int, end: int) -> None:
        try:
            await partition.wait_replicated(end, self._write_timeout_s)
        except ApiError as exc:
            log.info(
                "%s-%d: compaction's re-append not replicated (%s); the log start stays",
                partition.topic,
                partition.index,
                exc.message,
            )
            return
        if partition.leader_state is not None and partition.leader_epoch == epoch:
            _truncate_before(partition, start)


def _truncate_before(partition: "Partition", offset: int) -> None:
    """Move the log start of a compacted partition, and drop the producer snapshots below it."""
    partition.log.delete_records_before(offset)
    partition.producers.delete_snapshots_before(partition.directory, partition.log.log_start_offset)
