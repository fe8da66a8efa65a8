"""WriteTxnMarkers (API 27): the transaction coordinator asks each partition leader to end a
producer's transaction with a COMMIT or ABORT marker (inter-broker in Kafka).

For every partition named, the leader appends the marker (Partition.append_txn_marker: the
same control batch for classic and diskless partitions, inline in the partition log) and
answers once it is committed (the high watermark passes it, as Kafka appends markers with
acks=all), or with the partition's error: NOT_LEADER_OR_FOLLOWER, UNKNOWN_TOPIC_OR_PARTITION,
INVALID_PRODUCER_EPOCH (an older producer epoch than the partition's), or
TRANSACTION_COORDINATOR_FENCED (an older coordinator epoch than the last marker's),
NOT_ENOUGH_REPLICAS, REQUEST_TIMED_OUT. Appends happen before the first await, so markers of
one request land in request order. A marker in a `__consumer_offsets` partition (added by
AddOffsetsToTxn) also tells the group coordinator, which applies or drops the producer's
pending TxnOffsetCommit offsets there.

Versions: 1 (0 was removed in Kafka 4.0; the schema starts at 1). Version 2 carries the
transaction version (KIP-890 TV2 markers), which comes with the transaction coordinator.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from kafka.protocol.producer import WriteTxnMarkersRequest, WriteTxnMarkersResponse

from ..context import HandlerContext
from ..groups.offsets_records import OFFSETS_TOPIC
from ..protocol.api_keys import ApiKey
from ..protocol.errors import ApiError
from ..protocol.header import RequestHeader
from .registry import api

if TYPE_CHECKING:
    from ..partition import Partition

MARKER_TIMEOUT_S = 30.0  # Kafka appends markers with request.timeout.ms (30 s by default)
_Marker = WriteTxnMarkersResponse.WritableTxnMarkerResult
_Topic = _Marker.WritableTxnMarkerTopicResult
_Partition = _Topic.WritableTxnMarkerPartitionResult


@api(ApiKey.WRITE_TXN_MARKERS, versions=(1, 1))
async def handle(
    ctx: HandlerContext, header: RequestHeader, request: WriteTxnMarkersRequest
) -> WriteTxnMarkersResponse:
    markers = []
    waits: list[tuple[Any, Partition, int]] = []
    for marker in request.markers:
        topics = []
        for topic in marker.topics:
            partitions = []
            for index in topic.partition_indexes:
                result = _Partition(partition_index=index, error_code=0)
                try:
                    partition = ctx.replica_manager.leader(topic.name, index)
                    end = partition.append_txn_marker(
                        marker.producer_id,
                        marker.producer_epoch,
                        marker.coordinator_epoch,
                        bool(marker.transaction_result),
                    )
                    waits.append((result, partition, end))
                    if topic.name == OFFSETS_TOPIC:  # TxnOffsetCommit: the group shard applies or drops
                        ctx.groups.on_txn_marker(index, marker.producer_id, bool(marker.transaction_result), end)
                except ApiError as exc:
                    result.error_code = exc.code
                partitions.append(result)
            topics.append(_Topic(name=topic.name, partitions=partitions))
        markers.append(_Marker(producer_id=marker.producer_id, topics=topics))
    await asyncio.gather(*(_committed(result, partition, end) for result, partition, end in waits))
    return WriteTxnMarkersResponse(markers=markers)


async def _committed(result: Any, partition: Partition, end_offset: int) -> None:
    try:
        await partition.wait_replicated(end_offset, MARKER_TIMEOUT_S)
    except ApiError as exc:
        result.error_code = exc.code
