"""Injected time: components take a Clock so timeouts and expiry are testable without sleeping,
and the simulation (tests/sim) runs them on virtual time. Nothing else in broker/ reads the
system clock or sleeps (ruff's banned-API rule, TID251, enforces it).

A deadline that bounds waits on the event loop (asyncio.wait_for, asyncio.wait with a
timeout, call_later, a loop of `Clock.sleep`s) is read from the running loop's `time()`
instead: those waits run on the loop's time with every Clock, the simulation's loop is
virtual too, and a ManualClock's monotonic time, which moves only when a test advances it,
would never let such a deadline pass."""

from __future__ import annotations

import asyncio
import time
from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> int:
        """Wall-clock milliseconds since the epoch (record timestamps, retention)."""

    def monotonic_ms(self) -> int:
        """Monotonic milliseconds (timeouts, lingers, intervals)."""

    def monotonic(self) -> float:
        """Monotonic seconds with sub-millisecond resolution (durations for metrics)."""

    async def sleep(self, seconds: float) -> None:
        """Wait `seconds` (0: yield to the other tasks once)."""


class SystemClock:
    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000

    def monotonic(self) -> float:
        return time.perf_counter()

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)


class ManualClock:
    """A clock that moves only when a test calls `advance`. `sleep` still waits on the running
    loop: a component's background loop paces itself as before, while the times it reads
    change only when the test says so."""

    def __init__(self, now_ms: int = 1_700_000_000_000) -> None:
        self._now_ms = now_ms
        self._monotonic_ms = 0

    def now_ms(self) -> int:
        return self._now_ms

    def monotonic_ms(self) -> int:
        return self._monotonic_ms

    def monotonic(self) -> float:
        return self._monotonic_ms / 1000

    async def sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    def advance(self, ms: int) -> None:
        self._now_ms += ms
        self._monotonic_ms += ms
