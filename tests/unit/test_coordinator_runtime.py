"""The coordinator runtime's generic machinery, without consumer groups: the shard lifecycle
table, keyed timers, and load / write / compact / unload over a fake internal partition."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest

from broker.coordinator.lifecycle import (
    ALLOWED_TRANSITIONS,
    IllegalShardTransition,
    ShardState,
    on_leadership,
    transition,
)
from broker.coordinator.record_batches import Record, build_batch
from broker.coordinator.runtime import CoordinatorRuntime
from broker.coordinator.timers import ShardTimers
from broker.protocol.errors import ApiError, ErrorCode

S = ShardState


# -- lifecycle ------------------------------------------------------------------------------
def test_the_lifecycle_allows_exactly_its_table() -> None:
    for current in ShardState:
        for target in ShardState:
            if target in ALLOWED_TRANSITIONS[current]:
                assert transition(current, target) is target
            else:
                with pytest.raises(IllegalShardTransition):
                    transition(current, target)


@pytest.mark.parametrize(
    ("current", "leads", "wanted"),
    [
        (S.UNLOADED, True, S.LOADING),
        (S.FAILED, True, S.LOADING),
        (S.ACTIVE, True, None),
        (S.LOADING, True, None),  # a new epoch while leading: nothing to reload
        (S.ACTIVE, False, S.UNLOADED),
        (S.FAILED, False, S.UNLOADED),
        (S.LOADING, False, S.UNLOADED),
        (S.UNLOADED, False, None),
    ],
)
def test_what_a_leadership_change_asks_for(current: ShardState, leads: bool, wanted: ShardState | None) -> None:
    assert on_leadership(current, leads) is wanted
    if wanted is not None:
        transition(current, wanted)  # and the table allows it


# -- timers ---------------------------------------------------------------------------------
def test_timers_fire_once_when_due_and_go_with_their_shard() -> None:
    fired: list[tuple[str, int]] = []
    timers = ShardTimers(lambda: 0)
    timers.schedule(0, "a", 10, lambda now: fired.append(("a", now)))
    timers.schedule(0, "a", 20, lambda now: fired.append(("a2", now)))  # replaces the key's timer
    timers.schedule(1, "b", 15, lambda now: fired.append(("b", now)))
    timers.schedule(2, "c", 5, lambda now: fired.append(("c", now)))
    timers.cancel_shard(2)
    assert timers.next_deadline_ms() == 15
    timers.fire_due(16)
    assert fired == [("b", 16)]
    timers.fire_due(30)
    timers.fire_due(40)
    assert fired == [("b", 16), ("a2", 30)]
    assert timers.next_deadline_ms() is None


# -- runtime over a fake partition ----------------------------------------------------------
@dataclass
class FakeLog:
    batches: list[tuple[int, bytes]] = field(default_factory=list)  # (base offset, batch)
    ends: list[int] = field(default_factory=list)
    log_start_offset: int = 0
    log_end_offset: int = 0
    high_watermark: int = 0

    def iter_entries(self, start: int) -> Any:
        for (_base, data), end in zip(self.batches, self.ends):
            if end > start:
                yield SimpleNamespace(data=data, last_offset=end - 1)

    def delete_records_before(self, offset: int) -> None:
        self.log_start_offset = offset


class FakePartition:
    def __init__(self) -> None:
        self.topic, self.index, self.leader_state, self.leader_epoch = "__internal", 0, object(), 1
        self.log = FakeLog()
        self.producers = SimpleNamespace(delete_snapshots_before=lambda *_: None)
        self.directory = None
        self.replicated_to: asyncio.Event | None = None

    def append_records(self, data: memoryview, acks: int, verify_txn: bool = False) -> Any:
        from kafka.record.default_records import DefaultRecordBatch

        count = sum(1 for _ in DefaultRecordBatch(bytes(data)))
        self.log.batches.append((self.log.log_end_offset, bytes(data)))
        self.log.log_end_offset += count
        self.log.ends.append(self.log.log_end_offset)
        return SimpleNamespace(end_offset=self.log.log_end_offset)

    async def wait_replicated(self, end_offset: int, timeout_s: float) -> None:
        if self.log.high_watermark < end_offset:
            raise ApiError(ErrorCode.REQUEST_TIMED_OUT, "not replicated")


class KeyValueShard:
    """A last-value-per-key store: the smallest shard there is."""

    def __init__(self) -> None:
        self.latest: dict[bytes, bytes] = {}
        self.exposed_to = -1
        self.events: list[str] = []
        self.legacy = False  # replay saw a key starting with b"old:" (an older format)

    def replay(self, end_offset: int, records: list[Record]) -> None:
        self.put(records)

    def put(self, records: list[Record]) -> None:
        for key, value in records:
            self.legacy |= key.startswith(b"old:")
            if value is None:
                self.latest.pop(key, None)
            else:
                self.latest[key] = value

    def replay_transactional(self, first_offset: int, end_offset: int, producer_id: int, records: list[Record]) -> None:
        raise AssertionError("no transactional batches here")

    def replay_marker(self, end_offset: int, producer_id: int, commit: bool) -> None:
        raise AssertionError("no markers here")

    def compaction_floor(self) -> int | None:
        return None

    def holds_legacy_records(self) -> bool:
        return self.legacy

    def on_loaded(self) -> None:
        self.events.append("loaded")

    def on_replicated(self, high_watermark: int) -> None:
        self.exposed_to = high_watermark

    def live_records(self) -> list[Record]:
        return list(self.latest.items())

    def on_unloaded(self) -> None:
        self.events.append("unloaded")


def make_runtime(
    partition: FakePartition, min_records: int = 100
) -> tuple[CoordinatorRuntime[KeyValueShard], list[KeyValueShard]]:
    made: list[KeyValueShard] = []

    def new_shard(index: int) -> KeyValueShard:
        made.append(KeyValueShard())
        return made[-1]

    runtime = CoordinatorRuntime(
        "__internal",
        lambda index: partition,
        new_shard,
        lambda: 0,  # type: ignore[arg-type]
        write_timeout_ms=10,
        compaction_min_records=min_records,
    )
    return runtime, made


def test_load_replays_the_log_and_unload_drops_the_shard_and_its_timers() -> None:
    partition = FakePartition()
    partition.append_records(memoryview(build_batch([(b"k", b"1"), (b"j", b"2")], 0)), acks=1)
    partition.append_records(memoryview(build_batch([(b"k", b"3")], 0)), acks=1)
    partition.log.high_watermark = 2
    runtime, made = make_runtime(partition)
    runtime.on_role_changed(partition)  # type: ignore[arg-type]
    shard = runtime.shard(0)
    assert shard is made[0] and shard.latest == {b"k": b"3", b"j": b"2"} and shard.exposed_to == 2
    with pytest.raises(ApiError) as loading:  # loaded up to 3, replicated up to 2
        runtime.require_loaded_state_replicated(0)
    assert loading.value.code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
    runtime.timers.schedule(0, "t", 5, lambda now: None)
    runtime.on_role_changed(partition)  # type: ignore[arg-type]  # leading still: no reload
    assert runtime.shards() == [shard]
    partition.leader_state = None
    runtime.on_role_changed(partition)  # type: ignore[arg-type]
    assert runtime.shard(0) is None and shard.events == ["loaded", "unloaded"]
    assert runtime.timers.next_deadline_ms() is None
    with pytest.raises(ApiError):
        runtime.append(0, [(b"k", b"4")], lambda end: None)


def test_a_failed_load_is_retried_when_leadership_comes_back() -> None:
    partition = FakePartition()
    partition.append_records(memoryview(build_batch([(b"k", b"1")], 0)), acks=1)
    runtime, made = make_runtime(partition)
    working = runtime._new_shard

    def broken(end_offset: int, records: list[Record]) -> None:
        raise ValueError("unknown record version")

    runtime._new_shard = lambda index: SimpleNamespace(replay=broken)  # type: ignore[assignment, return-value]
    with pytest.raises(ValueError):
        runtime.on_role_changed(partition)  # type: ignore[arg-type]
    assert runtime.shard(0) is None
    runtime._new_shard = working
    runtime.on_role_changed(partition)  # type: ignore[arg-type]
    assert runtime.shard(0) is made[0]


def test_write_path_appends_tells_the_shard_then_exposes_only_what_is_replicated() -> None:
    async def scenario() -> None:
        partition = FakePartition()
        runtime, made = make_runtime(partition)
        runtime.on_role_changed(partition)  # type: ignore[arg-type]
        shard = made[0]
        records: list[Record] = [(b"k", b"1")]
        end = runtime.append(0, records, lambda end: shard.put(records))
        assert end == 1 and shard.latest == {b"k": b"1"}
        assert await runtime.replicated(0, end) == ErrorCode.REQUEST_TIMED_OUT and shard.exposed_to == 0
        partition.log.high_watermark = 1
        assert await runtime.replicated(0, end) is None and shard.exposed_to == 1

    asyncio.run(scenario())


def test_compaction_reappends_the_live_state_with_the_triggering_write_then_truncates_once_replicated() -> None:
    async def scenario() -> None:
        partition = FakePartition()
        runtime, made = make_runtime(partition, min_records=3)
        runtime.on_role_changed(partition)  # type: ignore[arg-type]
        shard = made[0]
        for i in range(4):  # the 4th write of the same key passes the threshold
            records: list[Record] = [(b"k", b"%d" % i)]
            runtime.append(0, records, lambda end: shard.put(records))
        assert partition.log.log_end_offset == 5  # 4 writes, then the live state: one record
        assert partition.log.batches[-1][1] == build_batch([(b"k", b"3")], 0)
        assert partition.log.log_start_offset == 0  # not replicated yet: the start stays
        partition.log.high_watermark = 5
        await asyncio.sleep(0)
        assert partition.log.log_start_offset == 4
        await runtime.stop()

    asyncio.run(scenario())


def test_a_log_with_records_of_an_older_format_is_rewritten_right_after_the_load() -> None:
    """An upgrade: the shard reads what an older broker wrote and says so; the runtime
    re-appends the live state (in the format written today) and, once that is replicated,
    moves the log start past the old records, with no write needed to trigger it."""

    async def scenario() -> None:
        partition = FakePartition()
        partition.append_records(memoryview(build_batch([(b"old:k", b"1"), (b"old:j", b"2")], 0)), acks=1)
        partition.append_records(memoryview(build_batch([(b"old:k", None)], 0)), acks=1)
        runtime, made = make_runtime(partition)
        runtime.on_role_changed(partition)  # type: ignore[arg-type]
        assert made[0].legacy and runtime.shard(0) is made[0]
        assert partition.log.batches[-1][1] == build_batch([(b"old:j", b"2")], 0)  # the live state again
        assert partition.log.log_end_offset == 4
        partition.log.high_watermark = 4
        await asyncio.sleep(0)
        assert partition.log.log_start_offset == 3
        await runtime.stop()
        # without older records nothing is rewritten at load
        fresh = FakePartition()
        fresh.append_records(memoryview(build_batch([(b"k", b"1")], 0)), acks=1)
        fresh_runtime, _ = make_runtime(fresh)
        fresh_runtime.on_role_changed(fresh)  # type: ignore[arg-type]
        assert fresh.log.log_end_offset == 1 and fresh.log.log_start_offset == 0

    asyncio.run(scenario())
