"""Request dispatch: one frame in, one encoded response (or none) out.

Owns the decisions that do not belong to any one API: which handler, which version,
what to do with a frame that cannot be decoded. A ConnectionFault means the stream can
no longer be trusted; the server closes that connection and keeps serving the others.
Requests another broker sent on (routing/request_forwarding.py) enter here too, already decoded.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from kafka.protocol.metadata import ApiVersionsResponse

from .handlers import registry, shoal_admin
from .protocol import admin
from .protocol.api_keys import ApiKey
from .protocol.error_codes import error_codes
from .protocol.errors import ConnectionFault, ErrorCode
from .protocol.header import HeaderError, RequestHeader, parse_request_header, peek_api
from .protocol.messages import REQUEST_CLASSES, decode_request, encode_response, is_flexible
from .routing.messages import ROUTING_VERSION, KafkaForwardRequest, KafkaForwardResponse

if TYPE_CHECKING:
    from .context import HandlerContext

log = logging.getLogger(__name__)

# Partition requests a broker that does not lead a diskless partition sends on to its leader.
FORWARDABLE = frozenset(
    {
        ApiKey.LIST_OFFSETS,
        ApiKey.OFFSET_FOR_LEADER_EPOCH,
        ApiKey.WRITE_TXN_MARKERS,
        ApiKey.DESCRIBE_PRODUCERS,
        ApiKey.DELETE_RECORDS,
    }
)


def _unsupported_api_versions(correlation_id: int) -> list[bytes | bytearray]:
    """ApiVersions v0 body with UNSUPPORTED_VERSION, listing what we support (KIP-511)."""
    response = ApiVersionsResponse(
        error_code=ErrorCode.UNSUPPORTED_VERSION,
        api_keys=[
            ApiVersionsResponse.ApiVersion(api_key=k, min_version=lo, max_version=hi)
            for k, lo, hi in registry.supported_versions()
        ],
    )
    header = RequestHeader(ApiKey.API_VERSIONS, 0, correlation_id, None)
    return encode_response(header, response)


async def dispatch(ctx: HandlerContext, frame: bytes, peer: str) -> list[bytes | bytearray] | None:
    try:
        api_key, api_version, correlation_id = peek_api(frame)
    except HeaderError as exc:
        raise ConnectionFault(str(exc)) from None
    if api_key == admin.SHOAL_ADMIN:
        started = ctx.clock.monotonic()
        try:
            return await _admin(ctx, frame)
        finally:
            ctx.metrics.observe_request(api_key, ctx.clock.monotonic() - started)
    handler = registry.HANDLERS.get(api_key)
    if handler is None:
        raise ConnectionFault(f"unsupported API key {api_key}")
    if not handler.supports(api_version):
        if api_key == ApiKey.API_VERSIONS:
            ctx.metrics.observe_request(api_key, 0.0)
            ctx.metrics.observe_errors(api_key, (ErrorCode.UNSUPPORTED_VERSION,))
            return _unsupported_api_versions(correlation_id)
        raise ConnectionFault(
            f"unsupported version {api_version} of API {api_key} "
            f"(supported {handler.min_version}-{handler.max_version})"
        )
    try:
        header, body_offset = parse_request_header(frame, is_flexible(api_key, api_version), peer)
        request = decode_request(api_key, api_version, frame, body_offset)
    except Exception as exc:  # the decoder raises many types on garbage; all mean "malformed"
        raise ConnectionFault(f"malformed request (API {api_key} v{api_version}): {exc!r}") from None
    started = ctx.clock.monotonic()
    try:
        response = await handler.fn(ctx, header, request)
    except ConnectionFault:
        raise
    except Exception:
        log.exception("handler for API %s v%s failed (client %s, %s)", api_key, api_version, header.client_id, peer)
        raise ConnectionFault("internal error while handling the request") from None
    finally:
        ctx.metrics.observe_request(api_key, ctx.clock.monotonic() - started)
    client_az, named = ctx.router.client_az(header)
    if response is None:
        ctx.cross_az.client_bytes(client_az, named, len(frame))
        return None
    # Here, not in answer_forwarded: a forwarded request's codes are counted once, by the
    # broker that answers the client.
    ctx.metrics.observe_errors(api_key, error_codes(response))
    encoded = encode_response(header, response)
    ctx.cross_az.client_bytes(client_az, named, len(frame) + sum(len(part) for part in encoded))
    return encoded


async def _admin(ctx: HandlerContext, frame: bytes) -> list[bytes | bytearray]:
    try:
        request = admin.decode_request(frame)
    except admin.AdminFrameError as exc:
        raise ConnectionFault(f"malformed Shoal admin request: {exc}") from None
    return [admin.encode_response(await shoal_admin.handle(ctx, request))]


async def answer_forwarded(ctx: HandlerContext, message: KafkaForwardRequest) -> KafkaForwardResponse:
    """The receiving side of routing/request_forwarding.py: run the handler here, marked as forwarded."""
    if message.version != ROUTING_VERSION or message.api_key not in FORWARDABLE:
        raise ValueError(f"cannot answer a forwarded request for API {message.api_key} (version {message.version})")
    handler = registry.HANDLERS[message.api_key]
    request = REQUEST_CLASSES[message.api_key].decode(message.body, version=message.api_version)
    header = RequestHeader(message.api_key, message.api_version, 0, message.client_id, forwarded=True)
    response = await handler.fn(ctx, header, request)
    return KafkaForwardResponse(ROUTING_VERSION, bytes(response.encode(version=message.api_version)))
