"""Fetch: read committed entries (below the high watermark) of each partition, long
polling until `min_bytes` are available or `max_wait_ms` passes; an append wakes parked
fetches at once. Sizes follow KIP-74: the first batch of the response is returned whole
even above `partition_max_bytes`/`max_bytes` so consumers always progress; after that both
limits are hard. Fetch sessions (KIP-227) are declined with session id 0, which makes
clients send full fetches, as the protocol allows.

This handler does the request-level work only: the byte budget across partitions, the long
poll (here, and at the replicas of partitions read elsewhere), and shaping the response.
Each partition is read by the partition reader (reads/partition_reader.py), which chooses
its source (a replica elsewhere, the local log, a tiered segment), applies the isolation
level and sizes it; all partitions' bytes are then resolved together, so batches of one WAL
object are read with coalesced ranged GETs through the object cache.

isolation_level READ_COMMITTED (1) reads up to the partition's last stable offset instead of
its high watermark, and answers the aborted transactions overlapping the returned range.
Transaction markers are ordinary control batches in the log: served, and skipped by clients.
"""

from __future__ import annotations

import asyncio
from collections.abc import Hashable
from typing import TYPE_CHECKING, Any

from kafka.protocol.consumer import FetchRequest, FetchResponse

from ..context import HandlerContext
from ..protocol.api_keys import ApiKey
from ..protocol.errors import ApiError, ErrorCode
from ..protocol.header import RequestHeader
from ..reads.partition_reader import PartitionRead, PartitionReader, ReadTarget, RemoteAnswers, Wanted
from .common import resolve_topic
from .registry import api

if TYPE_CHECKING:
    from ..topics import Topic

_Topic = FetchResponse.FetchableTopicResponse
_Partition = _Topic.PartitionData
_Aborted = _Partition.AbortedTransaction
READ_COMMITTED = 1


@api(ApiKey.FETCH)
async def handle(ctx: HandlerContext, header: RequestHeader, request: FetchRequest) -> FetchResponse:
    if header.api_version >= 11:
        ctx.router.racks.remember(header.peer, request.rack_id)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + max(request.max_wait_ms, 0) / 1000
    reader = PartitionReader(ctx)
    wanted_remote = _remote_partitions(ctx, reader, request)
    only_remote = len(wanted_remote) == sum(len(t.partitions) for t in request.topics)
    remote: RemoteAnswers | None = None
    while True:
        if wanted_remote and remote is None:  # a lone remote read long-polls at the replica
            wait_ms = int(max(deadline - loop.time(), 0) * 1000) if only_remote else 0
            remote = await reader.read_elsewhere(wanted_remote, wait_ms)
        topics, total_bytes, has_error, keys, found = _read_all(ctx, request, remote or {})
        remaining = deadline - loop.time()
        if total_bytes >= request.min_bytes or has_error or remaining <= 0 or ctx.stopping or only_remote:
            await _resolve(ctx, found)
            ctx.metrics.fetched_bytes.inc(total_bytes)
            return FetchResponse(throttle_time_ms=0, error_code=0, session_id=0, responses=topics)
        if wanted_remote:
            remote = await _wait_mixed(ctx, reader, wanted_remote, keys, remaining)
        else:
            await ctx.waiters.wait(keys, remaining)


async def _wait_mixed(
    ctx: HandlerContext, reader: PartitionReader, wanted_remote: list[Wanted], keys: list[Hashable], remaining: float
) -> RemoteAnswers | None:
    """Long-poll the remote partitions at their replicas while waiting for local appends:
    whichever comes first wakes the fetch, so a commit on either side reaches a tailing
    consumer at once. Returns the remote answer if it came first (None: read them again)."""
    polled = asyncio.ensure_future(reader.read_elsewhere(wanted_remote, int(remaining * 1000)))
    local = asyncio.ensure_future(ctx.waiters.wait(keys, remaining))
    try:
        await asyncio.wait((polled, local), return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in (polled, local):
            if not task.done():
                task.cancel()
    return polled.result() if polled.done() and not polled.cancelled() else None


def _remote_partitions(ctx: HandlerContext, reader: PartitionReader, request: FetchRequest) -> list[Wanted]:
    """Partitions of the request that this broker cannot serve itself."""
    wanted = []
    for fetch_topic in request.topics:
        try:
            topic = resolve_topic(ctx, fetch_topic.topic, fetch_topic.topic_id)
        except ApiError:
            continue
        for p in fetch_topic.partitions:
            item = reader.elsewhere(topic, p.partition, p.fetch_offset, p.partition_max_bytes, request.isolation_level)
            if item is not None:
                wanted.append(item)
    return wanted


Found = list[tuple[Any, PartitionRead]]  # partition responses whose records _resolve fills


async def _resolve(ctx: HandlerContext, found: Found) -> None:
    """Fill each found partition's records (or its error, and for a tiered read_committed
    read the aborted transactions of what it serves)."""
    await PartitionReader(ctx).resolve([read for _response, read in found])
    for response, read in found:
        response.records = read.records
        if read.error is not None:
            response.error_code = read.error.code
        elif read.aborted is not None:
            response.aborted_transactions = _aborted(read)


def _read_all(
    ctx: HandlerContext, request: FetchRequest, remote: RemoteAnswers
) -> tuple[list[Any], int, bool, list[Hashable], Found]:
    """Every partition's read, sized by KIP-74 across the request (the first batch of the
    response whole, then within `max_bytes`); errors per partition."""
    reader = PartitionReader(ctx, remote)
    budget = request.max_bytes if request.max_bytes > 0 else 0x7FFFFFFF
    total = 0
    has_error = False
    first_whole = True
    keys: list[Hashable] = []
    topics: list[Any] = []
    found: Found = []
    for fetch_topic in request.topics:
        partitions = []
        topic: Topic | None
        try:
            topic = resolve_topic(ctx, fetch_topic.topic, fetch_topic.topic_id)
            topic_error = None
        except ApiError as exc:
            topic, topic_error = None, exc
        for p in fetch_topic.partitions:
            if topic is None:
                error = topic_error or ApiError(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, "unknown topic")
                read = PartitionRead(p.partition, error=error)
            else:
                limit = min(p.partition_max_bytes, budget - total)
                target = ReadTarget(topic, p.partition, p.current_leader_epoch)
                read = reader.read(target, p.fetch_offset, limit, request.isolation_level, first_whole)
            response = _response(read, request.isolation_level)
            partitions.append(response)
            if read.error is not None:
                has_error = True
                continue
            if read.wait_key is not None:
                keys.append(read.wait_key)
            if read.found:
                first_whole = False
                total += read.size
                found.append((response, read))
        topics.append(_Topic(topic=fetch_topic.topic, topic_id=fetch_topic.topic_id, partitions=partitions))
    return topics, total, has_error, keys, found


def _response(read: PartitionRead, isolation_level: int) -> Any:
    """A partition's response before its records are resolved."""
    return _Partition(
        partition_index=read.index,
        error_code=read.error.code if read.error is not None else 0,
        high_watermark=read.high_watermark,
        last_stable_offset=read.last_stable_offset,
        log_start_offset=read.log_start_offset,
        aborted_transactions=_aborted(read) if read.error is None and isolation_level == READ_COMMITTED else None,
        preferred_read_replica=-1,
        records=b"",
    )


def _aborted(read: PartitionRead) -> list[Any]:
    return [_Aborted(producer_id=pid, first_offset=first) for pid, first, _last in read.aborted or []]
