"""The handler registry: one entry per Kafka API, and the single source of ApiVersions.

A handler module registers itself with `@api(KEY)`; the versions it claims default to
the full range of Kafka's schema for that API (kafka-python's message classes), so
advertising a version means every field of it is decoded and encoded.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Awaitable, Callable

from ..protocol.messages import schema_versions

if TYPE_CHECKING:
    from ..broker import Broker
    from ..protocol.header import RequestHeader

HandlerFn = Callable[["Broker", "RequestHeader", Any], Awaitable[Any]]


@dataclass(frozen=True, slots=True)
class Handler:
    api_key: int
    min_version: int
    max_version: int
    fn: HandlerFn

    def supports(self, version: int) -> bool:
        return self.min_version <= version <= self.max_version


HANDLERS: dict[int, Handler] = {}


def api(api_key: int, versions: tuple[int, int] | None = None) -> Callable[[HandlerFn], HandlerFn]:
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
