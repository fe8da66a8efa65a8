"""LoopSlices and RunSlices: a long pass, or a long run of calls, hands the event loop back
once a slice of work has passed, and never when no time passes during work (the
simulation's virtual clock, where seeds keep their course)."""

from __future__ import annotations

import asyncio
import uuid

from broker.clock import ManualClock
from broker.cluster.view import ClusterView
from broker.loop_slices import LoopSlices, RunSlices
from broker.metadata import KeyValue, records


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


class CountingClock(ManualClock):
    def __init__(self) -> None:
        super().__init__()
        self.yields = 0

    async def sleep(self, seconds: float) -> None:
        self.yields += 1
        await super().sleep(seconds)


def test_a_run_of_calls_yields_once_per_slice_and_idle_time_never_counts() -> None:
    """RunSlices (issue 28): a run of 10 changes costing 5 ms each yields after the 4th and
    8th; runs of one change apiece, with a second of idle time between them (on the
    simulation's clock that time passes too), never yield."""

    async def scenario() -> None:
        clock = CountingClock()
        slices = RunSlices(clock, slice_s=0.02)
        for _ in range(10):
            clock.advance(5)
            await slices.pause_if_due()
        assert clock.yields == 2
        await asyncio.sleep(0)  # the loop has control: the run is over
        clock.yields = 0
        for _ in range(20):
            clock.advance(1000)  # idle
            await slices.pause_if_due()  # one short change
            await asyncio.sleep(0)
        assert clock.yields == 0

    asyncio.run(scenario())


def test_the_views_run_of_partition_changes_lets_other_tasks_run() -> None:
    """A CreateTopics of 250 partitions applied its states in one step of the event loop,
    each opening a partition: 0.4 s in which nothing else ran."""

    class NoCatalog:
        async def apply_record(self, record: object) -> None: ...

        async def apply_delete(self, name: str) -> None: ...

    async def scenario() -> None:
        clock = ManualClock()
        view = ClusterView(None, NoCatalog(), clock)  # type: ignore[arg-type]
        view.on_partition_changed(lambda pid, state: clock.advance(2))  # opening the partition
        turns = 0
        busy = True

        async def other() -> None:
            nonlocal turns
            while busy:
                turns += 1
                await asyncio.sleep(0)

        task = asyncio.get_running_loop().create_task(other())
        await asyncio.sleep(0)
        turns = 0
        state = records.encode(records.PartitionStateRecord(records.RECORD_VERSION, [0], 0, 0, [0]))
        for index in range(250):
            await view.apply_put(KeyValue(records.partition_key(str(uuid.UUID(int=1)), index), state, index + 1))
        busy = False
        await task
        assert 10 <= turns <= 40  # 500 ms of opens: about one turn per 20 ms
        assert len(view.partitions) == 250

    asyncio.run(scenario())
