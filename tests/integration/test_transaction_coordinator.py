"""The transaction coordinator on a real broker process with real transactional producers
(librdkafka through confluent-kafka): commit, abort, commit on a classic and a diskless topic
seen exactly by read_committed consumers; a second producer with the same transactional.id
fences the first; a transaction left open by a killed client is aborted after its timeout
and the last stable offset moves on."""

from __future__ import annotations

import multiprocessing
import time

import pytest

from .clients import consume_confluent, create_topic, unique_topic

pytestmark = pytest.mark.integration

MODES = {"classic": "false", "diskless": "true"}
FAST = [
    "--set",
    "transaction.state.log.num.partitions=3",
    "--set",
    "transaction.abort.timed.out.transaction.cleanup.interval.ms=500",
]


def producer(bootstrap: str, txn_id: str, **extra):  # type: ignore[no-untyped-def]
    from confluent_kafka import Producer

    return Producer(
        {
            "bootstrap.servers": bootstrap,
            "transactional.id": txn_id,
            "linger.ms": 5,
            "client.id": "shoal-it-txn",
            **extra,
        }
    )


def values(records) -> list[bytes]:  # type: ignore[no-untyped-def]
    return [r.value for r in records]


@pytest.mark.parametrize("mode", sorted(MODES))
def test_commit_abort_commit(broker_factory, mode: str) -> None:  # type: ignore[no-untyped-def]
    broker = broker_factory(extra_args=FAST)
    topic = unique_topic(f"txc-{mode}")
    create_topic(broker.bootstrap, topic, partitions=2, configs={"diskless.enable": MODES[mode]})
    p = producer(broker.bootstrap, f"tx-{mode}")
    p.init_transactions(15)
    sent: dict[str, list[bytes]] = {"commit": [], "abort": []}
    for round_, outcome in enumerate(("commit", "abort", "commit")):
        p.begin_transaction()
        for i in range(10):
            value = f"{outcome}-{round_}-{i}".encode()
            p.produce(topic, value=value, partition=i % 2)
            sent[outcome].append(value)
        if outcome == "commit":
            p.commit_transaction(15)
        else:
            p.flush(10)
            p.abort_transaction(15)
    committed = consume_confluent(broker.bootstrap, topic, 2, 20, isolation_level="read_committed", settle_s=1.0)
    assert sorted(values(committed)) == sorted(sent["commit"])
    everything = consume_confluent(broker.bootstrap, topic, 2, 30, isolation_level="read_uncommitted", settle_s=1.0)
    assert sorted(values(everything)) == sorted(sent["commit"] + sent["abort"])


def test_second_producer_fences_the_first(broker_factory) -> None:  # type: ignore[no-untyped-def]
    from confluent_kafka import KafkaException

    broker = broker_factory(extra_args=FAST)
    topic = unique_topic("txc-fence")
    create_topic(broker.bootstrap, topic, partitions=1)
    first = producer(broker.bootstrap, "tx-fence")
    first.init_transactions(15)
    first.begin_transaction()
    first.produce(topic, value=b"zombie")
    first.flush(10)
    second = producer(broker.bootstrap, "tx-fence")
    second.init_transactions(30)  # aborts the first's open transaction, bumps the epoch
    second.begin_transaction()
    second.produce(topic, value=b"live")
    second.commit_transaction(15)
    with pytest.raises(KafkaException) as raised:
        first.commit_transaction(10)
    error = raised.value.args[0]
    assert error.fatal() or "fenc" in error.str().lower(), error
    committed = consume_confluent(broker.bootstrap, topic, 1, 1, isolation_level="read_committed", settle_s=1.0)
    assert values(committed) == [b"live"]


def _open_and_hang(bootstrap: str, topic: str) -> None:
    p = producer(bootstrap, "tx-hang", **{"transaction.timeout.ms": 3000})
    p.init_transactions(15)
    p.begin_transaction()
    p.produce(topic, value=b"left-open")
    p.flush(10)
    time.sleep(60)  # killed before it ends the transaction


