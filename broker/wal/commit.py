"""Commits: "append these batches, found at these coordinates, to your partition log".

A produce representative sends one CommitRequest per leader broker per WAL object, after the
object is uploaded; the leader checks producer state, assigns offsets and appends COORDINATES
entries (DESIGN "Data flow"), and answers at once with each partition's outcome. Partitions
written with acks=all are then acknowledged one by one as their high watermark passes them
(ReplicationWaitRequest: the leader answers as soon as any of them is done, and is asked
again for the rest), so a slow partition or follower delays only the producers that wrote to
it, never the others that shared the WAL object. These msgspec structs are the messages the
inter-broker RPC carries; on one broker the calls are local (`LocalCommitter`). Versioned: a
leader rejects a version it does not know.

Invariant 4 (DESIGN): a leader refuses commits of objects older than `wal.commit.deadline.ms`,
so the WAL file manager may delete an uncommitted object once deadline + grace has passed.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import msgspec

from walfiles.keys import parse_wal_id

from ..log.coordinates import make_ref
from ..protocol.errors import ApiError, ErrorCode
from ..representation_fence import Admission
from ..wire_errors import wire_error
from .commit_streams import CommitStream, CommitStreams

if TYPE_CHECKING:
    from ..clock import Clock
    from ..partition import Partition
    from ..replica_manager import ReplicaManager
    from ..topics import TopicCatalog

log = logging.getLogger(__name__)

# 2: answered once applied; acks=all waits are separate (ReplicationWaitRequest). 3: each
# partition says which mode marker its representative knew of (CommitPartition.mode_offset).
COMMIT_VERSION = 3


class CommitBatch(msgspec.Struct, array_like=True, frozen=True):
    header: bytes  # the batch's 61-byte header (LogAppendTime already stamped by the representative)
    offset: int  # byte offset of the batch in the WAL object
    length: int


class Representation(msgspec.Struct, array_like=True, frozen=True):
    """The representative that took a partition's batches, for clients of `client_az` (None:
    an AZ no broker is in), having decided so on its cluster view at `view_revision`, where
    the partition's leader epoch was `leader_epoch`."""

    node_id: int
    client_az: str | None
    view_revision: int
    leader_epoch: int


class CommitPartition(msgspec.Struct, array_like=True, frozen=True):
    """One partition's batches of one produce request: committed all or nothing, like Kafka."""

    topic_id: uuid.UUID
    partition: int
    acks: int
    batches: list[CommitBatch]
    # The partition's last mode marker as the representative's cluster view recorded it when
    # it accepted the batches (-1: none): Partition.append_coordinates refuses them if the
    # partition switched to classic after it. The default only lets a version-2 request
    # decode, to be answered UNSUPPORTED_VERSION rather than have its connection dropped.
    mode_offset: int = -1
    # Who took the batches, for which client AZ, as of which view and leader epoch
    # (representation_fence.py).
    # None from an older representative: not checked.
    represented_by: Representation | None = None
    # How long the produce's answer may take to reach its client (its request's timeout):
    # a refusal's sequence barrier counts its age from there (producers/barriers.py).
    answer_within_ms: int = 0


class CommitRequest(msgspec.Struct, array_like=True, frozen=True, tag="commit"):
    version: int
    object_id: str
    partitions: list[CommitPartition]  # in arrival order; a partition may appear more than once
    stream: CommitStream | None = None  # remote commits (commit_streams.py); None: local, or an older sender


class CommitResult(msgspec.Struct, array_like=True, frozen=True):
    error_code: int
    error_message: str | None = None
    base_offset: int = -1
    log_append_time_ms: int = -1
    log_start_offset: int = -1
    end_offset: int = -1  # the leader's log end offset after the append (acks=all waits for it)
    leader_epoch: int = -1  # the epoch it was appended in: a wait in another epoch fails
    replicated: bool = False  # the high watermark already passed end_offset (or acks were not all)


class CommitResponse(msgspec.Struct, array_like=True, frozen=True, tag="commit_response"):
    version: int
    results: list[CommitResult]  # one per CommitRequest.partitions entry, same order
    # >= 0: the request's stream is closed from this position on; no commit of it from there
    # was applied or ever will be (commit_streams.py)
    stream_closed_from: int = -1


class WaitPartition(msgspec.Struct, array_like=True, frozen=True):
    topic_id: uuid.UUID
    partition: int
    leader_epoch: int
    end_offset: int


class ReplicationWaitRequest(msgspec.Struct, array_like=True, frozen=True, tag="replication_wait"):
    """acks=all of committed partitions: answered as soon as any of them is replicated (or
    fails), or after max_wait_ms; the representative asks again for those still waiting."""

    version: int
    max_wait_ms: int
    partitions: list[WaitPartition]


