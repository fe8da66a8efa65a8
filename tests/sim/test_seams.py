"""The fault seams: every fault kind is observable, switches off, and is recorded in the trace.

Each test is a tiny simulation (tests.sim.runner.run) so time is virtual and exact.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

from broker.wal.commit import COMMIT_VERSION, CommitPartition, CommitRequest, CommitResponse, CommitResult
from broker.metadata.store import MetadataUnavailable
from broker.objectstore import (
    MemoryObjectStore,
    ObjectStoreError,
    ObjectStoreUnavailable,
    RetryingObjectStore,
    RetryPolicy,
)
from broker.objectstore.store import DEFAULT_MAX_CONCURRENCY
from broker.peer_service import PeerRequest, PeerResponse
from broker.rpc import RpcError, RpcRemoteError, RpcTimeout, RpcUnavailable
from tests.sim.metadata import MetadataFaults, build_metadata_store
from tests.sim.network import NetFaults, SimNetwork
from tests.sim.nodes import crash, new_node, spawn
from tests.sim.objectstore import FaultyObjectStore, ObjectStoreFaults, build_object_store
from tests.sim.runner import Sim, run
from tests.sim.support import Ping, Pong


def simulate(main: Any, seed: int = 1, **options: Any) -> Any:
    return run(seed, main, **options).value


def faulty_store(sim: Sim, faults: ObjectStoreFaults) -> FaultyObjectStore:
    return FaultyObjectStore(MemoryObjectStore(clock=sim.clock), sim.fork("faults"), sim.trace, faults=faults)


# -- object store ---------------------------------------------------------------------------------
def test_object_store_delay_failure_lost_answer_and_fatal_error() -> None:
    async def main(sim: Sim) -> None:
        loop = asyncio.get_running_loop()
        store = faulty_store(sim, ObjectStoreFaults(delay_s=(0.02, 0.02)))
        await store.put("a", b"1")
        assert loop.time() == 0.02 and store.inner.keys() == ["a"]

        store.faults = ObjectStoreFaults(delay_s=(0, 0), fail_p=1.0)
        with pytest.raises(ObjectStoreUnavailable):
            await store.put("b", b"2")
        assert store.inner.keys() == ["a"], "a failure before the request is not applied"

        store.faults = ObjectStoreFaults(delay_s=(0, 0), lost_answer_p=1.0)
        with pytest.raises(ObjectStoreUnavailable):
            await store.put("c", b"3")
        assert store.inner.keys() == ["a", "c"], "a lost answer: applied, and the caller was told it failed"

        store.faults = ObjectStoreFaults(delay_s=(0, 0), fatal_p=1.0)
        with pytest.raises(ObjectStoreError) as info:
            await store.get("a")
        assert not info.value.retriable

        store.faults = ObjectStoreFaults(delay_s=(0, 0), fail_p=1.0, operations=frozenset({"put"}))
        assert await store.get("a") == b"1", "faults apply to the chosen operations only"
        assert sim.trace.count("objectstore", "failed (retriable, not applied)") == 1
        assert sim.trace.count("objectstore", "answer lost") == 1
        assert sim.trace.count("objectstore", "failed (fatal)") == 1

    simulate(main)


def test_object_store_stall_resume_and_the_retry_layer_timing_out() -> None:
    async def main(sim: Sim) -> None:
        loop = asyncio.get_running_loop()
        objects = build_object_store(
            sim.fork("os"), sim.trace, sim.clock, faults=ObjectStoreFaults.none(), max_attempts=3, request_timeout_s=2.0
        )
        objects.faulty.stall()
        loop.call_later(10, objects.faulty.resume)
        with pytest.raises(ObjectStoreUnavailable, match="put failed after 3 attempts: TimeoutError"):
            await objects.store.put("k", b"v")
        assert 6.0 <= loop.time() < 10.0, "three attempts of 2 s each, plus backoff"
        assert objects.memory.keys() == [], "timed-out attempts never applied"
        waiting = loop.create_task(objects.faulty.put("k", b"v"))
        await asyncio.sleep(0)
        assert not waiting.done() and objects.faulty.stalled
        await waiting
        assert loop.time() == 10.0 and objects.memory.keys() == ["k"]

    simulate(main)


def test_a_crashed_brokers_frozen_requests_hold_no_other_brokers_store_slots() -> None:
    """`tiering` seed 680030: a killed broker's tiering job froze inside 64 requests to a
    stalled store; with one client shared by every broker those were all the concurrency
    slots there are, and after the store resumed no broker's request ever ran again. Each
    broker process has a client of its own, as a real one does."""

    async def main(sim: Sim) -> None:
        objects = build_object_store(sim.fork("os"), sim.trace, sim.clock, faults=ObjectStoreFaults.none())
        objects.faulty.stall()
        dying, living = new_node(sim.loop, 1), new_node(sim.loop, 2)
        dying_client, living_client = objects.new_client(), objects.new_client()
        for i in range(DEFAULT_MAX_CONCURRENCY):
            spawn(dying, dying_client.put(f"frozen-{i}", b"v"))
        await asyncio.sleep(0.1)
        crash(sim.loop, dying)
        objects.faulty.resume()
        await asyncio.wait_for(spawn(living, living_client.put("k", b"v")), 5.0)
        assert "k" in objects.memory.keys()

    simulate(main)


def test_object_store_unreadable_corrupt_and_partial_delete() -> None:
    async def main(sim: Sim) -> None:
        store = faulty_store(sim, ObjectStoreFaults.none())
        data = bytes(range(100))
        await store.put("obj", data)
        store.make_unreadable("obj")
        with pytest.raises(ObjectStoreUnavailable):
            await store.get("obj")
        store.make_readable("obj")
        store.corrupt("obj")
        damaged = await store.get("obj", 10, 60)
        assert len(damaged) == 50 and sum(a != b for a, b in zip(damaged, data[10:60])) == 1
        assert await store.get("obj", 10, 60) == damaged, "the damage is stable for a key"
        store.heal("obj")
        assert await store.get("obj") == data

        for i in range(40):
            await store.put(f"d/{i:02d}", b"x")
        store.faults = ObjectStoreFaults(delay_s=(0, 0), partial_delete_p=0.5)
        wanted = [f"d/{i:02d}" for i in range(40)]
        deleted = await store.delete_many(wanted)
        assert 0 < len(deleted) < 40
        assert sorted(set(wanted) - set(deleted)) == [k for k in store.inner.keys() if k.startswith("d/")]

    simulate(main)


def test_retry_layer_resumes_a_failed_listing_and_put_if_absent_survives_a_lost_answer() -> None:
    async def main(sim: Sim) -> None:
        memory = MemoryObjectStore(clock=sim.clock)
        for i in range(30):
            await memory.put(f"l/{i:02d}", b"x")
        faulty = FaultyObjectStore(
            memory,
            sim.fork("f"),
            sim.trace,
            list_page_size=4,
            faults=ObjectStoreFaults(delay_s=(0, 0), fail_p=0.3, operations=frozenset({"list"})),
        )
        store = RetryingObjectStore(
            faulty,
            RetryPolicy(max_attempts=50, random=sim.fork("r").random, sleep=sim.clock.sleep),
            clock=sim.clock,
            attempt_timeout_s=None,
        )
        listed = [info.key async for info in store.list("l/")]
        assert listed == [f"l/{i:02d}" for i in range(30)], "every key once, in order, across failed pages"
        assert sim.trace.count("objectstore", "list l/ failed") > 0

        faulty.faults = ObjectStoreFaults(delay_s=(0, 0), lost_answer_p=1.0, operations=frozenset({"put_if_absent"}))
        store = RetryingObjectStore(
            faulty,
            RetryPolicy(max_attempts=2, random=sim.fork("r").random, sleep=sim.clock.sleep),
            clock=sim.clock,
            attempt_timeout_s=None,
        )
        with pytest.raises(ObjectStoreUnavailable):
            await store.put_if_absent("lease", b"me")
        faulty.faults = ObjectStoreFaults.none()
        assert await store.put_if_absent("lease", b"me") is True, "my own earlier write: idempotent success"
        assert await store.put_if_absent("lease", b"you") is False

    simulate(main)


def test_switched_off_faults_leave_time_and_the_random_stream_alone() -> None:
    async def main(sim: Sim) -> None:
        rng = sim.fork("f")
        store = FaultyObjectStore(MemoryObjectStore(clock=sim.clock), rng, sim.trace, faults=ObjectStoreFaults.none())
        state = rng.getstate()
        await store.put("k", b"v")
        await store.get("k")
        assert asyncio.get_running_loop().time() == 0 and rng.getstate() == state

    simulate(main)


# -- metadata store -----------------------------------------------------------------------------
def test_metadata_unavailable_window_and_ambiguous_writes() -> None:
    async def main(sim: Sim) -> None:
        loop = asyncio.get_running_loop()
        store = build_metadata_store(sim.fork("m"), sim.trace, sim.clock, faults=MetadataFaults(delay_s=(0.01, 0.01)))
        await store.put("a", b"1")
        assert loop.time() == 0.02, "a delay on the way in and on the way back"
        store.unavailable_for(5)
        with pytest.raises(MetadataUnavailable):
            await store.put("b", b"2")
        assert await store.inner.get("b") is None, "not applied while unavailable"
        await asyncio.sleep(5)
        assert store.available
        store.faults = MetadataFaults(delay_s=(0, 0), ambiguous_p=1.0)
        with pytest.raises(MetadataUnavailable, match="outcome unknown"):
            await store.txn({"c": 0}, {"c": b"3"})
        kv = await store.inner.get("c")
        assert kv is not None and kv.value == b"3", "applied: the caller must read before retrying its CAS"
        assert await store.get("c") == kv, "reads are not ambiguous"
        await store.close()

    simulate(main)


def test_metadata_watches_break_on_unavailability_and_at_random() -> None:
    async def main(sim: Sim) -> None:
        store = build_metadata_store(sim.fork("m"), sim.trace, sim.clock, faults=MetadataFaults.none())
        watch = await store.watch("w/")
        await store.put("w/1", b"1")
        first = await watch.__anext__()
        assert first.kv.key == "w/1"
        pending = asyncio.get_running_loop().create_task(watch.__anext__())
        await asyncio.sleep(1)
        assert not pending.done()
        store.set_unavailable()
        with pytest.raises(MetadataUnavailable):
            await pending
        with pytest.raises(MetadataUnavailable):
            await watch.__anext__()
        store.set_unavailable(False)

        store.faults = MetadataFaults(delay_s=(0, 0), watch_break_p=1.0)
        watch = await store.watch("w/", start_revision=1)
        with pytest.raises(MetadataUnavailable, match="broke before delivering revision 1"):
            await watch.__anext__()
        await store.close()

    simulate(main)


def test_metadata_leases_expire_in_virtual_time_when_renewals_fail() -> None:
    async def main(sim: Sim) -> None:
        store = build_metadata_store(sim.fork("m"), sim.trace, sim.clock, faults=MetadataFaults.none())
        lease = await store.grant_lease(3)
        await store.put("brokers/1", b"alive", lease=lease)
        keeper = store.start_keep_alive(lease)
        await asyncio.sleep(60)
        assert await store.get("brokers/1") is not None and not keeper.lost.is_set(), "kept alive for a minute"
        store.unavailable_for(10)  # longer than the TTL: renewals fail, the lease expires
        await asyncio.wait_for(keeper.lost.wait(), 10)
        assert await store.inner.get("brokers/1") is None
        assert 62.0 < asyncio.get_running_loop().time() < 64.5
        await store.close()

    simulate(main)


# -- network --------------------------------------------------------------------------------------
def pair(sim: Sim, faults: NetFaults | None = None, handler: Any = None) -> tuple[SimNetwork, Any, list[Any]]:
    """Node 2 serves Ping -> Pong at n2:1 and records what it receives; node 1 calls it."""
    network = SimNetwork(sim.fork("net"), sim.trace, faults=faults or NetFaults(latency_s=(0.001, 0.001)))
    received: list[Any] = []

    async def echo(request: Ping) -> Pong:
        received.append(request)
        return Pong(request.seq, request.text)

    network.serve(2, "n2", 1, handler or echo, Ping, Pong)
    return network, network.pool(1, Ping, Pong).get(2, "n2", 1), received


def test_rpc_round_trip_copies_messages_and_reports_errors_like_the_real_client() -> None:
    async def main(sim: Sim) -> None:
        loop = asyncio.get_running_loop()
        network, client, received = pair(sim)
        request = Ping(1, "hello")
        response = await client.call(request, 1.0)
        assert response == Pong(1, "hello") and received[0] == request and received[0] is not request
        assert loop.time() == pytest.approx(0.004), "connect (one round trip) then the call (one round trip)"
        with pytest.raises(TypeError):
            await client.call(Pong(1), 1.0)
        with pytest.raises(RpcError, match="max_frame_bytes"):
            await network.pool(1, Ping, Pong, max_frame_bytes=64).get(2, "n2", 1).call(Ping(2, "x" * 100), 1.0)

        async def broken(request: Ping) -> Any:
            if request.seq == 1:
                raise ValueError("bad request")
            return request  # not a response type

        network.serve(2, "n2", 2, broken, Ping, Pong)
        other = network.pool(1, Ping, Pong).get(2, "n2", 2)
        with pytest.raises(RpcRemoteError, match="ValueError: bad request"):
            await other.call(Ping(1), 1.0)
        with pytest.raises(RpcRemoteError, match="not a response type"):
            await other.call(Ping(2), 1.0)

    simulate(main)


def test_rpc_keeps_send_order_on_a_connection_under_random_latency_and_drops() -> None:
    async def main(sim: Sim) -> None:
        _network, client, received = pair(sim, NetFaults(latency_s=(0.0001, 0.05), spike_p=0.05, drop_request_p=0.2))
        outcomes = await asyncio.gather(*(client.call(Ping(seq), 2.0) for seq in range(300)), return_exceptions=True)
        delivered = [r.seq for r in received]
        assert delivered == sorted(delivered), "delivered in send order, drops or not"
        dropped = [seq for seq, o in enumerate(outcomes) if isinstance(o, RpcTimeout)]
        assert 20 < len(dropped) < 100 and sorted(set(delivered) | set(dropped)) == list(range(300))
        assert all(o == Pong(seq) for seq, o in enumerate(outcomes) if seq not in dropped)

    simulate(main)


def test_rpc_lost_answer_the_handler_ran_and_the_caller_times_out() -> None:
    async def main(sim: Sim) -> None:
        _network, client, received = pair(sim, NetFaults(latency_s=(0.001, 0.001), drop_response_p=1.0))
        with pytest.raises(RpcTimeout):
            await client.call(Ping(7), 0.5)
        assert [r.seq for r in received] == [7]
        assert sim.trace.count("net", "response dropped") == 1

    simulate(main)


def test_rpc_partitions_drop_or_hold_and_heal() -> None:
    async def main(sim: Sim) -> None:
        network, client, received = pair(sim)
        await client.call(Ping(0), 1.0)
        network.partition(1, 2)
        with pytest.raises(RpcTimeout):
            await client.call(Ping(1), 0.5)
        network.heal()
        assert (await client.call(Ping(2), 1.0)).seq == 2
        network.partition(2, 1, one_way=True)  # answers are lost, requests arrive
        with pytest.raises(RpcTimeout):
            await client.call(Ping(3), 0.5)
        network.heal(1, 2)
        network.partition([1], [2], hold=True)
        with pytest.raises(RpcTimeout):
            await client.call(Ping(4), 0.5)
        assert [r.seq for r in received] == [0, 2, 3], "held, not yet delivered"
        network.heal()
        await asyncio.sleep(0.01)
        assert [r.seq for r in received] == [0, 2, 3, 4], (
            "delivered after the partition healed, long after its caller gave up"
        )
        assert sim.trace.count("net", "late response discarded") >= 1

    simulate(main)


def test_rpc_crash_refuses_or_black_holes_and_cancels_handlers() -> None:
    async def main(sim: Sim) -> None:
        loop = asyncio.get_running_loop()
        cancelled: list[int] = []

        async def slow(request: Ping) -> Pong:
            try:
                await asyncio.sleep(10)
            except asyncio.CancelledError:
                cancelled.append(request.seq)
                raise
            return Pong(request.seq)

        network, client, _ = pair(sim, handler=slow)
        call = loop.create_task(client.call(Ping(1), 5.0))
        await asyncio.sleep(0.1)
        network.crash(2)
        with pytest.raises(RpcUnavailable) as info:
            await call
        assert not isinstance(info.value, RpcTimeout) and cancelled == [1], "reset: fails fast, handler cancelled"
        started = loop.time()
        with pytest.raises(RpcUnavailable, match="refused"):
            await client.call(Ping(2), 5.0)
        assert loop.time() - started < 0.01

        network.restart(2)
        network.serve(2, "n2", 1, slow, Ping, Pong)
        started = loop.time()
        call = loop.create_task(client.call(Ping(3), 5.0))
        await asyncio.sleep(0.1)
        network.crash(2, black_hole=True)
        with pytest.raises(RpcTimeout):
            await call
        assert loop.time() == started + 5.0 and cancelled == [1, 3], "silence until the caller's timeout"
        own = network.pool(2, Ping, Pong).get(1, "n1", 1)
        with pytest.raises(RpcUnavailable, match="node 2 is down"):
            await own.call(Ping(4), 1.0)

    simulate(main)


def test_rpc_carries_the_brokers_real_peer_messages() -> None:
    async def main(sim: Sim) -> None:
        network = SimNetwork(sim.fork("net"), sim.trace)
        seen: list[CommitRequest] = []

        async def leader(request: Any) -> Any:
            assert isinstance(request, CommitRequest)
            seen.append(request)
            return CommitResponse(COMMIT_VERSION, [CommitResult(0, None, 5, -1, 0, 6)])

        network.serve(0, "leader", 9093, leader, PeerRequest, PeerResponse)
        pool = network.pool(1, PeerRequest, PeerResponse)
        request = CommitRequest(
            COMMIT_VERSION, "1800000000000-0000000001-0000000000", [CommitPartition(uuid.UUID(int=42), 0, -1, [], -1)]
        )
        response = await pool.get(0, "leader", 9093).call(request, 1.0)
        assert response.results[0].base_offset == 5 and seen == [request] and seen[0] is not request
        await pool.close()

    simulate(main)


def test_rpc_a_crashed_caller_cancels_its_requests_handlers_only_if_the_server_hears_of_it() -> None:
    async def main(sim: Sim) -> dict[str, str]:
        outcome: dict[str, str] = {}

        async def slow(request: Ping) -> Pong:
            try:
                await asyncio.sleep(1)
                outcome[request.text] = "finished"
            except asyncio.CancelledError:
                outcome[request.text] = "cancelled"
                raise
            return Pong(request.seq)

        network = SimNetwork(sim.fork("net"), sim.trace, faults=NetFaults(latency_s=(0.001, 0.001)))
        network.serve(2, "n2", 1, slow, Ping, Pong)
        for caller, black_hole in ((1, False), (3, True)):
            client = network.pool(caller, Ping, Pong).get(2, "n2", 1)
            call = asyncio.get_running_loop().create_task(client.call(Ping(caller, f"n{caller}"), 5.0))
            await asyncio.sleep(0.1)
            network.crash(caller, black_hole=black_hole)
            with pytest.raises(RpcUnavailable):
                await call
        await asyncio.sleep(2)
        return outcome

    assert simulate(main) == {"n1": "cancelled", "n3": "finished"}
