"""Bugs the simulation found in broker code, each reduced to a small deterministic run.

Marked xfail(strict=True) while the bug is open: the fix turns the test into an XPASS,
which fails the suite as a reminder to drop the marker (and the scenario's known issue).
"""

from __future__ import annotations

import asyncio
import uuid


from broker.wal.commit import CommitRequest, CommitResult, PendingCommit, resolved
from broker.wal.wal_writer import PartitionAppend, WalWriter
from broker.metrics import BrokerMetrics
from broker.objectstore import ObjectStoreUnavailable
from broker.log_validator import prepare_diskless
from tests.sim.runner import Sim, run
from tests.sim.scenarios.diskless_write import make_batch, topic_settings
from walfiles.keys import WalKeyAllocator


def test_commits_stay_in_seal_order_when_an_upload_in_the_middle_fails() -> None:
    """Found by diskless_write seed 490: an object whose upload failed resolved its
    `dispatched` future without waiting for its predecessor's, so the next object committed
    before earlier, slower ones."""

    async def main(sim: Sim) -> list[str]:
        class Store:
            """PUT 1 is slow, PUT 3 fails, the others are quick."""

            def __init__(self) -> None:
                self.puts = 0

            async def put_if_absent(self, key: str, data: bytes) -> bool:
                self.puts += 1
                if self.puts == 1:
                    await asyncio.sleep(1.0)
                elif self.puts == 3:
                    raise ObjectStoreUnavailable("503")
                else:
                    await asyncio.sleep(0.01)
                return True

        committed: list[str] = []

        class Committer:
            def route(self, topic_id: object, partition: int) -> None:
                return None

            def commit(self, request: CommitRequest) -> list[PendingCommit]:
                committed.append(request.object_id)
                done = resolved(CommitResult(0, None, 0, -1, 0, 1, 0, True))
                return [PendingCommit(done, done) for _ in request.partitions]

        keys = WalKeyAllocator("", "c", 0, sim.clock.now_ms, first_sequence=0)
        writer = WalWriter(
            Store(),
            keys,
            Committer(),
            None,
            BrokerMetrics(),
            clock=sim.clock,
            buffer_max_bytes=1,
            linger_ms=1000,
            max_inflight_bytes=1 << 20,
        )
        futures = []
        for seq in range(4):  # one object each (sealed by size); one producer each: a failed batch
            batch = memoryview(make_batch(7 + seq, 0, 1))  # holds back its own producer's later ones
            append = PartitionAppend(
                uuid.UUID(int=1), 0, -1, prepare_diskless(batch, topic_settings(), sim.clock.now_ms()), -1
            )
            futures += writer.submit([append])
        await asyncio.gather(*futures)
        return committed

    committed = run(1, main).value
    assert [object_id[-1] for object_id in committed] == ["0", "1", "3"], f"commit order {committed}"