class WaitResult(msgspec.Struct, array_like=True, frozen=True):
    done: bool  # False: still waiting, ask again
    error_code: int = 0
    error_message: str | None = None


class ReplicationWaitResponse(msgspec.Struct, array_like=True, frozen=True, tag="replication_wait_response"):
    version: int
    results: list[WaitResult]  # one per request partition, same order


# How long a commit with acks=all waits for the ISR; the representative's producer
# request times out on its own clock (request.timeout.ms, 30 s by default) anyway.
ACKS_TIMEOUT_S = 30.0
WAIT_GRACE_S = 0.02  # see LocalCommitter.answer_wait


@dataclass(slots=True)
class PendingCommit:
    """One partition's commit as its representative sees it, in two steps: `applied` (the
    leader assigned offsets, or refused) and `acknowledged` (its acks are satisfied, or they
    cannot be). The WAL writer frees the batch's in-flight bytes at the first and answers
    the producer at the second. `outcome_known` False: the leader's answer was lost (a
    timeout, a broken connection), so the batch may have been appended although `applied`
    holds an error; the WAL file manager must then assume the partition references the object."""

    applied: asyncio.Future[CommitResult]
    acknowledged: asyncio.Future[CommitResult]
    outcome_known: bool = True


class Committer(Protocol):
    def route(self, topic_id: uuid.UUID, partition: int) -> object:
        """Where a commit of the partition would go now (a hashable token: leader, leader
        epoch, commit stream). The WAL writer holds a partition's idempotent batches back
        while earlier ones sent another way are unresolved, and fails a plain batch whose
        route changed between its admission and its commit (wal_writer.py)."""

    def commit(self, request: CommitRequest) -> list[PendingCommit]:
        """Called in seal order: the call itself takes the commit's place in the leaders'
        order (so the next object may be committed at once). One PendingCommit per
        request partition, same order."""


def failed(exc: ApiError) -> CommitResult:
    return CommitResult(int(exc.code), exc.message)


def resolved(result: CommitResult) -> asyncio.Future[CommitResult]:
    future: asyncio.Future[CommitResult] = asyncio.get_running_loop().create_future()
    future.set_result(result)
    return future


def acknowledged_when(applied: CommitResult, wait: asyncio.Future[None]) -> asyncio.Future[CommitResult]:
    """`applied`, once `wait` (an acks=all wait) succeeded; its error if it raised one."""

    async def outcome() -> CommitResult:
        try:
            await wait
        except ApiError as exc:
            return failed(exc)
        return applied

    return asyncio.ensure_future(outcome())


