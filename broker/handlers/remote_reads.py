"""Fetch of diskless partitions this broker does not host: the entries come from a replica
in this broker's AZ (the leader only when the AZ has none) over the RPC, the batches from
the object cache or the object store, so record bytes never cross an AZ
(replication/read_service.py is the other side)."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from ..log import EntryKind, LogEntry
from ..protocol.batch import parse_header
from ..protocol.errors import ErrorCode
from ..replication.messages import REPLICATION_VERSION, ReadPartition, ReadResult, ReplicaReadRequest
from ..rpc import RpcError

if TYPE_CHECKING:
    from ..broker import Broker

RPC_MARGIN_S = 5.0
Wanted = tuple[str, int, str, int, int]  # topic name, partition, topic id, fetch offset, max bytes


class RemoteRead:
    """One partition's answer, shaped like what a local log read gives the fetch handler."""

    __slots__ = ("error_code", "high_watermark", "log_start_offset", "entries")

    def __init__(self, result: ReadResult) -> None:
        self.error_code = result.error_code
        self.high_watermark = result.high_watermark
        self.log_start_offset = result.log_start_offset
        self.entries = [LogEntry(EntryKind(kind), parse_header(data), memoryview(data)) for kind, data in result.entries]


def source_replica(broker: "Broker", topic_id: str, partition: int) -> int | None:
    """A live replica in this broker's AZ (the leader first), else the leader."""
    state = broker.view.partitions.get((topic_id, partition))
    if state is None:
        return None
    record = state.record
    live = broker.view.brokers
    local = [r for r in [record.leader, *record.replicas] if r in live and live[r].az == broker.config.az]
    if local:
        return local[0]
    return record.leader if record.leader in live else None


async def read_remote(broker: "Broker", wanted: list[Wanted], max_wait_ms: int) -> dict[tuple[str, int], RemoteRead]:
    """Entries for every wanted partition, one RPC per source broker, concurrently."""
    by_source: dict[int, list[Wanted]] = {}
    answers: dict[tuple[str, int], RemoteRead] = {}
    for item in wanted:
        source = source_replica(broker, item[2], item[1])
        if source is None:
            answers[(item[0], item[1])] = RemoteRead(ReadResult(item[2], item[1], ErrorCode.LEADER_NOT_AVAILABLE, -1, -1))
        else:
            by_source.setdefault(source, []).append(item)

    async def ask(source: int, items: list[Wanted]) -> None:
        registration = broker.view.brokers[source]
        request = ReplicaReadRequest(REPLICATION_VERSION, max_wait_ms,
                                     [ReadPartition(tid, index, offset, limit) for _n, index, tid, offset, limit in items])
        try:
            client = broker.rpc_pool.get(source, registration.rpc_host or "", registration.rpc_port)
            response = await client.call(request, max_wait_ms / 1000 + RPC_MARGIN_S)
            results = response.partitions
        except RpcError:
            results = [ReadResult(tid, index, ErrorCode.NOT_LEADER_OR_FOLLOWER, -1, -1)
                       for _n, index, tid, _o, _l in items]
        for (name, index, *_rest), result in zip(items, results):
            answers[(name, index)] = RemoteRead(result)

    await asyncio.gather(*(ask(source, items) for source, items in by_source.items()))
    return answers
