"""DescribeTopicPartitions (API 75, KIP-966): Metadata's partition details for admin tools,
in pages. Kafka 3.7+ admin clients describe topics with it; a cluster of 100,000 partitions
answers in pages of at most `max.request.partition.size.limit` partitions (Kafka's name and
default, 2,000), each ending with the cursor of the next.

As Kafka's handler: no topics asked means every topic; topics are answered in name order,
from the cursor's topic and partition on; a topic asked for that does not exist gets
UNKNOWN_TOPIC_OR_PARTITION (with every topic, missing ones are simply absent); a cursor
whose topic is not among those asked, or a negative cursor partition, is INVALID_REQUEST
for every topic asked. A partition's leader, replicas and ISR are what Metadata says
(partition_rows.py: a diskless partition names the client's AZ's representative). Eligible
leader replicas (KIP-966's ELR) do not exist here: their lists are empty. With no authorizer,
every topic operation is allowed, as Kafka reports then.
"""

from __future__ import annotations

from typing import Any

from kafka.protocol.admin import DescribeTopicPartitionsRequest, DescribeTopicPartitionsResponse

from ..context import HandlerContext
from ..protocol.api_keys import ApiKey
from ..protocol.errors import ErrorCode
from ..protocol.header import RequestHeader
from ..topics import Topic
from .common import ZERO_UUID
from .partition_rows import partition_rows
from .registry import api

_Topic = DescribeTopicPartitionsResponse.DescribeTopicPartitionsResponseTopic
_Partition = _Topic.DescribeTopicPartitionsResponsePartition
_Cursor = DescribeTopicPartitionsResponse.Cursor

# Kafka's AclOperation codes a topic supports: READ 3, WRITE 4, CREATE 5, DELETE 6, ALTER 7,
# DESCRIBE 8, DESCRIBE_CONFIGS 10, ALTER_CONFIGS 11 (AclEntry.supportedOperations(TOPIC)).
TOPIC_OPERATIONS = sum(1 << code for code in (3, 4, 5, 6, 7, 8, 10, 11))


@api(ApiKey.DESCRIBE_TOPIC_PARTITIONS)
async def handle(
    ctx: HandlerContext, header: RequestHeader, request: DescribeTopicPartitionsRequest
) -> DescribeTopicPartitionsResponse:
    cursor = request.cursor
    first_name = cursor.topic_name if cursor is not None else ""
    every_topic = not request.topics
    names = sorted({t.name for t in request.topics if t.name >= first_name})
    if cursor is not None and (cursor.partition_index < 0 or (not every_topic and cursor.topic_name not in names)):
        return DescribeTopicPartitionsResponse(
            throttle_time_ms=0,
            topics=[
                _Topic(error_code=ErrorCode.INVALID_REQUEST, name=t.name, topic_id=ZERO_UUID, partitions=[])
                for t in request.topics
            ],
            next_cursor=None,
        )
    if every_topic:
        names = sorted(t.name for t in ctx.catalog.all() if t.name >= first_name)
    remaining = max(min(ctx.config.max_request_partition_size_limit, request.response_partition_limit), 1)
    client_az = ctx.router.client_az(header)[0]
    topics: list[Any] = []
    next_cursor = None
    for name in names:
        start = cursor.partition_index if cursor is not None and name == cursor.topic_name else 0
        if remaining == 0:
            next_cursor = _Cursor(topic_name=name, partition_index=0)
            break
        topic = ctx.catalog.get(name)
        if topic is None:
            if not every_topic:
                topics.append(
                    _Topic(
                        error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name=name, topic_id=ZERO_UUID, partitions=[]
                    )
                )
            continue
        stop = min(topic.partitions, start + remaining)
        topics.append(_describe(ctx, topic, client_az, start, stop))
        if stop < topic.partitions:
            next_cursor = _Cursor(topic_name=name, partition_index=stop)
            break
        remaining -= max(stop - start, 0)
    return DescribeTopicPartitionsResponse(throttle_time_ms=0, topics=topics, next_cursor=next_cursor)


def _describe(ctx: HandlerContext, topic: Topic, client_az: str | None, start: int, stop: int) -> Any:
    partitions = [
        _Partition(
            error_code=row.error_code,
            partition_index=row.partition,
            leader_id=row.leader,
            leader_epoch=row.leader_epoch,
            replica_nodes=row.replicas,
            isr_nodes=row.isr,
            eligible_leader_replicas=[],
            last_known_elr=[],
            offline_replicas=row.offline,
        )
        for row in partition_rows(ctx, topic, client_az, start, stop)
    ]
    return _Topic(
        error_code=ErrorCode.NONE,
        name=topic.name,
        topic_id=topic.topic_id,
        is_internal=topic.internal,
        partitions=partitions,
        topic_authorized_operations=TOPIC_OPERATIONS,
    )
