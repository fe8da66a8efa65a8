"""Transactions through broker crashes in a 3-broker, 3-AZ cluster (etcd, moto, real broker
processes, librdkafka transactional producers). Each transaction spans a classic and a
diskless topic (RF 3, min.insync.replicas 2) whose partitions are led by each of the three
brokers, so the markers go to the coordinator's own partitions and to the other brokers'.

- kill -9 of the transaction coordinator's broker mid-commit: just after it answered EndTxn,
  with EndTxn requests sent but not answered, and with librdkafka's commit_transaction under
  way; the new coordinator (the new leader of the __transaction_state partition) completes
  or aborts each of them.
- kill -9 of a partition leader between AddPartitionsToTxn and EndTxn; one transaction
  commits (after sending more to the new leaders), one aborts.

Whatever happens, a transaction is committed or aborted as a whole: every partition holds
the same marker for it, read_committed consumers see all of its records exactly once or none,
the last stable offset of every partition reaches its high watermark, the producer (or one
re-created with the same transactional.id) carries on, and the killed broker, restarted,
catches up and serves the same committed data (its replicas' LSO and aborted transactions,
and its coordinator state).
"""

from __future__ import annotations

import re
import struct
import threading
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest

from broker.devcluster import DevCluster
from broker.transactions.records import TRANSACTION_TOPIC, partition_for
from tests.etcd_server import require_etcd_binary

from .clients import RawConnection, api_versions, consume_confluent, pick_version, raw_fetch
from .harness import wait_until
from .test_cluster import create, leader_of, stored_state

pytestmark = pytest.mark.integration

STATE_PARTITIONS = 3
SETTINGS = {
    "transaction.state.log.num.partitions": str(STATE_PARTITIONS),
    "offsets.topic.num.partitions": "3",
    # a dead broker is noticed (its lease expires) in 2 s, and leadership goes back to the
    # preferred replicas within a second of a restarted broker rejoining the ISR
    "broker.session.timeout.ms": "2000",
    "broker.heartbeat.interval.ms": "500",
    "leader.imbalance.check.interval.seconds": "1",
    "controlled.shutdown.enable": "false",  # no test stops a broker gently: a quick teardown
}
REPLICAS = [[0, 1, 2], [1, 2, 0], [2, 0, 1]]  # partition p is led by broker p
PARTITIONS = len(REPLICAS)
MODES = {"classic": "false", "diskless": "true"}
POLL_S = 0.2
VALUE = re.compile(rb"/(?P<mode>classic|diskless)-(?P<p>\d+)-\d+$")  # Txn.send's values


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DevCluster]:
    """One cluster for the module: each test uses its own topics and transactional ids and
    leaves every broker running, back in every ISR and leading its preferred partitions."""
    require_etcd_binary()
    with DevCluster(3, 3, work_dir=tmp_path_factory.mktemp("txn-failover") / "cluster", settings=SETTINGS) as running:
        yield running


@pytest.fixture(autouse=True)
def _brokers_up(cluster: DevCluster) -> None:
    """A test that failed half way may have left its victim down: start it again."""
    for broker in cluster.brokers:
        if not broker.running():
            broker.start()


# -- the cluster's state -------------------------------------------------------------------


def state_leaders(cluster: DevCluster) -> dict[int, int]:
    """__transaction_state partition -> its leader (creating the topic, as the first
    FindCoordinator for a transactional id does, and waiting for its leaders)."""
    from kafka.protocol.metadata import FindCoordinatorRequest

    def found() -> bool:
        try:
            with RawConnection(cluster.broker(0).bootstrap) as conn:
                answer = conn.request(FindCoordinatorRequest(key="probe", key_type=1), 1, timeout_s=10)
            return answer.error_code == 0
        except OSError:
            return False

    wait_until(found, 30, interval_s=POLL_S, what="a transaction coordinator")

    def leaders() -> dict[int, int] | None:
        led = {p: leader_of(cluster, TRANSACTION_TOPIC, p) for p in range(STATE_PARTITIONS)}
        return led if all(leader >= 0 for leader in led.values()) else None

    return wait_until(leaders, 30, interval_s=POLL_S, what=f"{TRANSACTION_TOPIC} leaders")


