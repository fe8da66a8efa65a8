"""AddPartitionsToTxn (API 24), the client versions 0-3: the producer names the partitions it
is about to write to in its transaction; the coordinator records them (the transaction becomes
Ongoing) and answers once that is replicated. Every partition gets the same code: the
request's error, or OPERATION_NOT_ATTEMPTED for all but the unknown ones when some are unknown.
Version 4 (KIP-890 broker verification, batched transactions) is not advertised: the partition
leader does not verify producers with the coordinator yet."""

from __future__ import annotations

from typing import Any

from kafka.protocol.producer import AddPartitionsToTxnRequest, AddPartitionsToTxnResponse

from ..context import HandlerContext
from ..protocol.api_keys import ApiKey
from ..protocol.errors import ApiError, ErrorCode
from ..protocol.header import RequestHeader
from .registry import api

FENCED_SINCE_VERSION = 2  # older clients get INVALID_PRODUCER_EPOCH for PRODUCER_FENCED (as Kafka)
_Result = AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult
_PartitionResult = _Result.AddPartitionsToTxnPartitionResult


@api(ApiKey.ADD_PARTITIONS_TO_TXN, versions=(0, 3))
async def handle(
    broker: HandlerContext, header: RequestHeader, request: AddPartitionsToTxnRequest
) -> AddPartitionsToTxnResponse:
    wanted = [(t.name, p) for t in request.v3_and_below_topics for p in t.partitions]
    unknown = {
        (name, p) for name, p in wanted if (topic := broker.catalog.get(name)) is None or not 0 <= p < topic.partitions
    }
    codes: dict[tuple[str, int], int]
    if unknown:
        codes = {
            tp: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if tp in unknown else ErrorCode.OPERATION_NOT_ATTEMPTED
            for tp in wanted
        }
    else:
        code: int = ErrorCode.NONE
        try:
            await broker.transactions.add_partitions(
                request.v3_and_below_transactional_id,
                request.v3_and_below_producer_id,
                request.v3_and_below_producer_epoch,
                frozenset(wanted),
            )
        except ApiError as exc:
            code = exc.code
            if code == ErrorCode.PRODUCER_FENCED and header.api_version < FENCED_SINCE_VERSION:
                code = ErrorCode.INVALID_PRODUCER_EPOCH
        codes = {tp: code for tp in wanted}
    by_topic: dict[str, list[Any]] = {}
    for (name, p), code in codes.items():
        by_topic.setdefault(name, []).append(_PartitionResult(partition_index=p, partition_error_code=code))
    return AddPartitionsToTxnResponse(
        throttle_time_ms=0,
        results_by_topic_v3_and_below=[_Result(name=name, results_by_partition=rs) for name, rs in by_topic.items()],
    )
