"""Transactions, the partition side, on a real broker process: transactional batches produced
over the raw protocol with a producer id from a non-transactional InitProducerId, ended by
WriteTxnMarkers COMMIT and ABORT, on a classic and a diskless topic (with
`transaction.partition.verification.enable=false`: no coordinator grants these producers). read_committed consumers (librdkafka, kafka-python) see exactly the
committed records and stop at an open transaction until its marker arrives; read_uncommitted
ones see every data record; ListOffsets read_committed answers the last stable offset. A
kill -9 and restart rebuild the same from the log (producer snapshots, transaction index)."""

from __future__ import annotations

import pytest

from .clients import (
    RawConnection,
    api_versions,
    build_batch,
    consume_confluent,
    consume_kafka_python,
    create_topic,
    pick_version,
    raw_produce,
    unique_topic,
)

pytestmark = pytest.mark.integration

MODES = {"classic": "false", "diskless": "true"}
UNVERIFIED = ["--set", "transaction.partition.verification.enable=false"]


@pytest.fixture
def broker(broker_factory):  # type: ignore[no-untyped-def]
    """A broker that lets any producer id open a transaction (no coordinator involved)."""
    return broker_factory(extra_args=UNVERIFIED)


def init_producer_id(conn: RawConnection, versions) -> tuple[int, int]:  # type: ignore[no-untyped-def]
    from kafka.protocol.producer import InitProducerIdRequest

    request = InitProducerIdRequest(
        transactional_id=None, transaction_timeout_ms=60_000, producer_id=-1, producer_epoch=-1
    )
    response = conn.request(request, pick_version(versions, InitProducerIdRequest, cap=4), timeout_s=15)
    assert response.error_code == 0
    return response.producer_id, response.producer_epoch


def write_marker(
    conn: RawConnection, topic: str, producer_id: int, epoch: int, commit: bool, coordinator_epoch: int = 0
) -> int:
    from kafka.protocol.producer import WriteTxnMarkersRequest

    M = WriteTxnMarkersRequest.WritableTxnMarker
    request = WriteTxnMarkersRequest(
        markers=[
            M(
                producer_id=producer_id,
                producer_epoch=epoch,
                transaction_result=commit,
                topics=[M.WritableTxnMarkerTopic(name=topic, partition_indexes=[0])],
                coordinator_epoch=coordinator_epoch,
            )
        ]
    )
    response = conn.request(request, 1, timeout_s=40)
    [marker] = response.markers
    return marker.topics[0].partitions[0].error_code


def latest(conn: RawConnection, versions, topic: str, isolation_level: int) -> int:  # type: ignore[no-untyped-def]
    from kafka.protocol.consumer import ListOffsetsRequest

    T = ListOffsetsRequest.ListOffsetsTopic
    request = ListOffsetsRequest(
        replica_id=-1,
        isolation_level=isolation_level,
        topics=[
            T(name=topic, partitions=[T.ListOffsetsPartition(partition_index=0, current_leader_epoch=-1, timestamp=-1)])
        ],
    )
    response = conn.request(request, pick_version(versions, ListOffsetsRequest, cap=7), timeout_s=15)
    part = response.topics[0].partitions[0]
    assert part.error_code == 0
    return part.offset


class Txn:
    """One producer id writing transactional batches with its own sequences."""

    def __init__(self, conn: RawConnection, versions, topic: str, tag: str) -> None:  # type: ignore[no-untyped-def]
        self.conn, self.versions, self.topic, self.tag = conn, versions, topic, tag
        self.producer_id, self.epoch = init_producer_id(conn, versions)
        self.seq = 0
        self.values: list[bytes] = []

    def send(self, n: int) -> int:
        values = [f"{self.tag}-{self.seq + i}".encode() for i in range(n)]
        batch = build_batch(
            [(b"k", v) for v in values],
            transactional=True,
            producer_id=self.producer_id,
            producer_epoch=self.epoch,
            base_sequence=self.seq,
        )
        error, offset = raw_produce(self.conn, self.versions, self.topic, 0, batch)
        assert error == 0, f"transactional produce answered {error}"
        self.seq += n
        self.values += values
        return offset

    def end(self, commit: bool, coordinator_epoch: int = 0) -> int:
        return write_marker(self.conn, self.topic, self.producer_id, self.epoch, commit, coordinator_epoch)