def txn_ids_on_one_coordinator(cluster: DevCluster, prefix: str, count: int) -> tuple[int, list[str]]:
    """The broker coordinating transactional id `<prefix>-0`, and `count` ids it coordinates
    (those of the same __transaction_state partition)."""
    leaders = state_leaders(cluster)
    ids = [f"{prefix}-{i}" for i in range(1000)]
    node = leaders[partition_for(ids[0], STATE_PARTITIONS)]
    chosen = [t for t in ids if leaders[partition_for(t, STATE_PARTITIONS)] == node][:count]
    assert len(chosen) == count
    return node, chosen


def make_topics(cluster: DevCluster, prefix: str) -> dict[str, str]:
    """mode -> topic name: one classic and one diskless topic, partition p led by broker p."""
    topics = {mode: f"{prefix}-{mode}" for mode in MODES}
    for mode, name in topics.items():
        create(cluster, name, REPLICAS, **{"diskless.enable": MODES[mode]})
    return topics


def all_partitions(topics: dict[str, str]) -> list[tuple[str, int]]:
    return [(name, p) for name in topics.values() for p in range(PARTITIONS)]


def stable_and_high(cluster: DevCluster, topic: str, partition: int) -> tuple[int, int] | None:
    """(last stable offset, high watermark) as the partition's leader answers ListOffsets;
    None while it has no live leader."""
    from kafka.protocol.consumer import ListOffsetsRequest

    leader = leader_of(cluster, topic, partition)
    if leader < 0 or not cluster.broker(leader).running():
        return None
    T = ListOffsetsRequest.ListOffsetsTopic
    out = []
    try:
        address = cluster.broker(leader).bootstrap
        versions = api_versions(address)
        with RawConnection(address) as conn:
            for isolation_level in (1, 0):
                request = ListOffsetsRequest(
                    replica_id=-1,
                    isolation_level=isolation_level,
                    topics=[
                        T(
                            name=topic,
                            partitions=[
                                T.ListOffsetsPartition(partition_index=partition, current_leader_epoch=-1, timestamp=-1)
                            ],
                        )
                    ],
                )
                answer = conn.request(request, pick_version(versions, ListOffsetsRequest, cap=7), timeout_s=10)
                part = answer.topics[0].partitions[0]
                if part.error_code != 0:
                    return None
                out.append(part.offset)
    except OSError:
        return None
    return out[0], out[1]


def record_counts(topics: dict[str, str], values: list[bytes]) -> dict[tuple[str, int], int]:
    """(topic, partition) -> how many of `values` (as `Txn.send` makes them) it holds."""
    counts = Counter((topics[m["mode"].decode()], int(m["p"])) for v in values if (m := VALUE.search(v)))
    assert sum(counts.values()) == len(values)
    return dict(counts)


def wait_stable(cluster: DevCluster, topics: dict[str, str], acked: list[bytes], timeout_s: float = 30) -> None:
    """Every partition's last stable offset reaches its high watermark, which covers every
    record `acked` (a new leader's high watermark may lag at first: below an open
    transaction, the LSO equals it too)."""
    least = record_counts(topics, acked)

    def lagging() -> list[str]:
        out = []
        for topic, p in all_partitions(topics):
            offsets = stable_and_high(cluster, topic, p)
            if offsets is None or offsets[0] != offsets[1] or offsets[1] < least.get((topic, p), 0):
                out.append(f"{topic}-{p}: {offsets}")
        return out

    last: list[list[str]] = [[]]

    def settled() -> bool:
        last[0] = lagging()
        return not last[0]

    try:
        wait_until(settled, timeout_s, interval_s=POLL_S, what="LSO == HW on every partition")
    except TimeoutError as exc:
        raise AssertionError(f"{exc}; (LSO, HW) lagging: {last[0]}") from None


