"""Controlled shutdown (`controlled.shutdown.enable`, Kafka's): SIGTERM to a broker that leads
partitions first moves their leadership to other in-sync replicas, while the broker still
serves, and only then closes its listener, once every other broker's view names the new
leaders. A regression test: before controlled shutdown the broker closed its listener first
and its leaderships moved only once its registration was gone, so clients met a closed port
for partitions the cluster still said it led. (Run with SHOAL_CONTROLLED_SHUTDOWN_ENABLE=false
in the environment, which the brokers inherit, and it fails at `stale`.) Before the stopping
broker waited for its peers' views, a loaded machine could see a peer still name it for a
moment after its port closed (tests/sim's cluster scenario checks this with lagging watches).

3 brokers in 3 AZs, a classic and a diskless topic (RF 3, min.insync.replicas=2), idempotent
acks=all producers (the diskless one in the stopping broker's AZ, so that broker represents
its partitions). The moment the stopping broker's port refuses a connection, Metadata from
both other brokers, asked for a client in the stopping broker's AZ, names other brokers for
every partition of both topics; the broker logs the "moved" line and exits 0; the producers
lose nothing and see no error they do not retry.
"""

from __future__ import annotations

import signal
import socket
import time
from collections.abc import Iterator

import pytest

from broker.devcluster import DevCluster
from tests.etcd_server import require_etcd_binary
from tests.integration.clients import (
    BackgroundProducer,
    RawConnection,
    api_versions,
    check_sequences,
    pick_version,
    read_all,
)
from tests.integration.harness import wait_until
from tests.integration.test_cluster import POLL_S, create, leader_of, stored_state

pytestmark = pytest.mark.integration

TOPICS = {"cs-classic": "false", "cs-diskless": "true"}
REPLICAS = [[0, 1, 2], [1, 2, 0], [2, 0, 1]]
PARTITIONS = len(REPLICAS)


@pytest.fixture
def cluster(tmp_path) -> Iterator[DevCluster]:
    require_etcd_binary()
    with DevCluster(3, 3, work_dir=tmp_path / "cluster") as running:
        yield running


def metadata_leaders(conn: RawConnection, version: int, client_az: str | None) -> dict[tuple[str, int], int]:
    """(topic, partition) -> the leader Metadata names for a client in `client_az` (for a
    diskless topic: the broker representing the partition in that AZ)."""
    from kafka.protocol.metadata import MetadataRequest, MetadataResponse

    request = MetadataRequest(
        topics=[MetadataRequest.MetadataRequestTopic(name=name) for name in TOPICS],
        allow_auto_topic_creation=False,
        include_topic_authorized_operations=False,
    )
    client_id = f"cs-check,shoal_az={client_az}" if client_az else "cs-check"
    conn.send_request(request, version, client_id=client_id)
    frame = conn.recv_frame()
    assert frame is not None, "the other broker closed the connection"
    response = MetadataResponse.decode(frame, version=version, header=True)
    return {(t.name, p.partition_index): p.leader_id for t in response.topics for p in t.partitions}


def controller_id(cluster: DevCluster) -> int:
    """The node the `controller` key names (-1: none)."""
    import asyncio

    from broker.metadata import records
    from broker.clock import SystemClock
    from broker.metadata.etcd import EtcdMetadataStore

    async def read() -> int:
        store = EtcdMetadataStore(cluster.metadata_url, clock=SystemClock())
        try:
            kv = await store.get(records.CONTROLLER_KEY)
            return -1 if kv is None else records.decode(kv.value, records.ControllerRecord).node_id
        finally:
            await store.close()

    return asyncio.run(read())


def port_accepts(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def test_sigterm_moves_leadership_before_the_listener_closes(cluster: DevCluster) -> None:
    for name, diskless in TOPICS.items():
        create(cluster, name, REPLICAS, **{"diskless.enable": diskless})
    victim = leader_of(cluster, "cs-classic", 0)
    stopping = cluster.broker(victim)
    az = stopping.az
    producers = {
        name: BackgroundProducer(
            cluster.bootstrap,
            name,
            PARTITIONS,
            enable_idempotence=True,
            acks="all",
            client_id=f"cs-{name},shoal_az={az}",
        ).start()
        for name in TOPICS
    }
    try:
        wait_until(
            lambda: all(p.acked_count() > 100 for p in producers.values()), 60, interval_s=POLL_S, what="traffic"
        )
        other = cluster.broker((victim + 1) % 3)
        from kafka.protocol.metadata import MetadataRequest

        version = pick_version(api_versions(other.bootstrap), MetadataRequest, cap=12)
        led_before = {key for key, leader in metadata_leaders_via(other, version, az).items() if leader == victim}
        assert ("cs-classic", 0) in led_before and ("cs-diskless", 0) in led_before, led_before

        was_controller = controller_id(cluster) == victim
        peers = [cluster.broker((victim + 1) % 3), cluster.broker((victim + 2) % 3)]
        with RawConnection(peers[0].bootstrap) as first, RawConnection(peers[1].bootstrap) as second:
            stopping.signal(signal.SIGTERM)
            started = time.monotonic()
            while stopping.running() and port_accepts(stopping.port) and time.monotonic() < started + 40:
                time.sleep(0.002)
            # The port refused a connection (or the process is gone): a client dropped now asks
            # another broker, and whichever it asks must name the new leaders straight away.
            after_close = {
                peer.node_id: metadata_leaders(conn, version, az) for peer, conn in zip(peers, (first, second))
            }
        # How soon it exits is not what this test checks, and a stop can wait seconds for its
        # last WAL commits (11 s once on a quiet 2-core run, with traffic up to the SIGTERM).
        code = stopping.wait_exit(60)
        log = stopping.log_path.read_text()
        assert code == 0, f"exit code {code}\n{stopping.tail()}"
        stale = {
            node: sorted(key for key, leader in leaders.items() if leader in (victim, -1))
            for node, leaders in after_close.items()
        }
        assert not any(stale.values()), (
            "once the stopping broker's listener had closed, Metadata from another broker still named it "
            f"(or no leader) for: {stale}\n{stopping.tail()}"
        )
        assert "controlled shutdown: moving leadership of" in log, stopping.tail()
        assert "controlled shutdown: moved" in log, stopping.tail()
        if was_controller:  # it moved its own leaderships, then handed the role over
            assert f"controller {victim} hands over (controlled shutdown)" in log, stopping.tail()
            wait_until(lambda: controller_id(cluster) not in (victim, -1), 30, interval_s=POLL_S, what="new controller")

        stopping.start()
        for name in TOPICS:
            for partition in range(PARTITIONS):
                wait_until(
                    lambda: stored_state(cluster, name, partition)[1] == [0, 1, 2],
                    60,
                    interval_s=POLL_S,
                    what=f"{name}-{partition} back in full ISR",
                )
        acked = {name: p.acked_count() for name, p in producers.items()}
        wait_until(
            lambda: all(p.acked_count() > acked[n] + 50 for n, p in producers.items()),
            30,
            interval_s=POLL_S,
            what="producers go on",
        )
    finally:
        for producer in producers.values():
            producer.close()
    for name, producer in producers.items():
        producer.assert_all_delivered()
        assert producer.refused == 0, f"{name}: {producer.refused} sends refused (no broker to send to)"
        check_sequences(read_all(cluster.bootstrap, name, PARTITIONS), producer.acked)


def metadata_leaders_via(broker, version: int, client_az: str | None) -> dict[tuple[str, int], int]:  # type: ignore[no-untyped-def]
    with RawConnection(broker.bootstrap) as conn:
        return metadata_leaders(conn, version, client_az)
