"""Produce requests the broker refuses before appending anything, over real classic and
diskless partitions (no sockets): acks other than 0, 1, -1 (INVALID_REQUIRED_ACKS). A
transactional id is no reason to refuse (the partition validates transactional batches; the
broker trusts the client to have added the partition, no KIP-890 verification yet).
InitProducerId with a transactional id goes to the transaction coordinator."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from types import SimpleNamespace

import pytest
from kafka.protocol.producer import InitProducerIdRequest

from broker.clock import SystemClock
from broker.config import load_config
from broker.handlers import init_producer_id, produce
from broker.metadata.records import PartitionStateRecord
from broker.objectstore import MemoryObjectStore
from broker.partition import Partition
from broker.protocol.errors import ErrorCode
from broker.topic_config import effective
from broker.topics import Topic
from tests.unit.test_partition import lead
from tests.unit.test_produce_handler import plain_batch
from tests.unit.test_wal_writer import TOPIC_ID, Rig

CLASSIC_ID = uuid.UUID(int=11)


def seam(tmp_path: Path):  # type: ignore[no-untyped-def]
    rig = Rig(tmp_path, MemoryObjectStore(clock=SystemClock()), partitions=1, wal_linger_ms=1)
    classic_settings = effective({"diskless.enable": "false"}, load_config(environ={}))
    classic = lead(
        Partition.open("c", 0, tmp_path / "c-0", classic_settings, rig.clock, 86_400_000, on_append=lambda p: None)
    )
    topics = {"t": Topic("t", TOPIC_ID, 1, {}, rig.settings), "c": Topic("c", CLASSIC_ID, 1, {}, classic_settings)}
    broker = SimpleNamespace(
        config=load_config(environ={}),
        metrics=rig.metrics,
        clock=rig.clock,
        wal=rig.writer,
        node_id=0,
        router=SimpleNamespace(
            client_az=lambda header: ("az1", False), representative=lambda *args: 0, represented_az=lambda az: az
        ),
        catalog=SimpleNamespace(get=topics.get, by_id=lambda topic_id: None),
        view=SimpleNamespace(
            partitions={(str(TOPIC_ID), 0): SimpleNamespace(record=PartitionStateRecord(1, [0], 0, 0, [0]))},
            applied_revision=1,
        ),
        replica_manager=SimpleNamespace(get=lambda name, index: classic),
    )
    return rig, classic, broker


def request(acks: int, transactional_id: str | None, now_ms: int) -> SimpleNamespace:
    return SimpleNamespace(
        acks=acks,
        transactional_id=transactional_id,
        timeout_ms=30_000,
        topic_data=[
            SimpleNamespace(
                name=name,
                topic_id=None,
                partition_data=[SimpleNamespace(index=0, records=plain_batch(name.encode(), now_ms))],
            )
            for name in ("c", "t")
        ],
    )


@pytest.mark.parametrize(
    "transactional_id, acks, code",
    [
        (None, 2, ErrorCode.INVALID_REQUIRED_ACKS),
        (None, -2, ErrorCode.INVALID_REQUIRED_ACKS),
    ],
)
def test_refused_for_every_partition_and_nothing_appended(
    tmp_path: Path, transactional_id: str | None, acks: int, code: ErrorCode
) -> None:
    async def scenario() -> None:
        rig, classic, broker = seam(tmp_path)
        header = SimpleNamespace(api_version=9, peer="p", client_id="c")
        response = await produce.handle(broker, header, request(acks, transactional_id, rig.clock.now_ms()))
        assert [p.error_code for t in response.responses for p in t.partition_responses] == [code, code]
        await rig.writer.close()
        assert classic.log.log_end_offset == 0 and rig.partitions[0].log.log_end_offset == 0
        # the same request without the problem is appended on both
        fine = await produce.handle(broker, header, request(-1, None, rig.clock.now_ms()))
        assert [p.error_code for t in fine.responses for p in t.partition_responses] == [0, 0]

    asyncio.run(scenario())


def test_a_transactional_id_is_no_reason_to_refuse(tmp_path: Path) -> None:
    async def scenario() -> None:
        rig, classic, broker = seam(tmp_path)
        header = SimpleNamespace(api_version=9, peer="p", client_id="c")
        response = await produce.handle(broker, header, request(-1, "tx-1", rig.clock.now_ms()))
        assert [p.error_code for t in response.responses for p in t.partition_responses] == [0, 0]
        await rig.writer.close()

    asyncio.run(scenario())


def test_init_producer_id_asks_the_transaction_coordinator() -> None:
    async def scenario() -> None:
        handed_out = []
        asked = []

        async def next_id() -> int:
            handed_out.append(1)
            return 4000

        async def init(transactional_id: str, timeout_ms: int, expected: object) -> tuple[int, int]:
            asked.append((transactional_id, timeout_ms, expected))
            return 7, 3

        broker = SimpleNamespace(
            producer_ids=SimpleNamespace(next_id=next_id), transactions=SimpleNamespace(init_producer_id=init)
        )
        header = SimpleNamespace(api_version=4)
        txn = await init_producer_id.handle(
            broker,
            header,
            InitProducerIdRequest(
                transactional_id="tx-1", transaction_timeout_ms=60_000, producer_id=-1, producer_epoch=-1
            ),
        )
        assert (txn.error_code, txn.producer_id, txn.producer_epoch, handed_out) == (0, 7, 3, [])
        assert asked == [("tx-1", 60_000, (-1, -1))]
        granted = await init_producer_id.handle(
            broker,
            header,
            InitProducerIdRequest(
                transactional_id=None, transaction_timeout_ms=60_000, producer_id=-1, producer_epoch=-1
            ),
        )
        assert (granted.error_code, granted.producer_id, granted.producer_epoch) == (0, 4000, 0)

    asyncio.run(scenario())
