"""DescribeCluster: cluster id, controller and brokers (the admin-client view)."""

from __future__ import annotations

from kafka.protocol.admin import DescribeClusterRequest, DescribeClusterResponse

from ..context import HandlerContext
from ..protocol.api_keys import ApiKey
from ..protocol.errors import ErrorCode
from ..protocol.header import RequestHeader
from .common import live_brokers
from .registry import api

BROKER_ENDPOINT = 1


@api(ApiKey.DESCRIBE_CLUSTER)
async def handle(
    ctx: HandlerContext, header: RequestHeader, request: DescribeClusterRequest
) -> DescribeClusterResponse:
    if header.api_version >= 1 and request.endpoint_type != BROKER_ENDPOINT:
        return DescribeClusterResponse(
            throttle_time_ms=0,
            error_code=ErrorCode.UNSUPPORTED_VERSION,
            error_message="only broker endpoints are served here",
            endpoint_type=request.endpoint_type,
            cluster_id=ctx.cluster_id,
            controller_id=-1,
            brokers=[],
        )
    return DescribeClusterResponse(
        throttle_time_ms=0,
        error_code=0,
        error_message=None,
        endpoint_type=BROKER_ENDPOINT,
        cluster_id=ctx.cluster_id,
        controller_id=ctx.view.controller_id,
        brokers=[
            DescribeClusterResponse.DescribeClusterBroker(broker_id=n, host=h, port=p, rack=r, is_fenced=False)
            for n, h, p, r in live_brokers(ctx)
        ],
    )
