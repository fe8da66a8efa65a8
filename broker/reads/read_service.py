"""Entries for brokers without a replica: a broker that serves a diskless partition it does
not host (a stateless broker, or any broker representing the partition in its AZ) asks a
replica in its own AZ for the committed entries of an offset range, then reads the batches
from its object cache or the object store. Below the replica's local log, the answer is the
tiered segment holding the offset, which the asking broker reads from the store itself, with
the replica's last stable offset and, for read_committed, the aborted transactions
overlapping the rest of that segment (from the tiered and local indexes, broker/tiering/reader.py).
The replica is read as Fetch reads it (reads/partition_reader.py `read_replica`).
Only partition-log entries (about 120 bytes per batch) travel between brokers; record bytes
never do. Long-polls like a consumer fetch.

A replica that is not the leader serves only the offsets it holds, up to its high
watermark; for an offset outside its log it answers OFFSET_NOT_AVAILABLE and the asking
broker turns to the leader, the only replica that may say OFFSET_OUT_OF_RANGE.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import TYPE_CHECKING

from ..log.remote_segments import encode_segment
from ..objectstore.store import ObjectStoreError
from ..tiering.reader import TieredReadError
from ..protocol.errors import ApiError, ErrorCode
from ..routing.messages import (
    ROUTING_VERSION,
    ReadPartition,
    ReadResult,
    ReplicaReadRequest,
    ReplicaReadResponse,
)
from ..wire_errors import wire_error
from .partition_reader import below_local_log, read_replica
from .replica_policy import holds, is_authoritative

if TYPE_CHECKING:
    from ..tiering.reader import TieredReader
    from ..replica_manager import ReplicaManager
    from ..topics import TopicCatalog
    from ..waiters import FetchWaiters


class ReplicaReadService:
    def __init__(
        self, catalog: "TopicCatalog", replicas: "ReplicaManager", waiters: "FetchWaiters", tiered: "TieredReader"
    ) -> None:
        self._catalog = catalog
        self._replicas = replicas
        self._waiters = waiters
        self._tiered = tiered
        self.stopping = False

    async def handle(self, request: ReplicaReadRequest) -> ReplicaReadResponse:
        if request.version != ROUTING_VERSION:
            raise ValueError(f"replica read version {request.version} is not supported")
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(request.max_wait_ms, 0) / 1000
        while True:
            results = await asyncio.gather(*(self._read(wanted) for wanted in request.partitions))
            remaining = deadline - loop.time()
            if remaining <= 0 or self.stopping or any(r.entries or r.tiered or r.error_code for r in results):
                return ReplicaReadResponse(ROUTING_VERSION, results)
            keys = [(self._name(p), p.partition) for p in request.partitions]
            await self._waiters.wait(keys, remaining)

    def _name(self, wanted: ReadPartition) -> str:
        topic = self._catalog.by_id(uuid.UUID(wanted.topic_id))
        return topic.name if topic is not None else ""

    async def _read(self, wanted: ReadPartition) -> ReadResult:
        log = None
        try:
            partition = self._replicas.get(self._name(wanted), wanted.partition)
            log = partition.log
            offset = wanted.fetch_offset
            if below_local_log(partition, offset) is None and not holds(partition, offset):
                if not is_authoritative(partition):  # only the leader knows whether the offset is valid
                    raise ApiError(
                        ErrorCode.OFFSET_NOT_AVAILABLE,
                        f"this replica holds [{log.log_start_offset}, {log.log_end_offset}]: "
                        f"ask the leader for offset {offset}",
                    )
                raise ApiError(
                    ErrorCode.OFFSET_OUT_OF_RANGE,
                    f"offset {offset} is outside [{log.log_start_offset}, {log.log_end_offset}]",
                )
            # the asking broker sizes the answer again, against its request's budget
            read = read_replica(partition, offset, wanted.max_bytes, wanted.isolation_level, first_whole=True)
            if read.span is not None:
                aborted = []
                if read.aborted is not None:  # read_committed: the whole segment's, the asker cuts
                    try:
                        found = await self._tiered.aborted_transactions(
                            partition, offset, read.span.segment.next_offset
                        )
                    except (ObjectStoreError, TieredReadError) as exc:
                        raise wire_error(exc) from None
                    aborted = [(t.producer_id, t.first_offset, t.last_offset) for t in found]
                return ReadResult(
                    wanted.topic_id,
                    wanted.partition,
                    0,
                    read.high_watermark,
                    partition.log_start_offset,
                    tiered=encode_segment(read.span.segment),
                    last_stable_offset=read.last_stable_offset,
                    aborted=aborted,
                )
            return ReadResult(
                wanted.topic_id,
                wanted.partition,
                0,
                read.high_watermark,
                read.log_start_offset,
                [(int(e.kind), e.data) for e in read.entries],  # type: ignore[misc]  # msgspec sends a memoryview as bytes
                last_stable_offset=read.last_stable_offset,
                aborted=read.aborted or [],
            )
        except ApiError as exc:
            return ReadResult(
                wanted.topic_id,
                wanted.partition,
                int(exc.code),
                log.high_watermark if log is not None else -1,
                log.log_start_offset if log is not None else -1,
            )
