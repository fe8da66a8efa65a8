"""One node id, one live process; one data dir, one broker (real `shoal broker` processes):
a second broker with a live broker's node id exits 2 naming it while the first keeps serving;
a second broker on a data dir in use, or a broker with another node id on it, exits 2; a
broker killed with -9 and restarted at once waits out its old registration and serves."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.etcd_server import EtcdServer, require_etcd_binary, start_etcd

from .clients import create_topic, make_records, produce_kafka_python, read_all, unique_topic
from .harness import BrokerProcess, free_port

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def etcd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EtcdServer]:
    require_etcd_binary()
    server = start_etcd(tmp_path_factory.mktemp("etcd"))
    try:
        yield server
    finally:
        server.stop()


def with_etcd(
    broker_factory,
    etcd: EtcdServer,
    name: str,
    node_id: int,
    prefix: str,  # type: ignore[no-untyped-def]
    start: bool = True,
    *settings: str,
) -> BrokerProcess:
    return broker_factory(
        name,
        node_id=node_id,
        rpc_port=free_port(),
        start=start,
        extra_args=["--metadata", etcd.url(prefix), *(a for s in settings for a in ("--set", s))],
    )


def refusal(broker: BrokerProcess) -> str:
    """The `shoal: ...` line a refused broker printed last."""
    lines = [line for line in broker.log_path.read_text().splitlines() if line.startswith("shoal: ")]
    assert lines, f"no 'shoal: ' line in the broker's output:\n{broker.tail()}"
    return lines[-1]


def test_a_second_broker_with_a_live_node_id_exits_2_and_the_first_keeps_serving(broker_factory, etcd) -> None:
    prefix = f"dup-{uuid.uuid4().hex[:8]}"
    first = with_etcd(broker_factory, etcd, "first", 1, prefix)
    topic = unique_topic("dup-node")
    create_topic(first.bootstrap, topic)
    recs = make_records(40, partitions=1)
    assert produce_kafka_python(first.bootstrap, topic, recs[:20], acks="all") == list(range(20))

    second = with_etcd(broker_factory, etcd, "second", 1, prefix, start=False)
    second.start(wait=False)
    # broker.session.timeout.ms (6 s) + 2 s of waiting, then the refusal
    assert second.wait_exit(30) == 2, second.tail()
    line = refusal(second)
    assert line.startswith(
        f"shoal: node.id 1 is registered by another live broker process (127.0.0.1:{first.port}, "
        f"rpc 127.0.0.1:{first.rpc_port}, incarnation "
    )
    assert line.endswith("still after 8.0 s: stop that broker, or give this one a different node.id")
    assert "a second broker with this node.id?" in second.log_path.read_text()

    assert first.running()
    assert produce_kafka_python(first.bootstrap, topic, recs[20:], acks="all") == list(range(20, 40))
    got = read_all(first.bootstrap, topic, 1)[0]
    assert [(r.key, r.value) for r in got] == [(r.key, r.value) for r in recs]


def test_a_data_dir_is_refused_while_in_use_and_to_another_node_id(broker_factory) -> None:
    first = broker_factory("first")
    second = broker_factory("second", start=False)
    second.data_dir = first.data_dir
    second.start(wait=False)
    assert second.wait_exit(30) == 2, second.tail()
    assert refusal(second) == (
        f"shoal: data dir {first.data_dir} is in use by another broker process "
        f"(pid {first.pid} holds {first.data_dir / '.lock'}): stop it first, or give this "
        "broker a data dir of its own"
    )
    topic = unique_topic("dir-in-use")
    create_topic(first.bootstrap, topic)
    assert produce_kafka_python(first.bootstrap, topic, make_records(5, partitions=1)) == list(range(5))

    assert first.stop() == 0
    other_node = broker_factory("other-node", start=False, node_id=7)
    other_node.data_dir = first.data_dir
    other_node.start(wait=False)
    assert other_node.wait_exit(30) == 2, other_node.tail()
    identity = Path(first.data_dir) / "identity.json"
    assert refusal(other_node) == (
        f"shoal: data dir {first.data_dir} belongs to node.id 0 ({identity}), but this "
        "broker is configured with node.id 7: start it with node.id 0, or give node 7 a "
        "data dir of its own"
    )
    first.start()  # its own node id: accepted, and the data is all there
    assert len(read_all(first.bootstrap, topic, 1)[0]) == 5


def test_kill9_and_an_immediate_restart_waits_out_the_old_registration_and_serves(broker_factory, etcd) -> None:
    prefix = f"restart-{uuid.uuid4().hex[:8]}"
    # Kafka's session timeout (9 s, not 6): the old lease outlives the new process's start-up
    # (at least 7 s after the kill) even on a busy machine, so the wait is always exercised.
    broker = with_etcd(broker_factory, etcd, "broker", 2, prefix, True, "broker.session.timeout.ms=9000")
    topic = unique_topic("kill9-restart")
    create_topic(broker.bootstrap, topic)
    recs = make_records(20, partitions=1)
    assert produce_kafka_python(broker.bootstrap, topic, recs[:10], acks="all") == list(range(10))
    broker.kill()
    broker.start()  # at once: the old lease lives for 7 to 9 s more
    log = broker.log_path.read_text().split("===== start #2")[-1]
    assert "same address as this broker: probably its previous process" in log, "it waited"
    assert produce_kafka_python(broker.bootstrap, topic, recs[10:], acks="all") == list(range(10, 20))
    got = read_all(broker.bootstrap, topic, 1)[0]
    assert [(r.key, r.value) for r in got] == [(r.key, r.value) for r in recs]


def test_a_data_dir_of_another_cluster_is_refused(broker_factory, etcd) -> None:
    broker = with_etcd(broker_factory, etcd, "broker", 3, f"cluster-a-{uuid.uuid4().hex[:8]}")
    assert broker.stop() == 0
    identity = Path(broker.data_dir) / "identity.json"
    cluster_id = identity.read_text().split('"cluster_id":"')[1].split('"')[0]
    other = etcd.url(f"cluster-b-{uuid.uuid4().hex[:8]}")
    broker.extra_args = ["--metadata", other]
    broker.start(wait=False)
    assert broker.wait_exit(30) == 2, broker.tail()
    assert refusal(broker) == (
        f"shoal: data dir {broker.data_dir} belongs to cluster {cluster_id} ({identity}), but the metadata store "
        f"({other}) holds no cluster (it is new and empty): point metadata at cluster {cluster_id}'s store (or "
        "restore it), or give this broker an empty data dir to start a new cluster"
    )
