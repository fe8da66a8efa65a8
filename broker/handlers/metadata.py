"""Metadata: brokers, cluster id, controller, and topics with their partition leaders.

Answers depend on the client's AZ (routing/): a diskless partition is advertised with the
broker of that AZ that represents it (with the real leader epoch, replicas and ISR), so
the client's produce and fetch stay in its AZ; a classic partition with its real leader.

Unknown topics are auto-created when the client allows it and
`auto.create.topics.enable` is true, as Kafka does.
"""

from __future__ import annotations

import uuid
from typing import Any

from kafka.protocol.metadata import MetadataRequest, MetadataResponse

from ..context import HandlerContext
from ..protocol.api_keys import ApiKey
from ..protocol.errors import ApiError, ErrorCode
from ..protocol.header import RequestHeader
from ..topics import Topic
from .common import ZERO_UUID, live_brokers
from .registry import api

_Broker = MetadataResponse.MetadataResponseBroker
_Topic = MetadataResponse.MetadataResponseTopic
_Partition = _Topic.MetadataResponsePartition


@api(ApiKey.METADATA)
async def handle(ctx: HandlerContext, header: RequestHeader, request: MetadataRequest) -> MetadataResponse:
    client_az = ctx.router.client_az(header)[0]
    if request.topics is None or (header.api_version == 0 and not request.topics):
        topics = [_describe(ctx, t, client_az) for t in ctx.catalog.all()]
    else:
        allow_create = request.allow_auto_topic_creation if header.api_version >= 4 else True
        topics = [await _lookup(ctx, t.name, t.topic_id, allow_create, client_az) for t in request.topics]
    return MetadataResponse(
        throttle_time_ms=0,
        brokers=[_Broker(node_id=n, host=h, port=p, rack=r) for n, h, p, r in live_brokers(ctx)],
        cluster_id=ctx.cluster_id,
        controller_id=ctx.view.controller_id,
        topics=topics,
        error_code=0,
    )


async def _lookup(
    ctx: HandlerContext, name: Any, topic_id: uuid.UUID | None, allow_create: bool, client_az: str | None
) -> Any:
    topic = ctx.catalog.get(name) if name else None
    if topic is None and topic_id is not None and topic_id != ZERO_UUID:
        topic = ctx.catalog.by_id(topic_id)
        if topic is None:
            return _Topic(error_code=ErrorCode.UNKNOWN_TOPIC_ID, name=None, topic_id=topic_id, partitions=[])
    if topic is None:
        if allow_create and ctx.config.auto_create_topics_enable:
            try:
                prepared = ctx.catalog.prepare(name, -1, {})
                factor = ctx.config.default_replication_factor
                topic = await ctx.catalog.create(prepared, ctx.assign_replicas(range(prepared.partitions), factor))
            except ApiError as exc:
                if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                    return _Topic(error_code=exc.code, name=name, topic_id=ZERO_UUID, partitions=[])
                topic = ctx.catalog.get(name)
        else:
            return _Topic(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name=name, topic_id=ZERO_UUID, partitions=[])
    if topic is None:  # another client created it and it was deleted again at once
        return _Topic(error_code=ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name=name, topic_id=ZERO_UUID, partitions=[])
    return _describe(ctx, topic, client_az)


def _describe(ctx: HandlerContext, topic: Topic, client_az: str | None) -> Any:
    live = ctx.view.brokers
    states = ctx.view.partitions_of(str(topic.topic_id))
    partitions = []
    for index in range(topic.partitions):
        state = states.get(index)
        if state is None:  # being created: clients retry
            partitions.append(
                _Partition(
                    error_code=ErrorCode.LEADER_NOT_AVAILABLE,
                    partition_index=index,
                    leader_id=-1,
                    leader_epoch=-1,
                    replica_nodes=[],
                    isr_nodes=[],
                    offline_replicas=[],
                )
            )
            continue
        record = state.record
        error = ErrorCode.NONE if record.leader in live else ErrorCode.LEADER_NOT_AVAILABLE
        leader = record.leader if record.leader in live else -1
        if topic.mode.serves_by_az and leader >= 0:
            leader = ctx.router.representative(str(topic.topic_id), index, leader, client_az)
        partitions.append(
            _Partition(
                error_code=error,
                partition_index=index,
                leader_id=leader,
                leader_epoch=record.leader_epoch,
                replica_nodes=list(record.replicas),
                isr_nodes=list(record.isr),
                offline_replicas=[r for r in record.replicas if r not in live],
            )
        )
    return _Topic(
        error_code=0, name=topic.name, topic_id=topic.topic_id, is_internal=topic.internal, partitions=partitions
    )
