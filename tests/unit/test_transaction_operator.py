"""The operator's view of transactions, without sockets: what DescribeProducers answers from
a partition's producer state (classic and diskless, and its errors), Kafka's find-hanging
decision, the open-transaction age behind shoal_partition_open_transaction_age_seconds, and
the `shoal transactions` usage errors caught before any connection."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

import pytest
from kafka.admin import ProducerState
from kafka.protocol.admin.transactions import DescribeProducersRequest

from broker.cli import main
from broker.clock import ManualClock, SystemClock
from broker.handlers import describe_producers
from broker.metadata.records import PartitionStateRecord
from broker.objectstore import MemoryObjectStore
from broker.ops.transactions import OpenTransaction, candidates, hanging
from broker.partition import Partition
from broker.producers import NUM_BATCHES_TO_RETAIN, EndTxn, ProducerStateManager
from broker.producers.open_transactions import open_transaction_age_s
from broker.protocol.batch import NO_SEQUENCE
from broker.protocol.error_codes import error_codes
from broker.protocol.errors import ErrorCode
from tests.unit.producer_state_support import T0, Log, hdr
from tests.unit.test_partition import CLOCK_START
from tests.unit.test_transactions import MARKER, TXN, classic, handler_broker, txn_batch
from tests.unit.test_wal_writer import Rig

# --- DescribeProducers ----------------------------------------------------------------------------


def story() -> ProducerStateManager:
    """Producer 1000 idempotent; 2000 with a transaction open at offset 3; 3000's ended by a
    marker of coordinator epoch 4."""
    log = Log(ProducerStateManager(ManualClock(T0)))
    assert log.produce(hdr(pid=1000, seq=0, count=2, ts=T0)) == 0
    assert log.produce(hdr(pid=3000, seq=0, ts=T0 + 1, attributes=TXN)) == 2
    assert log.produce(hdr(pid=2000, epoch=3, seq=0, count=2, ts=T0 + 2, attributes=TXN)) == 3
    assert log.produce(hdr(pid=1000, seq=2, ts=T0 + 5)) == 5
    marker = hdr(pid=3000, seq=NO_SEQUENCE, ts=T0 + 6, attributes=MARKER)
    assert log.produce(marker, end_txn=EndTxn(commit=True, coordinator_epoch=4)) == 6
    return log.mgr


def test_describe_producers_answers_each_producer_as_kafka() -> None:
    rows = [p.to_dict() for p in describe_producers.active_producers(story())]
    expected = [
        (1000, 0, 2, T0 + 5, -1, -1),  # no transaction: start offset -1, no marker: epoch -1
        (2000, 3, 1, T0 + 2, -1, 3),
        (3000, 0, 0, T0 + 6, 4, -1),  # ended: the marker's coordinator epoch stays
    ]
    keys = ("producer_id", "producer_epoch", "last_sequence", "last_timestamp", "coordinator_epoch")
    assert [tuple(r[k] for k in (*keys, "current_txn_start_offset")) for r in rows] == expected


def request(*topics: tuple[str, list[int]]) -> DescribeProducersRequest:
    T = DescribeProducersRequest.TopicRequest
    return DescribeProducersRequest(topics=[T(name=name, partition_indexes=indexes) for name, indexes in topics])


def ask(partition: Partition, req: DescribeProducersRequest) -> list[tuple[str, int, int, list[tuple[int, int]]]]:
    """(topic, partition, error, [(producer id, txn start offset)]) per answered partition."""
    header = SimpleNamespace(api_version=0, forwarded=False)
    response = asyncio.run(describe_producers.handle(handler_broker(partition), header, req))  # type: ignore[arg-type]
    assert error_codes(response) == [
        p.error_code for t in response.topics for p in t.partitions if p.error_code
    ]  # counted by shoal_request_errors_total
    return [
        (
            t.name,
            p.partition_index,
            p.error_code,
            [(a.producer_id, a.current_txn_start_offset) for a in p.active_producers],
        )
        for t in response.topics
        for p in t.partitions
    ]


def test_describe_producers_on_a_classic_leader_and_its_errors(tmp_path: Path) -> None:
    partition = classic(tmp_path, ManualClock(CLOCK_START))
    partition.append_records(txn_batch(0, producer_id=7, epoch=2), acks=-1)
    partition.append_records(txn_batch(0, producer_id=9, transactional=False), acks=-1)
    assert ask(partition, request(("c", [0]), ("gone", [0]))) == [
        ("c", 0, 0, [(7, 0), (9, -1)]),
        ("gone", 0, ErrorCode.UNKNOWN_TOPIC_OR_PARTITION, []),
    ]
    partition.make_follower(PartitionStateRecord(1, [1, 0], 1, 1, [1, 0]), 2)  # the leadership moved
    assert ask(partition, request(("c", [0]))) == [("c", 0, ErrorCode.NOT_LEADER_OR_FOLLOWER, [])]


def test_describe_producers_on_a_diskless_leader(tmp_path: Path) -> None:
    async def scenario() -> Partition:
        rig = Rig(tmp_path, MemoryObjectStore(clock=SystemClock()), partitions=1, wal_linger_ms=1)
        [result] = await asyncio.gather(*rig.writer.submit([rig.append(0, txn_batch(0, producer_id=7))]))
        assert result.error_code == 0
        await rig.writer.close()
        partition: Partition = rig.partitions[0]
        return partition

    partition = asyncio.run(scenario())
    assert partition.diskless
    assert ask(partition, request(("c", [0]))) == [("c", 0, 0, [(7, 0)])]  # answered here: it leads


# --- find-hanging: Kafka's decision ---------------------------------------------------------------

NOW = T0 + 3_600_000
MAX_TIMEOUT_MS = 15 * 60_000


def producer(pid: int, start: int, last_timestamp: int, epoch: int = 0, coordinator_epoch: int = -1) -> ProducerState:
    return ProducerState(pid, epoch, 4, last_timestamp, coordinator_epoch, start)


def open_txn(topic: str, partition: int, pid: int, start: int, last_timestamp: int) -> OpenTransaction:
    return OpenTransaction(topic, partition, pid, 0, -1, start, last_timestamp)


def test_candidates_are_open_transactions_older_than_the_max_timeout() -> None:
    old = NOW - MAX_TIMEOUT_MS - 1
    found = candidates(
        {
            ("t", 1): [producer(1, 40, old), producer(2, -1, old), producer(3, 7, NOW - MAX_TIMEOUT_MS)],
            ("t", 0): [producer(4, 0, old - 5)],
        },
        NOW,
        MAX_TIMEOUT_MS,
    )
    # 2 has none open; 3's producer wrote exactly the max timeout ago (Kafka: strictly longer)
    assert found == [open_txn("t", 0, 4, 0, old - 5), open_txn("t", 1, 1, 40, old)]


def test_an_open_transaction_hangs_unless_its_coordinator_still_has_the_partition() -> None:
    txns = [
        open_txn("t", 0, 1, 0, T0),  # no coordinator lists producer 1
        open_txn("t", 0, 2, 5, T0),  # its id is unknown to its coordinator
        open_txn("t", 0, 3, 9, T0),  # its coordinator's transaction has other partitions
        open_txn("t", 1, 4, 2, T0),  # its coordinator will write this partition's marker
    ]
    ids = {2: "b", 3: "c", 4: "d"}
    ongoing = {"b": None, "c": [("t", 1)], "d": [("t", 0), ("t", 1)]}
    assert hanging(txns, ids, ongoing) == txns[:3]
    assert hanging([], ids, ongoing) == []


# --- the age of the oldest open transaction -------------------------------------------------------


def test_open_transaction_age_is_from_the_first_batch_of_the_oldest() -> None:
    log = Log(ProducerStateManager(ManualClock(T0)))
    assert open_transaction_age_s(log.mgr, NOW) == 0.0
    log.produce(hdr(pid=1, seq=0, ts=T0 - 50_000))  # an idempotent write opens nothing
    assert open_transaction_age_s(log.mgr, NOW) == 0.0
    log.produce(hdr(pid=2, seq=0, ts=T0 + 1000, attributes=TXN))
    log.produce(hdr(pid=3, seq=0, ts=T0, attributes=TXN))  # opened later, with an older timestamp
    log.produce(hdr(pid=2, seq=1, ts=T0 + 9000, attributes=TXN))
    assert open_transaction_age_s(log.mgr, NOW) == 3600.0
    assert open_transaction_age_s(log.mgr, T0 - 10) == 0.0  # a producer clock ahead of ours
    log.produce(hdr(pid=3, seq=NO_SEQUENCE, attributes=MARKER), end_txn=EndTxn(False, 0))
    assert open_transaction_age_s(log.mgr, NOW) == (NOW - T0 - 1000) / 1000


def test_open_transaction_age_of_a_long_transaction_is_its_oldest_retained_batch() -> None:
    log = Log(ProducerStateManager(ManualClock(T0)))
    for seq in range(NUM_BATCHES_TO_RETAIN + 2):
        log.produce(hdr(pid=2, seq=seq, ts=T0 + seq * 1000, attributes=TXN))
    assert open_transaction_age_s(log.mgr, NOW) == (NOW - T0 - 2000) / 1000  # batches 0 and 1 are gone


# --- usage errors, before connecting --------------------------------------------------------------


@pytest.mark.parametrize(
    "args,message",
    [
        (["find-hanging"], "needs --broker-id or --topic"),
        (["find-hanging", "--broker-id", "0", "--partition", "1"], "--partition needs --topic"),
        (["find-hanging", "--topic", "t", "--max-transaction-timeout", "0"], "must be > 0 minutes"),
        (["abort", "--topic", "t", "--partition", "0"], "abort needs --start-offset"),
        (["abort", "--topic", "t", "--partition", "0", "--producer-id", "5"], "all of"),
        (["abort", "--topic", "t", "--partition", "0", "--start-offset", "3", "--producer-id", "5"], "not both"),
    ],
)
def test_usage_errors_exit_2_without_connecting(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["transactions", *args, "--bootstrap-server", "127.0.0.1:1"]) == 2
    assert message in capsys.readouterr().err
