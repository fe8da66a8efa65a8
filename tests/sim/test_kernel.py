"""The simulation kernel: virtual time, determinism, bounds, failure reports, the CLI's parsing.

Fast and socket-free: every test runs a few tiny simulations in this process.
"""

from __future__ import annotations

import asyncio
import gc
import os
import random
import socket
import threading
import time
import uuid
from typing import Any

import pytest

from tests.sim.cli import parse_seeds, run_seeds, trace_digest
from tests.sim.determinism import SimRandom, fixed_hash_seed
from tests.sim.loop import DEFAULT_EPOCH_MS, SimDeadlock, SimForbidden, SimStepLimit, SimTimeLimit, describe_task
from tests.sim.metadata import MetadataFaults, build_metadata_store
from tests.sim.network import NetFaults, SimNetwork
from tests.sim.nodes import as_node, crash, new_node, spawn
from tests.sim.objectstore import ObjectStoreFaults, build_object_store
from tests.sim.registry import Scenario
from tests.sim.runner import Sim, SimFailure, run
from tests.sim.support import Ping, Pong


def value_of(main: Any, seed: int = 1, **options: Any) -> Any:
    return run(seed, main, **options).value


# -- virtual time ---------------------------------------------------------------------------------
def test_an_hour_of_sleep_takes_milliseconds_and_moves_every_clock() -> None:
    async def main(sim: Sim) -> tuple[float, int, int, float, float]:
        await asyncio.sleep(3600)
        return sim.loop.time(), sim.clock.monotonic_ms(), sim.clock.now_ms(), time.time(), time.monotonic()

    # No real-time assertion: exact virtual readings below are the proof (a real sleep would
    # show real clocks), and a real hour would hit pytest's timeout long before it ended.
    loop_s, monotonic_ms, now_ms, wall_s, mono_s = value_of(main, max_virtual_s=7200)
    assert loop_s == 3600.0 and monotonic_ms == 3_600_000 and now_ms == DEFAULT_EPOCH_MS + 3_600_000
    assert wall_s == (DEFAULT_EPOCH_MS + 3_600_000) / 1000 and mono_s == 3600.0, "time.* follow virtual time"


def test_milliseconds_are_exact_after_float_delays() -> None:
    async def main(sim: Sim) -> list[int]:
        seen = []
        for delay in (4.35, 0.001, 0.29, 1e-4):
            await asyncio.sleep(delay)
            seen.append(sim.clock.monotonic_ms())
        return seen

    assert value_of(main) == [4350, 4351, 4641, 4641]


def test_timeouts_and_timers_fire_in_virtual_time() -> None:
    async def main(sim: Sim) -> dict[str, float]:
        loop = asyncio.get_running_loop()
        seen: dict[str, float] = {}
        try:
            async with asyncio.timeout(2):
                await asyncio.sleep(10)
        except TimeoutError:
            seen["timeout"] = loop.time()
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(asyncio.sleep(10), 1.5)
        seen["wait_for"] = loop.time()
        never: asyncio.Future[None] = loop.create_future()
        done, _ = await asyncio.wait([never], timeout=0.25)
        seen["wait"] = loop.time() if not done else -1
        order: list[str] = []
        loop.call_later(0.3, order.append, "b")
        loop.call_later(0.1, order.append, "a")
        loop.call_at(loop.time() + 0.2, order.append, "a2")
        await asyncio.sleep(1)
        seen["order_ok"] = float(order == ["a", "a2", "b"])
        return seen

    assert value_of(main) == {"timeout": 2.0, "wait_for": 3.5, "wait": 3.75, "order_ok": 1.0}


def test_run_in_executor_and_to_thread_run_inline() -> None:
    async def main(sim: Sim) -> list[Any]:
        loop = asyncio.get_running_loop()
        calls: list[str] = []

        def work() -> int:
            calls.append("ran")
            return 42

        future = loop.run_in_executor(None, work)
        assert calls == ["ran"] and future.done(), "ran at once, future already done"
        failing = loop.run_in_executor(None, lambda: 1 / 0)
        with pytest.raises(ZeroDivisionError):
            await failing
        threaded = await asyncio.to_thread(lambda: threading.current_thread() is threading.main_thread())
        sim.loop.executor_latency = lambda: 0.005  # e.g. an fsync's duration
        before = loop.time()
        slow = await loop.run_in_executor(None, lambda: "synced")
        return [await future, threaded, slow, loop.time() - before]

    assert value_of(main) == [42, True, "synced", 0.005]


