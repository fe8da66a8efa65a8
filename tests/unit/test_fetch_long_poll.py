"""Fetch long polling on an in-process broker (tests/inprocess.py): a fetch with nothing to
return parks until max_wait_ms, and a produce to its partition wakes it."""

from __future__ import annotations

import asyncio
from pathlib import Path

from tests.inprocess import InProcessBroker
from tests.integration.clients import build_batch, decode_records

PARKED_MAX_WAIT_S = 60.0  # a parked fetch's max_wait_ms: far beyond any wait bound below
WAKE_BOUND_S = 15.0  # a produce must wake the parked fetch well within PARKED_MAX_WAIT_S
PARK_S = 0.1  # long enough for a fetch that would be answered at once to be answered


def test_fetch_on_empty_partition_returns_empty_at_max_wait(tmp_path: Path) -> None:
    """Nothing arrives: the parked fetch is answered (empty, no error) when max_wait_ms
    passes. That it really parks is shown by test_fetch_parks_and_wakes_on_produce."""

    async def scenario() -> None:
        async with InProcessBroker(tmp_path) as harness:
            client = harness.client()
            assert await client.create_topic("wait", 1) == 0
            part = await asyncio.wait_for(client.fetch("wait", 0, 0, max_wait_ms=1000, min_bytes=1), 30)
        assert part.error_code == 0
        assert part.high_watermark == 0
        assert decode_records(part.records) == []

    asyncio.run(scenario())


def test_fetch_parks_and_wakes_on_produce(tmp_path: Path) -> None:
    """A fetch of an empty partition with a long max_wait_ms is answered with a record that was
    produced only after the fetch was sent: it parked (an early answer would be empty) and the
    produce woke it (max_wait_ms is far beyond the wait bound, so expiry cannot explain it)."""

    async def scenario() -> None:
        async with InProcessBroker(tmp_path) as harness:
            consumer, producer = harness.client("consumer"), harness.client("producer")
            assert await producer.create_topic("wake", 1) == 0
            parked = asyncio.create_task(
                consumer.fetch("wake", 0, 0, max_wait_ms=int(PARKED_MAX_WAIT_S * 1000), min_bytes=1, max_bytes=1 << 20)
            )
            await asyncio.sleep(PARK_S)
            assert not parked.done(), f"the fetch was answered before anything was produced: {parked}"
            assert await producer.produce("wake", 0, build_batch([(b"k", b"wake up")])) == (0, 0)
            await asyncio.wait((parked,), timeout=WAKE_BOUND_S)
            assert parked.done(), (
                f"the parked fetch was not woken by the produce (max_wait_ms is {PARKED_MAX_WAIT_S:.0f} s)"
            )
            part = parked.result()
        assert part.error_code == 0
        assert [r.value for r in decode_records(part.records)] == [b"wake up"]

    asyncio.run(scenario())