def test_a_killed_clients_transaction_times_out(broker_factory) -> None:  # type: ignore[no-untyped-def]
    broker = broker_factory(extra_args=FAST)
    topic = unique_topic("txc-timeout")
    create_topic(broker.bootstrap, topic, partitions=1)
    child = multiprocessing.get_context("spawn").Process(target=_open_and_hang, args=(broker.bootstrap, topic))
    child.start()
    try:
        everything = consume_confluent(
            broker.bootstrap, topic, 1, 1, timeout_s=20, isolation_level="read_uncommitted", settle_s=0.1
        )
        assert values(everything) == [b"left-open"]
    finally:
        child.kill()
        child.join(10)
    # the coordinator aborts it (3 s timeout, scanned every 0.5 s): the LSO passes the marker
    p = producer(broker.bootstrap, "tx-after")
    p.init_transactions(15)
    p.begin_transaction()
    p.produce(topic, value=b"after")
    p.commit_transaction(15)
    committed = consume_confluent(
        broker.bootstrap, topic, 1, 1, timeout_s=15, isolation_level="read_committed", settle_s=1.0
    )
    assert values(committed) == [b"after"]


def test_kafka_python_transactional_producer(broker_factory) -> None:  # type: ignore[no-untyped-def]
    from kafka import KafkaProducer

    broker = broker_factory(extra_args=FAST)
    topic = unique_topic("txc-kp")
    create_topic(broker.bootstrap, topic, partitions=1)
    p = KafkaProducer(bootstrap_servers=broker.bootstrap, transactional_id="tx-kp", request_timeout_ms=10_000)
    try:
        p.init_transactions()
        for outcome in ("commit", "abort", "commit"):
            p.begin_transaction()
            for i in range(5):
                p.send(topic, value=f"{outcome}-{i}".encode(), partition=0)
            p.flush()
            (p.commit_transaction if outcome == "commit" else p.abort_transaction)()
    finally:
        p.close(timeout=5)
    committed = consume_confluent(broker.bootstrap, topic, 1, 10, isolation_level="read_committed", settle_s=1.0)
    assert sorted(values(committed)) == sorted([f"commit-{i}".encode() for i in range(5)] * 2)


def offset_fetch(bootstrap: str, group: str, topic: str, require_stable: bool) -> tuple[int, int]:
    from kafka.protocol.consumer import OffsetFetchRequest

    from .clients import RawConnection

    T = OffsetFetchRequest.OffsetFetchRequestTopic
    request = OffsetFetchRequest(
        group_id=group, topics=[T(name=topic, partition_indexes=[0])], require_stable=require_stable
    )
    with RawConnection(bootstrap) as conn:
        response = conn.request(request, 7, timeout_s=10)
    [partition] = response.topics[0].partitions
    return partition.error_code, partition.committed_offset


