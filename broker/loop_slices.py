"""Long passes over every partition that hand the event loop back: a broker with thousands
of partitions spends hundreds of milliseconds in one such pass, and meanwhile its lease
keep-alives, the metadata watch, the Kafka listener and replication must go on (issue 28:
the loop's stalls, `shoal_event_loop_lag_seconds`, were the passes' length).

Time is the injected clock's, so on the simulation's virtual clock, where work takes no
time, a pass never yields and seeds keep their course."""

from __future__ import annotations

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
