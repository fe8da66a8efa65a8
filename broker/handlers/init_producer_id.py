"""InitProducerId for idempotent producers: a fresh producer id (epoch 0) from the block
this broker reserved in the metadata store. Kafka also hands a non-transactional producer
a new id rather than bumping the epoch of the one it presents."""

from __future__ import annotations

from kafka.protocol.producer import InitProducerIdRequest, InitProducerIdResponse

from ..context import HandlerContext
from ..protocol.api_keys import ApiKey
from ..protocol.errors import ErrorCode
from ..protocol.header import RequestHeader
from .registry import api


@api(ApiKey.INIT_PRODUCER_ID)
async def handle(
    broker: HandlerContext, header: RequestHeader, request: InitProducerIdRequest
) -> InitProducerIdResponse:
    if request.transactional_id is not None:
        return InitProducerIdResponse(
            throttle_time_ms=0, error_code=ErrorCode.UNSUPPORTED_VERSION, producer_id=-1, producer_epoch=-1
        )
    producer_id = await broker.producer_ids.next_id()
    return InitProducerIdResponse(throttle_time_ms=0, error_code=0, producer_id=producer_id, producer_epoch=0)
