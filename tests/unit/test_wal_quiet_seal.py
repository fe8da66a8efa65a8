"""The WAL writer's quiet seal (`wal.quiet.ms`, `wal.quiet.min.bytes`), on virtual time: a
buffer that holds enough bytes is sealed once no batch has arrived for `wal.quiet.ms`, not
before (arrivals push it back) and never below the size floor (small buffers wait for the
linger, which keeps PUTs per second at low load where they were)."""

from __future__ import annotations

import asyncio
import uuid

from broker.wal.commit import CommitRequest, CommitResult, PendingCommit, resolved
from broker.wal.wal_writer import PartitionAppend, WalWriter
from broker.metrics import BrokerMetrics
from broker.log_validator import prepare_diskless
from tests.sim.runner import Sim, run
from tests.sim.scenarios.diskless_write import make_batch, topic_settings
from walfiles.keys import WalKeyAllocator

LINGER_MS = 1000
QUIET_MS = 10


class Store:
    """Records when each PUT came, in seconds since the first batch (virtual time)."""

    def __init__(self, put_seconds: list[float]) -> None:
        self.loop = asyncio.get_running_loop()
        self.origin = self.loop.time()
        self.put_at: list[float] = []
        self.put_seconds = put_seconds

    async def put_if_absent(self, key: str, data: bytes) -> bool:
        self.put_at.append(round(self.loop.time() - self.origin, 6))
        await asyncio.sleep(self.put_seconds.pop(0) if self.put_seconds else 0)
        return True


class Committer:
    def route(self, topic_id: object, partition: int) -> None:
        return None

    def commit(self, request: CommitRequest) -> list[PendingCommit]:
        done = resolved(CommitResult(0, None, 0, -1, 0, 1, 0, True))
        return [PendingCommit(done, done) for _ in request.partitions]


def arrivals(
    gaps_ms: list[int], quiet_ms: int, min_batches: int, put_seconds: list[float] | None = None
) -> tuple[list[float], BrokerMetrics]:
    """Submit one batch, then one after each gap; return when each object's PUT began."""

    async def main(sim: Sim) -> tuple[list[float], BrokerMetrics]:
        store, metrics = Store(list(put_seconds or [])), BrokerMetrics()
        one = len(make_batch(7, 0, 1))
        writer = WalWriter(
            store,
            WalKeyAllocator("", "c", 0, sim.clock.now_ms, first_sequence=0),
            Committer(),
            None,
            metrics,
            clock=sim.clock,
            buffer_max_bytes=1 << 20,
            linger_ms=LINGER_MS,
            max_inflight_bytes=8 << 20,
            quiet_ms=quiet_ms,
            quiet_min_bytes=min_batches * one,
        )
        futures = []
        for seq, gap_ms in enumerate([0, *gaps_ms]):
            await asyncio.sleep(gap_ms / 1000)
            batch = memoryview(make_batch(7, seq, 1))
            futures += writer.submit(
                [
                    PartitionAppend(
                        uuid.UUID(int=1), 0, -1, prepare_diskless(batch, topic_settings(), sim.clock.now_ms()), -1
                    )
                ]
            )
        results = await asyncio.gather(*futures)
        assert all(r.error_code == 0 for r in results)
        return store.put_at, metrics

    put_at, metrics = run(1, main).value
    return put_at, metrics


def seals(metrics: BrokerMetrics, reason: str) -> float:
    return metrics.wal_seals.labels(reason)._value.get()  # type: ignore[no-any-return]


def test_a_quiet_buffer_above_the_floor_is_sealed_quiet_ms_after_its_last_batch() -> None:
    # Batches at 0, 5, 10, ..., 50 ms: each arrival pushes the seal back; the last is at 50 ms.
    put_at, metrics = arrivals([5] * 10, QUIET_MS, min_batches=2)
    assert len(put_at) == 1 and seals(metrics, "quiet") == 1
    assert put_at == [0.060]


def test_below_the_floor_the_buffer_waits_for_the_linger() -> None:
    put_at, metrics = arrivals([5] * 3, QUIET_MS, min_batches=10)
    assert len(put_at) == 1 and seals(metrics, "linger") == 1 and seals(metrics, "quiet") == 0
    assert put_at == [LINGER_MS / 1000]


def test_disabled_quiet_seal_waits_for_the_linger() -> None:
    put_at, metrics = arrivals([5] * 10, 0, min_batches=0)
    assert seals(metrics, "quiet") == 0 and put_at == [LINGER_MS / 1000]


def test_a_gap_longer_than_quiet_ms_seals_and_the_next_batch_opens_a_new_object() -> None:
    put_at, metrics = arrivals([5, 30, 5], QUIET_MS, min_batches=2)
    # 0, 5 (floor reached) -> sealed at 15; 35, 40 -> sealed at 50.
    assert put_at == [0.015, 0.050]
    assert seals(metrics, "quiet") == 2


def test_no_quiet_seal_while_an_earlier_object_is_in_the_pipeline() -> None:
    """A busy pipeline means producers may still be sending (they are not all waiting for
    answers): the buffer is sealed quiet only once the earlier object is committed."""
    put_at, metrics = arrivals([5, 15, 5], QUIET_MS, min_batches=2, put_seconds=[0.100])
    # 0, 5 -> sealed at 15, PUT until 115; 20, 25 wait for it although quiet since 35.
    assert put_at == [0.015, 0.115]
    assert seals(metrics, "quiet") == 2
