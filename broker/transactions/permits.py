"""Granting transaction permits (KIP-890 verification; producers/state.py rule 17).

The coordinator side: `PermitGranter.grant` sends each partition's leader the producer epoch
that may open a transaction there, once AddPartitionsToTxn has made the partition part of the
ongoing transaction, and waits for one attempt; what was not granted (a leader away or
changing) is granted again in the background, with backoff, for as long as the transaction
is still ongoing with that partition. The coordinator also grants again when a partition's
leader changes and when it takes over a `__transaction_state` partition, since permits live
only in the leader's memory.

The leader side: `answer` applies a TxnPermitRequest to the partitions led here."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING

from ..partition_ids import TopicIdPartition
from ..protocol.errors import ApiError, ErrorCode
from .messages import TXN_PERMIT_VERSION, TxnPermitRequest, TxnPermitResponse

if TYPE_CHECKING:
    from ..clock import Clock
    from ..cluster.view import ClusterView
    from ..replica_manager import ReplicaManager
    from ..topics import TopicCatalog
    from .metadata import TransactionMetadata

log = logging.getLogger(__name__)

RETRY_MIN_S = 0.05
RETRY_MAX_S = 1.0
ASK_TIMEOUT_S = 2.0  # one attempt while AddPartitionsToTxn waits; the rest is retried behind it

SendPermits = Callable[[int, TxnPermitRequest], Awaitable[TxnPermitResponse]]
Part = tuple[str, int]


class PermitGranter:
    def __init__(self, catalog: "TopicCatalog", view: "ClusterView", clock: "Clock", send: SendPermits) -> None:
        self._catalog = catalog
        self._view = view
        self._clock = clock
        self._send = send
        self._tasks: set[asyncio.Task[None]] = set()

    async def grant(self, txn: "TransactionMetadata", parts: Iterable[Part], wanted: Callable[[], bool]) -> None:
        """One attempt for every partition; what is left is retried in the background while
        `wanted()` (the transaction is still ongoing in this producer epoch)."""
        left = await self._attempt(txn, set(parts))
        if left:
            self.grant_later(txn, left, wanted)

    def grant_later(self, txn: "TransactionMetadata", parts: Iterable[Part], wanted: Callable[[], bool]) -> None:
        task = asyncio.get_running_loop().create_task(self._keep_granting(txn, set(parts), wanted))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def stop(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _keep_granting(self, txn: "TransactionMetadata", left: set[Part], wanted: Callable[[], bool]) -> None:
        delay = RETRY_MIN_S
        while left and wanted():
            left = await self._attempt(txn, left)
            if left:
                await self._clock.sleep(delay)
                delay = min(delay * 2, RETRY_MAX_S)

    async def _attempt(self, txn: "TransactionMetadata", parts: set[Part]) -> set[Part]:
        """Send the permits once, grouped by leader; the partitions not granted."""
        by_leader: dict[int, list[Part]] = {}
        left: set[Part] = set()
        for name, index in sorted(parts):
            topic = self._catalog.get(name)
            if topic is None or not 0 <= index < topic.partitions:
                continue  # deleted: nothing to produce to
            state = self._view.partitions.get(TopicIdPartition.of(topic.topic_id, index))
            if state is None or state.record.leader < 0:
                left.add((name, index))
            else:
                by_leader.setdefault(state.record.leader, []).append((name, index))
        sent = [(node, chunk) for node, chunk in by_leader.items()]
        answers = await asyncio.gather(*(self._ask(node, txn, chunk) for node, chunk in sent), return_exceptions=True)
        for (node, chunk), answer in zip(sent, answers):
            if isinstance(answer, BaseException):
                if isinstance(answer, asyncio.CancelledError):
                    raise answer
                log.info("%s: permits for broker %d not granted (%s); retrying", txn.transactional_id, node, answer)
                left.update(chunk)
                continue
            left.update(part for part, code in zip(chunk, answer.error_codes) if code != ErrorCode.NONE)
        return left

    async def _ask(self, node: int, txn: "TransactionMetadata", chunk: list[Part]) -> TxnPermitResponse:
        request = TxnPermitRequest(TXN_PERMIT_VERSION, txn.producer_id, txn.producer_epoch, chunk)
        return await asyncio.wait_for(self._send(node, request), ASK_TIMEOUT_S)


def answer(replicas: "ReplicaManager", node_id: int, request: TxnPermitRequest) -> TxnPermitResponse:
    """The leader's side: grant on every partition led here (NOT_LEADER_OR_FOLLOWER etc. for
    the others, which the coordinator grants again once their leadership settles)."""
    if request.version != TXN_PERMIT_VERSION:
        raise ValueError(f"transaction permit version {request.version} is not supported")
    codes = []
    for name, index in request.partitions:
        try:
            replicas.get(name, index).grant_txn_permit(request.producer_id, request.producer_epoch)
            codes.append(int(ErrorCode.NONE))
        except ApiError as exc:
            codes.append(int(exc.code))
    return TxnPermitResponse(TXN_PERMIT_VERSION, node_id, codes)