# -- no I/O -------------------------------------------------------------------------------------
def test_sockets_servers_subprocesses_threads_and_blocking_sleep_are_refused() -> None:
    async def main(sim: Sim) -> list[str]:
        loop = asyncio.get_running_loop()
        refused = []
        attempts = {
            "open_connection": lambda: asyncio.open_connection("127.0.0.1", 9),
            "start_server": lambda: asyncio.start_server(lambda r, w: None, "127.0.0.1", 0),
            "subprocess": lambda: asyncio.create_subprocess_exec("true"),
            "getaddrinfo": lambda: loop.getaddrinfo("localhost", 80),
        }
        for name, attempt in attempts.items():
            with pytest.raises(SimForbidden):
                await attempt()
            refused.append(name)
        for name, blocking in {
            "socket": lambda: socket.socket(),
            "sleep": lambda: time.sleep(0.1),
            "thread": lambda: threading.Thread(target=print).start(),
        }.items():
            with pytest.raises(SimForbidden):
                blocking()
            refused.append(name)
        return refused

    assert len(value_of(main)) == 7
    socket.socket().close()  # restored after the run


# -- bounds and verdicts ----------------------------------------------------------------------------
def test_a_deadlock_is_reported_with_where_each_task_waits() -> None:
    async def waits_forever(sim: Sim) -> None:
        await asyncio.get_running_loop().create_future()

    async def main(sim: Sim) -> None:
        await asyncio.gather(waits_forever(sim), asyncio.sleep(1))

    with pytest.raises(SimFailure) as info:
        run(7, main, scenario="stuck")
    failure = info.value
    assert isinstance(failure.cause, SimDeadlock)
    assert failure.virtual_s == 1.0, "time ran until the last timer, then nothing could happen"
    report = failure.report()
    assert "test_kernel.py" in report and "waits_forever" in report


def test_time_and_step_limits() -> None:
    async def ticks_forever(sim: Sim) -> None:
        while True:
            await asyncio.sleep(1)

    async def spins_forever(sim: Sim) -> None:
        while True:
            await asyncio.sleep(0)

    with pytest.raises(SimFailure) as info:
        run(1, ticks_forever, max_virtual_s=30)
    assert isinstance(info.value.cause, SimTimeLimit) and info.value.virtual_s == 30.0
    with pytest.raises(SimFailure) as info:
        run(1, spins_forever, max_steps=500)
    assert isinstance(info.value.cause, SimStepLimit) and info.value.virtual_s == 0.0


def test_a_failing_seed_prints_how_to_replay_it() -> None:
    async def main(sim: Sim) -> None:
        sim.trace.record("scenario", "about to fail at %d", 3)
        await asyncio.sleep(2)
        raise AssertionError("offsets not dense")

    with pytest.raises(SimFailure) as info:
        run(1234, main, scenario="dense")
    text = str(info.value)
    assert "scenario 'dense' seed 1234 failed at virtual 2.000000 s" in text
    assert "AssertionError: offsets not dense" in text
    assert "make sim SCENARIO=dense SEEDS=1234" in text
    assert "python -m tests.sim --scenario dense --seeds 1234" in text
    report = info.value.report()
    assert "about to fail at 3" in report and "Traceback" in report


def test_an_exception_in_a_task_nobody_awaits_fails_the_run() -> None:
    async def boom() -> None:
        await asyncio.sleep(1)
        raise RuntimeError("lost in the background")

    async def main(sim: Sim) -> None:
        task = asyncio.get_running_loop().create_task(boom())
        await asyncio.sleep(2)
        del task

    with pytest.raises(SimFailure) as info:
        run(1, main)
    assert info.value.unhandled and "lost in the background" in info.value.unhandled[0]
    assert run(1, main, fail_on_unhandled=False).virtual_s == 2.0


def test_leftover_tasks_are_cancelled_in_creation_order() -> None:
    cancelled: list[str] = []

    async def background(name: str) -> None:
        try:
            await asyncio.sleep(100)
        except asyncio.CancelledError:
            cancelled.append(name)
            raise

    async def main(sim: Sim) -> list[str]:
        loop = asyncio.get_running_loop()
        tasks = [loop.create_task(background(f"b{i}")) for i in range(20)]
        await asyncio.sleep(0)
        return [t.get_name() for t in tasks]

    names = value_of(main)
    assert names == [f"sim-task-{i}" for i in range(2, 22)], "numbered per loop, not by asyncio's global counter"
    assert cancelled == [f"b{i}" for i in range(20)]


