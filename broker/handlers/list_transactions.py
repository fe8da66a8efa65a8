"""ListTransactions (API 66, versions 0-1): the transactional ids this broker coordinates
(every `__transaction_state` partition it leads), filtered by state, producer id and, from
version 1, by how long the transaction has been running. Admin clients ask every broker.
Version 2 (a regular expression on the id) is not advertised."""

from __future__ import annotations

from kafka.protocol.admin.transactions import ListTransactionsRequest, ListTransactionsResponse

from ..context import HandlerContext
from ..protocol.api_keys import ApiKey
from ..protocol.header import RequestHeader
from ..transactions.metadata import TxnState
from .registry import api

_State = ListTransactionsResponse.TransactionState
_KNOWN = {state.value for state in TxnState}


@api(ApiKey.LIST_TRANSACTIONS, versions=(0, 1))
async def handle(
    ctx: HandlerContext, header: RequestHeader, request: ListTransactionsRequest
) -> ListTransactionsResponse:
    states = set(request.state_filters or ())
    producers = set(request.producer_id_filters or ())
    duration = request.duration_filter if header.api_version >= 1 else -1
    now = ctx.clock.now_ms()
    listed = [
        _State(transactional_id=txn.transactional_id, producer_id=txn.producer_id, transaction_state=txn.state.value)
        for txn in ctx.transactions.transactions()
        if (not states or txn.state.value in states)
        and (not producers or txn.producer_id in producers)
        and (duration < 0 or (txn.txn_start_ms >= 0 and now - txn.txn_start_ms > duration))
    ]
    return ListTransactionsResponse(
        throttle_time_ms=0,
        error_code=0,
        unknown_state_filters=sorted(states - _KNOWN),
        transaction_states=sorted(listed, key=lambda s: s.transactional_id),
    )
