"""Produce: validate and append each partition's batches; per-partition error codes.

Classic partitions are appended at once by their leader. Diskless partitions are accepted by
the broker that represents them for the client's AZ (routing/), which need not host them:
they are validated here, then handed to the WAL writer together (one submit per request, so
they share WAL objects and keep arrival order); the answer waits for the leader's commit.

With acks=0 the client reads no response, so a failed partition closes the connection
(as Kafka does) to make the client notice and refresh its metadata.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from kafka.protocol.producer import ProduceRequest, ProduceResponse

from ..context import HandlerContext
from ..wal.commit import Representation
from ..wal.wal_writer import PartitionAppend
from ..log_validator import check_produce_request, prepare_diskless
from ..partition_ids import TopicIdPartition
from ..protocol.api_keys import ApiKey
from ..protocol.errors import ApiError, ConnectionFault, ErrorCode
from ..protocol.header import RequestHeader
from .common import resolve_topic
from .registry import api

if TYPE_CHECKING:
    from ..cluster.view import PartitionState
    from ..wal.commit import CommitResult
    from ..topics import Topic

_Topic = ProduceResponse.TopicProduceResponse
_Partition = _Topic.PartitionProduceResponse


@api(ApiKey.PRODUCE)
async def handle(ctx: HandlerContext, header: RequestHeader, request: ProduceRequest) -> ProduceResponse | None:
    acks = request.acks
    answer_within_s = request.timeout_ms / 1000  # a refusal's answer may wait that long (producers/barriers.py)
    metrics = ctx.metrics
    client_az = ctx.router.client_az(header)[0]
    represented_az = ctx.router.represented_az(client_az)  # named in commits (representation_fence.py)
    topics = []
    diskless: list[tuple[list, int, PartitionAppend]] = []  # (results list, slot in it, append)
    replicating: list[tuple[list, int, object, int]] = []  # acks=all: (results, slot, partition, end offset)
    for topic_data in request.topic_data:
        results: list = []
        try:
            topic = resolve_topic(ctx, topic_data.name, topic_data.topic_id)
            if topic.internal:  # only their coordinators write them: a stray record would stop a load
                raise ApiError(ErrorCode.INVALID_TOPIC_EXCEPTION, f"Cannot append to internal topic {topic.name}")
        except ApiError as exc:
            topic, topic_error = None, exc
        for data in topic_data.partition_data:
            try:
                if acks not in (0, 1, -1):
                    raise ApiError(ErrorCode.INVALID_REQUIRED_ACKS, f"acks must be 0, 1 or -1, not {acks}")
                if topic is None:
                    raise topic_error
                records = memoryview(data.records if data.records is not None else b"")
                check_produce_request(records, header.api_version)
                if topic.mode.appends_to_wal:
                    try:
                        state = _check_representative(ctx, topic, data.index, client_az)
                    except ApiError as exc:
                        ctx.wal.refused(topic.topic_id, data.index, records, exc.code, answer_within_s)
                        raise
                    # The view as it chose this broker (no await since), for the leader's check
                    represented_by = Representation(
                        ctx.node_id, represented_az, ctx.view.applied_revision, state.record.leader_epoch
                    )
                    prepared = prepare_diskless(records, topic.settings, ctx.clock.now_ms())
                    append = PartitionAppend(
                        topic.topic_id,
                        data.index,
                        acks,
                        prepared,
                        state.record.mode_offset,
                        represented_by,
                        max(request.timeout_ms, 0),
                    )
                    diskless.append((results, len(results), append))
                    results.append(None)
                    continue
                partition = ctx.replica_manager.get(topic.name, data.index)
                outcome = partition.append_records(
                    records,
                    acks,
                    verify_txn=ctx.config.transaction_partition_verification_enable,
                    answer_within_s=answer_within_s,
                )
            except ApiError as exc:
                results.append(_error(ctx, data.index, exc.code, exc.message))
                continue
            if outcome.appended_bytes:
                metrics.produced_bytes.inc(outcome.appended_bytes)
            if acks == -1:
                replicating.append((results, len(results), partition, outcome.end_offset))
            results.append(
                _Partition(
                    index=data.index,
                    error_code=0,
                    base_offset=outcome.base_offset,
                    log_append_time_ms=outcome.log_append_time_ms,
                    log_start_offset=outcome.log_start_offset,
                    record_errors=[],
                    error_message=None,
                )
            )
        topics.append(_Topic(name=topic_data.name, topic_id=topic_data.topic_id, partition_responses=results))
    if acks == 0 and any(p is not None and p.error_code for t in topics for p in t.partition_responses):
        raise ConnectionFault("acks=0 produce failed for at least one partition")
    # Submitted before anything is awaited: a partition's batches keep the order in which
    # requests arrived, whatever else a request holds (a classic acks=all wait, say).
    admitted = asyncio.get_running_loop().create_future()
    futures = ctx.wal.submit([append for _results, _slot, append in diskless], admitted) if diskless else []
    if acks == 0:
        if diskless:  # nobody reads the answer, but the request holds its connection's memory until
            await admitted  # the WAL takes its batches: backpressure reaches the socket
        return None
    await asyncio.gather(
        _wait_replicated(ctx, replicating, request.timeout_ms / 1000), _wait_committed(ctx, diskless, futures)
    )
    return ProduceResponse(responses=topics, throttle_time_ms=0)


async def _wait_committed(
    ctx: HandlerContext,
    diskless: list[tuple[list[Any], int, PartitionAppend]],
    futures: list[asyncio.Future[CommitResult]],
) -> None:
    """Diskless partitions: answer with the leader's commit (offsets, or why not)."""
    for (results, slot, append), result in zip(diskless, await asyncio.gather(*futures)):
        if result.error_code:
            results[slot] = _error(ctx, append.partition, ErrorCode(result.error_code), result.error_message)
            continue
        ctx.metrics.produced_bytes.inc(append.size)
        results[slot] = _Partition(
            index=append.partition,
            error_code=0,
            base_offset=result.base_offset,
            log_append_time_ms=result.log_append_time_ms,
            log_start_offset=result.log_start_offset,
            record_errors=[],
            error_message=None,
        )


