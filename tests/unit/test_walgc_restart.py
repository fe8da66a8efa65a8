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
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from broker.metadata import records
from broker.metrics import BrokerMetrics
from broker.walfiles.cluster import ClusterReferences
from broker.walfiles.manager import GcPaused, ManagerSettings, WalFileManager
from broker.walfiles.messages import (
    WALGC_VERSION,
    ObjectsFound,
    ObjectsQuery,
    ReplicaReference,
    WalQueryRequest,
    WalQueryResponse,
    WalReferencesRequest,
    WalReferencesResponse,
)
from broker.walfiles.reporter import NotReady
from tests.inprocess import InProcessBroker
from tests.integration.clients import build_batch
from walfiles.format import WalObjectBuilder
from walfiles.keys import format_wal_key

GRACE_MS = 2_000
DEADLINE_MS = 60_000
SETTINGS = {
    "wal.file.manager.enable": "false",  # cycles run when the test says so
    "wal.file.manager.grace.ms": str(GRACE_MS),
    "wal.commit.deadline.ms": str(DEADLINE_MS),
    "wal.linger.ms": "20",
}
DISKLESS = {"diskless.enable": "true"}
OTHER = 1  # the second broker, reached through `Peer`


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


# -- the manager's side ------------------------------------------------------------------------


class Peer:
    """Broker OTHER's inter-broker RPC as the manager's pool reaches it: it answers what
    `answer` makes of the request (or raises what it returns)."""

    def __init__(self) -> None:
        self.answer: Callable[[Any], Any] = lambda request: RuntimeError("not set")

    def get(self, node: int, host: str, port: int) -> "Peer":
        assert node == OTHER
        return self

    async def call(self, request: Any, timeout_s: float) -> Any:
        answer = self.answer(request)
        if isinstance(answer, BaseException):
            raise answer
        return answer


async def register_other(harness: InProcessBroker) -> None:
    """Broker OTHER's registration (its old incarnation's, still alive after a kill -9)."""
    record = records.BrokerRecord(
        records.RECORD_VERSION, OTHER, None, "other", 9092, "other", 9093, False, "test", "old-incarnation"
    )
    await harness.broker.store.put(records.broker_key(OTHER), records.encode(record))
    while OTHER not in harness.broker.view.brokers:
        await asyncio.sleep(0.01)


async def topic_on_other(harness: InProcessBroker, name: str) -> uuid.UUID:
    """A diskless topic whose one partition has its only replica on OTHER."""
    catalog = harness.broker.catalog
    topic = await catalog.create(catalog.prepare(name, 1, dict(DISKLESS)), {0: [OTHER]})
    return topic.topic_id


async def put_object(harness: InProcessBroker, topic_id: uuid.UUID, sequence: int) -> str:
    """A WAL object with one batch of partition 0 of `topic_id` (written by OTHER)."""
    builder = WalObjectBuilder()
    builder.append(topic_id, 0, build_batch([(None, b"x")]))
    key = format_wal_key("", harness.broker.cluster_id, harness.clock.now_ms(), OTHER, sequence)
    await harness.objects.put(key, builder.build())
    return key


def premature(harness: InProcessBroker, opened: dict[str, list[int]] | None) -> Callable[[Any], Any]:
    """What a restarting broker answered before the fix: no replicas (`opened` None: a
    broker without the field; {}: one that says it has nothing open)."""

    def answer(request: Any) -> Any:
        if isinstance(request, WalQueryRequest):
            return WalQueryResponse(WALGC_VERSION, OTHER, [])
        return WalReferencesResponse(WALGC_VERSION, OTHER, harness.clock.now_ms(), DEADLINE_MS, [], [], opened)

    return answer


def run(test: Callable[[InProcessBroker, ClusterReferences, Peer], Any], tmp_path: Path) -> None:
    async def scenario() -> None:
        async with InProcessBroker(tmp_path, SETTINGS) as harness:
            await register_other(harness)
            peer = Peer()
            broker = harness.broker
            references = ClusterReferences(broker.node_id, broker.view, broker.catalog, peer, broker.reference_reporter)  # type: ignore[arg-type]
            await test(harness, references, peer)

    asyncio.run(scenario())


def test_gather_pauses_when_a_broker_answers_without_the_replicas_the_view_gives_it(tmp_path: Path) -> None:
    async def test(harness: InProcessBroker, references: ClusterReferences, peer: Peer) -> None:
        topic_id = str(await topic_on_other(harness, "t"))
        for opened in ({}, None, {str(uuid.UUID(int=7)): [0]}):
            peer.answer = premature(harness, opened)
            with pytest.raises(GcPaused) as paused:
                await references.gather()
            assert paused.value.brokers == (OTHER,)
            assert f"broker {OTHER}" in str(paused.value) and "may reference any object" in str(paused.value)
        assert "has not opened 1 of the 1 replica(s)" in str(paused.value) and topic_id in str(paused.value)
        peer.answer = lambda request: NotReady(f"broker {OTHER} has not opened its partition logs")
        with pytest.raises(GcPaused, match=f"broker {OTHER} did not answer .*NotReady"):
            await references.gather()
        # Once it has opened the partition (it references nothing yet: an idle partition), it counts.
        peer.answer = premature(harness, {topic_id: [0]})
        answers = await references.gather()
        assert sorted(a.node_id for a in answers) == [0, OTHER]

    run(test, tmp_path)