def markers(cluster: DevCluster, topic: str, partition: int) -> list[tuple[int, int, str]]:
    """(producer id, producer epoch, "COMMIT"/"ABORT") of every control batch of a partition,
    in log order, read from its leader."""
    from kafka.record.memory_records import MemoryRecords

    leader = leader_of(cluster, topic, partition)
    assert leader >= 0, f"{topic}-{partition} has no leader"
    address = cluster.broker(leader).bootstrap
    with RawConnection(address) as conn:
        data = raw_fetch(conn, api_versions(address), topic, partition, 0).records
    out = []
    records = MemoryRecords(bytes(data or b""))
    while (batch := records.next_batch()) is not None:
        if batch.is_control_batch:
            for record in batch:
                _, kind = struct.unpack(">hh", record.key)
                out.append((batch.producer_id, batch.producer_epoch, "COMMIT" if kind == 1 else "ABORT"))
    return out


def first_outcome(cluster: DevCluster, topics: dict[str, str], producer_id: int) -> tuple[int, str]:
    """How a producer's first transaction ended: (epoch, COMMIT/ABORT) of its first marker,
    which must be the same on every partition (the transaction spans them all)."""
    found = {}
    for topic, p in all_partitions(topics):
        mine = [(epoch, kind) for pid, epoch, kind in markers(cluster, topic, p) if pid == producer_id]
        assert mine, f"{topic}-{p}: no marker of producer {producer_id}"
        found[f"{topic}-{p}"] = mine[0]
    assert len(set(found.values())) == 1, f"producer {producer_id}'s first transaction ended differently: {found}"
    return next(iter(found.values()))


def describe_txn(cluster: DevCluster, transactional_id: str) -> Any:
    """DescribeTransactions on the id's current coordinator (None while there is none)."""
    from kafka.protocol.admin.transactions import DescribeTransactionsRequest

    node = leader_of(cluster, TRANSACTION_TOPIC, partition_for(transactional_id, STATE_PARTITIONS))
    if node < 0 or not cluster.broker(node).running():
        return None
    try:
        with RawConnection(cluster.broker(node).bootstrap) as conn:
            [state] = conn.request(
                DescribeTransactionsRequest(transactional_ids=[transactional_id]), 0, timeout_s=10
            ).transaction_states
    except OSError:
        return None
    return state if state.error_code == 0 else None


def preferred_leader(cluster: DevCluster, topic: str, partition: int) -> int:
    """The first replica of the partition's assignment, as the controller recorded it."""
    import asyncio

    from broker.metadata import records
    from broker.clock import SystemClock
    from broker.metadata.etcd import EtcdMetadataStore

    async def read() -> int:
        store = EtcdMetadataStore(cluster.metadata_url, clock=SystemClock())
        try:
            kv = await store.get(records.topic_key(topic))
            assert kv is not None, f"no topic {topic}"
            topic_id = records.decode(kv.value, records.TopicRecord).topic_id
            kv = await store.get(records.partition_key(topic_id, partition))
            assert kv is not None, f"no state for {topic}-{partition}"
            return records.decode(kv.value, records.PartitionStateRecord).replicas[0]
        finally:
            await store.close()

    return asyncio.run(read())


def wait_recovered(cluster: DevCluster, node: int, topics: dict[str, str]) -> None:
    """The restarted `node` is back in the ISR of every partition of `topics` and of
    __transaction_state, and every one of them is led by its preferred replica again (so the
    next test finds the coordinators and leaders it started with)."""
    checked = [*all_partitions(topics), *((TRANSACTION_TOPIC, p) for p in range(STATE_PARTITIONS))]
    wait_until(
        lambda: all(node in stored_state(cluster, t, p)[1] for t, p in checked),
        45,
        interval_s=POLL_S,
        what=f"broker {node} back in every ISR",
    )
    preferred = {(t, p): preferred_leader(cluster, t, p) for t, p in checked}
    wait_until(
        lambda: all(leader_of(cluster, t, p) == preferred[t, p] for t, p in checked),
        30,
        interval_s=POLL_S,
        what="leadership back on the preferred replicas",
    )


