"""Batch timestamps and codecs as Kafka stores them, through a whole in-process broker
(tests/inprocess.py), classic and diskless.

Regressions (issue 26, items 9 and 12): a batch whose header maxTimestamp is -1 (older Go
clients) was stored with -1, so ListOffsets by timestamp found nothing, the idempotent
producer's last timestamp was -1 (its state expired at the first check), and on diskless
topics the WAL object and the leader's entry held -1 too; a record 3 h in the future that is
neither first nor the header's maximum passed; Produce v3-v6 carried zstd batches that Kafka
refuses (KIP-110)."""

from __future__ import annotations

import asyncio
import struct
from pathlib import Path

import crc32c
import pytest
from kafka.protocol.consumer import ListOffsetsRequest
from kafka.protocol.producer import InitProducerIdRequest, ProduceRequest
from kafka.record.default_records import DefaultRecordBatch
from kafka.record.memory_records import MemoryRecords

from broker.protocol.batch import parse_header
from broker.protocol.errors import ErrorCode
from walfiles.format import read_object
from tests.inprocess import InProcessBroker, InProcessClient
from tests.integration.clients import build_batch

MODES = {"classic": "false", "diskless": "true"}
HOUR = 3_600_000
MAX_TIMESTAMP = -3  # ListOffsets' special timestamp (KIP-734)
NONE, GZIP, LZ4, ZSTD = 0, 1, 3, 4  # the batch attributes' codec bits


def without_max_timestamp(batch: bytes) -> bytes:
    """What sarama and segmentio/kafka-go send: maxTimestamp -1 (the CRC made to match)."""
    raw = bytearray(batch)
    struct.pack_into(">q", raw, 35, -1)
    struct.pack_into(">I", raw, 17, crc32c.crc32c(bytes(raw[21:])))
    return bytes(raw)


async def list_offset(client: InProcessClient, topic: str, timestamp: int) -> tuple[int, int, int]:
    """ListOffsets of partition 0: (error_code, offset, timestamp)."""
    wanted = ListOffsetsRequest.ListOffsetsTopic
    request = ListOffsetsRequest(
        replica_id=-1,
        isolation_level=0,
        topics=[wanted(name=topic, partitions=[wanted.ListOffsetsPartition(partition_index=0, timestamp=timestamp)])],
    )
    response = await client.request(request, await client.version(ListOffsetsRequest, cap=8))
    [answer] = response.topics[0].partitions
    return answer.error_code, answer.offset, answer.timestamp


async def produce_at(client: InProcessClient, version: int, topic: str, records: bytes) -> int:
    """One Produce at a given version; the partition's error code."""
    data = ProduceRequest.TopicProduceData
    request = ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout_ms=10_000,
        topic_data=[data(name=topic, partition_data=[data.PartitionProduceData(index=0, records=records)])],
    )
    response = await client.request(request, version)
    return int(response.responses[0].partition_responses[0].error_code)


def stored_batches(records: bytes | None) -> list[DefaultRecordBatch]:
    found, reader = [], MemoryRecords(bytes(records or b""))
    while (batch := reader.next_batch()) is not None:
        assert batch.validate_crc()
        found.append(batch)
    return found


@pytest.mark.parametrize("mode", sorted(MODES))
def test_batches_without_max_timestamp_are_stored_with_the_records_maximum(tmp_path: Path, mode: str) -> None:
    async def scenario() -> None:
        async with InProcessBroker(tmp_path) as harness:
            client = harness.client()
            now = harness.clock.now_ms()
            assert await client.create_topic("go", 1, {"diskless.enable": MODES[mode]}) == 0
            init = await client.request(InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60_000), 2)
            pid, epoch = init.producer_id, init.producer_epoch
            sent = [((now - 50, now + 20, now - 10), NONE), ((now + 100, now + 200), LZ4)]
            seq = 0
            for stamps, codec in sent:
                batch = build_batch(
                    [(b"k", b"v%d" % ts * 20) for ts in stamps],
                    timestamps=list(stamps),
                    compression=codec,
                    producer_id=pid,
                    producer_epoch=epoch,
                    base_sequence=seq,
                )
                assert parse_header(batch).compression == codec
                assert await client.produce("go", 0, without_max_timestamp(batch)) == (0, seq)
                seq += len(stamps)
            part = await client.fetch("go", 0, 0)
            assert [b.max_timestamp for b in stored_batches(part.records)] == [now + 20, now + 200]
            assert await list_offset(client, "go", now + 15) == (0, 1, now + 20)
            assert await list_offset(client, "go", now + 150) == (0, 4, now + 200)
            assert await list_offset(client, "go", MAX_TIMESTAMP) == (0, 4, now + 200)
            partition = harness.broker.replica_manager.get("go", 0)
            entry = partition.producers.entry(pid)
            assert entry is not None and entry.last_timestamp_ms == now + 200
            harness.clock.advance(HOUR)
            partition.producers.expire()
            assert partition.producers.entry(pid) is not None  # its state lives on (producer.id.expiration.ms)
            # the leader's partition log holds the true maximum in both modes
            assert [e.header.max_timestamp for e in partition.log.iter_entries(0)] == [now + 20, now + 200]
            if mode == "diskless":  # and the WAL objects hold the batches as stored, CRC included
                in_objects = []
                for key in harness.objects.keys():
                    index, view = read_object(await harness.objects.get(key))
                    in_objects += [parse_header(view[e.offset : e.end]) for e in index.entries()]
                assert [h.max_timestamp for h in in_objects] == [now + 20, now + 200]

    asyncio.run(scenario())