def test_a_deleted_topics_leftover_states_are_not_required_to_be_open(tmp_path: Path) -> None:
    """Partition states whose topic record is gone (a deletion interrupted between its two
    writes) are hosted nowhere: they must not pause the manager for ever."""

    async def test(harness: InProcessBroker, references: ClusterReferences, peer: Peer) -> None:
        topic_id = await topic_on_other(harness, "t")
        await harness.broker.store.delete(records.topic_key("t"))
        while harness.broker.catalog.get("t") is not None:
            await asyncio.sleep(0.01)
        assert records.partition_key(str(topic_id), 0) in {kv.key for kv in await harness.broker.store.list("")}
        peer.answer = premature(harness, {})
        assert len(await references.gather()) == 2

    run(test, tmp_path)


def test_query_pauses_when_a_replica_answers_nothing_for_a_partition_it_hosts(tmp_path: Path) -> None:
    async def test(harness: InProcessBroker, references: ClusterReferences, peer: Peer) -> None:
        topic_id = str(await topic_on_other(harness, "t"))
        asked = {(topic_id, 0): ["1-0000000000-1"]}
        peer.answer = premature(harness, {})
        with pytest.raises(GcPaused, match=f"broker {OTHER} has not opened 1 of the 1"):
            await references.query(asked)
        peer.answer = lambda request: WalQueryResponse(
            WALGC_VERSION, OTHER, [ObjectsFound(topic_id, 0, ["1-0000000000-1"], [])]
        )
        assert await references.query(asked) == {(topic_id, 0): ({"1-0000000000-1"}, set())}

    run(test, tmp_path)


def test_the_manager_keeps_the_objects_of_a_broker_that_answers_too_early(tmp_path: Path) -> None:
    """The review's case end to end: objects only OTHER's log references, old enough to go
    but for that; OTHER, restarted, answers "no replicas". The manager pauses, says which
    broker it waits for, and deletes nothing; once OTHER answers with its log, the objects
    are referenced."""

    async def test(harness: InProcessBroker, references: ClusterReferences, peer: Peer) -> None:
        topic_id = await topic_on_other(harness, "t")
        keys = [await put_object(harness, topic_id, sequence) for sequence in range(3)]
        oldest = int(keys[0].rsplit("/", 1)[1].split("-")[0])
        metrics = BrokerMetrics()
        manager = WalFileManager(
            node_id=harness.broker.node_id,
            store=harness.objects,
            wal_prefix=harness.broker._wal_prefix,
            references=references,
            holds_controller=lambda: asyncio.sleep(0, True),
            is_controller=lambda: True,
            settings=ManagerSettings.from_config(harness.broker.config),
            clock=harness.clock,
            metrics=metrics,
        )
        harness.clock.advance(DEADLINE_MS + 2 * GRACE_MS)
        peer.answer = premature(harness, {})
        reports = []
        for _ in range(3):
            reports.append(await manager.run_cycle())
            harness.clock.advance(GRACE_MS)
        assert sorted(k for k in harness.objects._objects if k.startswith("wal/")) == keys  # type: ignore[attr-defined]
        for report in reports:
            assert report.status.paused and f"broker {OTHER} has not opened" in (report.status.paused_reason or "")
        assert metrics.walfiles_waiting_for_brokers._value.get() == 1

        def opened(request: Any) -> Any:
            if isinstance(request, WalQueryRequest):
                found = [ObjectsFound(str(topic_id), 0, [k.rsplit("/", 1)[1] for k in keys], [])]
                return WalQueryResponse(WALGC_VERSION, OTHER, found)
            reference = ReplicaReference(str(topic_id), 0, oldest, 100, True)
            return WalReferencesResponse(
                WALGC_VERSION, OTHER, harness.clock.now_ms(), DEADLINE_MS, [reference], [], {str(topic_id): [0]}
            )

        peer.answer = opened
        for _ in range(2):
            report = await manager.run_cycle()
            assert not report.status.paused and report.deleted_objects == 0
            harness.clock.advance(GRACE_MS)
        assert metrics.walfiles_waiting_for_brokers._value.get() == 0
        assert sorted(k for k in harness.objects._objects if k.startswith("wal/")) == keys  # type: ignore[attr-defined]

    run(test, tmp_path)
