"""EndTxn (API 26): commit or abort. The coordinator persists PrepareCommit/PrepareAbort and
answers once that is replicated; the markers are written to the transaction's partitions
afterwards (the client's next InitProducerId/AddPartitionsToTxn gets CONCURRENT_TRANSACTIONS
until they are). Versions 0-4; version 5 (KIP-890 part 2, the epoch bumped at every
transaction) is not advertised."""

from __future__ import annotations

from kafka.protocol.producer import EndTxnRequest, EndTxnResponse

from ..context import HandlerContext
from ..protocol.api_keys import ApiKey
from ..protocol.errors import ApiError, ErrorCode
from ..protocol.header import RequestHeader
from .registry import api

FENCED_SINCE_VERSION = 2  # older clients get INVALID_PRODUCER_EPOCH for PRODUCER_FENCED (as Kafka)


@api(ApiKey.END_TXN, versions=(0, 4))
async def handle(ctx: HandlerContext, header: RequestHeader, request: EndTxnRequest) -> EndTxnResponse:
    code = ErrorCode.NONE
    try:
        await ctx.transactions.end_txn(
            request.transactional_id, request.producer_id, request.producer_epoch, bool(request.committed)
        )
    except ApiError as exc:
        code = exc.code
        if code == ErrorCode.PRODUCER_FENCED and header.api_version < FENCED_SINCE_VERSION:
            code = ErrorCode.INVALID_PRODUCER_EPOCH
    return EndTxnResponse(throttle_time_ms=0, error_code=code)
