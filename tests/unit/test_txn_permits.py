"""The coordinator's side of KIP-890 verification (broker/transactions/permits.py), without
sockets: permits go to each partition's leader in one request per leader; a leader that
fails or answers NOT_LEADER is asked again in the background, with backoff, only while the
transaction still wants the permit; deleted partitions are skipped; and the leader's side
grants on what it leads and names the error for the rest."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from broker.clock import ManualClock
from broker.protocol.errors import ErrorCode
from broker.rpc import RpcUnavailable
from broker.transactions import permits
from broker.transactions.messages import TXN_PERMIT_VERSION, TxnPermitRequest, TxnPermitResponse
from broker.transactions.metadata import TransactionMetadata, TxnState
from tests.unit.test_partition import CLOCK_START
from tests.unit.test_transactions import classic, txn_batch

TXN = TransactionMetadata("t", 7, -1, 2, -1, 60_000, TxnState.ONGOING, frozenset(), 0, 0)


def cluster(leaders: dict[tuple[str, int], int]) -> tuple[Any, Any]:
    topics = {
        name: SimpleNamespace(topic_id=f"00000000-0000-0000-0000-00000000000{len(name)}", partitions=4)
        for name, _ in leaders
    }
    catalog = SimpleNamespace(get=topics.get)
    states = {
        (topics[name].topic_id, index): SimpleNamespace(record=SimpleNamespace(leader=leader))
        for (name, index), leader in leaders.items()
    }
    return catalog, SimpleNamespace(partitions=states)


def test_one_request_per_leader_and_the_failed_ones_again_while_wanted() -> None:
    async def main() -> None:
        sent: list[tuple[int, list[tuple[str, int]]]] = []
        failures = {2: 2}  # broker 2 fails twice, then grants

        async def send(node: int, request: TxnPermitRequest) -> TxnPermitResponse:
            sent.append((node, list(request.partitions)))
            assert (request.producer_id, request.producer_epoch) == (7, 2)
            if failures.get(node):
                failures[node] -= 1
                raise RpcUnavailable("away")
            return TxnPermitResponse(TXN_PERMIT_VERSION, node, [0] * len(request.partitions))

        catalog, view = cluster({("a", 0): 1, ("a", 1): 2, ("bb", 0): 1})
        granter = permits.PermitGranter(catalog, view, ManualClock(), send)
        await granter.grant(TXN, [("a", 0), ("a", 1), ("bb", 0), ("gone", 0)], lambda: True)
        assert sorted(sent[:2]) == [(1, [("a", 0), ("bb", 0)]), (2, [("a", 1)])]
        for _ in range(100):
            if not granter._tasks:
                break
            await asyncio.sleep(0.02)
        assert sent[2:] == [(2, [("a", 1)]), (2, [("a", 1)])]  # retried until granted

        wanted = [True]
        failures[2] = 1_000
        granter.grant_later(TXN, [("a", 1)], lambda: wanted[0])
        await asyncio.sleep(0.2)
        wanted[0] = False  # the transaction ended: stop asking
        await asyncio.sleep(1.2)
        asked = len(sent)
        await asyncio.sleep(1.2)
        assert len(sent) == asked and not granter._tasks
        await granter.stop()

    asyncio.run(main())


def test_the_leader_grants_what_it_leads(tmp_path: Path) -> None:
    led = classic(tmp_path / "t-0", ManualClock(CLOCK_START))
    replicas = SimpleNamespace(get=lambda name, index: led if (name, index) == ("t", 0) else _not_leader())
    answer = permits.answer(replicas, 3, TxnPermitRequest(TXN_PERMIT_VERSION, 11, 0, [("t", 0), ("t", 1)]))  # type: ignore[arg-type]
    assert answer == TxnPermitResponse(TXN_PERMIT_VERSION, 3, [ErrorCode.NONE, ErrorCode.NOT_LEADER_OR_FOLLOWER])
    assert led.append_records(txn_batch(0, producer_id=11), acks=-1, verify_txn=True).base_offset == 0


def _not_leader() -> Any:
    from broker.protocol.errors import ApiError

    raise ApiError(ErrorCode.NOT_LEADER_OR_FOLLOWER, "not here")