def plain(conn: RawConnection, versions, topic: str, value: bytes) -> int:  # type: ignore[no-untyped-def]
    error, offset = raw_produce(conn, versions, topic, 0, build_batch([(b"k", value)]))
    assert error == 0
    return offset


def values_confluent(bootstrap: str, topic: str, isolation: str, expected: int) -> list[bytes]:
    recs = consume_confluent(bootstrap, topic, 1, expected, settle_s=0.5, **{"isolation.level": isolation})
    return [r.value for r in recs]


def values_kafka_python(bootstrap: str, topic: str, isolation: str, expected: int) -> list[bytes]:
    recs = consume_kafka_python(bootstrap, topic, 1, expected, settle_s=0.5, isolation_level=isolation)
    return [r.value for r in recs]


def check_reads(bootstrap: str, topic: str, committed: list[bytes], everything: list[bytes]) -> None:
    assert values_confluent(bootstrap, topic, "read_committed", len(committed)) == committed
    assert values_kafka_python(bootstrap, topic, "read_committed", len(committed)) == committed
    assert sorted(values_confluent(bootstrap, topic, "read_uncommitted", len(everything))) == sorted(everything)


@pytest.mark.parametrize("mode", sorted(MODES))
def test_commit_abort_open_and_restart(broker, mode: str) -> None:  # type: ignore[no-untyped-def]
    bs = broker.bootstrap
    topic = unique_topic(f"txn-{mode}")
    create_topic(bs, topic, partitions=1, configs={"diskless.enable": MODES[mode]})
    versions = api_versions(bs)
    assert versions.get(27) == (1, 1)  # WriteTxnMarkers advertised
    with RawConnection(bs) as conn:
        committed, aborted = Txn(conn, versions, topic, "c"), Txn(conn, versions, topic, "a")
        committed.send(3)
        aborted.send(2)
        committed.send(1)
        p0 = b"plain-0"
        plain(conn, versions, topic, p0)
        assert latest(conn, versions, topic, 1) == 0  # both transactions open from offset 0
        assert committed.end(commit=True) == 0
        assert latest(conn, versions, topic, 1) == 3  # the aborted one's first offset
        assert aborted.end(commit=False) == 0
        hw = latest(conn, versions, topic, 0)
        assert latest(conn, versions, topic, 1) == hw
        # an open transaction holds read_committed consumers back, also for what follows it
        open_txn = Txn(conn, versions, topic, "o")
        first_open = open_txn.send(2)
        p1 = b"plain-1"
        plain(conn, versions, topic, p1)
        assert latest(conn, versions, topic, 1) == first_open < latest(conn, versions, topic, 0)
        # fencing: an older producer epoch or coordinator epoch is refused
        assert write_marker(conn, topic, open_txn.producer_id, -1, True) == 47  # INVALID_PRODUCER_EPOCH
    committed_values = committed.values + [p0]
    everything = committed.values + aborted.values + [p0] + open_txn.values + [p1]
    check_reads(bs, topic, committed_values, everything)
    with RawConnection(bs) as conn:
        open_txn.conn = conn
        assert open_txn.end(commit=True, coordinator_epoch=2) == 0
        assert write_marker(conn, topic, open_txn.producer_id, 0, True, coordinator_epoch=1) == 52  # fenced
        pending = Txn(conn, versions, topic, "p")
        first_pending = pending.send(2)  # open across the crash
    committed_values += open_txn.values + [p1]
    everything += pending.values
    check_reads(bs, topic, committed_values, everything)

    broker.kill()  # kill -9: producer state, the LSO and the transaction index come back from the log
    broker.start()
    with RawConnection(bs) as conn:
        versions = api_versions(bs)
        assert latest(conn, versions, topic, 1) == first_pending
    check_reads(bs, topic, committed_values, everything)
    with RawConnection(bs) as conn:
        pending.conn, pending.versions = conn, versions
        assert pending.end(commit=False) == 0
        assert latest(conn, versions, topic, 1) == latest(conn, versions, topic, 0)
        after = b"plain-after"
        plain(conn, versions, topic, after)
    check_reads(bs, topic, committed_values + [after], everything + [after])


