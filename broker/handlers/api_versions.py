"""ApiVersions: what this broker implements, straight from the handler registry."""

from __future__ import annotations

from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse

from ..context import HandlerContext
from ..protocol.api_keys import ApiKey
from ..protocol.header import RequestHeader
from .registry import api, supported_versions

_ApiVersion = ApiVersionsResponse.ApiVersion


@api(ApiKey.API_VERSIONS)
async def handle(ctx: HandlerContext, header: RequestHeader, request: ApiVersionsRequest) -> ApiVersionsResponse:
    return ApiVersionsResponse(
        error_code=0,
        throttle_time_ms=0,
        api_keys=[_ApiVersion(api_key=k, min_version=lo, max_version=hi) for k, lo, hi in supported_versions()],
    )
