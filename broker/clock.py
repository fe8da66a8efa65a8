"""Injected time: components take a Clock so timeouts and expiry are testable without sleeping."""

from __future__ import annotations

import time
from typing import Protocol


class Clock(Protocol):
    def now_ms(self) -> int:
        """Wall-clock milliseconds since the epoch (record timestamps, retention)."""

    def monotonic_ms(self) -> int:
        """Monotonic milliseconds (timeouts, lingers, intervals)."""


class SystemClock:
    def now_ms(self) -> int:
        return time.time_ns() // 1_000_000

    def monotonic_ms(self) -> int:
        return time.monotonic_ns() // 1_000_000


class ManualClock:
    """A clock that moves only when a test calls `advance`."""

    def __init__(self, now_ms: int = 1_700_000_000_000) -> None:
        self._now_ms = now_ms
        self._monotonic_ms = 0

    def now_ms(self) -> int:
        return self._now_ms

    def monotonic_ms(self) -> int:
        return self._monotonic_ms

    def advance(self, ms: int) -> None:
        self._now_ms += ms
        self._monotonic_ms += ms
