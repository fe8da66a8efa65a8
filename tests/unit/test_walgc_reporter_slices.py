"""The WAL file manager's reference report hands the event loop back (issue 28): it visits
every hosted replica, which with 20,000 partitions is most of a second, and it ran whole on
the loop every GC cycle, so leases, the metadata watch and clients all waited. Time is a
clock that moves 1 ms whenever it is read: the 400 replicas take more than a slice."""

from __future__ import annotations

import asyncio
from types import SimpleNamespace

from broker.clock import ManualClock
from broker.walfiles.messages import WALGC_VERSION, ObjectsQuery, WalQueryRequest, WalReferencesRequest
from broker.walfiles.reporter import RecentUploads, ReferenceReporter

PARTITIONS = 400


class MovingClock(ManualClock):
    def monotonic(self) -> float:
        self.advance(1)
        return super().monotonic()


def replica(index: int) -> SimpleNamespace:
    references = SimpleNamespace(oldest_created_ms=lambda: 1000 + index, referenced_among=lambda asked: {})
    return SimpleNamespace(
        topic_id="t",
        index=index,
        may_reference_wal=True,
        wal_references=references,
        leader_state=object(),
        log=SimpleNamespace(size_bytes=10, high_watermark=5),
    )


def test_the_reference_report_and_query_let_other_tasks_run() -> None:
    async def scenario() -> None:
        replicas = SimpleNamespace(loaded=True, partitions={("t", i): replica(i) for i in range(PARTITIONS)})
        reporter = ReferenceReporter(0, replicas, MovingClock(), 30_000, RecentUploads())  # type: ignore[arg-type]
        turns = 0
        busy = True

        async def other_work() -> None:
            nonlocal turns
            while busy:
                turns += 1
                await asyncio.sleep(0)

        other = asyncio.create_task(other_work())
        await asyncio.sleep(0)
        report = await reporter.answer(WalReferencesRequest(WALGC_VERSION, 1))
        turns_during_report, turns = turns, 0
        query = WalQueryRequest(WALGC_VERSION, [ObjectsQuery("t", i, []) for i in range(PARTITIONS)])
        found = await reporter.answer_query(query)
        busy = False
        await other
        assert turns_during_report > 5 and turns > 5, "an answer held the event loop from start to end"
        assert [r.oldest_created_ms for r in report.replicas] == [1000 + i for i in range(PARTITIONS)]
        assert report.opened == {"t": list(range(PARTITIONS))}
        assert len(found.found) == PARTITIONS

    asyncio.run(scenario())
