"""Timers of coordinator shards, keyed by (shard, key) and fired by one task, so a shard's
timers go with it when it is unloaded (Kafka's CoordinatorTimer). A shard (re)schedules a key
whenever its next deadline changes; the task sleeps until the earliest deadline, or at most
MAX_TIMER_SLEEP_S, and is woken early when a timer is scheduled."""

from __future__ import annotations

import asyncio
from typing import Callable

MAX_TIMER_SLEEP_S = 1.0
Fire = Callable[[int], None]  # called with the clock's now_ms


class ShardTimers:
    def __init__(self, now_ms: Callable[[], int]) -> None:
        self._now_ms = now_ms
        self._timers: dict[int, dict[str, tuple[int, Fire]]] = {}  # shard -> key -> (deadline ms, fire)
        self._waker: asyncio.Future[None] | None = None

    def schedule(self, shard: int, key: str, deadline_ms: int, fire: Fire) -> None:
        """Call `fire(now_ms)` once, at or after `deadline_ms`; replaces the key's earlier timer."""
        self._timers.setdefault(shard, {})[key] = (deadline_ms, fire)
        if self._waker is not None and not self._waker.done():
            self._waker.set_result(None)  # the deadline may be earlier than the one slept towards

    def cancel(self, shard: int, key: str) -> None:
        timers = self._timers.get(shard)
        if timers is not None:
            timers.pop(key, None)
            if not timers:
                del self._timers[shard]

    def cancel_shard(self, shard: int) -> None:
        self._timers.pop(shard, None)

    def next_deadline_ms(self) -> int | None:
        return min((deadline for timers in self._timers.values() for deadline, _ in timers.values()), default=None)

    def fire_due(self, now_ms: int) -> None:
        """Fire every timer due at `now_ms`; one fired timer may schedule or cancel others."""
        due = [
            (shard, key, timer)
            for shard, timers in self._timers.items()
            for key, timer in timers.items()
            if timer[0] <= now_ms
        ]
        for shard, key, timer in due:
            if self._timers.get(shard, {}).get(key) is timer:
                self.cancel(shard, key)
                timer[1](now_ms)

    async def run(self) -> None:
        while True:
            self.fire_due(self._now_ms())
            next_deadline = self.next_deadline_ms()
            sleep_s = (
                MAX_TIMER_SLEEP_S
                if next_deadline is None
                else min(MAX_TIMER_SLEEP_S, max(0.001, (next_deadline - self._now_ms()) / 1000))
            )
            # asyncio.wait, not wait_for: on Python 3.11 wait_for can swallow a cancellation
            # that arrives as the awaited future completes, and stop() would hang.
            self._waker = asyncio.get_running_loop().create_future()
            await asyncio.wait((self._waker,), timeout=sleep_s)