def test_send_offsets_to_transaction(broker_factory) -> None:  # type: ignore[no-untyped-def]
    """Consume-transform-produce: the group's offsets committed in a transaction are visible
    only after the commit (not after an abort), with the output records."""
    from confluent_kafka import Consumer, Producer, TopicPartition

    broker = broker_factory(extra_args=FAST)
    source, sink = unique_topic("txc-in"), unique_topic("txc-out")
    create_topic(broker.bootstrap, source, partitions=1)
    create_topic(broker.bootstrap, sink, partitions=1)
    plain = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(10):
        plain.produce(source, value=f"in-{i}".encode())
    plain.flush(10)
    group = unique_topic("txc-group")
    consumer = Consumer(
        {
            "bootstrap.servers": broker.bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
        }
    )
    p = producer(broker.bootstrap, "tx-eos")
    try:
        consumer.subscribe([source])
        got: list = []
        deadline = time.monotonic() + 20
        while len(got) < 10 and time.monotonic() < deadline:
            got += [m for m in consumer.consume(10, timeout=0.5) if m.error() is None]
        assert len(got) == 10
        p.init_transactions(15)

        def committed() -> int:
            [tp] = consumer.committed([TopicPartition(source, 0)], timeout=10)
            return tp.offset

        for outcome in ("abort", "commit"):
            p.begin_transaction()
            for m in got:
                p.produce(sink, value=b"out-" + m.value())
            p.send_offsets_to_transaction(
                consumer.position(consumer.assignment()), consumer.consumer_group_metadata(), 15
            )
            if outcome == "abort":
                # pending until the marker: require_stable (read_committed consumers) waits
                assert offset_fetch(broker.bootstrap, group, source, True) == (88, -1)  # UNSTABLE_OFFSET_COMMIT
                assert offset_fetch(broker.bootstrap, group, source, False) == (0, -1)
                p.abort_transaction(15)
                assert committed() < 0  # nothing committed
            else:
                p.commit_transaction(15)
                deadline = time.monotonic() + 10
                while committed() != 10 and time.monotonic() < deadline:
                    time.sleep(0.2)
                assert committed() == 10
    finally:
        consumer.close()
    out = consume_confluent(broker.bootstrap, sink, 1, 10, isolation_level="read_committed", settle_s=1.0)
    assert sorted(values(out)) == sorted(b"out-" + m.value() for m in got)
    # a restart replays the transactional offsets and both markers: 10 stays committed
    broker.stop()
    broker.start()
    again = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "enable.auto.commit": False})
    try:
        deadline = time.monotonic() + 15
        offset = -1
        while offset != 10 and time.monotonic() < deadline:
            try:
                [tp] = again.committed([TopicPartition(source, 0)], timeout=5)
                offset = tp.offset
            except Exception:  # the coordinator is loading
                time.sleep(0.3)
        assert offset == 10
    finally:
        again.close()


def test_three_brokers_markers_cross_brokers(tmp_path) -> None:  # type: ignore[no-untyped-def]
    """A 3-broker cluster (etcd): a transaction over partitions led by each broker, so the
    coordinator writes markers in-process to its own and over the inter-broker RPC to the
    others; read_committed sees exactly the committed rounds."""
    from kafka.admin import NewTopic

    from broker.devcluster import DevCluster
    from tests.etcd_server import require_etcd_binary

    from .clients import kp_admin
    from .harness import wait_until
    from .test_cluster import leader_of

    require_etcd_binary()
    with DevCluster(3, 3, work_dir=tmp_path / "cluster") as cluster:
        topic = "txc-three"
        replicas = [[0, 1, 2], [1, 2, 0], [2, 0, 1]]
        admin = kp_admin(cluster.bootstrap)
        try:
            admin.create_topics(
                [
                    NewTopic(
                        topic, replica_assignments=dict(enumerate(replicas)), topic_configs={"min.insync.replicas": "2"}
                    )
                ]
            )
        finally:
            admin.close()
        wait_until(
            lambda: all(leader_of(cluster, topic, p) == r[0] for p, r in enumerate(replicas)), 60, what="leaders"
        )
        p = producer(cluster.bootstrap, "tx-three")
        p.init_transactions(30)
        expected = []
        for round_, outcome in enumerate(("commit", "abort", "commit")):
            p.begin_transaction()
            for i in range(9):
                value = f"{outcome}-{round_}-{i}".encode()
                p.produce(topic, value=value, partition=i % 3)
                if outcome == "commit":
                    expected.append(value)
            if outcome == "commit":
                p.commit_transaction(30)
            else:
                p.flush(10)
                p.abort_transaction(30)
        got = consume_confluent(cluster.bootstrap, topic, 3, 18, isolation_level="read_committed", settle_s=1.0)
        assert sorted(values(got)) == sorted(expected)


