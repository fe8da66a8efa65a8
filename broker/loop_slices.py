"""Long passes over every partition that hand the event loop back: a broker with thousands
of partitions spends hundreds of milliseconds in one such pass, and meanwhile its lease
keep-alives, the metadata watch, the Kafka listener and replication must go on (issue 28:
the loop's stalls, `shoal_event_loop_lag_seconds`, were the passes' length).

Time is the injected clock's, so on the simulation's virtual clock, where work takes no
time, a pass never yields and seeds keep their course."""

from __future__ import annotations

import asyncio

from .clock import Clock

SLICE_S = 0.02  # the longest a pass holds the event loop before handing it back


class LoopSlices:
    """`await slices.pause_if_due()` between items: yields once SLICE_S of work has passed."""

    def __init__(self, clock: Clock, slice_s: float = SLICE_S) -> None:
        self._clock = clock
        self._slice_s = slice_s
        self._started = clock.monotonic()

    async def pause_if_due(self) -> None:
        if self._clock.monotonic() - self._started >= self._slice_s:
            await self._clock.sleep(0)
            self._started = self._clock.monotonic()


class RunSlices:
    """For work that comes in runs of calls rather than in one pass: changes applied one at a
    time, each by its caller (a CreateTopics of 250 partitions opening each one, a watch
    response of 128 moved leaderships). `await slices.pause_if_due()` after each call yields
    once SLICE_S of one uninterrupted run has passed. A run starts at the first call after
    the loop last had control: a callback scheduled then marks its end, so time that passed
    while the loop was free (on the simulation's clock, too) never counts as work."""

    def __init__(self, clock: Clock, slice_s: float = SLICE_S) -> None:
        self._clock = clock
        self._slice_s = slice_s
        self._run_started: float | None = None

    async def pause_if_due(self) -> None:
        now = self._clock.monotonic()
        if self._run_started is None:
            self._run_started = now
            asyncio.get_running_loop().call_soon(self._end_run)
        elif now - self._run_started >= self._slice_s:
            await self._clock.sleep(0)  # the loop runs _end_run before this task resumes

    def _end_run(self) -> None:
        self._run_started = None
