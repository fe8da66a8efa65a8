"""Fetch of diskless partitions this broker does not host, or hosts as a replica that does
not hold the offset asked for (it restarted and is catching up, or its retention moved its
log start): the entries come from an in-sync replica in this broker's AZ (the leader first;
the leader itself when the AZ has none, or when that replica cannot serve the offset either)
over the RPC, the batches from the object cache or the object store, so record bytes never
cross an AZ (reads/read_service.py is the other side). The partition reader
(reads/partition_reader.py) asks, and reads the answers as it reads a hosted replica. Only the leader may answer
OFFSET_OUT_OF_RANGE: a client told so by a lagging replica would reset its offsets."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, cast

from ..log import EntryKind, LogEntry
from ..log.remote_segments import RemoteSegment, decode_segment
from ..protocol.batch import parse_header
from ..protocol.errors import ErrorCode
from ..routing.messages import ROUTING_VERSION, ReadPartition, ReadResult, ReplicaReadRequest, ReplicaReadResponse
from ..rpc import RpcError, RpcUnavailable
from .replica_policy import ReplicaSite, leader_of, source_replica

if TYPE_CHECKING:
    from ..rpc import RpcClientPool

RPC_MARGIN_S = 5.0
# topic name, partition, topic id, fetch offset, max bytes, isolation level (1: read_committed)
Wanted = tuple[str, int, str, int, int, int]


class RemoteSite(ReplicaSite, Protocol):
    """What a remote read uses of this broker: the replica policy's view and the RPC pool."""

    @property
    def rpc_pool(self) -> "RpcClientPool[Any, Any]": ...


class RemoteRead:
    """One partition's answer, shaped like what a local log read gives the fetch handler."""

    __slots__ = (
        "error_code",
        "high_watermark",
        "log_start_offset",
        "entries",
        "tiered",
        "last_stable_offset",
        "aborted",
    )

    def __init__(self, result: ReadResult) -> None:
        self.error_code = result.error_code
        self.high_watermark = result.high_watermark
        self.log_start_offset = result.log_start_offset
        self.entries = [
            LogEntry(EntryKind(kind), parse_header(data), memoryview(data)) for kind, data in result.entries
        ]
        self.tiered: RemoteSegment | None = decode_segment(result.tiered) if result.tiered else None
        self.last_stable_offset = result.last_stable_offset  # -1: a replica that predates transactions
        self.aborted = result.aborted  # [producer id, first offset, last offset], for read_committed


RemoteAnswers = dict[tuple[str, int], RemoteRead]  # by topic name and partition


async def read_remote(broker: RemoteSite, wanted: list[Wanted], max_wait_ms: int) -> RemoteAnswers:
    """Entries for every wanted partition, one RPC per source broker, concurrently. A source
    that is not the leader serves only offsets it holds; for the others it answers
    OFFSET_NOT_AVAILABLE and the leader is asked, whose answer (OFFSET_OUT_OF_RANGE included)
    is authoritative."""
    answers = await _ask_sources(broker, wanted, max_wait_ms, source_replica)
    again = [item for item in wanted if answers[(item[0], item[1])].error_code == ErrorCode.OFFSET_NOT_AVAILABLE]
    if again:
        answers.update(await _ask_sources(broker, again, max_wait_ms, leader_of))
    for read in answers.values():
        if read.error_code == ErrorCode.OFFSET_NOT_AVAILABLE:  # leadership moved meanwhile
            read.error_code = ErrorCode.NOT_LEADER_OR_FOLLOWER
    return answers


async def _ask_sources(
    broker: RemoteSite,
    wanted: list[Wanted],
    max_wait_ms: int,
    choose: Callable[[ReplicaSite, str, int], int | None],
) -> RemoteAnswers:
    by_source: dict[int, list[Wanted]] = {}
    answers: RemoteAnswers = {}
    for item in wanted:
        source = choose(broker, item[2], item[1])
        if source is None:
            answers[(item[0], item[1])] = RemoteRead(
                ReadResult(item[2], item[1], ErrorCode.LEADER_NOT_AVAILABLE, -1, -1)
            )
        else:
            by_source.setdefault(source, []).append(item)

    async def ask(source: int, items: list[Wanted]) -> None:
        request = ReplicaReadRequest(
            ROUTING_VERSION,
            max_wait_ms,
            [ReadPartition(tid, index, offset, limit, isolation) for _n, index, tid, offset, limit, isolation in items],
        )
        try:
            registration = broker.view.brokers.get(source)
            if registration is None:
                raise RpcUnavailable(f"broker {source} left the cluster")
            client = broker.rpc_pool.get(source, registration.rpc_host or "", registration.rpc_port)
            response = cast(ReplicaReadResponse, await client.call(request, max_wait_ms / 1000 + RPC_MARGIN_S))
            results = response.partitions
        except RpcError:  # a read has no "maybe applied": NOT_LEADER_OR_FOLLOWER for any RPC failure
            results = [
                ReadResult(tid, index, ErrorCode.NOT_LEADER_OR_FOLLOWER, -1, -1) for _n, index, tid, *_rest in items
            ]
        for (name, index, *_rest), result in zip(items, results):
            answers[(name, index)] = RemoteRead(result)

    await asyncio.gather(*(ask(source, items) for source, items in by_source.items()))
    return answers