def test_logs_go_into_the_trace_not_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    import logging

    async def main(sim: Sim) -> int:
        await asyncio.sleep(1)
        logging.getLogger("broker.something").warning("upload of %s failed", "wal/1")
        return sim.trace.count("log:broker.something", "WARNING upload of wal/1 failed")

    assert value_of(main) == 1
    assert "upload of" not in capsys.readouterr().err

    async def names_its_dir(sim: Sim) -> list[str]:
        logging.getLogger("broker.log").warning("recovered %s", sim.tmp / "t-0")
        return sim.trace.lines()

    assert value_of(names_its_dir)[-1].endswith("WARNING recovered <tmp>/t-0"), "the same story in every process"


def test_gc_is_off_during_a_run_and_restored() -> None:
    async def main(sim: Sim) -> bool:
        return gc.isenabled()

    assert gc.isenabled()
    assert value_of(main) is False
    assert gc.isenabled()


# -- determinism --------------------------------------------------------------------------------------
def test_hidden_sources_are_seeded_during_a_run_and_restored_after() -> None:
    async def main(sim: Sim) -> tuple[Any, ...]:
        return uuid.uuid4(), uuid.uuid1(), random.random(), random.randrange(1000), os.urandom(4), sim.ids.uuid4()

    state = random.getstate()
    first, again, other = value_of(main, 5), value_of(main, 5), value_of(main, 6)
    assert first == again and first != other
    assert all(a != b for a, b in zip(first, other))
    assert random.getstate() == state, "the global random state is restored"
    assert abs(time.time() - _real_wall_clock()) < 5, "time.time restored"


def _real_wall_clock() -> float:
    return time.clock_gettime(time.CLOCK_REALTIME)


def test_forked_streams_are_independent_of_other_draws() -> None:
    root = SimRandom(99)
    expected = [root.fork("objectstore").random() for _ in range(3)]
    other = SimRandom(99)
    other.random()
    other.fork("network").random()
    assert [other.fork("objectstore").random() for _ in range(3)] == expected
    assert SimRandom(100).fork("objectstore").random() != expected[0]
    rng = SimRandom(1)
    state = rng.getstate()
    assert not rng.chance(0.0) and rng.between((0.5, 0.5)) == 0.5
    assert rng.getstate() == state, "a switched-off fault draws nothing"


async def everything(sim: Sim) -> list[str]:
    """Every seam with faults on, a little traffic through each: the determinism witness."""
    objects = build_object_store(
        sim.fork("objectstore"), sim.trace, sim.clock, faults=ObjectStoreFaults.flaky(), max_attempts=3
    )
    metadata = build_metadata_store(sim.fork("metadata"), sim.trace, sim.clock, faults=MetadataFaults.flaky())
    network = SimNetwork(sim.fork("network"), sim.trace, faults=NetFaults.flaky())
    outcomes: list[str] = []

    async def handle(request: Ping) -> Pong:
        await asyncio.sleep(sim.rng.uniform(0, 0.01))
        return Pong(request.seq, f"n2 saw {request.text}")

    network.serve(2, "n2", 1, handle, Ping, Pong)
    client = network.pool(1, Ping, Pong).get(2, "n2", 1)

    async def worker(index: int) -> None:
        for step in range(15):
            key = f"k/{index}/{step}"
            for name, action in (
                ("put", objects.store.put(key, b"x" * step)),
                ("meta", metadata.put(key, b"v")),
                ("rpc", client.call(Ping(step, key), 0.5)),
            ):
                try:
                    await action
                    outcomes.append(f"{name} {key} ok")
                except Exception as exc:
                    outcomes.append(f"{name} {key} {type(exc).__name__}")
            await asyncio.sleep(sim.rng.expovariate(20))

    await asyncio.gather(*(worker(i) for i in range(3)))
    outcomes.append(f"objects {objects.memory.keys()}")
    outcomes.append(f"metadata {[kv.key for kv in await metadata.inner.list('')]}")
    await metadata.close()
    return outcomes


def test_same_seed_same_trace_different_seed_different_trace() -> None:
    first, again, other = run(11, everything), run(11, everything), run(12, everything)
    assert first.trace.lines() == again.trace.lines() and first.value == again.value
    assert len(first.trace.events) > 100
    assert first.trace.lines() != other.trace.lines()
    assert trace_digest(first.trace) == trace_digest(again.trace) != trace_digest(other.trace)


