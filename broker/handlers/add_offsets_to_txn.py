"""AddOffsetsToTxn (API 25): a producer about to commit a group's offsets in its transaction
(TxnOffsetCommit) adds the group's `__consumer_offsets` partition to the transaction, so that
the coordinator writes the transaction's marker there too."""

from __future__ import annotations

from kafka.protocol.producer import AddOffsetsToTxnRequest, AddOffsetsToTxnResponse

from ..context import HandlerContext
from ..protocol.api_keys import ApiKey
from ..protocol.errors import ApiError, ErrorCode
from ..protocol.header import RequestHeader
from .registry import api

FENCED_SINCE_VERSION = 2  # older clients get INVALID_PRODUCER_EPOCH for PRODUCER_FENCED (as Kafka)


@api(ApiKey.ADD_OFFSETS_TO_TXN, versions=(0, 4))
async def handle(
    ctx: HandlerContext, header: RequestHeader, request: AddOffsetsToTxnRequest
) -> AddOffsetsToTxnResponse:
    code = ErrorCode.NONE
    try:
        await ctx.groups.ensure_offsets_topic()
        partition = ctx.transactions.offsets_partition(request.group_id)
        await ctx.transactions.add_partitions(
            request.transactional_id, request.producer_id, request.producer_epoch, frozenset({partition})
        )
    except ApiError as exc:
        code = exc.code
        if code == ErrorCode.PRODUCER_FENCED and header.api_version < FENCED_SINCE_VERSION:
            code = ErrorCode.INVALID_PRODUCER_EPOCH
    return AddOffsetsToTxnResponse(throttle_time_ms=0, error_code=code)
