"""A data broker's side of the WAL file manager: answers `WalReferencesRequest` with every
replica it hosts whose log may reference WAL objects (a diskless partition, or one switched
to classic whose log still holds its diskless range) and the oldest WAL object each references
(wal_references.py), and hands over what its WAL writer uploaded since it was last asked;
answers `WalQueryRequest` with the asked objects each hosted replica references.

Neither before the replica manager has opened every replica the broker hosts: a restarted
broker serves the inter-broker RPC while it waits for its old registration to expire and
before its logs are open, and "no replicas" then would let the manager delete every object
only its logs on disk reference. It answers `NotReady` instead, and the manager pauses.

Answering costs the entries appended since the previous question (the references are kept
per segment) and never touches the produce or commit path. It visits every hosted replica,
so it hands the event loop back every few milliseconds (loop_slices.py): with 20,000
partitions one answer is most of a second of work. What it reports stays safe across those
pauses: the clock is read first, so commits the scan may miss are of objects too new to
delete, and replicas that open meanwhile are those a question asked a moment earlier would
not have seen either.
"""

from __future__ import annotations

import collections
from typing import TYPE_CHECKING

from ..loop_slices import LoopSlices
from ..rpc.errors import RpcRefused
from ..wal_references import created_ms_of
from .messages import (
    NO_REFERENCE,
    WALGC_VERSION,
    ObjectsFound,
    ReplicaReference,
    UploadedObject,
    WalQueryRequest,
    WalQueryResponse,
    WalReferencesRequest,
    WalReferencesResponse,
)

if TYPE_CHECKING:
    import uuid

    from ..clock import Clock
    from ..replica_manager import ReplicaManager

# Uploads remembered for the manager between two of its questions; older ones are dropped
# (the manager then reads those objects' indexes instead).
MAX_REMEMBERED_UPLOADS = 10_000


class RecentUploads:
    """The WAL objects this broker uploaded lately, each with the partitions that reference
    it for good and those that may (wal_writer.py OnCommitted); bounded, oldest dropped first."""

    def __init__(self, max_objects: int = MAX_REMEMBERED_UPLOADS) -> None:
        self._objects: collections.deque[UploadedObject] = collections.deque(maxlen=max_objects)

    def record(
        self, object_id: str, committed: "list[tuple[uuid.UUID, int]]", maybe: "list[tuple[uuid.UUID, int]]"
    ) -> None:
        self._objects.append(
            UploadedObject(
                object_id, sorted({(str(t), p) for t, p in committed}), sorted({(str(t), p) for t, p in maybe})
            )
        )

    def drain(self) -> list[UploadedObject]:
        drained = list(self._objects)
        self._objects.clear()
        return drained

    def __len__(self) -> int:
        return len(self._objects)


class NotReady(RpcRefused):
    """This broker has not opened every replica it hosts (starting, or stopping)."""


class ReferenceReporter:
    def __init__(
        self,
        node_id: int,
        replicas: "ReplicaManager",
        clock: "Clock",
        commit_deadline_ms: int,
        uploads: RecentUploads,
    ) -> None:
        self._node_id = node_id
        self._replicas = replicas
        self._clock = clock
        self._commit_deadline_ms = commit_deadline_ms
        self._uploads = uploads

    def _check(self, version: int) -> None:
        if version != WALGC_VERSION:
            raise ValueError(f"WAL references version {version} is not supported")
        if not self._replicas.loaded:
            raise NotReady(f"broker {self._node_id} has not opened its partition logs (starting or stopping)")

    async def answer(self, request: WalReferencesRequest) -> WalReferencesResponse:
        self._check(request.version)
        # The clock is read before the logs: a commit accepted after this moment is of an
        # object created after now - deadline, whatever the scan below sees.
        now_ms = self._clock.now_ms()
        replicas = []
        opened: dict[str, list[int]] = {}
        slices = LoopSlices(self._clock)
        for partition in list(self._replicas.partitions.values()):
            await slices.pause_if_due()
            if not partition.topic_id:
                continue
            opened.setdefault(partition.topic_id, []).append(partition.index)
            if not partition.may_reference_wal:
                continue
            oldest = partition.wal_references.oldest_created_ms()
            leader = partition.leader_state is not None
            replicas.append(
                ReplicaReference(
                    partition.topic_id,
                    partition.index,
                    NO_REFERENCE if oldest is None else oldest,
                    partition.log.size_bytes if leader else 0,
                    leader,
                )
            )
        return WalReferencesResponse(
            WALGC_VERSION, self._node_id, now_ms, self._commit_deadline_ms, replicas, self._uploads.drain(), opened
        )

    async def answer_query(self, request: WalQueryRequest) -> WalQueryResponse:
        self._check(request.version)
        hosted = {(p.topic_id, p.index): p for p in list(self._replicas.partitions.values()) if p.topic_id}
        referenced = []
        slices = LoopSlices(self._clock)
        for query in request.partitions:
            await slices.pause_if_due()
            partition = hosted.get((query.topic_id, query.partition))
            if partition is None:
                continue
            asked = {object_id: created_ms_of(object_id) for object_id in query.object_ids}
            found = partition.wal_references.referenced_among(asked)  # object id -> its oldest entry's last offset
            committed_below = partition.log.high_watermark
            referenced.append(
                ObjectsFound(
                    query.topic_id,
                    query.partition,
                    sorted(o for o, last in found.items() if last < committed_below),
                    sorted(o for o, last in found.items() if last >= committed_below),
                )
            )
        return WalQueryResponse(WALGC_VERSION, self._node_id, referenced)
