"""AddPartitionsToTxn (API 24). Versions 0-3, the client's: the producer names the partitions
it is about to write to in its transaction; the coordinator records them (the transaction
becomes Ongoing), grants their leaders the producer's permit (KIP-890 verification,
transactions/permits.py) and answers once that is replicated. Versions 4-5, the broker's
(KIP-890): a batch of transactions, each either added like that or, with `verify_only`,
only checked: NONE for the partitions in the producer's ongoing transaction,
INVALID_TXN_STATE for the others (Kafka's leaders ask this before a transactional produce;
Shoal's coordinator grants permits instead, so its own brokers never send it). Every
partition of a transaction gets the same code when the request fails as a whole: the
error, or OPERATION_NOT_ATTEMPTED for all but the unknown ones when some are unknown."""

from __future__ import annotations

from typing import Any

from kafka.protocol.producer import AddPartitionsToTxnRequest, AddPartitionsToTxnResponse

from ..context import HandlerContext
from ..protocol.api_keys import ApiKey
from ..protocol.errors import ApiError, ErrorCode
from ..protocol.header import RequestHeader
from .registry import api

FENCED_SINCE_VERSION = 2  # older clients get INVALID_PRODUCER_EPOCH for PRODUCER_FENCED (as Kafka)
BATCHED_SINCE_VERSION = 4
_Result = AddPartitionsToTxnResponse.AddPartitionsToTxnTopicResult
_PartitionResult = _Result.AddPartitionsToTxnPartitionResult
_TxnResult = AddPartitionsToTxnResponse.AddPartitionsToTxnResult


@api(ApiKey.ADD_PARTITIONS_TO_TXN, versions=(0, 5))
async def handle(
    ctx: HandlerContext, header: RequestHeader, request: AddPartitionsToTxnRequest
) -> AddPartitionsToTxnResponse:
    if header.api_version < BATCHED_SINCE_VERSION:
        codes = await _answer(
            ctx,
            header,
            request.v3_and_below_transactional_id,
            request.v3_and_below_producer_id,
            request.v3_and_below_producer_epoch,
            [(t.name, p) for t in request.v3_and_below_topics for p in t.partitions],
            verify_only=False,
        )
        return AddPartitionsToTxnResponse(throttle_time_ms=0, results_by_topic_v3_and_below=_by_topic(codes))
    results = []
    for txn in request.transactions:
        codes = await _answer(
            ctx,
            header,
            txn.transactional_id,
            txn.producer_id,
            txn.producer_epoch,
            [(t.name, p) for t in txn.topics for p in t.partitions],
            verify_only=txn.verify_only,
        )
        results.append(_TxnResult(transactional_id=txn.transactional_id, topic_results=_by_topic(codes)))
    return AddPartitionsToTxnResponse(throttle_time_ms=0, error_code=0, results_by_transaction=results)


async def _answer(
    ctx: HandlerContext,
    header: RequestHeader,
    transactional_id: str,
    producer_id: int,
    epoch: int,
    wanted: list[tuple[str, int]],
    verify_only: bool,
) -> dict[tuple[str, int], int]:
    """One transaction's partitions -> their error codes."""
    unknown = {
        (name, p) for name, p in wanted if (topic := ctx.catalog.get(name)) is None or not 0 <= p < topic.partitions
    }
    if unknown:
        return {
            tp: ErrorCode.UNKNOWN_TOPIC_OR_PARTITION if tp in unknown else ErrorCode.OPERATION_NOT_ATTEMPTED
            for tp in wanted
        }
    try:
        if verify_only:
            verified = ctx.transactions.verify_partitions(transactional_id, producer_id, epoch, frozenset(wanted))
            return {tp: int(verified[tp]) for tp in wanted}
        await ctx.transactions.add_partitions(transactional_id, producer_id, epoch, frozenset(wanted))
        code: int = ErrorCode.NONE
    except ApiError as exc:
        code = exc.code
        if code == ErrorCode.PRODUCER_FENCED and header.api_version < FENCED_SINCE_VERSION:
            code = ErrorCode.INVALID_PRODUCER_EPOCH
    return {tp: code for tp in wanted}


def _by_topic(codes: dict[tuple[str, int], int]) -> list[Any]:
    by_topic: dict[str, list[Any]] = {}
    for (name, p), code in codes.items():
        by_topic.setdefault(name, []).append(_PartitionResult(partition_index=p, partition_error_code=code))
    return [_Result(name=name, results_by_partition=rs) for name, rs in by_topic.items()]