class LocalCommitter:
    """The leader side: applies commits to partitions this broker leads."""

    def __init__(
        self,
        catalog: "TopicCatalog",
        replicas: "ReplicaManager",
        clock: "Clock",
        deadline_ms: int,
        verify_txn: bool = False,
    ) -> None:
        self._verify_txn = verify_txn  # client batches open transactions only with a permit (KIP-890)
        self._catalog = catalog
        self._replicas = replicas
        self._clock = clock
        self._deadline_ms = deadline_ms
        self._streams = CommitStreams()  # representatives' commit streams to this leader

    def route(self, topic_id: uuid.UUID, partition: int) -> object:
        """Every commit is applied here, in place: one route."""
        return "local"

    def commit(self, request: CommitRequest) -> list[PendingCommit]:
        response = self.apply(request)
        pending = []
        for part, result in zip(request.partitions, response.results):
            applied = resolved(result)
            if result.replicated or result.error_code:
                pending.append(PendingCommit(applied, applied))
                continue
            wait = asyncio.ensure_future(
                self.wait_replicated(
                    WaitPartition(part.topic_id, part.partition, result.leader_epoch, result.end_offset), ACKS_TIMEOUT_S
                )
            )
            pending.append(PendingCommit(applied, acknowledged_when(result, wait)))
        return pending

    async def wait_replicated(self, wanted: WaitPartition, timeout_s: float) -> None:
        """acks=all: return once the ISR holds the partition's log up to `end_offset` in the
        same leader epoch; raise ApiError otherwise (as Kafka's delayed produce does)."""
        partition = self._partition(wanted.topic_id, wanted.partition)
        if partition.leader_state is None or partition.leader_epoch != wanted.leader_epoch:
            raise ApiError(
                ErrorCode.NOT_LEADER_OR_FOLLOWER,
                f"leadership of {partition.topic}-{partition.index} changed during the commit",
            )
        await partition.wait_replicated(wanted.end_offset, timeout_s)

    async def answer_wait(self, request: ReplicationWaitRequest) -> ReplicationWaitResponse:
        """The leader's side of ReplicationWaitRequest: answer once every partition is done,
        or, when some are done, once the rest have had as long again (at least
        WAIT_GRACE_S) to follow: partitions replicated together are answered together (one
        round trip), a partition that lags well behind the others does not hold them."""
        if request.version != COMMIT_VERSION:
            raise ValueError(f"replication wait version {request.version} is not supported")
        loop = asyncio.get_running_loop()
        started = loop.time()
        deadline = started + max(request.max_wait_ms, 0) / 1000
        waits = [asyncio.ensure_future(self.wait_replicated(p, ACKS_TIMEOUT_S)) for p in request.partitions]
        try:
            done, pending = await asyncio.wait(waits, timeout=deadline - started, return_when=asyncio.FIRST_COMPLETED)
            if done and pending:
                grace = max(WAIT_GRACE_S, loop.time() - started)
                await asyncio.wait(pending, timeout=max(0.0, min(grace, deadline - loop.time())))
        finally:
            for wait in waits:
                if not wait.done():
                    wait.cancel()  # done only once it runs: below it still reads as not done
                elif not wait.cancelled():
                    wait.exception()  # retrieved: when this call is cancelled nobody reads it below
        results = []
        for wait in waits:
            if not wait.done() or wait.cancelled():
                results.append(WaitResult(False))
            elif isinstance(wait.exception(), ApiError):
                error = wait.exception()
                assert isinstance(error, ApiError)
                results.append(WaitResult(True, int(error.code), error.message))
            elif (exc := wait.exception()) is not None:
                raise exc
            else:
                results.append(WaitResult(True))
        return ReplicationWaitResponse(COMMIT_VERSION, results)

    def apply(self, request: CommitRequest) -> CommitResponse:
        """Append every partition's batches, in order, before returning (no await): commits
        of one representative reach the partitions in the order they were sent."""
        if request.version != COMMIT_VERSION:
            error = ApiError(ErrorCode.UNSUPPORTED_VERSION, f"commit version {request.version} is not supported")
            return CommitResponse(COMMIT_VERSION, [failed(error)] * len(request.partitions))
        stream = request.stream
        if stream is not None and (closed_from := self._streams.admit(stream)) is not None:
            error = ApiError(
                ErrorCode.NOT_LEADER_OR_FOLLOWER,
                f"commit {stream.sequence} of broker {stream.node_id}'s stream {stream.number} follows one that never "
                "arrived: not committed, retry the produce",
            )
            return CommitResponse(COMMIT_VERSION, [failed(error)] * len(request.partitions), closed_from)
        created_ms = parse_wal_id(request.object_id)[0]
        age_ms = self._clock.now_ms() - created_ms
        if age_ms > self._deadline_ms:
            error = ApiError(
                ErrorCode.REQUEST_TIMED_OUT,
                f"WAL object {request.object_id} is {age_ms} ms old, past wal.commit.deadline.ms="
                f"{self._deadline_ms}: not committed, retry the produce",
            )
            closed_from = -1 if stream is None else self._streams.close(stream)  # nothing of the stream after it
            return CommitResponse(COMMIT_VERSION, [failed(error)] * len(request.partitions), closed_from)
        return CommitResponse(COMMIT_VERSION, [self._apply_partition(request.object_id, p) for p in request.partitions])

    def _partition(self, topic_id: uuid.UUID, index: int) -> "Partition":
        topic = self._catalog.by_id(topic_id)
        if topic is None:
            raise ApiError(ErrorCode.UNKNOWN_TOPIC_ID, f"unknown topic id {topic_id}")
        return self._replicas.get(topic.name, index)

    def _apply_partition(self, object_id: str, part: CommitPartition) -> CommitResult:
        """One partition's outcome, exactly: appended, or refused with nothing appended
        (Partition appends all batches or none), whatever happens to the others."""
        try:
            partition = self._partition(part.topic_id, part.partition)
            outcome = partition.append_coordinates(
                [(b.header, make_ref(object_id, b.offset, b.length)) for b in part.batches],
                part.acks,
                part.mode_offset,
                verify_txn=self._verify_txn,
                admission=None if (by := part.represented_by) is None else Admission(*msgspec.structs.astuple(by)),
                answer_within_s=part.answer_within_ms / 1000,
            )
        except ApiError as exc:
            return failed(exc)
        except Exception as exc:  # a disk error, a log closed under us: this partition only
            log.exception("commit of WAL object %s to partition %s-%d failed", object_id, part.topic_id, part.partition)
            return failed(wire_error(exc, "commit failed, nothing was appended"))
        replicated = part.acks != -1 or (
            partition.log.high_watermark >= outcome.end_offset
            and partition.isr_size >= partition.settings.min_insync_replicas
        )
        return CommitResult(
            0,
            None,
            outcome.base_offset,
            outcome.log_append_time_ms,
            outcome.log_start_offset,
            outcome.end_offset,
            partition.leader_epoch,
            replicated,
        )
