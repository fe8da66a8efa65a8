"""OffsetFetch: one group (v1-7) or many (v8+); null topics means every committed offset.
With `require_stable` (v7+, KIP-447: read_committed consumers), a partition with a
transactional offset commit still waiting for its marker answers UNSTABLE_OFFSET_COMMIT
(retriable) instead of an offset that is about to change."""

from __future__ import annotations

from typing import Any

from kafka.protocol.consumer import OffsetFetchRequest, OffsetFetchResponse

from ..context import HandlerContext
from ..protocol.api_keys import ApiKey
from ..protocol.errors import ApiError, ErrorCode
from ..protocol.header import RequestHeader
from .common import ZERO_UUID
from .registry import api

R = OffsetFetchResponse
_OldTopic, _Group = R.OffsetFetchResponseTopic, R.OffsetFetchResponseGroup
_OldPartition = _OldTopic.OffsetFetchResponsePartition
_NewTopic = _Group.OffsetFetchResponseTopics
_NewPartition = _NewTopic.OffsetFetchResponsePartitions


@api(ApiKey.OFFSET_FETCH)
async def handle(ctx: HandlerContext, header: RequestHeader, request: OffsetFetchRequest) -> OffsetFetchResponse:
    version = header.api_version
    if version >= 8:
        return R(
            throttle_time_ms=0,
            groups=[_fetch_group(ctx, g.group_id, g.topics, version, request.require_stable) for g in request.groups],
        )
    topics = request.topics if (request.topics is not None or version < 2) else None
    group = _fetch_group(ctx, request.group_id, topics, version, version >= 7 and request.require_stable)
    old_topics = [
        _OldTopic(
            name=t.name,
            partitions=[
                _OldPartition(
                    partition_index=p.partition_index,
                    committed_offset=p.committed_offset,
                    committed_leader_epoch=p.committed_leader_epoch,
                    metadata=p.metadata,
                    error_code=p.error_code,
                )
                for p in t.partitions
            ],
        )
        for t in group.topics
    ]
    return R(throttle_time_ms=0, topics=old_topics, error_code=group.error_code)


def _fetch_group(
    ctx: HandlerContext, group_id: str, topics: list[Any] | None, version: int, require_stable: bool
) -> Any:
    names: dict[str, object] = {}  # name -> topic id to echo (v10)
    wanted = None
    if topics is not None:
        wanted = []
        for t in topics:
            if version >= 10 and t.topic_id not in (None, ZERO_UUID):
                topic = ctx.catalog.by_id(t.topic_id)
                name = topic.name if topic is not None else str(t.topic_id)
            else:
                name = t.name
            names[name] = getattr(t, "topic_id", None)
            wanted.append((name, list(t.partition_indexes)))
    try:
        found = ctx.groups.fetch_offsets(group_id, wanted)
    except ApiError as exc:
        return _Group(group_id=group_id, topics=[], error_code=exc.code)
    unstable = ctx.groups.unstable_offsets(group_id) if require_stable else set()
    result = []
    for name, partitions in found.items():
        topic_id = names.get(name)
        if topic_id is None:
            topic = ctx.catalog.get(name)
            topic_id = topic.topic_id if topic is not None else ZERO_UUID
        result.append(
            _NewTopic(
                name=name,
                topic_id=topic_id,
                partitions=[
                    _NewPartition(
                        partition_index=p,
                        committed_offset=v.offset if v and (name, p) not in unstable else -1,
                        committed_leader_epoch=v.leader_epoch if v and (name, p) not in unstable else -1,
                        metadata=(v.metadata if v else "") or "",
                        error_code=ErrorCode.UNSTABLE_OFFSET_COMMIT if (name, p) in unstable else ErrorCode.NONE,
                    )
                    for p, v in partitions.items()
                ],
            )
        )
    return _Group(group_id=group_id, topics=result, error_code=ErrorCode.NONE)