def test_list_and_describe_transactions(broker_factory) -> None:  # type: ignore[no-untyped-def]
    from kafka.protocol.admin.transactions import DescribeTransactionsRequest, ListTransactionsRequest

    from .clients import RawConnection

    broker = broker_factory(extra_args=FAST)
    topic = unique_topic("txc-list")
    create_topic(broker.bootstrap, topic, partitions=1)
    p = producer(broker.bootstrap, "tx-list")
    p.init_transactions(15)
    p.begin_transaction()
    p.produce(topic, value=b"open")
    p.flush(10)
    with RawConnection(broker.bootstrap) as conn:
        listed = conn.request(
            ListTransactionsRequest(state_filters=["Ongoing", "Bogus"], producer_id_filters=[], duration_filter=-1),
            1,
            timeout_s=10,
        )
        assert [(s.transactional_id, s.transaction_state) for s in listed.transaction_states] == [
            ("tx-list", "Ongoing")
        ]
        assert listed.unknown_state_filters == ["Bogus"]
        [described, missing] = conn.request(
            DescribeTransactionsRequest(transactional_ids=["tx-list", "tx-nope"]), 0, timeout_s=10
        ).transaction_states
        assert (described.error_code, described.transaction_state, described.producer_epoch) == (0, "Ongoing", 0)
        assert [(t.topic, list(t.partitions)) for t in described.topics] == [(topic, [0])]
        assert described.transaction_start_time_ms > 0
        assert missing.error_code == 105  # TRANSACTIONAL_ID_NOT_FOUND
        p.commit_transaction(15)
        time.sleep(0.5)
        [done] = conn.request(
            DescribeTransactionsRequest(transactional_ids=["tx-list"]), 0, timeout_s=10
        ).transaction_states
        assert (done.transaction_state, list(done.topics)) == ("CompleteCommit", [])


def test_an_idle_transactional_id_expires(broker_factory) -> None:  # type: ignore[no-untyped-def]
    """`transactional.id.expiration.ms`: an id with no transaction open is forgotten once idle
    that long (DescribeTransactions: TRANSACTIONAL_ID_NOT_FOUND), the tombstone survives a
    restart, and a producer coming back with it gets a new producer id."""
    from kafka.protocol.admin.transactions import DescribeTransactionsRequest

    from .clients import RawConnection

    expiring = [
        "--set",
        "transactional.id.expiration.ms=1500",
        "--set",
        "transaction.remove.expired.transaction.cleanup.interval.ms=300",
    ]
    broker = broker_factory(extra_args=FAST + expiring)
    topic = unique_topic("txc-expire")
    create_topic(broker.bootstrap, topic, partitions=1)

    def described() -> tuple[int, int]:
        with RawConnection(broker.bootstrap) as conn:
            [state] = conn.request(
                DescribeTransactionsRequest(transactional_ids=["tx-expire"]), 0, timeout_s=10
            ).transaction_states
        return state.error_code, state.producer_id

    p = producer(broker.bootstrap, "tx-expire")
    p.init_transactions(15)
    p.begin_transaction()
    p.produce(topic, value=b"kept")
    p.commit_transaction(15)
    code, first_id = described()
    assert code == 0
    deadline = time.monotonic() + 20
    while described()[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert described()[0] == 105  # TRANSACTIONAL_ID_NOT_FOUND
    broker.kill()
    broker.start()
    deadline = time.monotonic() + 20
    while described()[0] != 105 and time.monotonic() < deadline:  # coordinator loading: NOT_COORDINATOR etc.
        time.sleep(0.2)
    assert described()[0] == 105  # the tombstone was replayed
    again = producer(broker.bootstrap, "tx-expire")
    again.init_transactions(15)
    again.begin_transaction()
    again.produce(topic, value=b"again")
    again.commit_transaction(15)
    code, second_id = described()
    assert code == 0 and second_id != first_id
    assert values(consume_confluent(broker.bootstrap, topic, 1, 2, **{"isolation.level": "read_committed"})) == [
        b"kept",
        b"again",
    ]
