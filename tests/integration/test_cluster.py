"""A 3-broker, 3-AZ cluster (etcd, moto, real broker processes from `shoal dev cluster`'s
launcher) driven by real clients: leader failover under idempotent acks=all traffic on a
classic and a diskless topic, losing two of three brokers, an etcd restart with a split-brain
check, and consumer groups losing their coordinator. Every acknowledged record must be read
back exactly once and in order.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from broker.devcluster import DevCluster
from broker.protocol.errors import ErrorCode
from tests.etcd_server import require_etcd_binary
from tests.integration.clients import (
    BackgroundProducer,
    RawConnection,
    api_versions,
    build_batch,
    check_sequences,
    describe_topic_configs_kafka_python,
    kp_admin,
    produce_kafka_python,
    make_records,
    raw_produce,
    read_all,
)
from tests.integration.harness import wait_until

POLL_S = 0.25  # admin clients connect on every poll
RF3 = {"min.insync.replicas": "2"}


@pytest.fixture
def cluster(tmp_path) -> Iterator[DevCluster]:
    require_etcd_binary()
    # Default settings except how often leadership returns to preferred replicas (300 s).
    with DevCluster(
        3, 3, work_dir=tmp_path / "cluster", settings={"leader.imbalance.check.interval.seconds": "1"}
    ) as running:
        yield running


def create(cluster: DevCluster, name: str, replicas: list[list[int]], **configs: str) -> None:
    from kafka.admin import NewTopic

    admin = kp_admin(cluster.bootstrap)
    try:
        admin.create_topics(
            [NewTopic(name, replica_assignments=dict(enumerate(replicas)), topic_configs={**RF3, **configs})]
        )
    finally:
        admin.close()
    wait_until(
        lambda: all(leader_of(cluster, name, p) == r[0] for p, r in enumerate(replicas)),
        60,
        interval_s=POLL_S,
        what=f"{name} leaders",
    )
    time.sleep(0.5)  # every broker applies the new states from its watch


def partition_state(cluster: DevCluster, topic: str, partition: int, via: int) -> tuple[int, list[int], int]:
    """(leader, isr, leader epoch) as broker `via` answers Metadata (for a diskless topic the
    "leader" is the broker representing the partition in the client's AZ)."""
    admin = kp_admin(cluster.broker(via).bootstrap)
    try:
        [described] = admin.describe_topics([topic])
    finally:
        admin.close()
    found = next(p for p in described["partitions"] if p["partition_index"] == partition)
    return found["leader_id"], sorted(found["isr_nodes"]), found["leader_epoch"]


def stored_state(cluster: DevCluster, topic: str, partition: int) -> tuple[int, list[int], int]:
    """(leader, isr, leader epoch) as the controller recorded them in etcd."""
    import asyncio

    from broker.metadata import records
    from broker.clock import SystemClock
    from broker.metadata.etcd import EtcdMetadataStore

    async def read() -> tuple[int, list[int], int]:
        store = EtcdMetadataStore(cluster.metadata_url, clock=SystemClock())
        try:
            kv = await store.get(records.topic_key(topic))
            assert kv is not None, f"no topic {topic}"
            topic_id = records.decode(kv.value, records.TopicRecord).topic_id
            kv = await store.get(records.partition_key(topic_id, partition))
            assert kv is not None, f"no state for {topic}-{partition}"
            state = records.decode(kv.value, records.PartitionStateRecord)
            return state.leader, sorted(state.isr), state.leader_epoch
        finally:
            await store.close()

    return asyncio.run(read())


def leader_of(cluster: DevCluster, topic: str, partition: int) -> int:
    try:
        return stored_state(cluster, topic, partition)[0]
    except Exception:  # noqa: BLE001 - not created yet, or etcd restarting
        return -2


def test_leader_kill9_fails_over_and_loses_nothing(cluster: DevCluster) -> None:
    """kill -9 of the leader: a surviving ISR member leads in a higher epoch, producers carry on
    there, and nothing acknowledged is lost. How long the failover takes is measured by `make
    bench` (tests/bench/cluster.py, docs/benchmarks.md), not asserted here."""
    topics = {"fo-classic": "false", "fo-diskless": "true"}
    for name, diskless in topics.items():
        create(cluster, name, [[0, 1, 2]], **{"diskless.enable": diskless})
    producers = {
        name: BackgroundProducer(cluster.bootstrap, name, 1, enable_idempotence=True, acks="all").start()
        for name in topics
    }
    try:
        wait_until(
            lambda: all(p.acked_count() > 100 for p in producers.values()), 60, interval_s=POLL_S, what="traffic"
        )
        _, _, epoch_before = stored_state(cluster, "fo-classic", 0)
        cluster.kill(0)  # leader of both partitions, and the controller (the first broker up)
        wait_until(lambda: all(leader_of(cluster, t, 0) in (1, 2) for t in topics), 60, what="new leaders")
        assert stored_state(cluster, "fo-classic", 0)[2] > epoch_before, "leader epoch bumped"
        assert_epoch_end(cluster, "fo-classic", epoch_before, via=leader_of(cluster, "fo-classic", 0))
        acked = {name: p.acked_count() for name, p in producers.items()}
        wait_until(
            lambda: all(p.acked_count() > acked[n] + 100 for n, p in producers.items()),
            60,
            what="producers continue on the new leaders",
        )
        cluster.restart(0, graceful=False)
        wait_until(
            lambda: all(stored_state(cluster, t, 0)[1] == [0, 1, 2] for t in topics),
            120,
            interval_s=POLL_S,
            what="restarted broker back in the ISR",
        )
        wait_until(
            lambda: all(leader_of(cluster, t, 0) == 0 for t in topics),
            45,
            interval_s=POLL_S,
            what="leadership back on the preferred replica",
        )
    finally:
        for producer in producers.values():
            producer.close()
    for name, producer in producers.items():
        assert producer.acked_count() > 200
        check_sequences(read_all(cluster.bootstrap, name, 1), producer.acked)


def test_two_of_three_down_refuses_acks_all_and_resumes_when_one_returns(cluster: DevCluster) -> None:
    for name, diskless in (("two-classic", "false"), ("two-diskless", "true")):
        create(cluster, name, [[1, 2, 0]], **{"diskless.enable": diskless})
        recs = make_records(50, partitions=1, tag=name)
        offsets = produce_kafka_python(cluster.bootstrap, name, recs, acks="all")
        assert offsets == list(range(50))
    cluster.kill(1)
    cluster.kill(2)

    def produce_to_leader(topic: str) -> int:
        """acks=all to the leader broker 0 names (leadership returns to broker 1 once it is back)."""
        leader = leader_of(cluster, topic, 0)
        if leader not in (0, 1):
            return -1
        address = cluster.broker(leader).bootstrap
        with RawConnection(address) as conn:
            return raw_produce(conn, api_versions(address), topic, 0, build_batch([(None, b"after")]))[0]

    for name in ("two-classic", "two-diskless"):
        wait_until(lambda: leader_of(cluster, name, 0) == 0, 60, interval_s=POLL_S, what=f"{name}: broker 0 leads")
        wait_until(
            lambda: produce_to_leader(name) == ErrorCode.NOT_ENOUGH_REPLICAS,
            60,
            interval_s=POLL_S,
            what=f"{name}: NOT_ENOUGH_REPLICAS with one live replica",
        )
    cluster.restart(1, graceful=False)
    for name in ("two-classic", "two-diskless"):
        wait_until(
            lambda: produce_to_leader(name) == ErrorCode.NONE, 120, interval_s=POLL_S, what=f"{name}: produce resumes"
        )
        got = read_all(cluster.bootstrap, name, 1)[0]
        assert [r.value for r in got[:50]] == [r.value for r in make_records(50, partitions=1, tag=name)]
        assert got[-1].value == b"after"


def test_etcd_restart_keeps_leadership_and_never_two_leaders(cluster: DevCluster) -> None:
    create(cluster, "etcd-traffic", [[0, 1, 2], [1, 2, 0], [2, 0, 1]], **{"diskless.enable": "false"})
    create(cluster, "etcd-probe", [[0, 1, 2], [1, 2, 0], [2, 0, 1]], **{"diskless.enable": "false"})
    producer = BackgroundProducer(cluster.bootstrap, "etcd-traffic", 3, enable_idempotence=True, acks="all").start()
    try:
        wait_until(lambda: producer.acked_count() > 100, 60, interval_s=POLL_S, what="traffic")
        assert cluster.etcd is not None
        cluster.etcd.kill()
        before = producer.acked_count()
        wait_until(
            lambda: producer.acked_count() > before + 100, 60, interval_s=POLL_S, what="traffic while etcd is down"
        )
        time.sleep(8)  # longer than broker.session.timeout.ms: leases would have expired
        assert_one_leader_per_partition(cluster, "etcd-probe")
        cluster.etcd.start()
        before = producer.acked_count()
        wait_until(
            lambda: producer.acked_count() > before + 100, 60, interval_s=POLL_S, what="traffic after etcd is back"
        )
        time.sleep(8)  # the brokers' sessions recover and the controller looks again
        assert_one_leader_per_partition(cluster, "etcd-probe")
        for node in range(3):
            assert [partition_state(cluster, "etcd-traffic", p, via=node)[0] for p in range(3)] == [0, 1, 2]
    finally:
        producer.close()
    check_sequences(read_all(cluster.bootstrap, "etcd-traffic", 3), producer.acked)


def assert_epoch_end(cluster: DevCluster, topic: str, old_epoch: int, via: int) -> None:
    """OffsetForLeaderEpoch on the new leader: the old epoch ends where the new one starts,
    at or below the log end offset; an unknown partition is refused."""
    from kafka.protocol.consumer import OffsetForLeaderEpochRequest as Request

    address = cluster.broker(via).bootstrap
    partition = Request.OffsetForLeaderTopic.OffsetForLeaderPartition
    request = Request(
        replica_id=-1,
        topics=[
            Request.OffsetForLeaderTopic(
                topic=topic,
                partitions=[
                    partition(partition=0, current_leader_epoch=-1, leader_epoch=old_epoch),
                    partition(partition=9, current_leader_epoch=-1, leader_epoch=old_epoch),
                ],
            )
        ],
    )
    with RawConnection(address) as conn:
        answer = conn.request(request, 4, timeout_s=10).topics[0].partitions
    ended, unknown = answer
    assert (ended.error_code, ended.leader_epoch) == (0, old_epoch) and ended.end_offset > 0
    assert unknown.error_code == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION


def assert_one_leader_per_partition(cluster: DevCluster, topic: str) -> None:
    """Send one record to every partition through every broker: exactly one may accept it."""
    for partition in range(3):
        accepted = []
        for node in range(3):
            address = cluster.broker(node).bootstrap
            with RawConnection(address) as conn:
                code, _ = raw_produce(
                    conn, api_versions(address), topic, partition, build_batch([(None, b"probe")]), acks=1
                )
            if code == ErrorCode.NONE:
                accepted.append(node)
            else:
                assert code == ErrorCode.NOT_LEADER_OR_FOLLOWER, f"broker {node}: {ErrorCode(code).name}"
        assert len(accepted) == 1, f"{topic}-{partition}: accepted by brokers {accepted}"


def test_group_offsets_survive_the_loss_of_their_coordinator(cluster: DevCluster) -> None:
    from kafka import KafkaConsumer, TopicPartition

    create(cluster, "grp", [[0, 1, 2], [1, 2, 0]], **{"diskless.enable": "true"})
    produce_kafka_python(cluster.bootstrap, "grp", make_records(40, partitions=2, tag="grp"), acks="all")
    consumer = KafkaConsumer(
        "grp",
        bootstrap_servers=cluster.bootstrap,
        group_id="survivors",
        auto_offset_reset="earliest",
        enable_auto_commit=False,
    )
    try:
        seen = 0
        deadline = time.monotonic() + 30
        while seen < 40 and time.monotonic() < deadline:
            seen += sum(len(batch) for batch in consumer.poll(timeout_ms=500).values())
        assert seen == 40
        consumer.commit()
        # kafka-python names the coordinator's connection "coordinator-<node id>"
        coordinator = int(str(consumer._coordinator.coordinator_id).removeprefix("coordinator-"))
    finally:
        consumer.close()
    assert coordinator in (0, 1, 2)
    cluster.kill(coordinator)
    survivor = next(n for n in range(3) if n != coordinator)

    def committed() -> dict[int, int | None]:
        reader = KafkaConsumer(
            bootstrap_servers=cluster.broker(survivor).bootstrap,
            group_id="survivors",
            enable_auto_commit=False,
            request_timeout_ms=5000,
        )
        try:
            return {p: reader.committed(TopicPartition("grp", p)) for p in (0, 1)}
        except Exception:  # noqa: BLE001 - NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE until it moves
            return {}
        finally:
            reader.close()

    wait_until(
        lambda: committed() == {0: 20, 1: 20}, 60, interval_s=POLL_S, what="committed offsets from the new coordinator"
    )


def test_topic_changes_made_on_one_broker_reach_every_broker(cluster: DevCluster) -> None:
    from kafka.admin import ConfigResource, ConfigResourceType, NewPartitions, NewTopic

    def admin_of(node: int):  # type: ignore[no-untyped-def]
        return kp_admin(cluster.broker(node).bootstrap)

    def retention_on(node: int) -> str | None:
        return describe_topic_configs_kafka_python(cluster.broker(node).bootstrap, "admin-t").get("retention.ms")

    def partitions_on(node: int) -> list[int] | None:
        """Leaders of admin-t's partitions as broker `node` answers Metadata; [] only when it
        answers UNKNOWN_TOPIC_OR_PARTITION (deleted); None for no answer or another error, which
        proves nothing either way (the wait asks again)."""
        try:
            admin = admin_of(node)
            try:
                [described] = admin.describe_topics(["admin-t"])
            finally:
                admin.close()
        except Exception:  # noqa: BLE001 - no answer this time: neither present nor deleted
            return None
        if described["error_code"] == ErrorCode.UNKNOWN_TOPIC_OR_PARTITION:
            return []
        if described["error_code"] != 0:
            return None  # e.g. LEADER_NOT_AVAILABLE while the topic is being created
        return sorted(p["leader_id"] for p in described["partitions"] if p["error_code"] == 0)

    admin = admin_of(0)
    try:
        admin.create_topics([NewTopic("admin-t", 2, 3)])
    finally:
        admin.close()
    wait_until(
        lambda: all(len(partitions_on(n) or ()) == 2 for n in range(3)),
        60,
        interval_s=POLL_S,
        what="the topic on every broker",
    )
    admin = admin_of(1)
    try:
        admin.alter_configs([ConfigResource(ConfigResourceType.TOPIC, "admin-t", configs={"retention.ms": "12345"})])
        admin.create_partitions({"admin-t": NewPartitions(total_count=4)})
    finally:
        admin.close()
    wait_until(
        lambda: all(retention_on(n) == "12345" for n in range(3)),
        60,
        interval_s=POLL_S,
        what="the config change on every broker",
    )
    wait_until(
        lambda: all(len(partitions_on(n) or ()) == 4 for n in range(3)),
        60,
        interval_s=POLL_S,
        what="four partitions with leaders on every broker",
    )
    hosted = [cluster.broker(n).partition_dir("admin-t", p) for n in range(3) for p in range(4)]
    assert all(d.exists() for d in hosted), "RF=3 over 3 brokers: every broker hosts every partition"
    admin = admin_of(2)
    try:
        admin.delete_topics(["admin-t"])
    finally:
        admin.close()
    wait_until(
        lambda: all(partitions_on(n) == [] for n in range(3)),
        60,
        interval_s=POLL_S,
        what="the topic gone from every broker",
    )
    wait_until(
        lambda: not any(d.exists() for d in hosted),
        60,
        interval_s=POLL_S,
        what="partition directories deleted on every broker",
    )
