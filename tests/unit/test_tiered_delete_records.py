"""DeleteRecords on a partition with tiered segments moves Kafka's log start offset across both
tiers (UnifiedLog.maybeIncrementLogStartOffset): ListOffsets EARLIEST and every Fetch follow
it, nothing below it is served, the tiered segments wholly below it are deleted by the next
tiering cycle (their files through the usual deletion path) while one straddling it is kept
and read from the log start, and the offset survives a restart. A whole real broker in
process (tests/inprocess.py), on a classic tiered topic (the broker tiers it itself).

Regression (issue 26, F3): DeleteRecords moved only the local log start. Past the tiered end
it answered low_watermark Y while EARLIEST stayed at the tiered start, the "deleted" records
were still served, and a Fetch at the tiered end answered OFFSET_OUT_OF_RANGE, so a consumer
reading from the earliest offset looped over the tiered range for ever; inside the tiered
range it deleted nothing at all.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from kafka.protocol.admin import DeleteRecordsRequest
from kafka.record.memory_records import MemoryRecords

from broker.clock import ManualClock
from broker.objectstore import MemoryObjectStore
from broker.partition import Partition
from broker.protocol.errors import ErrorCode
from tests.inprocess import InProcessBroker, InProcessClient
from tests.integration.clients import build_batch
from tests.unit.test_inprocess_harness import list_offset
from tests.unit.test_partition_tiering import CLOCK_START, STARTED, TIERED, event, lead, open_partition
from tests.unit.test_transactions import txn_batch

EARLIEST = -2
RECORDS_PER_BATCH = 3
TOPIC = "tiered"
# three batches of three records per local segment; tiered once older than a second; kept for ever
CONFIGS = {
    "diskless.enable": "false",
    "remote.storage.enable": "true",
    "segment.bytes": "300",
    "local.retention.ms": "1000",
    "retention.ms": "-1",
}


async def produce(harness: InProcessBroker, client: InProcessClient, batches: int) -> list[int]:
    """`batches` batches of three records; the records' offsets (markers take offsets too)."""
    offsets: list[int] = []
    for _ in range(batches):
        now = harness.clock.now_ms()
        records = [(b"k", b"v") for _ in range(RECORDS_PER_BATCH)]
        error, base = await client.produce(TOPIC, 0, build_batch(records, timestamp_ms=now))
        assert error == ErrorCode.NONE
        offsets += range(base, base + RECORDS_PER_BATCH)
    return offsets


def partition(harness: InProcessBroker) -> Partition:
    return harness.broker.replica_manager.get(TOPIC, 0)


async def tier_and_drop_locally(harness: InProcessBroker) -> None:
    """One tiering cycle over what is older than local.retention.ms, then local retention."""
    harness.clock.advance(5_000)
    report = await harness.broker.offload.run_once()
    assert report.committed and not report.failed, report
    p = partition(harness)
    p.log.enforce_retention(harness.clock.now_ms(), p.remote_retention())


async def delete_records(client: InProcessClient, offset: int) -> tuple[int, int]:
    """DeleteRecords(before `offset`): (error code, low watermark)."""
    topic, part = (
        DeleteRecordsRequest.DeleteRecordsTopic,
        DeleteRecordsRequest.DeleteRecordsTopic.DeleteRecordsPartition,
    )
    request = DeleteRecordsRequest(
        topics=[topic(name=TOPIC, partitions=[part(partition_index=0, offset=offset)])], timeout_ms=5_000
    )
    response = await client.request(request, await client.version(DeleteRecordsRequest, cap=2))
    [answer] = response.topics[0].partitions
    return answer.error_code, answer.low_watermark


async def consume_from_earliest(client: InProcessClient, max_fetches: int = 200) -> list[int]:
    """What a consumer with auto.offset.reset=earliest delivers: from ListOffsets EARLIEST,
    each record at or above the fetch position (clients skip the start of a batch below it and
    control batches), resetting to EARLIEST on OFFSET_OUT_OF_RANGE, until the high watermark."""
    error, position = await list_offset(client, TOPIC, 0, EARLIEST)
    assert error == ErrorCode.NONE
    delivered: list[int] = []
    for _ in range(max_fetches):
        answer = await client.fetch(TOPIC, 0, position, max_bytes=600)
        if answer.error_code == ErrorCode.OFFSET_OUT_OF_RANGE:
            position = (await list_offset(client, TOPIC, 0, EARLIEST))[1]
            continue
        assert answer.error_code == ErrorCode.NONE, answer.error_code
        if position >= answer.high_watermark:
            return delivered
        records = MemoryRecords(bytes(answer.records))
        while (batch := records.next_batch()) is not None:
            if not batch.is_control_batch:
                delivered += [r.offset for r in batch if r.offset >= position]
            position = max(position, batch.base_offset + batch.last_offset_delta + 1)
    raise AssertionError(f"never reached the high watermark; delivered {delivered[:40]}...")


async def delete_in_tiering_cycles(harness: InProcessBroker) -> int:
    """Tiered segments deleted by two cycles (a segment is marked, then its files go once the
    mark has committed: at once with one replica)."""
    return sum([(await harness.broker.offload.run_once()).deleted for _ in range(2)])


