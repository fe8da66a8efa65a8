"""DeleteRecords: advance a partition's log start offset across both tiers (whole local
segments below it go at once, tiered ones with the next tiering cycle; nothing below it is
served from then on)."""

from __future__ import annotations

from kafka.protocol.admin import DeleteRecordsRequest, DeleteRecordsResponse

from ..context import HandlerContext
from ..protocol.api_keys import ApiKey
from ..protocol.errors import ApiError
from ..protocol.header import RequestHeader
from .registry import api

_Topic = DeleteRecordsResponse.DeleteRecordsTopicResult
_Partition = _Topic.DeleteRecordsPartitionResult
TO_HIGH_WATERMARK = -1


@api(ApiKey.DELETE_RECORDS)
async def handle(broker: HandlerContext, header: RequestHeader, request: DeleteRecordsRequest) -> DeleteRecordsResponse:
    topics = []
    for wanted in request.topics:
        partitions = []
        for item in wanted.partitions:
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
    return DeleteRecordsResponse(throttle_time_ms=0, topics=topics)
