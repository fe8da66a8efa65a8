"""Issue 11, "Acknowledged means kept", for committed offsets: offsets committed past the
compaction threshold of `__consumer_offsets` survive kill -9 of a single broker and kill -9
of a cluster's group coordinator.

With `offsets.topic.compaction.min.records=20` the commits below trigger a compaction (the
live state re-appended, then the log start moved past the superseded records) every few
commits. A client commits increasing offsets explicitly (confluent-kafka
`Consumer.commit(offsets=..., asynchronous=False)`) over partitions that start being
committed at different times, some only after many compactions. The coordinator logs
`compacted __consumer_offsets-N` before it answers the commit that triggered it, so the test
can stop right after an acknowledged commit that compacted and kill -9 the coordinator there.

- single broker: kill -9, restart, and OffsetFetch returns exactly the last acknowledged
  offset of every partition; once right after a commit that compacted, once after one that
  did not;
- 3 brokers, `__consumer_offsets` with RF=3: kill -9 of the group's coordinator (found with
  FindCoordinator) right after a commit that compacted; the new coordinator returns exactly
  the last acknowledged offsets, and a consumer joining the group with
  `auto.offset.reset=error` starts at them on every partition: no reset, nothing before them
  read again, nothing skipped.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator

import pytest

from broker.devcluster import DevCluster
from tests.etcd_server import require_etcd_binary

from .clients import RawConnection, api_versions, create_topic, pick_version, produce_confluent
from .harness import wait_until
from .test_cluster import create

pytestmark = pytest.mark.integration

THRESHOLD = 20  # offsets.topic.compaction.min.records
MIN_ROUNDS = 3 * THRESHOLD  # commits before the test may stop: several compactions behind it
MAX_ROUNDS = MIN_ROUNDS + 60  # it stops at the first compaction after MIN_ROUNDS, well before this
RECORDS = MAX_ROUNDS + 10  # per partition: every committed offset is inside the log
PARTITIONS = 8
# Round at which each partition is committed for the first time; None: one of the late ones,
# committed first after MIN_ROUNDS (one per round), i.e. after several compactions.
FIRST_ROUND = {0: 0, 1: 0, 2: 0, 3: 9, 4: 33, 5: None, 6: None, 7: None}
SETTINGS = {
    "offsets.topic.compaction.min.records": str(THRESHOLD),
    "offsets.topic.num.partitions": "5",  # fewer internal partitions: lighter brokers
    "group.initial.rebalance.delay.ms": "0",
}
COMPACTED = b"compacted __consumer_offsets-"


class Committer:
    """Explicit commits of increasing offsets, one commit per round, by a confluent consumer
    that never subscribes (generation -1, as a standalone client commits). `acked[p]` is the
    offset of the last acknowledged commit that included partition p."""

    def __init__(self, bootstrap: str, group: str, topic: str, after: Committer | None = None) -> None:
        """`after`: go on where that (closed) committer stopped."""
        from confluent_kafka import Consumer

        self.topic = topic
        self.consumer = Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "enable.auto.commit": False,
                "client.id": "issue11-committer",
            }
        )
        self.round = after.round if after else 0
        self.acked: dict[int, int] = dict(after.acked) if after else {}
        self._late = list(after._late) if after else [p for p, first in FIRST_ROUND.items() if first is None]

    def partitions_of_round(self, i: int) -> list[int]:
        chosen = [
            p for p, first in FIRST_ROUND.items() if first is not None and i >= first and (i - first) % (1 + p % 3) == 0
        ]
        chosen += [p for p in FIRST_ROUND if FIRST_ROUND[p] is None and p in self.acked]  # late ones, once begun
        if i >= MIN_ROUNDS and self._late:
            chosen.append(self._late.pop(0))  # committed for the first time now
        return sorted(set(chosen))

    def commit_round(self) -> list[int]:
        """One synchronous commit; raises unless every partition in it is acknowledged."""
        from confluent_kafka import TopicPartition

        i = self.round
        partitions = self.partitions_of_round(i)
        offsets = {p: i + 1 + p % 3 for p in partitions}  # increasing per partition, < RECORDS
        result = self.consumer.commit(
            offsets=[TopicPartition(self.topic, p, o) for p, o in offsets.items()], asynchronous=False
        )
        failed = [(tp.partition, tp.error) for tp in result if tp.error is not None]
        assert not failed, f"round {i}: commit refused for {failed}"
        assert sorted(tp.partition for tp in result) == partitions
        self.acked.update(offsets)
        self.round += 1
        return partitions

    def all_begun(self) -> bool:
        return not self._late and len(self.acked) == PARTITIONS

    def close(self) -> None:
        self.consumer.close()


def compactions(log_path) -> int:
    """How many compactions of __consumer_offsets the broker has logged (over all its starts)."""
    return log_path.read_bytes().count(COMPACTED)


def commit_until_compaction(
    committer: Committer, log_path, *, then_stop: bool = True, at_least: int = MIN_ROUNDS
) -> int:
    """Commit at least `at_least` rounds and until every partition has been committed, then
    stop right after the first acknowledged commit that compacted (`then_stop`), or after one
    that did not. Returns the number of compactions seen during these rounds."""
    start = compactions(log_path)
    before = start
    for done in range(1, MAX_ROUNDS + 1):
        committer.commit_round()
        now = compactions(log_path)
        compacted, before = now > before, now
        if done >= at_least and committer.all_begun() and compacted == then_stop:
            return now - start
    raise AssertionError(f"no stopping point within {MAX_ROUNDS} rounds ({before - start} compactions)")


def committed(bootstrap: str, group: str, topic: str, timeout_s: float = 10) -> dict[int, int]:
    """OffsetFetch (confluent-kafka `committed()`): partition -> committed offset (absent if none)."""
    from confluent_kafka import Consumer, TopicPartition

    reader = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "client.id": "issue11-offset-reader",
        }
    )
    try:
        got = reader.committed([TopicPartition(topic, p) for p in range(PARTITIONS)], timeout=timeout_s)
    finally:
        reader.close()
    errors = [(tp.partition, tp.error) for tp in got if tp.error is not None]
    assert not errors, errors
    return {tp.partition: tp.offset for tp in got if tp.offset >= 0}


def try_committed(bootstrap: str, group: str, topic: str) -> list[dict[int, int]] | None:
    """[`committed()`] (a list, so that an empty answer still ends a wait), or None while the
    group has no coordinator that answers."""
    try:
        return [committed(bootstrap, group, topic, timeout_s=5)]
    except Exception:  # noqa: BLE001 - NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, timeouts while it moves
        return None


def find_coordinator(address: str, group: str) -> int:
    """The group's coordinator node id as broker `address` answers FindCoordinator (-1: none yet)."""
    from kafka.protocol.metadata import FindCoordinatorRequest

    v = pick_version(api_versions(address), FindCoordinatorRequest, cap=3)
    with RawConnection(address) as conn:
        answer = conn.request(FindCoordinatorRequest(key=group, key_type=0), v, timeout_s=10)
    return answer.node_id if answer.error_code == 0 else -1


