"""DescribeTransactions (API 65, version 0): the state of transactional ids this broker
coordinates: state, timeout, start time, producer id and epoch, and the partitions of the
ongoing transaction. NOT_COORDINATOR for ids of partitions led elsewhere,
TRANSACTIONAL_ID_NOT_FOUND for unknown ids."""

from __future__ import annotations

from kafka.protocol.admin.transactions import DescribeTransactionsRequest, DescribeTransactionsResponse

from ..context import HandlerContext
from ..protocol.api_keys import ApiKey
from ..protocol.errors import ApiError, ErrorCode
from ..protocol.header import RequestHeader
from .registry import api

_State = DescribeTransactionsResponse.TransactionState
_Topic = _State.TopicData


@api(ApiKey.DESCRIBE_TRANSACTIONS, versions=(0, 0))
async def handle(
    ctx: HandlerContext, header: RequestHeader, request: DescribeTransactionsRequest
) -> DescribeTransactionsResponse:
    states = []
    for transactional_id in request.transactional_ids:
        try:
            txn = ctx.transactions.describe(transactional_id)
        except ApiError as exc:
            txn, code = None, exc.code
        else:
            code = ErrorCode.NONE if txn is not None else ErrorCode.TRANSACTIONAL_ID_NOT_FOUND
        if txn is None:
            states.append(
                _State(
                    error_code=code,
                    transactional_id=transactional_id,
                    transaction_state="",
                    transaction_timeout_ms=0,
                    transaction_start_time_ms=-1,
                    producer_id=-1,
                    producer_epoch=-1,
                    topics=[],
                )
            )
            continue
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(txn.partitions):
            by_topic.setdefault(topic, []).append(partition)
        states.append(
            _State(
                error_code=0,
                transactional_id=transactional_id,
                transaction_state=txn.state.value,
                transaction_timeout_ms=txn.timeout_ms,
                transaction_start_time_ms=txn.txn_start_ms,
                producer_id=txn.producer_id,
                producer_epoch=txn.producer_epoch,
                topics=[_Topic(topic=t, partitions=ps) for t, ps in by_topic.items()],
            )
        )
    return DescribeTransactionsResponse(throttle_time_ms=0, transaction_states=states)