# -- clients -------------------------------------------------------------------------------


def producer(cluster: DevCluster, transactional_id: str) -> Any:
    from confluent_kafka import Producer

    return Producer(
        {
            "bootstrap.servers": cluster.bootstrap,
            "transactional.id": transactional_id,
            "linger.ms": 5,
            "client.id": "shoal-it-txn-failover",
        }
    )


@dataclass
class Txn:
    """A transactional producer (librdkafka, acks=all) whose transactions span every
    partition of the topics; `values` holds everything it sent, in order."""

    cluster: DevCluster
    transactional_id: str
    topics: dict[str, str]
    values: list[bytes] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.producer = producer(self.cluster, self.transactional_id)
        self.producer.init_transactions(30)

    def begin(self) -> Txn:
        self.producer.begin_transaction()
        return self

    def send(self, tag: str, per_partition: int = 3) -> None:
        """Records to every partition; returns once all are acknowledged (acks=all)."""
        for mode, topic in self.topics.items():
            for p in range(PARTITIONS):
                for i in range(per_partition):
                    value = f"{self.transactional_id}/{tag}/{mode}-{p}-{i}".encode()
                    self.producer.produce(topic, value=value, partition=p)
                    self.values.append(value)
        assert self.producer.flush(30) == 0, "records not acknowledged"

    def ids(self) -> tuple[int, int]:
        """(producer id, epoch) as the coordinator holds them, checking the transaction
        spans every partition."""
        state = wait_until(lambda: describe_txn(self.cluster, self.transactional_id), 15, what="DescribeTransactions")
        assert state.transaction_state == "Ongoing"
        spanned = {(t.topic, p) for t in state.topics for p in t.partitions}
        assert spanned == set(all_partitions(self.topics))
        return state.producer_id, state.producer_epoch


def end_txn_request(transactional_id: str, producer_id: int, epoch: int, commit: bool) -> Any:
    from kafka.protocol.producer import EndTxnRequest

    return EndTxnRequest(
        transactional_id=transactional_id, producer_id=producer_id, producer_epoch=epoch, committed=commit
    )


def read_values(bootstrap: str, topic: str, isolation: str, expected: int, **config: str) -> Counter:
    records = consume_confluent(
        bootstrap, topic, PARTITIONS, expected, timeout_s=20, settle_s=0.5, isolation_level=isolation, **config
    )
    return Counter(r.value for r in records)


def read_both(bootstrap: str, topics: dict[str, str], isolation: str, expected: list[bytes], **config: str) -> Counter:
    """Every value a consumer of both topics reads (value -> how many times), waiting for as
    many as `expected` holds of each topic."""
    got: Counter = Counter()
    for mode, topic in topics.items():
        got += read_values(bootstrap, topic, isolation, sum(f"/{mode}-".encode() in v for v in expected), **config)
    return got


def committed_exactly(cluster: DevCluster, topics: dict[str, str], expected: list[bytes]) -> None:
    """read_committed consumers of both topics see `expected`, each value once."""
    got = read_both(cluster.bootstrap, topics, "read_committed", expected)
    want = Counter(expected)
    assert got == want, f"read_committed: missing {sorted(want - got)[:5]}, extra {sorted((got - want).items())[:5]}"


# -- the tests -----------------------------------------------------------------------------