@pytest.mark.parametrize("mode", sorted(MODES))
def test_time_retention_reads_the_records_time(tmp_path: Path, mode: str) -> None:
    """Records written ten days ago by a client that leaves maxTimestamp at -1: retention.ms
    (one week) deletes their segment, by their own time, not by the file's age."""

    async def scenario() -> None:
        async with InProcessBroker(tmp_path) as harness:
            client = harness.client()
            now = harness.clock.now_ms()
            configs = {"diskless.enable": MODES[mode], "segment.bytes": "1000"}
            assert await client.create_topic("old", 1, configs) == 0
            for i in range(3):  # a segment each
                batch = build_batch([(None, b"x" * 600)], timestamps=[now - 10 * 24 * HOUR + i])
                assert await client.produce("old", 0, without_max_timestamp(batch)) == (0, i)
            log = harness.broker.replica_manager.get("old", 0).log
            assert len(log.segment_base_offsets) >= 3
            assert log.enforce_retention(now) >= 2 and log.log_start_offset >= 2

    asyncio.run(scenario())


@pytest.mark.parametrize("mode", sorted(MODES))
@pytest.mark.parametrize("codec", [NONE, GZIP])
def test_a_record_far_in_the_future_is_refused_wherever_it_is(tmp_path: Path, mode: str, codec: int) -> None:
    async def scenario() -> None:
        async with InProcessBroker(tmp_path) as harness:
            client = harness.client()
            now = harness.clock.now_ms()
            configs = {"diskless.enable": MODES[mode], "message.timestamp.after.max.ms": str(HOUR)}
            assert await client.create_topic("future", 1, configs) == 0
            stamps = [now, now + 3 * HOUR, now]
            batch = build_batch([(None, b"x" * 100)] * 3, timestamps=stamps, compression=codec)
            assert parse_header(batch).compression == codec
            code, _offset = await client.produce("future", 0, without_max_timestamp(batch))
            assert code == ErrorCode.INVALID_TIMESTAMP
            assert (await client.fetch("future", 0, 0)).high_watermark == 0

    asyncio.run(scenario())


@pytest.mark.parametrize("mode", sorted(MODES))
def test_zstd_is_refused_below_produce_v7(tmp_path: Path, mode: str) -> None:
    """KIP-110, as Kafka's ProduceRequest.validateRecords: UNSUPPORTED_COMPRESSION_TYPE for the
    partition with Produce v3-v6; v7 and later store it."""

    async def scenario() -> None:
        async with InProcessBroker(tmp_path) as harness:
            client = harness.client()
            assert await client.create_topic("z", 1, {"diskless.enable": MODES[mode]}) == 0
            zstd, lz4 = (build_batch([(b"k", b"v" * 100)], compression=codec) for codec in (ZSTD, LZ4))
            assert (parse_header(zstd).compression, parse_header(lz4).compression) == (ZSTD, LZ4)
            for version in (3, 4, 5, 6):
                assert await produce_at(client, version, "z", zstd) == ErrorCode.UNSUPPORTED_COMPRESSION_TYPE
                assert await produce_at(client, version, "z", lz4) == 0
            assert await produce_at(client, 7, "z", zstd) == 0
            assert [b.compression_type for b in stored_batches((await client.fetch("z", 0, 0)).records)] == [
                LZ4
            ] * 4 + [ZSTD]

    asyncio.run(scenario())


@pytest.mark.parametrize("mode", sorted(MODES))
def test_a_recompressed_batch_and_its_retry(tmp_path: Path, mode: str) -> None:
    """compression.type=zstd: an idempotent producer's lz4 batch is stored in zstd (its size
    changes: the diskless coordinates are the new batch's), and its retry is recognised by its
    sequences and answered with the first offsets, not stored twice."""

    async def scenario() -> None:
        async with InProcessBroker(tmp_path) as harness:
            client = harness.client()
            configs = {"diskless.enable": MODES[mode], "compression.type": "zstd"}
            assert await client.create_topic("z", 1, configs) == 0
            init = await client.request(InitProducerIdRequest(transactional_id=None, transaction_timeout_ms=60_000), 2)
            batches = [
                build_batch(
                    [(b"k%d" % i, b"value %d " % i * 30) for i in range(4)],
                    compression=LZ4,
                    producer_id=init.producer_id,
                    producer_epoch=init.producer_epoch,
                    base_sequence=seq,
                )
                for seq in (0, 4)
            ]
            assert await client.produce("z", 0, batches[0]) == (0, 0)
            assert await client.produce("z", 0, batches[0]) == (0, 0)  # the retry
            assert await client.produce("z", 0, batches[1]) == (0, 4)
            stored = stored_batches((await client.fetch("z", 0, 0)).records)
            assert [(b.base_offset, b.compression_type) for b in stored] == [(0, ZSTD), (4, ZSTD)]
            assert [r.value for b in stored for r in b] == [b"value %d " % i * 30 for i in range(4)] * 2
            assert stored[0].size_in_bytes != len(batches[0])

    asyncio.run(scenario())