def _check_representative(ctx: HandlerContext, topic: Topic, index: int, client_az: str | None) -> PartitionState:
    """Only the partition's representative for the client's AZ takes its produce: any other
    broker answers NOT_LEADER_OR_FOLLOWER, so the client refreshes its metadata and moves
    (after a broker joins or leaves its AZ). Returns the partition's state as the view has it
    (its recorded mode marker goes with the batches: CommitPartition.mode_offset)."""
    state = ctx.view.partitions.get(TopicIdPartition.of(topic.topic_id, index))
    if state is None:
        code = ErrorCode.LEADER_NOT_AVAILABLE if 0 <= index < topic.partitions else ErrorCode.UNKNOWN_TOPIC_OR_PARTITION
        raise ApiError(code, f"no state for {topic.name}-{index}")
    chosen = ctx.router.representative(str(topic.topic_id), index, state.record.leader, client_az)
    if chosen != ctx.node_id:
        raise ApiError(
            ErrorCode.NOT_LEADER_OR_FOLLOWER,
            f"broker {chosen} takes produce for {topic.name}-{index} in AZ {client_az}",
        )
    return state


async def _wait_replicated(ctx: HandlerContext, waits: list[tuple[list[Any], int, Any, int]], timeout_s: float) -> None:
    """acks=all on classic partitions: answer once the ISR holds the records (or say why not)."""
    if not waits:
        return
    outcomes = await asyncio.gather(
        *(partition.wait_replicated(end, timeout_s) for _, _, partition, end in waits), return_exceptions=True
    )
    for (results, slot, partition, _end), outcome in zip(waits, outcomes):
        if isinstance(outcome, ApiError):
            results[slot] = _error(ctx, partition.index, outcome.code, outcome.message)
        elif isinstance(outcome, BaseException):
            raise outcome


def _error(ctx: HandlerContext, index: int, code: ErrorCode, message: str | None) -> Any:
    ctx.metrics.produce_errors.labels(code.name).inc()
    return _Partition(
        index=index,
        error_code=code,
        base_offset=-1,
        log_append_time_ms=-1,
        log_start_offset=-1,
        record_errors=[],
        error_message=message,
    )