def test_coordinator_killed_mid_commit(cluster: DevCluster) -> None:
    """kill -9 of the coordinator's broker with four transactions over every partition in
    the middle of their commit: (a) EndTxn(commit) answered: the new coordinator writes the
    COMMIT markers (the dead one may have written some, even ones never replicated);
    (b) EndTxn(commit) sent 10 ms before the kill (usually persisted) and (c) right before it
    (usually not), neither answer read: each transaction ends all or nothing, and a producer
    re-created with the same transactional.id carries on; (d) a librdkafka commit_transaction
    under way: the same producer's commit completes on the new coordinator."""
    from kafka.protocol.producer import EndTxnRequest

    topics = make_topics(cluster, "tfo-coord")
    coordinator, ids = txn_ids_on_one_coordinator(cluster, "tfo-coord", 4)  # also leads partition `coordinator`
    txns = [Txn(cluster, t, topics).begin() for t in ids]
    for txn in txns:
        txn.send("mid-commit")
    answered, early, late, in_flight = txns
    pid_epoch = {txn.transactional_id: txn.ids() for txn in txns}

    address = cluster.broker(coordinator).bootstrap
    version = pick_version(api_versions(address), EndTxnRequest, cap=3)

    def end_txn(txn: Txn) -> Any:
        return end_txn_request(txn.transactional_id, *pid_epoch[txn.transactional_id], commit=True)

    commit_error: list[BaseException] = []

    def commit_in_flight() -> None:
        try:
            in_flight.producer.commit_transaction(45)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            commit_error.append(exc)

    committer = threading.Thread(target=commit_in_flight, daemon=True)
    with RawConnection(address) as first, RawConnection(address) as second, RawConnection(address) as third:
        assert first.request(end_txn(answered), version, timeout_s=15).error_code == 0
        committer.start()
        second.send_request(end_txn(early), version)
        time.sleep(0.01)  # long enough, on most machines, for the coordinator to persist it
        third.send_request(end_txn(late), version)
        cluster.kill(coordinator)
    killed_at = time.monotonic()

    # (a) the new coordinator finds PrepareCommit and completes it
    wait_until(
        lambda: (
            (state := describe_txn(cluster, answered.transactional_id)) is not None
            and state.transaction_state == "CompleteCommit"
        ),
        30,
        interval_s=POLL_S,
        what=f"{answered.transactional_id} completed by the new coordinator",
    )
    assert leader_of(cluster, TRANSACTION_TOPIC, partition_for(ids[0], STATE_PARTITIONS)) != coordinator
    # (d) librdkafka finds the new coordinator and finishes its commit
    committer.join(50)
    assert not committer.is_alive() and not commit_error, f"commit_transaction: {commit_error}"
    # (b), (c) the producers come back with the same transactional.id: init_transactions lets
    # the new coordinator complete or abort the interrupted transaction, then a new one commits
    again = [Txn(cluster, txn.transactional_id, topics) for txn in (early, late)]
    for txn in again:
        txn.begin().send("after")
        txn.producer.commit_transaction(30)
    everything = [v for txn in txns + again for v in txn.values]
    wait_stable(cluster, topics, everything)
    recovered_after_s = time.monotonic() - killed_at

    committed = []
    outcomes = {}
    for txn in txns:
        pid, epoch = pid_epoch[txn.transactional_id]
        outcome = outcomes[txn.transactional_id] = first_outcome(cluster, topics, pid)
        if txn in (early, late):  # committed in its epoch, or aborted by the new coordinator in the next
            assert outcome in ((epoch, "COMMIT"), (epoch + 1, "ABORT")), outcome
        else:
            assert outcome == (epoch, "COMMIT")
        if outcome[1] == "COMMIT":
            committed += txn.values
    committed += [v for txn in again for v in txn.values]
    committed_exactly(cluster, topics, committed)
    assert read_both(cluster.bootstrap, topics, "read_uncommitted", everything) == Counter(everything)

    # the killed coordinator restarts, catches up, coordinates and leads again, and serves the same
    cluster.restart(coordinator, graceful=False)
    wait_recovered(cluster, coordinator, topics)
    for txn in txns:
        wait_until(
            lambda: (
                (state := describe_txn(cluster, txn.transactional_id)) is not None
                and state.transaction_state == "CompleteCommit"
            ),
            15,
            interval_s=POLL_S,
            what=f"{txn.transactional_id} CompleteCommit on the restarted coordinator",
        )
    wait_stable(cluster, topics, everything)
    committed_exactly(cluster, topics, committed)
    print(f"recovered {recovered_after_s:.1f}s after the kill; outcomes {outcomes}")