def txn_request(conn: RawConnection, versions, request):  # type: ignore[no-untyped-def]
    """A coordinator request, retried while the coordinator is loading or busy."""
    import time

    deadline = time.monotonic() + 30
    while True:
        response = conn.request(request, pick_version(versions, type(request), cap=3), timeout_s=15)
        code = getattr(response, "error_code", None)
        if code is None:  # AddPartitionsToTxn v0-3: per partition
            code = response.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code
        if (
            code not in (14, 15, 16, 51) or time.monotonic() > deadline
        ):  # LOAD_IN_PROGRESS, NOT_AVAILABLE, NOT_COORDINATOR, CONCURRENT
            assert code == 0, f"{type(request).__name__} answered {code}"
            return response
        time.sleep(0.1)


@pytest.mark.parametrize("mode", sorted(MODES))
def test_verification_refuses_batches_outside_a_granted_transaction(broker_factory, mode: str) -> None:  # type: ignore[no-untyped-def]
    """KIP-890 (`transaction.partition.verification.enable`, on by default): a transactional
    batch opens a transaction on a partition only after AddPartitionsToTxn put the partition
    in the producer's ongoing transaction. A batch sent without it, and a late batch of a
    transaction that has ended (same epoch), are refused with the retriable
    NOT_ENOUGH_REPLICAS, so no transaction is left open that nobody will end: the last stable
    offset stays at the high watermark. (Without verification both are appended and the last
    stable offset stops at them for good.)"""
    from kafka.protocol.metadata import FindCoordinatorRequest
    from kafka.protocol.producer import AddPartitionsToTxnRequest, EndTxnRequest, InitProducerIdRequest

    broker = broker_factory()
    topic = unique_topic(f"verify-{mode}")
    create_topic(broker.bootstrap, topic, 1, {"diskless.enable": MODES[mode]})
    txn_id = f"verify-{mode}"
    with RawConnection(broker.bootstrap) as conn:
        versions = api_versions(broker.bootstrap)
        txn_request(conn, versions, FindCoordinatorRequest(key=txn_id, key_type=1))
        init = txn_request(
            conn,
            versions,
            InitProducerIdRequest(
                transactional_id=txn_id, transaction_timeout_ms=60_000, producer_id=-1, producer_epoch=-1
            ),
        )
        pid, epoch = init.producer_id, init.producer_epoch

        def send(seq: int, value: bytes) -> int:
            batch = build_batch(
                [(b"k", value)], transactional=True, producer_id=pid, producer_epoch=epoch, base_sequence=seq
            )
            return raw_produce(conn, versions, topic, 0, batch)[0]

        def stable() -> bool:
            return latest(conn, versions, topic, 1) == latest(conn, versions, topic, 0)

        assert send(0, b"not-added") == 19  # NOT_ENOUGH_REPLICAS: not in a transaction the coordinator knows
        assert stable()
        add = AddPartitionsToTxnRequest.AddPartitionsToTxnTopic(name=topic, partitions=[0])
        txn_request(
            conn,
            versions,
            AddPartitionsToTxnRequest(
                v3_and_below_transactional_id=txn_id,
                v3_and_below_producer_id=pid,
                v3_and_below_producer_epoch=epoch,
                v3_and_below_topics=[add],
            ),
        )
        assert send(0, b"committed") == 0
        assert not stable()  # open

        def verified(producer_epoch: int) -> int:
            """AddPartitionsToTxn v4 verify_only (what Kafka's leaders ask the coordinator)."""
            T = AddPartitionsToTxnRequest.AddPartitionsToTxnTransaction
            request = AddPartitionsToTxnRequest(
                transactions=[
                    T(
                        transactional_id=txn_id,
                        producer_id=pid,
                        producer_epoch=producer_epoch,
                        verify_only=True,
                        topics=[add],
                    )
                ]
            )
            [result] = conn.request(request, 4, timeout_s=15).results_by_transaction
            return result.topic_results[0].results_by_partition[0].partition_error_code

        assert verified(epoch) == 0 and verified(epoch + 1) == 90  # PRODUCER_FENCED
        txn_request(
            conn,
            versions,
            EndTxnRequest(transactional_id=txn_id, producer_id=pid, producer_epoch=epoch, committed=True),
        )
        import time

        deadline = time.monotonic() + 20
        while not stable() and time.monotonic() < deadline:  # the COMMIT marker is written after EndTxn's answer
            time.sleep(0.05)
        assert stable()
        assert send(1, b"late") == 19  # a late batch of the ended transaction
        assert verified(epoch) == 48  # INVALID_TXN_STATE: not in an ongoing transaction any more
        assert stable()
        assert values_confluent(broker.bootstrap, topic, "read_committed", 1) == [b"committed"]
