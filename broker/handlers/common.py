"""A helper shared by the API modules, not an API: broker lists and topic lookup by name or
id, which several handlers need."""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING

from ..protocol.errors import ApiError, ErrorCode
from ..topics import Topic

if TYPE_CHECKING:
    from ..context import HandlerContext

ZERO_UUID = uuid.UUID(int=0)


def resolve_topic(ctx: "HandlerContext", name: str | None, topic_id: uuid.UUID | None) -> Topic:
    """The topic a request names, by id (v13+ Produce/Fetch) or by name."""
    if topic_id is not None and topic_id != ZERO_UUID:
        topic = ctx.catalog.by_id(topic_id)
        if topic is None:
            raise ApiError(ErrorCode.UNKNOWN_TOPIC_ID, f"unknown topic id {topic_id}")
        return topic
    topic = ctx.catalog.get(name or "")
    if topic is None:
        raise ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, f"unknown topic {name!r}")
    return topic


def live_brokers(ctx: "HandlerContext") -> list[tuple[int, str, int, str | None]]:
    """(node_id, host, port, rack) of every registered broker, by node id."""
    return [(b.node_id, b.host, b.port, b.az) for b in sorted(ctx.view.brokers.values(), key=lambda b: b.node_id)]
