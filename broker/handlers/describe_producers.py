"""DescribeProducers (API 61, version 0; KIP-664): the producers a partition's state knows,
with each one's epoch, last sequence and timestamp, the coordinator epoch of its last marker
and the first offset of its open transaction (-1: none), as Kafka's
ProducerStateManager.activeProducers answers it. Operators find hanging transactions with it
(`shoal transactions describe-producers|find-hanging|abort`, kafka-transactions.sh).

Answered by the partition's leader, whose state is authoritative: NOT_LEADER_OR_FOLLOWER
elsewhere (the client refreshes its metadata), UNKNOWN_TOPIC_OR_PARTITION for a partition
that does not exist. A diskless partition is advertised with its AZ's representative as
leader, so a representative that does not lead it sends the question on to the leader, as
ListOffsets does (routing/request_forwarding.py). Classic and diskless partitions keep the same
producer state (Partition.producers), so both answer alike.
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin.transactions import DescribeProducersRequest, DescribeProducersResponse

from ..context import HandlerContext
from ..producers import ProducerStateManager
from ..protocol.api_keys import ApiKey
from ..protocol.errors import ApiError, ErrorCode
from ..protocol.header import RequestHeader
from ..reads.replica_policy import forward_target
from ..routing.request_forwarding import Forwarded
from .registry import api

_Topic = DescribeProducersResponse.TopicResponse
_Partition = _Topic.PartitionResponse
_Producer = _Partition.ProducerState


def active_producers(producers: ProducerStateManager) -> list[Any]:
    """One ProducerState per producer id the partition's state holds, by producer id."""
    return [
        _Producer(
            producer_id=entry.producer_id,
            producer_epoch=entry.producer_epoch,
            last_sequence=entry.last_seq,
            last_timestamp=entry.last_timestamp_ms,
            coordinator_epoch=entry.coordinator_epoch,
            current_txn_start_offset=entry.current_txn_first_offset,
        )
        for _, entry in sorted(producers.active_producers().items())
    ]


def _failed(index: int, code: int, message: str | None) -> Any:
    return _Partition(partition_index=index, error_code=code, error_message=message, active_producers=[])


@api(ApiKey.DESCRIBE_PRODUCERS)
async def handle(
    ctx: HandlerContext, header: RequestHeader, request: DescribeProducersRequest
) -> DescribeProducersResponse:
    topics = []
    elsewhere = Forwarded()
    for t_pos, wanted in enumerate(request.topics):
        partitions: list = []
        topic = ctx.catalog.get(wanted.name)
        for p_pos, index in enumerate(wanted.partition_indexes):
            target = forward_target(ctx, header, topic, index) if topic is not None else None
            if target is not None:
                elsewhere.reserve(target, (t_pos, p_pos), partitions)
                continue
            try:
                partition = ctx.replica_manager.leader(wanted.name, index)
            except ApiError as exc:
                partitions.append(_failed(index, exc.code, exc.message))
                continue
            partitions.append(
                _Partition(
                    partition_index=index,
                    error_code=0,
                    error_message=None,
                    active_producers=active_producers(partition.producers),
                )
            )
        topics.append(_Topic(name=wanted.name, partitions=partitions))
    await elsewhere.fill(
        ctx,
        header,
        request,
        "topics",
        "partition_indexes",
        lambda index: _failed(index, ErrorCode.NOT_LEADER_OR_FOLLOWER, "the partition's leader did not answer"),
        answers_attr="partitions",
    )
    return DescribeProducersResponse(throttle_time_ms=0, topics=topics)
