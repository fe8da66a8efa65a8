"""The handler registry: one entry per Kafka API, and the single source of ApiVersions.

A handler module registers itself with `@api(ApiKey.NAME)`; the versions it claims default to
the full range of Kafka's schema for that API (kafka-python's message classes), so
advertising a version means every field of it is decoded and encoded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from ..protocol.api_keys import ApiKey
from ..protocol.messages import schema_versions

if TYPE_CHECKING:
    from ..context import HandlerContext
    from ..protocol.header import RequestHeader

# (context, header, decoded request) -> response, or None for an acks=0 Produce. Requests and
# responses are kafka-python's message classes, which are untyped: hence Any.
HandlerFn = Callable[["HandlerContext", "RequestHeader", Any], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class Handler:
    api_key: ApiKey
    min_version: int
    max_version: int
    fn: HandlerFn

    def supports(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version


HANDLERS: dict[int, Handler] = {}  # by API key (an ApiKey, found with the int read off the wire)


def api(api_key: ApiKey, versions: tuple[int, int] | None = None) -> Callable[[HandlerFn], HandlerFn]:
    low, high = versions or schema_versions(api_key)

    def register(fn: HandlerFn) -> HandlerFn:
        if api_key in HANDLERS:
            raise RuntimeError(f"API {api_key} registered twice")
        HANDLERS[api_key] = Handler(api_key, low, high, fn)
        return fn

    return register


def supported_versions() -> list[tuple[int, int, int]]:
    """(api_key, min, max) for every registered handler, for ApiVersions."""
    return [(h.api_key, h.min_version, h.max_version) for h in sorted(HANDLERS.values(), key=lambda h: h.api_key)]