def test_partition_leader_killed_between_add_partitions_and_end_txn(cluster: DevCluster) -> None:
    """kill -9 of a broker leading partitions of two open transactions (their records acked
    with acks=all): the new leaders keep them open (nothing visible to read_committed), one
    producer sends more (to the new leaders) and commits, the other aborts; both end as a
    whole, the producers carry on, and the restarted broker serves the same committed data,
    as a follower (the diskless topic's replica in its AZ) and as the leader again."""
    topics = make_topics(cluster, "tfo-leader")
    coordinator, (commit_id, abort_id) = txn_ids_on_one_coordinator(cluster, "tfo-leader", 2)
    victim = (coordinator + 1) % 3  # leads partition `victim` of each topic
    to_commit = Txn(cluster, commit_id, topics).begin()
    to_commit.send("before")
    to_abort = Txn(cluster, abort_id, topics).begin()
    to_abort.send("before")
    commit_pid, commit_epoch = to_commit.ids()
    abort_pid, abort_epoch = to_abort.ids()

    cluster.kill(victim)
    wait_until(
        lambda: all(leader_of(cluster, t, p) not in (victim, -1) for t, p in all_partitions(topics)),
        30,
        interval_s=POLL_S,
        what=f"new leaders for broker {victim}'s partitions",
    )
    # both transactions are still open everywhere, on the new leaders too: the last stable
    # offset stays at their start once the high watermark covers every record acked
    acked = record_counts(topics, to_commit.values + to_abort.values)
    for topic, p in all_partitions(topics):
        offsets = wait_until(
            lambda: (o := stable_and_high(cluster, topic, p)) is not None and o[1] >= acked[topic, p] and o,
            15,
            interval_s=POLL_S,
            what=f"{topic}-{p}: the high watermark past the acked records",
        )
        assert offsets == (0, acked[topic, p]), f"{topic}-{p}: (LSO, HW) {offsets} with two transactions open"
    to_commit.send("after-kill")  # partition `victim` of each topic: to its new leader
    to_commit.producer.commit_transaction(30)
    to_abort.producer.abort_transaction(30)
    wait_stable(cluster, topics, to_commit.values + to_abort.values)

    assert first_outcome(cluster, topics, commit_pid) == (commit_epoch, "COMMIT")
    assert first_outcome(cluster, topics, abort_pid) == (abort_epoch, "ABORT")
    committed_exactly(cluster, topics, to_commit.values)
    aborted = list(to_abort.values)
    everything = to_commit.values + aborted
    assert read_both(cluster.bootstrap, topics, "read_uncommitted", everything) == Counter(everything)
    for txn in (to_commit, to_abort):  # both producers carry on
        txn.begin().send("next")
        txn.producer.commit_transaction(30)
    everything = to_commit.values + to_abort.values
    wait_stable(cluster, topics, everything)
    committed = to_commit.values + to_abort.values[len(aborted) :]

    cluster.restart(victim, graceful=False)
    wait_recovered(cluster, victim, topics)
    wait_stable(cluster, topics, everything)  # partition `victim` of each topic led by the restarted broker again
    committed_exactly(cluster, topics, committed)
    # a consumer in the restarted broker's AZ reads the diskless topic from the replica
    # there: the restarted broker's own, also as a follower of the other two partitions,
    # with its own LSO and aborted transactions
    broker = cluster.broker(victim)
    diskless = [v for v in committed if b"/diskless-" in v]
    got = read_values(
        broker.bootstrap,
        topics["diskless"],
        "read_committed",
        len(diskless),
        **{"client.id": f"shoal-it shoal_az={broker.az}"},
    )
    assert got == Counter(diskless)
