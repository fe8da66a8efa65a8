"""A follower that starts over above the leader's local log (restart_at) learns the leader's
tiered segments from the OFFSET_OUT_OF_RANGE answer, so it serves and, as a new leader,
keeps the tiered range the old leader committed (regression: without the snapshot a follower
that fell behind the leader's local start forgot every segment tiered below it). Followers
learn a log start offset that DeleteRecords moved into the tiered range from every answer,
and keep it across a restart."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

from kafka.protocol.admin import DeleteRecordsRequest

from broker.clock import SystemClock
from broker.config import load_config
from broker.handlers import delete_records as delete_records_handler
from broker.log.markers import EVENT_VERSION, RemoteSegmentEvent, RemoteSegmentState
from broker.metadata.records import PartitionStateRecord
from broker.metrics import BrokerMetrics
from broker.protocol.errors import ErrorCode
from broker.replication.fetcher import ReplicaFetcher
from broker.replication.messages import (
    REPLICATION_VERSION,
    FetchedPartition,
    FetchPartition,
    ReplicaFetchRequest,
    ReplicaFetchResponse,
)
from tests.unit.test_partition import open_partition
from tests.unit.test_replication_leader_service import TOPIC_ID, Rig


def test_out_of_range_answer_carries_the_tiered_segments_and_the_follower_installs_them(tmp_path: Path) -> None:
    async def scenario() -> None:
        rig = Rig(tmp_path / "leader", isr=(0,))
        for _ in range(4):
            rig.append()
        tiered = RemoteSegmentEvent(EVENT_VERSION, RemoteSegmentState.COPY_SEGMENT_FINISHED, "seg-1", 0, 7, 3, 100, 1)
        rig.partition.append_marker(tiered)
        assert [s.segment_id for s in rig.partition.remote_segments.readable] == ["seg-1"]
        rig.partition.log.delete_records_before(8)  # the local log now starts above the tiered range

        answer = await rig.fetch(0)
        assert answer.error_code == ErrorCode.OFFSET_OUT_OF_RANGE and answer.remote_segments

        follower = open_partition(tmp_path / "follower", rig.clock)
        follower.restart_at(answer.log_start_offset)
        follower.remote_segments.install(answer.remote_segments, answer.log_start_offset)
        assert [(s.segment_id, s.base_offset, s.end_offset) for s in follower.remote_segments.readable] == [
            ("seg-1", 0, 7)
        ]
        assert follower.log_start_offset == 0  # the tiered start, as on the leader
        follower.close()
        reopened = open_partition(tmp_path / "follower", rig.clock)
        assert [s.segment_id for s in reopened.remote_segments.readable] == ["seg-1"]

    asyncio.run(scenario())


def test_answer_within_the_log_carries_no_snapshot(tmp_path: Path) -> None:
    async def scenario() -> None:
        rig = Rig(tmp_path, isr=(0,))
        rig.append()
        answer = await rig.fetch(0, wait_s=5.0)
        assert answer.error_code == 0 and answer.remote_segments == b""

    asyncio.run(scenario())


async def delete_records(
    rig: Rig, offset: int, live: tuple[int, ...] = (0, 1), timeout_ms: int = 10_000
) -> tuple[int, int]:
    """DeleteRecords(before `offset`) through the handler, at the rig's leader, with the
    brokers `live` registered: (error code, low watermark)."""
    topic, part = (
        DeleteRecordsRequest.DeleteRecordsTopic,
        DeleteRecordsRequest.DeleteRecordsTopic.DeleteRecordsPartition,
    )
    request = DeleteRecordsRequest(
        topics=[topic(name="t", partitions=[part(partition_index=0, offset=offset)])], timeout_ms=timeout_ms
    )
    broker = SimpleNamespace(
        replica_manager=rig,
        catalog=SimpleNamespace(get=lambda name: None),
        waiters=rig.waiters,
        view=SimpleNamespace(brokers=dict.fromkeys(live)),
    )
    header = SimpleNamespace(api_version=2, peer="p", client_id="c", forwarded=False)
    [answer] = (await delete_records_handler.handle(broker, header, request)).topics[0].partitions  # type: ignore[arg-type]
    return answer.error_code, answer.low_watermark


class _LeaderPool:
    """The follower's RPC pool, wired to the rig's real leader service (no sockets)."""

    address = "leader:9093"

    def __init__(self, rig: Rig) -> None:
        self._rig = rig

    def get(self, node_id: int, host: str, port: int) -> "_LeaderPool":
        return self

    async def call(self, request: ReplicaFetchRequest, timeout_s: float) -> ReplicaFetchResponse:
        return await self._rig.service.handle(request)


def test_a_follower_learns_a_log_start_moved_into_the_tiered_range_and_keeps_it(tmp_path: Path) -> None:
    """Regression (issue 26, F3): a log start offset that DeleteRecords moved inside the tiered
    range (below the leader's local log, which does not change) never reached the followers:
    they kept serving the deleted records from the tiered segments, and as a new leader would
    have answered EARLIEST = the tiered start again."""

    async def scenario() -> None:
        rig = Rig(tmp_path / "leader")  # broker 0 leads in epoch 3, broker 1 follows
        config = load_config(overrides={"node.id": "1", "metrics.listen": None}, environ={})
        view = SimpleNamespace(brokers={0: SimpleNamespace(rpc_host="leader", rpc_port=9093)})
        cross_az = SimpleNamespace(replicated=lambda address, nbytes: None)
        fetcher = ReplicaFetcher(config, view, _LeaderPool(rig), BrokerMetrics(), cross_az, SystemClock())  # type: ignore[arg-type]
        follower = open_partition(tmp_path / "follower", rig.clock)
        follower.topic_id = str(TOPIC_ID)
        follower.make_follower(PartitionStateRecord(1, [0, 1], 0, 3, [0, 1]), 2)
        fetcher.on_role_changed(follower)

        async def caught_up(what: str) -> None:
            for _ in range(200):
                if follower.log.high_watermark == rig.partition.log.high_watermark == rig.partition.log.log_end_offset:
                    return
                await asyncio.sleep(0.01)
            raise AssertionError(f"the follower did not catch up: {what}")

        try:
            for _ in range(6):
                rig.append()  # offsets 0..11
            for state in (RemoteSegmentState.COPY_SEGMENT_STARTED, RemoteSegmentState.COPY_SEGMENT_FINISHED):
                rig.partition.append_marker(RemoteSegmentEvent(EVENT_VERSION, state, "seg-1", 0, 5, 3, 100, 1))
                rig.partition.append_marker(RemoteSegmentEvent(EVENT_VERSION, state, "seg-2", 6, 9, 3, 100, 1))
            await caught_up("the markers")
            assert [s.segment_id for s in follower.remote_segments.readable] == ["seg-1", "seg-2"]
            rig.partition.log.delete_records_before(10)  # local retention on the leader: [0, 10) is tiered only

            # inside seg-2; answered once the follower has it (Kafka's DelayedDeleteRecords)
            assert await delete_records(rig, 7) == (ErrorCode.NONE, 7)
            assert follower.log_start_offset == 7
            assert follower.remote_segments.segment_for(6) is None and follower.remote_segments.segment_for(7)
            assert [s.segment_id for s in follower.remote_segments.below_log_start()] == ["seg-1"]
        finally:
            await fetcher.stop()
        follower.close()
        reopened = open_partition(tmp_path / "follower", rig.clock)
        assert reopened.log_start_offset == 7, "the follower forgot the log start offset on restart"

    asyncio.run(scenario())


def test_a_follower_keeps_a_log_start_it_learnt_before_the_tiered_segment_below_it_applies(tmp_path: Path) -> None:
    """Regression (tiered_delete_records seeds 120293, 120231): a follower learnt the leader's
    log start (DeleteRecords) in an answer whose high watermark was still below the markers
    of a segment tiered under it. It compared the leader's value with its own log start, then
    its local start (nothing tiered known yet, and the local log had just moved there), so it
    never recorded it; once the markers applied, the segment was readable again and the log
    start fell back to its base. Elected leader before another answer, it answered EARLIEST
    with the old start and OFFSET_OUT_OF_RANGE for the deleted offsets after that segment (a
    reader from EARLIEST looped), and a DeleteRecords answered for it was lost."""

    async def scenario() -> None:
        rig = Rig(tmp_path / "leader", isr=(0,))
        for _ in range(6):
            rig.append()  # offsets 0..11
        for state in (RemoteSegmentState.COPY_SEGMENT_STARTED, RemoteSegmentState.COPY_SEGMENT_FINISHED):
            rig.partition.append_marker(RemoteSegmentEvent(EVENT_VERSION, state, "seg-1", 0, 5, 3, 100, 1))
        copied = await rig.fetch(0)  # offsets 0..13, the markers at 12 and 13
        assert rig.partition.delete_records_before(8) == 8

        config = load_config(overrides={"node.id": "1", "metrics.listen": None}, environ={})
        fetcher = ReplicaFetcher(config, SimpleNamespace(brokers={}), None, BrokerMetrics(), None, SystemClock())  # type: ignore[arg-type]
        follower = open_partition(tmp_path / "follower", rig.clock)
        follower.make_follower(PartitionStateRecord(1, [0, 1], 0, 3, [0, 1]), 2)
        answer = FetchedPartition(
            str(TOPIC_ID), 0, 0, 10, 8, entries=copied.entries, partition_log_start_offset=8
        )  # the leader's high watermark as it was when it sent these: below the markers
        assert fetcher._apply(follower, answer)
        assert follower.log_start_offset == 8 and not follower.remote_segments.readable

        # the leader dies; the follower leads and its high watermark passes the markers
        follower.make_leader(1, PartitionStateRecord(1, [0, 1], 1, 4, [1]), 3)
        assert follower.log.high_watermark == 14 and follower.remote_segments.segment_for(0) is None
        assert follower.log_start_offset == 8, "the log start fell back below what DeleteRecords deleted"
        follower.close()
        assert open_partition(tmp_path / "follower", rig.clock).log_start_offset == 8

    asyncio.run(scenario())


def test_a_follower_that_starts_over_learns_the_log_start_with_the_tiered_segments(tmp_path: Path) -> None:
    async def scenario() -> None:
        rig = Rig(tmp_path / "leader", isr=(0,))
        for _ in range(4):
            rig.append()
        tiered = RemoteSegmentEvent(EVENT_VERSION, RemoteSegmentState.COPY_SEGMENT_FINISHED, "seg-1", 0, 7, 3, 100, 1)
        rig.partition.append_marker(tiered)
        rig.partition.log.delete_records_before(8)
        assert await delete_records(rig, 5, live=(0,)) == (ErrorCode.NONE, 5)  # broker 1 is down

        answer = await rig.fetch(0)
        follower = open_partition(tmp_path / "follower", rig.clock)
        follower.restart_at(answer.log_start_offset)
        follower.remote_segments.install(answer.remote_segments, answer.log_start_offset)
        assert follower.log_start_offset == 5

    asyncio.run(scenario())


def test_delete_records_waits_for_the_followers_on_live_brokers(tmp_path: Path) -> None:
    """Regression (found by the tiered_delete_records simulation, seeds 101, 105, 108 and 11
    more of 100..199): DeleteRecords answered as soon as the leader moved its log start; the
    leader died before a follower learned it, the follower took over and served the deleted
    records again. As Kafka's DelayedDeleteRecords, the answer now waits for every replica on
    a live broker (the low watermark is the smallest log start among them)."""

    async def scenario() -> None:
        rig = Rig(tmp_path)  # broker 1 follows, and has not fetched yet
        for _ in range(4):
            rig.append()
        await rig.fetch(8, last_epoch=3)  # follower 1 holds all of it: the high watermark is 8
        assert await delete_records(rig, 4, timeout_ms=50) == (ErrorCode.REQUEST_TIMED_OUT, -1)
        assert rig.partition.log_start_offset == 4, "the leader keeps it all the same"
        assert await delete_records(rig, 4, live=(0,)) == (ErrorCode.NONE, 4), "a dead broker holds nothing back"

        waiting = asyncio.ensure_future(delete_records(rig, 6))
        await asyncio.sleep(0.05)
        assert not waiting.done()
        answer = await rig.fetch(8, last_epoch=3)  # at once: the log start moved since it was told
        assert answer.partition_log_start_offset == 6
        request = ReplicaFetchRequest(
            REPLICATION_VERSION, 1, 0, 1 << 20, [FetchPartition(str(TOPIC_ID), 0, 8, 3, 3, 6)]
        )
        await rig.service.handle(request)  # the follower's next fetch reports it
        assert await waiting == (ErrorCode.NONE, 6)

    asyncio.run(scenario())