# -- CLI pieces ---------------------------------------------------------------------------------------
def test_seed_specs() -> None:
    assert parse_seeds("7") == [7]
    assert parse_seeds("0..3") == [0, 1, 2]
    assert parse_seeds("0..=3") == [0, 1, 2, 3]
    assert parse_seeds("1,5, 10..12") == [1, 5, 10, 11]
    with pytest.raises(ValueError):
        parse_seeds(",")


def test_run_seeds_collects_failures_with_reports() -> None:
    async def odd_seeds_fail(sim: Sim) -> None:
        await asyncio.sleep(0.5)
        assert sim.seed % 2 == 0, f"seed {sim.seed} is odd"

    outcome = run_seeds(Scenario("parity", odd_seeds_fail, "fails on odd seeds"), [2, 3, 4, 5], trace_lines=5)
    assert outcome.seeds == 4 and [seed for seed, _, _ in outcome.failures] == [3, 5]
    assert "make sim SCENARIO=parity SEEDS=3" in outcome.failures[0][2]

    known = Scenario("parity", odd_seeds_fail, "", known_issues={r"seed 5 is odd": "bug #5"})
    outcome = run_seeds(known, [3, 5], trace_lines=5)
    assert [seed for seed, _, _ in outcome.failures] == [3] and outcome.known == [(5, "bug #5")]
    assert [seed for seed, _, _ in run_seeds(known, [3, 5], strict=True).failures] == [3, 5]


def test_hash_seed_detection(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PYTHONHASHSEED", "0")
    assert fixed_hash_seed() == 0
    monkeypatch.setenv("PYTHONHASHSEED", "random")
    assert fixed_hash_seed() is None
    monkeypatch.delenv("PYTHONHASHSEED")
    assert fixed_hash_seed() is None


# -- nodes: kill -9 and restart ---------------------------------------------------------------------
def test_a_killed_node_freezes_while_others_go_on_and_a_new_incarnation_runs() -> None:
    async def main(sim: Sim) -> dict[str, Any]:
        loop = sim.loop
        log: list[str] = []

        async def ticker(name: str, gate: asyncio.Event) -> None:
            try:
                while True:
                    await asyncio.sleep(1)
                    log.append(f"{name}@{loop.time():g}")
                    if gate.is_set():
                        log.append(f"{name} saw the gate")
            finally:
                log.append(f"{name} finally")

        gate = asyncio.Event()
        first, other = new_node(loop, 1), new_node(loop, 2)
        spawn(first, ticker("a", gate))
        spawn(other, ticker("b", gate))
        with as_node(first):
            loop.call_later(2.5, log.append, "a's timer")
        await asyncio.sleep(2.2)
        crash(loop, first)
        gate.set()  # would wake node 1's ticker if it were alive
        await asyncio.sleep(2)
        restarted = new_node(loop, 1)
        spawn(restarted, ticker("a2", gate))
        await asyncio.sleep(1.5)
        return {
            "log": list(log),
            "restarted": str(restarted),
            "pending": [describe_task(t) for t in loop.pending_tasks()],
        }

    result = value_of(main)
    assert result["log"] == [
        "a@1",
        "b@1",
        "a@2",
        "b@2",
        "b@3",
        "b saw the gate",
        "b@4",
        "b saw the gate",
        "b@5",
        "b saw the gate",
        "a2@5.2",
        "a2 saw the gate",
    ]
    assert result["restarted"] == "n1.2"
    assert any("[n1.1, killed]" in line for line in result["pending"]), "frozen, not finished"


def test_rpc_handlers_belong_to_the_serving_node() -> None:
    async def main(sim: Sim) -> list[Any]:
        network = SimNetwork(sim.fork("net"), sim.trace, faults=NetFaults(latency_s=(0.001, 0.001)))
        server = new_node(sim.loop, 2)
        handled: list[int] = []

        async def handle(request: Ping) -> Pong:
            await asyncio.sleep(0.5)
            handled.append(request.seq)
            return Pong(request.seq)

        with as_node(server):
            network.serve(2, "n2", 1, handle, Ping, Pong)
        client = network.pool(1, Ping, Pong).get(2, "n2", 1)
        first = await client.call(Ping(1), 1.0)
        call = sim.loop.create_task(client.call(Ping(2), 1.0))
        await asyncio.sleep(0.1)
        sim.loop.kill(server)  # the process froze; the network does not know yet
        outcome = await asyncio.gather(call, return_exceptions=True)
        return [first, handled, type(outcome[0]).__name__]

    assert value_of(main) == [Pong(1), [1], "RpcTimeout"]