def resume_in_group(
    bootstrap: str, group: str, topic: str, expected_start: dict[int, int], timeout_s: float = 60
) -> None:
    """A consumer joins the group with auto.offset.reset=error and reads to the end of every
    partition: each partition starts exactly at its committed offset and is read densely to
    the end, and no offset reset (nor any other error) is reported."""
    from confluent_kafka import Consumer, KafkaError

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "auto.offset.reset": "error",
            "enable.partition.eof": False,
            "client.id": "issue11-resumer",
            "session.timeout.ms": 10_000,
        }
    )
    read: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
    errors: list[str] = []
    try:
        consumer.subscribe([topic])
        deadline = time.monotonic() + timeout_s
        while any(len(read[p]) < RECORDS - expected_start[p] for p in read) and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=500, timeout=0.5):
                if message.error() is not None:
                    # _AUTO_OFFSET_RESET: the client found no valid position and refused to reset
                    name = "AUTO_OFFSET_RESET" if message.error().code() == KafkaError._AUTO_OFFSET_RESET else ""
                    errors.append(f"{name} {message.error()}")
                else:
                    read[message.partition()].append(message.offset())
    finally:
        consumer.close()
    assert not errors, f"the resuming consumer reported errors: {errors[:5]}"
    for p, offsets in read.items():
        start = expected_start[p]
        assert offsets[:1] == [start], f"partition {p}: resumed at {offsets[:1]}, committed offset {start}"
        assert offsets == list(range(start, RECORDS)), (
            f"partition {p}: read {len(offsets)} offsets from {start}, not exactly {start}..{RECORDS - 1}"
        )


