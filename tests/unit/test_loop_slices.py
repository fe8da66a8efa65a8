"""LoopSlices: a long pass hands the event loop back once a slice of work has passed, and
never when no time passes (the simulation's virtual clock, where seeds keep their course)."""

from __future__ import annotations

import asyncio

from broker.clock import ManualClock
from broker.loop_slices import LoopSlices


async def turns_others_get(work_ms_per_item: int, items: int) -> list[int]:
    """Run a pass of `items`, each costing `work_ms_per_item` on the clock; the items after
    which another task got the loop."""
    clock = ManualClock()
    slices = LoopSlices(clock, slice_s=0.02)
    done = 0
    turns: list[int] = []
    stop = asyncio.Event()

    async def other() -> None:
        while not stop.is_set():
            turns.append(done)
            await asyncio.sleep(0)

    task = asyncio.get_running_loop().create_task(other())
    await asyncio.sleep(0)  # the other task's first turn, before the pass
    turns.clear()
    for _ in range(items):
        clock.advance(work_ms_per_item)
        done += 1
        await slices.pause_if_due()
    stop.set()
    await task
    return turns


def test_a_pass_yields_once_per_slice_of_work() -> None:
    assert asyncio.run(turns_others_get(work_ms_per_item=5, items=10)) == [4, 8]


def test_a_pass_that_takes_no_time_never_yields() -> None:
    assert asyncio.run(turns_others_get(work_ms_per_item=0, items=1000)) == []
