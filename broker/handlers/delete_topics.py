"""DeleteTopics, by name (v0-5) or by name or id (v6+)."""

from __future__ import annotations

from kafka.protocol.admin import DeleteTopicsRequest, DeleteTopicsResponse

from ..context import HandlerContext
from ..protocol.api_keys import ApiKey
from ..protocol.errors import ApiError
from ..protocol.header import RequestHeader
from .common import ZERO_UUID, resolve_topic
from .registry import api

_Result = DeleteTopicsResponse.DeletableTopicResult


@api(ApiKey.DELETE_TOPICS)
async def handle(ctx: HandlerContext, header: RequestHeader, request: DeleteTopicsRequest) -> DeleteTopicsResponse:
    if header.api_version >= 6:
        wanted = [(t.name, t.topic_id) for t in request.topics]
    else:
        wanted = [(name, None) for name in request.topic_names]
    results = []
    for name, topic_id in wanted:
        try:
            topic = resolve_topic(ctx, name, topic_id)
            await ctx.catalog.delete(topic.name)
            results.append(_Result(name=topic.name, topic_id=topic.topic_id, error_code=0, error_message=None))
        except ApiError as exc:
            results.append(
                _Result(name=name, topic_id=topic_id or ZERO_UUID, error_code=exc.code, error_message=exc.message)
            )
    return DeleteTopicsResponse(throttle_time_ms=0, responses=results)