def produce_everywhere(bootstrap: str, topic: str) -> None:
    from .clients import Rec

    recs = [
        Rec(p, None, b"%d-%d" % (p, i), (), int(time.time() * 1000)) for i in range(RECORDS) for p in range(PARTITIONS)
    ]
    offsets = produce_confluent(bootstrap, topic, recs, acks="all")
    assert sorted(offsets)[-1] == RECORDS - 1


# -- single broker -------------------------------------------------------------------------------


def test_offsets_past_compaction_survive_kill9_of_a_single_broker(broker_factory):
    broker = broker_factory(extra_args=[arg for k, v in SETTINGS.items() for arg in ("--set", f"{k}={v}")])
    bs = broker.bootstrap
    topic, group = f"ofc-{uuid.uuid4().hex[:8]}", f"ofc-g-{uuid.uuid4().hex[:8]}"
    create_topic(bs, topic, partitions=PARTITIONS)
    produce_everywhere(bs, topic)

    # 1. Stop right after an acknowledged commit that compacted; kill -9 at once.
    committer = Committer(bs, group, topic)
    try:
        seen = commit_until_compaction(committer, broker.log_path)
        broker.kill()
    finally:
        committer.close()
    assert seen >= 3, f"only {seen} compactions in {committer.round} commits"
    print(f"killed after commit round {committer.round} ({seen} compactions): {committer.acked}")
    broker.start()
    assert committed(bs, group, topic) == committer.acked, "offsets after kill -9 right after a compaction"

    # 2. On from there, over the recovered log: at least one more compaction, then stop right
    # after a commit that did not compact.
    committer2 = Committer(bs, group, topic, after=committer)
    try:
        seen = commit_until_compaction(committer2, broker.log_path, then_stop=False, at_least=2 * THRESHOLD)
        broker.kill()
    finally:
        committer2.close()
    assert seen >= 1, "no compaction after the restart"
    broker.start()
    assert committed(bs, group, topic) == committer2.acked, "offsets after kill -9 between compactions"
    resume_in_group(bs, group, topic, committer2.acked)


# -- 3 brokers: the coordinator dies --------------------------------------------------------------


@pytest.fixture
def cluster(tmp_path) -> Iterator[DevCluster]:
    require_etcd_binary()
    with DevCluster(3, 3, work_dir=tmp_path / "cluster", settings=SETTINGS) as running:
        yield running


def test_offsets_past_compaction_survive_kill9_of_the_coordinator(cluster: DevCluster):
    topic, group = "ofc-rf3", f"ofc-g-{uuid.uuid4().hex[:8]}"
    create(cluster, topic, [[p % 3, (p + 1) % 3, (p + 2) % 3] for p in range(PARTITIONS)])
    produce_everywhere(cluster.bootstrap, topic)
    wait_until(
        lambda: find_coordinator(cluster.broker(0).bootstrap, group) >= 0,
        30,
        interval_s=0.25,
        what="a coordinator for the group",
    )
    coordinator = find_coordinator(cluster.broker(0).bootstrap, group)
    log_path = cluster.broker(coordinator).log_path

    committer = Committer(cluster.broker(coordinator).bootstrap, group, topic)
    try:
        seen = commit_until_compaction(committer, log_path)
        cluster.kill(coordinator)  # kill -9 right after the acknowledged commit that compacted
        killed_at = time.monotonic()
    finally:
        committer.close()
    assert seen >= 3, f"only {seen} compactions in {committer.round} commits"
    print(
        f"killed coordinator {coordinator} after commit round {committer.round} ({seen} compactions): {committer.acked}"
    )

    survivors = [n for n in range(3) if n != coordinator]
    bootstrap = ",".join(cluster.broker(n).bootstrap for n in survivors)
    wait_until(
        lambda: find_coordinator(cluster.broker(survivors[0]).bootstrap, group) in survivors,
        60,
        interval_s=0.25,
        what="a new coordinator",
    )
    [answer] = wait_until(
        lambda: try_committed(bootstrap, group, topic),
        60,
        interval_s=0.25,
        what="OffsetFetch answered by the new coordinator",
    )
    print(
        f"new coordinator {find_coordinator(cluster.broker(survivors[0]).bootstrap, group)} answered "
        f"{time.monotonic() - killed_at:.1f}s after the kill"
    )
    assert answer == committer.acked, "the new coordinator lost or changed acknowledged offsets"
    resume_in_group(bootstrap, group, topic, committer.acked)
