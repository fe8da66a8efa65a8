"""acks=all on a partition with followers: the answer waits for the high watermark, and the
ISR at that moment decides it (Kafka's delayed produce): NOT_ENOUGH_REPLICAS before the append
when the ISR is already too small, NOT_ENOUGH_REPLICAS_AFTER_APPEND when it shrank below
min.insync.replicas while the append waited (the records are in the log, not acknowledged)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from broker.clock import ManualClock
from broker.config import load_config
from broker.metadata.records import PartitionStateRecord
from broker.partition import Partition
from broker.protocol.errors import ApiError, ErrorCode
from broker.topic_config import effective
from tests.unit.test_partition import CLOCK_START, batch

REPLICAS = [0, 1, 2]


def leader_of_three(tmp_path: Path, clock: ManualClock) -> Partition:
    settings = effective({"min.insync.replicas": "2", "diskless.enable": "false"}, load_config(environ={}))
    partition = Partition.open("t", 0, tmp_path, settings, clock, 86_400_000, on_append=lambda p: None)
    partition.make_leader(0, PartitionStateRecord(1, REPLICAS, 0, 1, REPLICAS), 1)
    return partition


def set_isr(partition: Partition, isr: list[int], revision: int) -> None:
    """The ISR changed in the same leader epoch (the leader's own shrink, as replication/isr.py makes it)."""
    partition.make_leader(0, PartitionStateRecord(1, REPLICAS, 0, 1, isr), revision)


def follower_fetch(partition: Partition, replica: int, clock: ManualClock) -> None:
    leo = partition.log.log_end_offset
    assert partition.leader_state is not None
    partition.leader_state.on_follower_fetch(replica, leo, leo, clock.now_ms())
    partition.advance_high_watermark()


def test_isr_shrinking_below_min_insync_while_waiting_is_not_enough_replicas_after_append(tmp_path: Path) -> None:
    async def scenario() -> None:
        clock = ManualClock(CLOCK_START)
        partition = leader_of_three(tmp_path, clock)
        outcome = partition.append_records(batch(0), acks=-1)  # 3 in sync >= 2: accepted
        waiting = asyncio.ensure_future(partition.wait_replicated(outcome.end_offset, 30))
        await asyncio.sleep(0.01)
        assert not waiting.done(), "followers 1 and 2 hold nothing yet"
        set_isr(partition, [0], 2)  # both followers dropped out
        with pytest.raises(ApiError) as info:
            await asyncio.wait_for(waiting, 5)
        assert info.value.code == ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND
        assert partition.log.log_end_offset == 2, "appended, just not acknowledged"
        with pytest.raises(ApiError) as before:  # the next one is refused up front
            partition.append_records(batch(2), acks=-1)
        assert before.value.code == ErrorCode.NOT_ENOUGH_REPLICAS
        assert partition.log.log_end_offset == 2

    asyncio.run(scenario())


def test_isr_shrinking_to_exactly_min_insync_still_succeeds(tmp_path: Path) -> None:
    async def scenario() -> None:
        clock = ManualClock(CLOCK_START)
        partition = leader_of_three(tmp_path, clock)
        outcome = partition.append_records(batch(0), acks=-1)
        waiting = asyncio.ensure_future(partition.wait_replicated(outcome.end_offset, 30))
        await asyncio.sleep(0.01)
        set_isr(partition, [0, 1], 2)  # 2 left: still enough
        await asyncio.sleep(0.01)
        assert not waiting.done(), "follower 1 has not fetched the records yet"
        follower_fetch(partition, 1, clock)
        await asyncio.wait_for(waiting, 5)  # no error
        assert partition.log.high_watermark == 2

    asyncio.run(scenario())
