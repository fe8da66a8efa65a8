"""InitProducerId. Without a transactional id (idempotent producers): a fresh producer id
(epoch 0) from the block this broker reserved in the metadata store; Kafka also hands a
non-transactional producer a new id rather than bumping the epoch of the one it presents.
With one: the transaction coordinator's answer (transactions/coordinator.py): a new id at
epoch 0, or the id's epoch bumped, fencing the previous producer; CONCURRENT_TRANSACTIONS
while the previous producer's ongoing transaction is being aborted."""

from __future__ import annotations

from kafka.protocol.producer import InitProducerIdRequest, InitProducerIdResponse

from ..context import HandlerContext
from ..protocol.api_keys import ApiKey
from ..protocol.errors import ApiError, ErrorCode
from ..protocol.header import RequestHeader
from .registry import api

# PRODUCER_FENCED exists from version 4 on; older clients get INVALID_PRODUCER_EPOCH (as Kafka)
FENCED_SINCE_VERSION = 4


@api(ApiKey.INIT_PRODUCER_ID)
async def handle(ctx: HandlerContext, header: RequestHeader, request: InitProducerIdRequest) -> InitProducerIdResponse:
    if request.transactional_id is None:
        producer_id = await ctx.producer_ids.next_id()
        return InitProducerIdResponse(throttle_time_ms=0, error_code=0, producer_id=producer_id, producer_epoch=0)
    expected = (request.producer_id, request.producer_epoch) if header.api_version >= 3 else None
    try:
        producer_id, epoch = await ctx.transactions.init_producer_id(
            request.transactional_id, request.transaction_timeout_ms, expected
        )
    except ApiError as exc:
        code = exc.code
        if code == ErrorCode.PRODUCER_FENCED and header.api_version < FENCED_SINCE_VERSION:
            code = ErrorCode.INVALID_PRODUCER_EPOCH
        return InitProducerIdResponse(throttle_time_ms=0, error_code=code, producer_id=-1, producer_epoch=-1)
    return InitProducerIdResponse(throttle_time_ms=0, error_code=0, producer_id=producer_id, producer_epoch=epoch)
