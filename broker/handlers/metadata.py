"""Metadata: brokers, cluster id, controller, and topics with their partition leaders.

Answers depend on the client's AZ (routing/): a diskless partition is advertised with the
broker of that AZ that represents it (with the real leader epoch, replicas and ISR), so
the client's produce and fetch stay in its AZ; a classic partition with its real leader.

Unknown topics are auto-created when the client allows it and
`auto.create.topics.enable` is true, as Kafka does.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from kafka.protocol.metadata import MetadataRequest

from ..context import HandlerContext
from ..loop_slices import LoopSlices
from ..protocol.api_keys import ApiKey
from ..protocol.encoded import EncodedBody
from ..protocol.errors import ApiError, ErrorCode
from ..protocol.header import RequestHeader
from ..protocol.metadata_encoding import BrokerRow, TopicSectionEncoder, encode_metadata_body
from ..topics import Topic
from .common import ZERO_UUID, live_brokers
from .partition_rows import partition_rows
from .registry import api


@dataclass(frozen=True)
class _Missing:
    """A topic asked for that cannot be described: its entry is the error alone."""

    error_code: int
    name: str | None
    topic_id: uuid.UUID = ZERO_UUID


@api(ApiKey.METADATA)
async def handle(ctx: HandlerContext, header: RequestHeader, request: MetadataRequest) -> EncodedBody:
    client_az = ctx.router.client_az(header)[0]
    encoder = TopicSectionEncoder(header.api_version)
    codes: list[int] = []
    slices = LoopSlices(ctx.clock)  # an answer over 100,000 partitions must not stall the loop
    sections = []
    if request.topics is None or (header.api_version == 0 and not request.topics):
        for topic in ctx.catalog.all():
            sections.append(_describe(ctx, encoder, topic, client_az, codes))
            await slices.pause_if_due()
    else:
        allow_create = request.allow_auto_topic_creation if header.api_version >= 4 else True
        for wanted in request.topics:
            found = await _lookup(ctx, wanted.name, wanted.topic_id, allow_create)
            if isinstance(found, Topic):
                sections.append(_describe(ctx, encoder, found, client_az, codes))
            else:
                codes.append(found.error_code)
                sections.append(encoder.topic(found.error_code, found.name, found.topic_id, False, []))
            await slices.pause_if_due()
    brokers = [BrokerRow(n, h, p, r) for n, h, p, r in live_brokers(ctx)]
    body = encode_metadata_body(header.api_version, brokers, ctx.cluster_id, ctx.view.controller_id, sections)
    return EncodedBody(body, codes)


async def _lookup(ctx: HandlerContext, name: Any, topic_id: uuid.UUID | None, allow_create: bool) -> Topic | _Missing:
    """The topic asked for, created if allowed, or a bare topic entry with the error."""
    topic = ctx.catalog.get(name) if name else None
    if topic is None and topic_id is not None and topic_id != ZERO_UUID:
        topic = ctx.catalog.by_id(topic_id)
        if topic is None:
            return _Missing(ErrorCode.UNKNOWN_TOPIC_ID, None, topic_id)
    if topic is None:
        if allow_create and ctx.config.auto_create_topics_enable:
            try:
                prepared = ctx.catalog.prepare(name, -1, {})
                factor = ctx.config.default_replication_factor
                topic = await ctx.catalog.create(prepared, ctx.assign_replicas(range(prepared.partitions), factor))
            except ApiError as exc:
                if exc.code != ErrorCode.TOPIC_ALREADY_EXISTS:
                    return _Missing(exc.code, name)
                topic = ctx.catalog.get(name)
        else:
            return _Missing(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name)
    if topic is None:  # another client created it and it was deleted again at once
        return _Missing(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, name)
    return topic


def _describe(
    ctx: HandlerContext, encoder: TopicSectionEncoder, topic: Topic, client_az: str | None, codes: list[int]
) -> bytes:
    """The topic's encoded section; its partitions' error codes go to `codes`."""
    partitions = []
    for row in partition_rows(ctx, topic, client_az):
        if row.error_code:
            codes.append(row.error_code)
        partitions.append(encoder.partition(*row))
    return encoder.topic(0, topic.name, topic.topic_id, topic.internal, partitions)
