"""DeleteRecords: advance a partition's log start offset across both tiers (whole local
segments below it go at once, tiered ones with the next tiering cycle; nothing below it is
served from then on). A diskless partition's clients send it to their AZ's representative,
which sends it on to the leader (routing/forwarding.py), as ListOffsets."""

from __future__ import annotations

from kafka.protocol.admin import DeleteRecordsRequest, DeleteRecordsResponse

from ..context import HandlerContext
from ..protocol.api_keys import ApiKey
from ..protocol.errors import ApiError, ErrorCode
from ..protocol.header import RequestHeader
from ..reads.replica_policy import forward_target
from ..routing.forwarding import Forwarded
from .registry import api

_Topic = DeleteRecordsResponse.DeleteRecordsTopicResult
_Partition = _Topic.DeleteRecordsPartitionResult
TO_HIGH_WATERMARK = -1


@api(ApiKey.DELETE_RECORDS)
async def handle(broker: HandlerContext, header: RequestHeader, request: DeleteRecordsRequest) -> DeleteRecordsResponse:
    topics = []
    elsewhere = Forwarded()
    for t_pos, wanted in enumerate(request.topics):
        partitions: list = []
        topic = broker.catalog.get(wanted.name)
        for p_pos, item in enumerate(wanted.partitions):
            target = forward_target(broker, header, topic, item.partition_index) if topic is not None else None
            if target is not None:
                elsewhere.reserve(target, (t_pos, p_pos), partitions)
                continue
            try:
                partition = broker.replica_manager.leader(wanted.name, item.partition_index)
                offset = partition.log.high_watermark if item.offset == TO_HIGH_WATERMARK else item.offset
                # as Kafka: OFFSET_OUT_OF_RANGE above the high watermark, below the start a no-op
                low_watermark = partition.delete_records_before(offset)
                partitions.append(
                    _Partition(partition_index=item.partition_index, low_watermark=low_watermark, error_code=0)
                )
            except ApiError as exc:
                partitions.append(
                    _Partition(partition_index=item.partition_index, low_watermark=-1, error_code=exc.code)
                )
        topics.append(_Topic(name=wanted.name, partitions=partitions))
    await elsewhere.fill(
        broker,
        header,
        request,
        "topics",
        "partitions",
        lambda p: _Partition(
            partition_index=p.partition_index, low_watermark=-1, error_code=ErrorCode.NOT_LEADER_OR_FOLLOWER
        ),
    )
    return DeleteRecordsResponse(throttle_time_ms=0, topics=topics)
