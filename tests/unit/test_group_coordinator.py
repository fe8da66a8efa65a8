"""The coordinator over a real broker core (catalog, partition logs, metadata) in a temp
dir, without sockets: offsets and groups survive restarts, compaction bounds the replay,
expiry and topic deletion remove offsets."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from broker.broker import Broker
from broker.clock import ManualClock
from broker.config import load_config
from broker.groups.offsets_records import OFFSETS_TOPIC, partition_for
from broker.metadata.records import PartitionStateRecord
from broker.protocol.errors import ApiError, ErrorCode

START_MS = 1_800_000_000_000


async def start_core(data_dir: Path, clock: ManualClock, **overrides: str) -> Broker:
    config = load_config(overrides={"data.dir": str(data_dir), "metrics.listen": None, **overrides}, environ={})
    broker = Broker(config, clock)
    broker.cluster_id = "test"
    await broker.view.start()
    await broker.membership.start()
    await broker.replica_manager.start()
    await broker.controller.step()
    await broker.groups.start()
    return broker


async def stop_core(broker: Broker) -> None:
    await broker.groups.stop()
    await broker.membership.stop()
    await broker.view.stop()
    await broker.replica_manager.stop()
    await broker.store.close()
    if broker.data_dir is not None:
        broker.data_dir.close()


async def commit(
    broker: Broker,
    group: str,
    topic: str,
    partition: int,
    offset: int,
    generation: int = -1,
    member: str = "",
    metadata: str = "meta",
) -> list[int]:
    return await broker.groups.commit_offsets(
        group,
        member_id=member,
        group_instance_id=None,
        generation_id=generation,
        api_version=8,
        offsets=[(broker.catalog.get(topic), topic, partition, offset, -1, metadata, -1)],
    )


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock(START_MS)


def test_offsets_survive_restart_and_compaction_bounds_the_log(tmp_path: Path, clock: ManualClock) -> None:
    async def scenario() -> None:
        broker = await start_core(
            tmp_path, clock, **{"offsets.topic.compaction.min.records": "50", "offsets.topic.num.partitions": "3"}
        )
        await broker.catalog.create(broker.catalog.prepare("orders", 4, {}), broker.assign_replicas(range(4), 1))
        for i in range(500):
            assert await commit(broker, "g", "orders", i % 4, i) == [ErrorCode.NONE]
        log = broker.replica_manager.get(OFFSETS_TOPIC, partition_for("g", 3)).log
        assert log.log_start_offset > 0  # compaction moved the start
        assert log.log_end_offset - log.log_start_offset < 200  # replay is bounded by live state
        await stop_core(broker)
        again = await start_core(tmp_path, clock, **{"offsets.topic.compaction.min.records": "50"})
        found = again.groups.fetch_offsets("g", [("orders", [0, 1, 2, 3])])
        assert {p: v.offset for p, v in found["orders"].items()} == {0: 496, 1: 497, 2: 498, 3: 499}
        await stop_core(again)

    run(scenario())


def test_group_generation_survives_restart(tmp_path: Path, clock: ManualClock) -> None:
    async def scenario() -> None:
        broker = await start_core(tmp_path, clock, **{"group.initial.rebalance.delay.ms": "0"})
        join = await broker.groups.join(
            "g",
            member_id="",
            group_instance_id=None,
            client_id="c",
            client_host="/h",
            session_timeout_ms=10_000,
            rebalance_timeout_ms=10_000,
            protocol_type="consumer",
            protocols=[("range", b"m")],
        )
        assert join.error_code == ErrorCode.NONE and join.leader == join.member_id
        sync = await broker.groups.sync(
            "g",
            member_id=join.member_id,
            group_instance_id=None,
            generation_id=join.generation_id,
            assignments={join.member_id: b"a"},
        )
        assert sync.assignment == b"a"
        await stop_core(broker)
        again = await start_core(tmp_path, clock)
        description = again.groups.describe("g")
        assert description is not None and description.state == "Stable"
        assert [m.member_id for m in description.members] == [join.member_id]
        assert (
            await again.groups.heartbeat(
                "g", member_id=join.member_id, group_instance_id=None, generation_id=join.generation_id
            )
            == ErrorCode.NONE
        )
        await stop_core(again)

    run(scenario())


def test_offset_metadata_limit(tmp_path: Path, clock: ManualClock) -> None:
    async def scenario() -> None:
        broker = await start_core(tmp_path, clock, **{"offset.metadata.max.bytes": "4"})
        await broker.catalog.create(broker.catalog.prepare("t", 1, {}), broker.assign_replicas(range(1), 1))
        assert await commit(broker, "g", "t", 0, 1, metadata="1234") == [ErrorCode.NONE]
        assert await commit(broker, "g", "t", 0, 2, metadata="12345") == [ErrorCode.OFFSET_METADATA_TOO_LARGE]
        assert broker.groups.fetch_offsets("g", None)["t"][0].offset == 1
        await stop_core(broker)

    run(scenario())


def test_unknown_group_with_generation(tmp_path: Path, clock: ManualClock) -> None:
    async def scenario() -> None:
        broker = await start_core(tmp_path, clock)
        await broker.catalog.create(broker.catalog.prepare("t", 1, {}), broker.assign_replicas(range(1), 1))
        assert await commit(broker, "nobody", "t", 0, 1, generation=3, member="m") == [ErrorCode.ILLEGAL_GENERATION]
        assert await commit(broker, "simple", "t", 0, 1) == [ErrorCode.NONE]
        assert await commit(broker, "simple", "t", 5, 1) == [ErrorCode.UNKNOWN_TOPIC_OR_PARTITION]
        await stop_core(broker)

    run(scenario())


def test_expiry_and_topic_deletion_remove_offsets(tmp_path: Path, clock: ManualClock) -> None:
    async def scenario() -> None:
        broker = await start_core(tmp_path, clock, **{"offsets.retention.minutes": "1"})
        for name in ("keep", "drop"):
            await broker.catalog.create(broker.catalog.prepare(name, 1, {}), broker.assign_replicas(range(1), 1))
        await commit(broker, "a", "keep", 0, 7)
        await commit(broker, "b", "drop", 0, 9)
        await broker.catalog.delete("drop")
        assert broker.groups.fetch_offsets("b", None) == {}
        assert broker.groups.expire_offsets() == 0
        clock.advance(61_000)
        assert broker.groups.expire_offsets() == 1
        assert broker.groups.fetch_offsets("a", None) == {}
        await stop_core(broker)
        again = await start_core(tmp_path, clock)
        assert again.groups.fetch_offsets("a", None) == {} and again.groups.fetch_offsets("b", None) == {}
        await stop_core(again)

    run(scenario())


def test_every_acknowledged_commit_survives_a_reload_even_the_one_that_compacts(
    tmp_path: Path, clock: ManualClock
) -> None:
    """Regression (issue 11, defect 1): the commit that triggered compaction was re-appended
    with its old value after it (or left below the new log start), so a reload rolled it
    back; a key committed for the first time at that moment vanished."""

    async def scenario() -> None:
        overrides = {"offsets.topic.compaction.min.records": "5", "offsets.topic.num.partitions": "1"}
        broker = await start_core(tmp_path, clock, **overrides)
        await broker.catalog.create(broker.catalog.prepare("orders", 16, {}), broker.assign_replicas(range(16), 1))
        expected: dict[int, int] = {}
        for i in range(24):  # several compactions; every commit is checked by a fresh replay
            partition = i % 3 if i % 4 else 3 + i // 4  # re-commits of old keys and first commits of new ones
            assert await commit(broker, "g", "orders", partition, 100 + i) == [ErrorCode.NONE]
            expected[partition] = 100 + i
            await stop_core(broker)
            broker = await start_core(tmp_path, clock, **overrides)
            found = broker.groups.fetch_offsets("g", None)["orders"]
            assert {p: v.offset for p, v in found.items() if v is not None} == expected, f"after commit {i}"
        assert broker.replica_manager.get(OFFSETS_TOPIC, 0).log.log_start_offset > 0  # compaction did run
        await stop_core(broker)

    run(scenario())


def _lead_with_lagging_follower(broker: Broker) -> None:
    """Make __consumer_offsets-0 a 2-replica partition whose follower (1) never fetched."""
    partition = broker.replica_manager.get(OFFSETS_TOPIC, 0)
    partition.make_leader(
        0, PartitionStateRecord(1, [0, 1], 0, partition.leader_epoch + 1, [0, 1]), partition.state_revision + 1
    )


def _follower_catches_up(broker: Broker, clock: ManualClock) -> None:
    partition = broker.replica_manager.get(OFFSETS_TOPIC, 0)
    assert partition.leader_state is not None
    leo = partition.log.log_end_offset
    partition.leader_state.on_follower_fetch(1, leo, leo, clock.now_ms())
    partition.advance_high_watermark()


def test_a_commit_is_visible_only_once_replicated(tmp_path: Path, clock: ManualClock) -> None:
    """Regression (issue 11, defect 1): OffsetCommit updated memory before the ISR held the
    write, so OffsetFetch could return an offset that a failover then lost."""

    async def scenario() -> None:
        broker = await start_core(
            tmp_path, clock, **{"offsets.topic.num.partitions": "1", "offsets.commit.timeout.ms": "50"}
        )
        await broker.catalog.create(broker.catalog.prepare("t", 1, {}), broker.assign_replicas(range(1), 1))
        assert await commit(broker, "g", "t", 0, 5) == [ErrorCode.NONE]
        _lead_with_lagging_follower(broker)
        assert await commit(broker, "g", "t", 0, 7) == [ErrorCode.REQUEST_TIMED_OUT]
        assert broker.groups.fetch_offsets("g", None)["t"][0].offset == 5
        _follower_catches_up(broker, clock)
        assert broker.groups.fetch_offsets("g", None)["t"][0].offset == 7  # replicated after all: now visible
        await stop_core(broker)

    run(scenario())


def test_compaction_moves_the_log_start_only_after_the_reappend_is_replicated(
    tmp_path: Path, clock: ManualClock
) -> None:
    """Regression (issue 11, defect 1): compaction moved the log start before its re-append
    was replicated, so a follower with a partial copy could take over without the live state."""

    async def scenario() -> None:
        broker = await start_core(
            tmp_path,
            clock,
            **{
                "offsets.topic.num.partitions": "1",
                "offsets.topic.compaction.min.records": "5",
                "offsets.commit.timeout.ms": "5000",
            },
        )
        await broker.catalog.create(broker.catalog.prepare("t", 1, {}), broker.assign_replicas(range(1), 1))
        _lead_with_lagging_follower(broker)
        log = broker.replica_manager.get(OFFSETS_TOPIC, 0).log
        commits = [asyncio.create_task(commit(broker, "g", "t", 0, i)) for i in range(8)]  # compacts on the way
        await asyncio.sleep(0)
        assert log.log_end_offset > 8 and log.log_start_offset == 0  # re-appended, start kept
        _follower_catches_up(broker, clock)
        assert [await c for c in commits] == [[ErrorCode.NONE]] * 8
        for _ in range(3):
            await asyncio.sleep(0)
        assert log.log_start_offset > 0
        assert broker.groups.fetch_offsets("g", None)["t"][0].offset == 7
        await stop_core(broker)

    run(scenario())


def test_offsets_loaded_above_the_high_watermark_are_not_answered_until_replicated(
    tmp_path: Path, clock: ManualClock
) -> None:
    """Found by the simulation (cluster seed 70): a coordinator that restarted (its high
    watermark back from a stale checkpoint) while its followers were cut off answered
    OffsetFetch without the offsets its previous incarnation had acknowledged, so consumers
    would have reset. Until what it loaded is replicated it answers COORDINATOR_LOAD_IN_PROGRESS."""

    async def scenario() -> None:
        broker = await start_core(
            tmp_path, clock, **{"offsets.topic.num.partitions": "1", "offsets.commit.timeout.ms": "50"}
        )
        await broker.catalog.create(broker.catalog.prepare("t", 1, {}), broker.assign_replicas(range(1), 1))
        assert await commit(broker, "g", "t", 0, 5) == [ErrorCode.NONE]
        _lead_with_lagging_follower(broker)
        await commit(broker, "g", "t", 0, 7)  # in the log, above the high watermark
        partition = broker.replica_manager.get(OFFSETS_TOPIC, 0)
        partition.make_follower(
            PartitionStateRecord(1, [0, 1], 1, partition.leader_epoch + 1, [0, 1]), partition.state_revision + 1
        )
        broker.groups._on_role_changed(partition)
        _lead_with_lagging_follower(broker)  # leader again: it loads the log, 7 included
        broker.groups._on_role_changed(partition)
        with pytest.raises(ApiError) as loading:
            broker.groups.fetch_offsets("g", None)
        assert loading.value.code == ErrorCode.COORDINATOR_LOAD_IN_PROGRESS
        _follower_catches_up(broker, clock)
        assert broker.groups.fetch_offsets("g", None)["t"][0].offset == 7
        await stop_core(broker)

    run(scenario())