def segment_keys(objects: MemoryObjectStore, segment_id: str) -> list[str]:
    return [k for k in objects.keys() if segment_id in k]


def test_delete_records_past_the_tiered_end_moves_the_log_start_and_deletes_the_tiered_segments(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with InProcessBroker(tmp_path) as harness:
            client = harness.client()
            assert await client.create_topic(TOPIC, 1, CONFIGS) == ErrorCode.NONE
            sent = await produce(harness, client, 4)
            await tier_and_drop_locally(harness)
            p = partition(harness)
            tiered = p.remote_segments.readable
            tiered_end = p.remote_segments.tiered_end
            assert tiered and tiered[0].base_offset == 0 and tiered_end > 0
            sent += await produce(harness, client, 4)  # recent: stays local only
            target = sent[-4]  # the last record of the last batch but one: a log start inside a batch
            assert target > tiered_end

            assert await delete_records(client, target) == (ErrorCode.NONE, target)
            assert await list_offset(client, TOPIC, 0, EARLIEST) == (ErrorCode.NONE, target)
            assert await list_offset(client, TOPIC, 0, 0) == (ErrorCode.NONE, target), "by timestamp"
            below = await client.fetch(TOPIC, 0, 0)
            assert below.error_code == ErrorCode.OFFSET_OUT_OF_RANGE, "a deleted record is still served"
            assert below.log_start_offset == target
            assert await consume_from_earliest(client) == sent[-4:]

            deleted = await delete_in_tiering_cycles(harness)
            assert deleted == len(tiered)
            assert p.remote_segments.segments == [] and p.remote_segments.readable == []
            for segment in tiered:
                assert segment_keys(harness.objects, segment.segment_id) == [], "tiered files left behind"

            # tiering goes on from the log start, which lies inside a batch
            sent += await produce(harness, client, 3)
            await tier_and_drop_locally(harness)
            assert p.remote_segments.readable[0].base_offset < target < p.log.log_start_offset
            assert await consume_from_earliest(client) == [o for o in sent if o >= target]

    asyncio.run(scenario())


def test_delete_records_inside_the_tiered_range_keeps_the_straddling_segment_and_survives_a_restart(
    tmp_path: Path,
) -> None:
    async def scenario() -> None:
        async with InProcessBroker(tmp_path) as harness:
            client = harness.client()
            assert await client.create_topic(TOPIC, 1, CONFIGS) == ErrorCode.NONE
            sent = await produce(harness, client, 12)
            await tier_and_drop_locally(harness)
            p = partition(harness)
            tiered = p.remote_segments.readable
            assert len(tiered) >= 3 and p.log.log_start_offset >= tiered[2].next_offset
            straddling = tiered[1]
            target = straddling.base_offset + 1  # inside its first batch
            kept = [o for o in sent if o >= target]

            assert await delete_records(client, target) == (ErrorCode.NONE, target)
            assert await list_offset(client, TOPIC, 0, EARLIEST) == (ErrorCode.NONE, target)
            assert await list_offset(client, TOPIC, 0, 0) == (ErrorCode.NONE, target), "by timestamp"
            assert (await client.fetch(TOPIC, 0, target - 1)).error_code == ErrorCode.OFFSET_OUT_OF_RANGE
            assert await consume_from_earliest(client) == kept
            await delete_records(client, target - 1)  # below the log start: nothing changes
            assert await list_offset(client, TOPIC, 0, EARLIEST) == (ErrorCode.NONE, target)

            assert await delete_in_tiering_cycles(harness) == 1
            assert segment_keys(harness.objects, tiered[0].segment_id) == [], "the segment below it is deleted"
            assert segment_keys(harness.objects, straddling.segment_id), "the straddling segment is kept"
            assert [s.segment_id for s in p.remote_segments.segments][0] == straddling.segment_id
            objects, now = harness.objects, harness.clock.now_ms()

        async with InProcessBroker(tmp_path, objects=objects, start_ms=now) as harness:
            client = harness.client()
            assert await list_offset(client, TOPIC, 0, EARLIEST) == (ErrorCode.NONE, target)
            assert (await client.fetch(TOPIC, 0, target - 1)).error_code == ErrorCode.OFFSET_OUT_OF_RANGE
            assert await consume_from_earliest(client) == kept

    asyncio.run(scenario())


def test_a_stop_between_recording_the_log_start_and_moving_the_local_log_is_finished_at_open(
    tmp_path: Path,
) -> None:
    clock = ManualClock(CLOCK_START)
    p = lead(open_partition(tmp_path, clock, **TIERED))
    for seq in range(0, 8, 2):
        p.append_records(txn_batch(seq, producer_id=9, transactional=False), acks=-1)
    p.append_marker(event(STARTED, "a", 0, 1))  # the partition has a remote-segments checkpoint
    assert p.remote_segments.advance_log_start(5)  # the first step of delete_records_before only
    p.log.close()
    reopened = open_partition(tmp_path, clock, **TIERED)
    assert reopened.log.log_start_offset == reopened.log_start_offset == 5
