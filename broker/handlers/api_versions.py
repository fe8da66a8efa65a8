"""ApiVersions: what this broker implements, straight from the handler registry."""

from __future__ import annotations

from kafka.protocol.metadata import ApiVersionsResponse

from .registry import api, supported_versions

_ApiVersion = ApiVersionsResponse.ApiVersion


@api(18)
async def handle(broker, header, request):  # type: ignore[no-untyped-def]
    return ApiVersionsResponse(
        error_code=0, throttle_time_ms=0,
        api_keys=[_ApiVersion(api_key=k, min_version=lo, max_version=hi) for k, lo, hi in supported_versions()],
    )
