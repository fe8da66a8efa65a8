"""The Fetch handler over real partitions, the real WAL writer and reader and the in-memory
object store (no sockets)."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from types import SimpleNamespace

from kafka.protocol.consumer import FetchRequest

from broker.clock import SystemClock
from broker.config import load_config
from broker.handlers import fetch
from broker.objectstore import MemoryObjectStore
from broker.partition import Partition
from broker.protocol.errors import ErrorCode
from broker.topic_config import effective
from broker.topics import Topic
from broker.waiters import FetchWaiters
from tests.unit.test_partition import batch, lead
from tests.unit.test_wal_writer import TOPIC_ID, Rig

CLASSIC_ID = uuid.UUID(int=8)


def fetch_request(*wanted: tuple[str, int, int]) -> FetchRequest:
    """Fetch v12 of (topic, partition, offset), no waiting."""
    topics: dict[str, list] = {}
    for name, index, offset in wanted:
        topics.setdefault(name, []).append(
            FetchRequest.FetchTopic.FetchPartition(
                partition=index,
                current_leader_epoch=-1,
                fetch_offset=offset,
                last_fetched_epoch=-1,
                log_start_offset=-1,
                partition_max_bytes=1 << 20,
            )
        )
    return FetchRequest(
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=1,
        max_bytes=1 << 24,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        rack_id="",
        forgotten_topics_data=[],
        topics=[FetchRequest.FetchTopic(topic=name, partitions=parts) for name, parts in topics.items()],
    )


async def diskless_with_classic(tmp_path: Path) -> tuple[Rig, SimpleNamespace]:
    """Diskless t-0 and t-1 (one batch each, in one WAL object per partition) and classic c-0."""
    store = MemoryObjectStore(clock=SystemClock())
    rig = Rig(tmp_path, store, partitions=2, wal_linger_ms=1)
    for index in range(2):  # one object each, so one can go missing alone
        [result] = await asyncio.gather(*rig.writer.submit([rig.append(index, batch(0, producer_id=30 + index))]))
        assert result.error_code == 0
    classic_settings = effective({"diskless.enable": "false"}, load_config(environ={}))
    classic = lead(
        Partition.open("c", 0, tmp_path / "c-0", classic_settings, rig.clock, 86_400_000, on_append=lambda p: None)
    )
    classic.append_records(batch(0, producer_id=40), acks=1)
    topics = {"t": Topic("t", TOPIC_ID, 2, {}, rig.settings), "c": Topic("c", CLASSIC_ID, 1, {}, classic_settings)}
    hosted = {("t", 0): rig.partitions[0], ("t", 1): rig.partitions[1], ("c", 0): classic}

    def leader(name: str, index: int) -> Partition:
        hosted[(name, index)].check_leader()
        return hosted[(name, index)]

    broker = SimpleNamespace(
        catalog=SimpleNamespace(get=topics.get, by_id=lambda topic_id: None),
        replica_manager=SimpleNamespace(
            partitions=hosted, get=lambda name, index: hosted[(name, index)], leader=leader
        ),
        wal_reader=rig.reader,
        waiters=FetchWaiters(),
        metrics=rig.metrics,
        stopping=False,
        router=SimpleNamespace(racks=SimpleNamespace(remember=lambda peer, rack: None)),
    )
    return rig, broker


def test_one_unreadable_wal_object_fails_only_its_partition(tmp_path: Path) -> None:
    """Regression (issue 11, defect 4): one missing or corrupt WAL object failed every
    partition of the Fetch (KAFKA_STORAGE_ERROR for all, classic ones included)."""

    async def scenario() -> None:
        rig, broker = await diskless_with_classic(tmp_path)
        [missing] = [k for k in rig.store.keys()][:1]
        await rig.store.delete_many([missing])
        response = await fetch.handle(
            broker, SimpleNamespace(api_version=12, peer="p"), fetch_request(("t", 0, 0), ("t", 1, 0), ("c", 0, 0))
        )
        answers = {(t.topic, p.partition_index): p for t in response.responses for p in t.partitions}
        assert answers[("t", 0)].error_code == ErrorCode.KAFKA_STORAGE_ERROR and answers[("t", 0)].records == b""
        for readable in (("t", 1), ("c", 0)):
            assert answers[readable].error_code == 0 and len(answers[readable].records) > 0

    asyncio.run(scenario())
