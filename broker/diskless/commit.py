"""Commits: "append these batches, found at these coordinates, to your partition log".

A produce representative sends one CommitRequest per leader broker per WAL object, after the
object is uploaded; the leader checks producer state, assigns offsets and appends COORDINATES
entries (DESIGN "Data flow"). These msgspec structs are the messages the inter-broker RPC
carries; on one broker the call is local (`LocalCommitter`). Versioned: a leader rejects a
version it does not know.

Invariant 4 (DESIGN): a leader refuses commits of objects older than `wal.commit.deadline.ms`,
so the WAL file manager may delete an uncommitted object once deadline + grace has passed.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from typing import TYPE_CHECKING, Awaitable, Protocol

import msgspec

from walfiles.keys import parse_wal_id

from ..protocol.errors import ApiError, ErrorCode
from .coordinates import make_ref

if TYPE_CHECKING:
    from ..clock import Clock
    from ..partition import Partition
    from ..replica_manager import ReplicaManager
    from ..topics import TopicCatalog

log = logging.getLogger(__name__)

COMMIT_VERSION = 1


class CommitBatch(msgspec.Struct, array_like=True, frozen=True):
    header: bytes  # the batch's 61-byte header (LogAppendTime already stamped by the representative)
    offset: int  # byte offset of the batch in the WAL object
    length: int


class CommitPartition(msgspec.Struct, array_like=True, frozen=True):
    """One partition's batches of one produce request: committed all or nothing, like Kafka."""

    topic_id: uuid.UUID
    partition: int
    acks: int
    batches: list[CommitBatch]


class CommitRequest(msgspec.Struct, array_like=True, frozen=True, tag="commit"):
    version: int
    object_id: str
    partitions: list[CommitPartition]  # in arrival order; a partition may appear more than once


class CommitResult(msgspec.Struct, array_like=True, frozen=True):
    error_code: int
    error_message: str | None = None
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    end_offset: int = -1  # the leader's log end offset after the append (acks=all waits for it)


class CommitResponse(msgspec.Struct, array_like=True, frozen=True, tag="commit_response"):
    version: int
    results: list[CommitResult]  # one per CommitRequest.partitions entry, same order


# How long a commit with acks=all waits for the ISR; the representative's producer
# request times out on its own clock (request.timeout.ms, 30 s by default) anyway.
ACKS_TIMEOUT_S = 30.0


class Committer(Protocol):
    def commit(self, request: CommitRequest) -> Awaitable[CommitResponse]:
        """Called in seal order: the call itself takes the commit's place in the leader's
        order (so the next object may be committed at once); the awaitable completes when
        the partitions' acks are satisfied."""


def failed(exc: ApiError) -> CommitResult:
    return CommitResult(int(exc.code), exc.message)


class LocalCommitter:
    """The leader side: applies commits to partitions this broker leads."""

    def __init__(self, catalog: "TopicCatalog", replicas: "ReplicaManager", clock: "Clock",
                 deadline_ms: int) -> None:
        self._catalog = catalog
        self._replicas = replicas
        self._clock = clock
        self._deadline_ms = deadline_ms

    def commit(self, request: CommitRequest) -> Awaitable[CommitResponse]:
        response = self.apply(request)
        return self._replicated(request, response)

    async def _replicated(self, request: CommitRequest, response: CommitResponse) -> CommitResponse:
        """acks=all: wait until each appended partition's ISR holds its entries."""
        waits = []
        for i, (part, result) in enumerate(zip(request.partitions, response.results)):
            topic = self._catalog.by_id(part.topic_id)
            if part.acks == -1 and result.error_code == 0 and topic is not None:
                waits.append((i, self._replicas.partitions.get((topic.name, part.partition)), result))
        if not waits:
            return response
        outcomes = await asyncio.gather(*(self._wait(partition, result.end_offset) for _, partition, result in waits),
                                        return_exceptions=True)
        results = list(response.results)
        for (i, _partition, _result), outcome in zip(waits, outcomes):
            if isinstance(outcome, ApiError):
                results[i] = failed(outcome)
            elif isinstance(outcome, BaseException):
                raise outcome
        return CommitResponse(response.version, results)

    @staticmethod
    async def _wait(partition: "Partition | None", end_offset: int) -> None:
        if partition is None:
            raise ApiError(ErrorCode.NOT_LEADER_OR_FOLLOWER, "the partition moved away during the commit")
        await partition.wait_replicated(end_offset, ACKS_TIMEOUT_S)

    def apply(self, request: CommitRequest) -> CommitResponse:
        if request.version != COMMIT_VERSION:
            error = ApiError(ErrorCode.UNSUPPORTED_VERSION, f"commit version {request.version} is not supported")
            return CommitResponse(COMMIT_VERSION, [failed(error)] * len(request.partitions))
        created_ms = parse_wal_id(request.object_id)[0]
        age_ms = self._clock.now_ms() - created_ms
        if age_ms > self._deadline_ms:
            error = ApiError(ErrorCode.REQUEST_TIMED_OUT,
                             f"WAL object {request.object_id} is {age_ms} ms old, past wal.commit.deadline.ms="
                             f"{self._deadline_ms}: not committed, retry the produce")
            return CommitResponse(COMMIT_VERSION, [failed(error)] * len(request.partitions))
        return CommitResponse(COMMIT_VERSION, [self._apply_partition(request.object_id, p) for p in request.partitions])

    def _apply_partition(self, object_id: str, part: CommitPartition) -> CommitResult:
        """One partition's outcome, exactly: appended, or refused with nothing appended
        (Partition appends all batches or none), whatever happens to the others."""
        try:
            topic = self._catalog.by_id(part.topic_id)
            if topic is None:
                raise ApiError(ErrorCode.UNKNOWN_TOPIC_ID, f"unknown topic id {part.topic_id}")
            partition = self._replicas.get(topic.name, part.partition)
            outcome = partition.append_coordinates(
                [(b.header, make_ref(object_id, b.offset, b.length)) for b in part.batches], part.acks)
        except ApiError as exc:
            return failed(exc)
        except Exception as exc:  # a disk error, a log closed under us: this partition only
            log.exception("commit of WAL object %s to partition %s-%d failed", object_id, part.topic_id,
                          part.partition)
            return failed(ApiError(ErrorCode.KAFKA_STORAGE_ERROR, f"commit failed, nothing was appended: {exc}"))
        return CommitResult(0, None, outcome.base_offset, outcome.log_append_time_ms, outcome.log_start_offset,
                            outcome.end_offset)
