"""The retry layer (broker/objectstore/retrying.py) over the simulation's fault-injecting store:
retries until an answer, the bound on attempts, non-retriable failures, the per-attempt timeout
and the concurrency slots, a conditional put whose answer was lost, and the cutting of listings
and deletes into one-request attempts. Virtual time (tests/sim/runner.py); sleeps between
attempts are recorded, and may change the faults, instead of being slept."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from broker.objectstore import (
    MemoryObjectStore,
    NotFound,
    ObjectStoreError,
    ObjectStoreUnavailable,
    RetryingObjectStore,
    RetryPolicy,
)
from tests.contract.test_objectstore import Requests
from tests.sim.objectstore import FaultyObjectStore, ObjectStoreFaults
from tests.sim.runner import Sim, run

NONE = ObjectStoreFaults.none()


class S3LikeConditional(MemoryObjectStore):
    """Answers a conditional put over any existing object with False, whatever its bytes, as
    S3's 412 does: recognising our own earlier write is the retry layer's job."""

    async def put_if_absent(self, key: str, data: bytes) -> bool:
        if await self.head(key) is not None:
            return False
        return await super().put_if_absent(key, data)


class Layer:
    """A FaultyObjectStore and the retry layer over it; `on_sleep` runs before each backoff."""

    def __init__(
        self,
        sim: Sim,
        faults: ObjectStoreFaults,
        *,
        memory: MemoryObjectStore | None = None,
        max_attempts: int = 4,
        attempt_timeout_s: float | None = 5.0,
        **options: Any,
    ) -> None:
        self.memory = memory or MemoryObjectStore(clock=sim.clock)
        self.faulty = FaultyObjectStore(self.memory, sim.fork("faults"), sim.trace, faults=faults)
        self.sleeps: list[float] = []
        self.on_sleep: Callable[[int], None] = lambda _: None
        self.requests = Requests()
        policy = RetryPolicy(max_attempts=max_attempts, base_delay_ms=100, random=lambda: 0.5, sleep=self._sleep)
        self.store = RetryingObjectStore(
            self.faulty,
            policy,
            clock=sim.clock,
            attempt_timeout_s=attempt_timeout_s,
            on_request=self.requests,
            name="test",
            **options,
        )

    async def _sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.on_sleep(len(self.sleeps))

    def outcomes(self, operation: str) -> list[str]:
        return [outcome for op, outcome, _ in self.requests.calls if op == operation]

    def heal_after(self, failures: int) -> None:
        """Switch the faults off at the backoff after the `failures`-th failed attempt."""

        def on_sleep(count: int) -> None:
            if count == failures:
                self.faulty.faults = NONE

        self.on_sleep = on_sleep


def simulate(main: Callable[[Sim], Awaitable[None]]) -> None:
    run(1, main)


def test_retriable_failures_are_retried_with_backoff_until_an_answer() -> None:
    async def main(sim: Sim) -> None:
        layer = Layer(sim, ObjectStoreFaults(delay_s=(0, 0), fail_p=1.0))
        layer.heal_after(2)
        await layer.store.put("k", b"value")
        assert layer.sleeps == [0.05, 0.1], "full jitter at 0.5: 0.5 * 100 ms, 0.5 * 200 ms"
        assert layer.faulty.requests == 3 and layer.memory.keys() == ["k"]
        assert layer.outcomes("put") == ["retry", "retry"], "the answered attempt is the inner store's to report"
        assert await layer.store.get("k") == b"value"

    simulate(main)


def test_retries_are_bounded_and_the_last_failure_is_unavailable() -> None:
    async def main(sim: Sim) -> None:
        layer = Layer(sim, ObjectStoreFaults(delay_s=(0, 0), fail_p=1.0))
        with pytest.raises(ObjectStoreUnavailable) as caught:
            await layer.store.get("k")
        assert caught.value.retriable and "503 SlowDown" in str(caught.value)
        assert layer.faulty.requests == 4 and layer.sleeps == [0.05, 0.1, 0.2]
        assert layer.outcomes("get") == ["retry", "retry", "retry", "error"]

    simulate(main)


def test_non_retriable_failures_and_answers_are_not_retried() -> None:
    async def main(sim: Sim) -> None:
        layer = Layer(sim, ObjectStoreFaults(delay_s=(0, 0), fatal_p=1.0))
        with pytest.raises(ObjectStoreError) as caught:
            await layer.store.put("k", b"v")
        assert caught.value.retriable is False and "access denied" in str(caught.value)
        layer.faulty.faults = NONE
        with pytest.raises(NotFound):
            await layer.store.get("missing")
        with pytest.raises(ValueError):
            await layer.store.get("k", 5, 4)  # the contract's ValueError, not an ObjectStoreError
        assert layer.faulty.requests == 2 and layer.sleeps == []
        assert layer.outcomes("put") == ["error"] and layer.outcomes("get") == []

    simulate(main)


def test_a_stalled_attempt_times_out_and_slots_bound_the_attempts_in_flight() -> None:
    async def main(sim: Sim) -> None:
        loop = asyncio.get_running_loop()
        layer = Layer(sim, NONE, max_attempts=3, attempt_timeout_s=2.0, max_concurrency=2)
        layer.faulty.stall()
        puts = [loop.create_task(layer.store.put(f"k{index}", b"v")) for index in range(5)]
        await asyncio.sleep(1.0)
        assert layer.store.in_flight == 2 and layer.faulty.requests == 2, "three puts wait for a slot"
        results = await asyncio.gather(*puts, return_exceptions=True)
        assert all(isinstance(r, ObjectStoreUnavailable) and "TimeoutError" in str(r) for r in results)
        # Each put: three attempts of 2 s (backoff recorded, not slept); two slots: ceil(15 / 2) rounds.
        assert loop.time() == pytest.approx(16.0)
        assert layer.outcomes("put") == ["retry"] * 10 + ["error"] * 5
        assert layer.store.in_flight == 0 and layer.memory.keys() == [], "timed-out attempts never applied"

    simulate(main)


def test_a_conditional_put_whose_answer_was_lost_finds_its_own_write() -> None:
    async def main(sim: Sim) -> None:
        lost = ObjectStoreFaults(delay_s=(0, 0), lost_answer_p=1.0, operations=frozenset({"put_if_absent"}))
        layer = Layer(sim, lost, memory=S3LikeConditional(clock=sim.clock))
        layer.heal_after(1)
        assert await layer.store.put_if_absent("lease", b"mine") is True, "applied, answer lost, retried: ours"
        assert layer.outcomes("put_if_absent") == ["retry"]
        assert await layer.store.put_if_absent("lease", b"yours") is False, "a different size"
        assert await layer.store.put_if_absent("lease", b"your") is False, "the same size, other bytes"
        assert await layer.store.get("lease") == b"mine"
        assert sim.trace.count("objectstore", "head lease ok") == 3, "each False was checked"
        assert sim.trace.count("objectstore", "get lease") == 3, "two compared the bytes, one is the read above"

    simulate(main)


def test_listings_are_read_a_page_per_attempt_and_deletes_a_batch_per_attempt() -> None:
    async def main(sim: Sim) -> None:
        layer = Layer(sim, NONE, max_attempts=50, list_page_size=4, delete_batch_size=3)
        keys = [f"l/{index:02d}" for index in range(10)]
        for key in keys:
            await layer.memory.put(key, b"x")
        layer.faulty.faults = ObjectStoreFaults(delay_s=(0, 0), fail_p=0.4, operations=frozenset({"list"}))
        assert [info.key async for info in layer.store.list("l/")] == keys, "every key once, in order"
        assert layer.outcomes("list").count("retry") == sim.trace.count("objectstore", "list l/ failed") > 0
        assert [info.key async for info in layer.store.list("l/", start_after="l/05")] == keys[6:]

        layer.faulty.faults = NONE
        before = layer.faulty.requests
        assert await layer.store.delete_many(keys[:7]) == keys[:7]
        assert layer.faulty.requests - before == 3, "7 keys in batches of 3"
        assert layer.memory.keys() == keys[7:]

    simulate(main)
