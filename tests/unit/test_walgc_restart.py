"""A broker that restarts must not tell the WAL file manager it references nothing (issue 26
F6). Its peer service answers the inter-broker RPC before its partition logs are open (while
it waits for its old registration to expire), and its replica manager then holds nothing.

Both sides are tested: the broker's reporter answers `NotReady` until every replica it hosts
is open (a real broker restarted on its data dir, asked in the windows of its start-up), and
the manager (`ClusterReferences` and a `WalFileManager` over it) pauses when a broker that
the cluster view gives replicas answers without them, as brokers before the fix did. The
second broker is reached through a stand-in for the RPC pool, the only layer swapped.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from broker.walgc.messages import (
    WALGC_VERSION,
    ObjectsQuery,
    WalQueryRequest,
    WalReferencesRequest,
    WalReferencesResponse,
)
from broker.walgc.reporter import NotReady
from tests.inprocess import InProcessBroker
from tests.integration.clients import build_batch

GRACE_MS = 2_000
DEADLINE_MS = 60_000
SETTINGS = {
    "wal.file.manager.enable": "false",  # cycles run when the test says so
    "wal.file.manager.grace.ms": str(GRACE_MS),
    "wal.commit.deadline.ms": str(DEADLINE_MS),
    "wal.linger.ms": "20",
}
DISKLESS = {"diskless.enable": "true"}


# -- the broker's side -------------------------------------------------------------------------


def test_a_restarting_broker_answers_not_ready_until_its_logs_are_open(tmp_path: Path) -> None:
    """The review's reproduction: a broker writes a diskless partition and stops; a new
    process on the same data dir is asked both questions while it serves the RPC but has not
    opened its logs (before its view loads, and while it waits out its old registration).
    Before the fix it answered "no replicas" and "found nothing", and the manager judged
    every object its log references deletable."""

    async def scenario() -> None:
        async with InProcessBroker(tmp_path, SETTINGS) as first:
            client = first.client()
            assert await client.create_topic("d", configs=DISKLESS) == 0
            for value in (b"a", b"b", b"c"):
                first.clock.advance(5)
                assert (await client.produce("d", 0, build_batch([(None, value)])))[0] == 0
            partition = first.broker.replica_manager.partitions[("d", 0)]  # type: ignore[index]
            topic_id, oldest = partition.topic_id, partition.wal_references.oldest_created_ms()
            assert oldest is not None

        second = InProcessBroker(tmp_path, SETTINGS)
        broker = second.broker
        references = WalReferencesRequest(WALGC_VERSION, 99)
        query = WalQueryRequest(WALGC_VERSION, [ObjectsQuery(topic_id, 0, ["1-0000000000-1"])])
        refused: list[str] = []

        def asked_first(step: Callable[[], Any], window: str) -> Callable[[], Any]:
            async def wrapped() -> None:
                for request in (references, query):
                    with pytest.raises(NotReady, match="has not opened its partition logs"):
                        await broker.peers.handle(request)
                    refused.append(window)
                await step()

            return wrapped

        # The peer service serves from here on (broker.start: env.peers.serve comes first).
        broker.view.start = asked_first(broker.view.start, "before the view")  # type: ignore[method-assign]
        broker.membership.start = asked_first(broker.membership.start, "registering")  # type: ignore[method-assign]
        async with second:
            assert refused == ["before the view"] * 2 + ["registering"] * 2
            answer = await broker.peers.handle(references)
            assert isinstance(answer, WalReferencesResponse)
            assert [(r.topic_id, r.partition, r.oldest_created_ms) for r in answer.replicas] == [(topic_id, 0, oldest)]
            assert answer.opened is not None and answer.opened[topic_id] == [0]
        with pytest.raises(NotReady):  # stopped: its partitions are closed
            await broker.peers.handle(references)

    asyncio.run(scenario())
