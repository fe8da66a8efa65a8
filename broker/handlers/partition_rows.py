"""What Metadata and DescribeTopicPartitions say about each partition of a topic: its leader
as the client's AZ should see it (a diskless partition's representative there, routing/),
epoch, replicas, ISR and the replicas of brokers that are not registered. One place, so the
two APIs never disagree about a partition."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, NamedTuple

from ..protocol.errors import ErrorCode
from ..topics import Topic

if TYPE_CHECKING:
    from ..context import HandlerContext


class PartitionRow(NamedTuple):
    error_code: int  # LEADER_NOT_AVAILABLE when there is no live leader, or no state yet
    partition: int
    leader: int  # -1: none
    leader_epoch: int
    replicas: list[int]
    isr: list[int]
    offline: list[int]


def partition_rows(
    ctx: "HandlerContext", topic: Topic, client_az: str | None, start: int = 0, stop: int | None = None
) -> Iterator[PartitionRow]:
    """Rows for partitions `start` up to `stop` (default: all) of `topic`."""
    live = ctx.view.brokers
    states = ctx.view.partitions_of(str(topic.topic_id))
    by_az = topic.mode.serves_by_az
    topic_id = str(topic.topic_id)
    for index in range(start, topic.partitions if stop is None else stop):
        state = states.get(index)
        if state is None:  # being created: clients retry
            yield PartitionRow(ErrorCode.LEADER_NOT_AVAILABLE, index, -1, -1, [], [], [])
            continue
        record = state.record
        leader = record.leader if record.leader in live else -1
        if leader >= 0 and by_az:
            leader = ctx.router.representative(topic_id, index, leader, client_az)
        yield PartitionRow(
            ErrorCode.NONE if leader >= 0 else ErrorCode.LEADER_NOT_AVAILABLE,
            index,
            leader,
            record.leader_epoch,
            list(record.replicas),
            list(record.isr),
            [r for r in record.replicas if r not in live],
        )
