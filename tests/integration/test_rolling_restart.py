"""Issue 11, "Acknowledged means kept", through a rolling restart: 3 AZs, each with a data
broker and a stateless broker (`--stateless`), a diskless topic with RF=3 and
min.insync.replicas=2, idempotent acks=all producers in every AZ, and a consumer in every AZ
tailing every partition through its own AZ's brokers with `auto.offset.reset=error`
(librdkafka then reports `_AUTO_OFFSET_RESET` instead of moving the position).

Every broker is restarted one at a time (SIGTERM + start; the data broker of az2 is killed
with kill -9 instead and started again only once it left the ISR and the producers went on
without it, so it comes back behind), and the cluster settles between restarts: the restarted broker is ready, every
partition is back in full ISR under its preferred leader, and every producer and consumer
made progress again. Then:

- no consumer ever reported an offset reset (a replica that came back behind must not answer
  OFFSET_OUT_OF_RANGE for offsets the leader has: it serves what it holds and sends the rest
  to an in-sync replica or the leader);
- in every AZ, each partition was consumed exactly once and in order: offsets 0..end with no
  gap and no duplicate, identical in all AZs;
- every acknowledged record is at its acknowledged offset, and each producer's records are in
  send order without duplicates.

A broker that serves a diskless partition without hosting it (a stateless broker) fences
fetches by the leader epoch it knows, as replicas do (`test_fetch_through_a_stateless_broker_fences_stale_leader_epochs`):
before that was fixed, a fetch sent under the previous epoch returned records of the new one,
and librdkafka could then report a log truncation that did not happen ("Partition log
truncation detected ... Reset to INVALID", as _AUTO_OFFSET_RESET; with earliest/latest it
would seek back and deliver records twice). A consumer that reports one here goes on from its
own next offset, so that the other checks still run, and the test then fails with
`SpuriousTruncation`.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Iterator

import pytest

from broker.devcluster import DevCluster
from tests.etcd_server import require_etcd_binary

from .harness import wait_until
from .test_cluster import create, leader_of, stored_state

pytestmark = pytest.mark.integration

AZS = ("az1", "az2", "az3")
TOPIC = "roll"
PARTITIONS = 6
REPLICAS = [[p % 3, (p + 1) % 3, (p + 2) % 3] for p in range(PARTITIONS)]
RATE = 100  # records/s per producer (one producer per AZ)
MAX_RECORDS = 30_000  # per producer: a bound on the volume whatever happens
PADDING = b"." * 100
PROGRESS = 100  # records each producer and consumer must move between restarts
SETTLE_S = 120  # generous: this machine has 2 shared cores


class SpuriousTruncation(AssertionError):
    """A consumer reported a log truncation, yet it read every acknowledged record exactly once
    and in order: a false report (a fetch not fenced by its leader epoch leads librdkafka to it)."""


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[DevCluster]:
    require_etcd_binary()
    with DevCluster(
        3,
        3,
        stateless_per_az=1,
        work_dir=tmp_path_factory.mktemp("roll") / "cluster",
        settings={"leader.imbalance.check.interval.seconds": "1"},
    ) as running:
        create(running, TOPIC, REPLICAS)
        yield running


class PacedProducer(threading.Thread):
    """An idempotent acks=all confluent producer in one AZ sending b"<az>-<seq>:..." round
    robin over the partitions at RATE records/s; `acked[partition]` is [(seq, offset)], the offset
    None when librdkafka reports a record persisted without its offset (its own answer was lost,
    a later batch of the partition succeeded)."""

    def __init__(self, cluster: DevCluster, az: str) -> None:
        super().__init__(daemon=True, name=f"producer-{az}")
        from confluent_kafka import Producer

        self.az = az
        self.producer = Producer(
            {
                "bootstrap.servers": cluster.bootstrap_by_az[az],
                "client.id": f"roll,shoal_az={az}",
                "enable.idempotence": True,
                "acks": "all",
                "linger.ms": 20,
                "message.timeout.ms": 180_000,
            }
        )
        self.acked: dict[int, list[tuple[int, int]]] = defaultdict(list)
        self.errors: list[str] = []
        self.sent = 0
        self._halt = threading.Event()
        self._lock = threading.Lock()

    def run(self) -> None:
        start = time.monotonic()
        for seq in range(MAX_RECORDS):
            if self._halt.is_set():
                break
            ahead = seq / RATE - (time.monotonic() - start)
            if ahead > 0:
                time.sleep(ahead)
            while True:
                try:
                    self.producer.produce(
                        TOPIC,
                        value=f"{self.az}-{seq}:".encode() + PADDING,
                        partition=seq % PARTITIONS,
                        on_delivery=self._delivered(seq),
                    )
                    break
                except BufferError:
                    self.producer.poll(0.05)
            self.sent += 1
            self.producer.poll(0)
        self.producer.flush(180)

    def _delivered(self, seq: int):  # type: ignore[no-untyped-def]
        def callback(err, msg) -> None:  # type: ignore[no-untyped-def]
            with self._lock:
                if err is not None:
                    self.errors.append(str(err))
                else:
                    self.acked[msg.partition()].append((seq, msg.offset()))

        return callback

    def count(self) -> int:
        with self._lock:
            return sum(len(v) for v in self.acked.values())

    def finish(self) -> None:
        self._halt.set()
        self.join(200)
        assert not self.is_alive(), f"{self.az}: producer did not finish"


class TailingConsumer(threading.Thread):
    """A confluent consumer in one AZ (bootstrap, client.id and client.rack of that AZ)
    assigned every partition from offset 0 with auto.offset.reset=error; keeps every record
    it gets, every error event and every client-level error. An offset reset is a failure
    (`resets`), except a reported log truncation (`truncations`, see the module docstring):
    the consumer then goes on from the offset after the last record it read, so that the
    test can still check that nothing was lost or duplicated."""

    def __init__(self, cluster: DevCluster, az: str) -> None:
        super().__init__(daemon=True, name=f"consumer-{az}")
        from confluent_kafka import Consumer, TopicPartition

        self.az = az
        self.errors: list[str] = []
        self.resets: list[str] = []
        self.truncations: list[str] = []
        self.consumer = Consumer(
            {
                "bootstrap.servers": cluster.bootstrap_by_az[az],
                "client.id": f"tail,shoal_az={az}",
                "client.rack": az,
                "group.id": f"tail-{az}",
                "enable.auto.commit": False,
                "auto.offset.reset": "error",
                "enable.partition.eof": False,
                "fetch.wait.max.ms": 200,
                "error_cb": self._client_error,
            }
        )
        self.consumer.assign([TopicPartition(TOPIC, p, 0) for p in range(PARTITIONS)])
        self.got: dict[int, list[tuple[int, bytes]]] = defaultdict(list)
        self.epochs: dict[int, list[int | None]] = defaultdict(list)  # leader epoch of each record read
        self._halt = threading.Event()
        self._lock = threading.Lock()

    def _client_error(self, err) -> None:  # type: ignore[no-untyped-def]
        with self._lock:
            self.errors.append(f"client: {err}")

    def run(self) -> None:
        from confluent_kafka import KafkaError, TopicPartition

        deadline = time.monotonic() + 900  # a bound whatever happens
        try:
            while not self._halt.is_set() and time.monotonic() < deadline:
                reassigned = False  # after a reassignment the rest of this batch is stale: it is fetched again
                for message in self.consumer.consume(num_messages=500, timeout=0.2):
                    if reassigned:
                        continue
                    with self._lock:
                        error = message.error()
                        if error is None:
                            self.got[message.partition()].append((message.offset(), message.value()))
                            self.epochs[message.partition()].append(message.leader_epoch())
                        elif error.code() == KafkaError._AUTO_OFFSET_RESET and "log truncation detected" in error.str():
                            p = message.partition()
                            tail = [(o, e) for (o, _v), e in zip(self.got[p][-3:], self.epochs[p][-3:])]
                            self.truncations.append(f"partition {p}: {error.str()}; last read (offset, epoch) {tail}")
                            # librdkafka refuses to seek a partition in this state: assign every
                            # partition again, each at the offset after the last record read
                            self.consumer.assign(
                                [
                                    TopicPartition(TOPIC, q, self.got[q][-1][0] + 1 if self.got[q] else 0)
                                    for q in range(PARTITIONS)
                                ]
                            )
                            reassigned = True
                        elif error.code() == KafkaError._AUTO_OFFSET_RESET:
                            self.resets.append(f"partition {message.partition()}: {error}")
                        else:
                            self.errors.append(f"partition {message.partition()}: {error}")
        finally:
            self.consumer.close()

    def count(self) -> int:
        with self._lock:
            return sum(len(v) for v in self.got.values())

    def reached(self, ends: dict[int, int]) -> bool:
        with self._lock:
            return all(len(self.got[p]) >= end for p, end in ends.items()) or bool(self.resets)

    def finish(self) -> None:
        self._halt.set()
        self.join(30)


def log_ends(cluster: DevCluster) -> dict[int, int]:
    """Each partition's high watermark, from ListOffsets."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer({"bootstrap.servers": cluster.bootstrap, "group.id": "roll-ends", "client.id": "roll-ends"})
    try:
        return {
            p: consumer.get_watermark_offsets(TopicPartition(TOPIC, p), timeout=15, cached=False)[1]
            for p in range(PARTITIONS)
        }
    finally:
        consumer.close()


def settled(cluster: DevCluster, producers: list[PacedProducer], consumers: list[TailingConsumer], what: str) -> None:
    """Full ISR and preferred leaders for every partition, then PROGRESS more records
    acknowledged by every producer and read by every consumer."""
    wait_until(
        lambda: all(stored_state(cluster, TOPIC, p)[1] == [0, 1, 2] for p in range(PARTITIONS)),
        SETTLE_S,
        interval_s=0.5,
        what=f"{what}: every partition back in full ISR",
    )
    wait_until(
        lambda: all(leader_of(cluster, TOPIC, p) == REPLICAS[p][0] for p in range(PARTITIONS)),
        SETTLE_S,
        interval_s=0.5,
        what=f"{what}: preferred leaders again",
    )
    base = {c.name: c.count() for c in [*producers, *consumers]}

    def moving() -> bool:
        resets = [f"{c.az}: {r}" for c in consumers for r in c.resets]
        assert not resets, f"{what}: offset reset reported: {resets[:3]}"
        return all(c.count() >= base[c.name] + PROGRESS for c in [*producers, *consumers])

    try:
        wait_until(moving, SETTLE_S, interval_s=0.2, what=f"{what}: every producer and consumer moving again")
    except TimeoutError as exc:
        counts = {c.name: (base[c.name], c.count()) for c in [*producers, *consumers]}
        errors = {c.name: c.errors[-3:] for c in [*producers, *consumers]}
        raise AssertionError(f"{exc}: (before, now) {counts}; last errors {errors}") from None


def test_rolling_restart_with_stateless_brokers_loses_and_resets_nothing(cluster: DevCluster) -> None:
    producers = [PacedProducer(cluster, az) for az in AZS]
    consumers = [TailingConsumer(cluster, az) for az in AZS]
    try:
        for worker in [*consumers, *producers]:
            worker.start()
        settled(cluster, producers, consumers, "before the restarts")
        # Data broker, then the stateless broker, of each AZ in turn; az2's data broker crashes.
        for node in (0, 3, 1, 4, 2, 5):
            broker = cluster.broker(node)
            graceful = node != 1
            started = time.monotonic()
            if graceful:
                cluster.restart(node)
            else:  # a crash that lasts: the partitions go on without it, so it comes back behind
                cluster.kill(node)
                wait_until(
                    lambda: all(node not in stored_state(cluster, TOPIC, p)[1] for p in range(PARTITIONS)),
                    SETTLE_S,
                    interval_s=0.5,
                    what=f"broker {node} out of every ISR",
                )
                base = {p.name: p.count() for p in producers}
                wait_until(
                    lambda: all(p.count() >= base[p.name] + PROGRESS for p in producers),
                    SETTLE_S,
                    interval_s=0.2,
                    what=f"producers going on without broker {node}",
                )
                broker.start()
            what = f"{'restart' if graceful else 'kill -9'} of broker {node} ({'stateless' if broker.stateless else 'data'}, {broker.az})"
            settled(cluster, producers, consumers, what)
            print(f"{what}: settled after {time.monotonic() - started:.1f}s")
    finally:
        for producer in producers:
            producer.finish()
    try:
        for producer in producers:
            assert not producer.errors, f"{producer.az}: {producer.errors[:3]}"
            assert producer.count() == producer.sent
        ends = log_ends(cluster)  # every stored record is checked below to be an acknowledged one
        wait_until(
            lambda: all(c.reached(ends) for c in consumers),
            SETTLE_S,
            interval_s=0.2,
            what="every consumer at the end of every partition",
        )
        time.sleep(1.0)  # anything read twice would show up now
    finally:
        for consumer in consumers:
            consumer.finish()
    print(
        f"produced {sum(p.sent for p in producers)} records; consumer errors (retriable, reported only): "
        f"{ {c.az: c.errors[:2] for c in consumers} }"
    )

    assert not [r for c in consumers for r in c.resets], [r for c in consumers for r in c.resets][:5]
    reference = consumers[0].got
    for consumer in consumers:
        for p in range(PARTITIONS):
            offsets = [o for o, _v in consumer.got[p]]
            assert offsets == list(range(ends[p])), (
                f"{consumer.az} partition {p}: not exactly offsets 0..{ends[p] - 1} once each, in order "
                f"({len(offsets)} read, {len(offsets) - len(set(offsets))} duplicates)"
            )
            assert consumer.got[p] == reference[p], f"{consumer.az} partition {p}: read other records than az1"
    for p in range(PARTITIONS):
        stored = dict(reference[p])
        for producer in producers:
            prefix = f"{producer.az}-".encode()
            seqs = [int(v[len(prefix) : v.index(b":")]) for _o, v in reference[p] if v.startswith(prefix)]
            out_of_place = [(i, a, b) for i, (a, b) in enumerate(zip(seqs, seqs[1:])) if b <= a]
            assert not out_of_place, (
                f"partition {p}, {producer.az}: duplicated or reordered at "
                f"{[(i, seqs[max(i - 2, 0) : i + 4]) for i, _a, _b in out_of_place[:5]]}"
            )
            assert seqs == sorted(s for s, _o in producer.acked[p]), (
                f"partition {p}, {producer.az}: stored records are not exactly the acknowledged ones"
            )
            for seq, offset in producer.acked[p]:
                if offset is None:  # librdkafka: persisted (a later batch succeeded), its own answer lost
                    continue
                assert stored[offset].startswith(f"{producer.az}-{seq}:".encode()), (
                    f"partition {p}: acknowledged {producer.az}-{seq} is not at offset {offset}"
                )
    truncations = [f"{c.az}: {t}" for c in consumers for t in c.truncations]
    if truncations:
        raise SpuriousTruncation(
            f"{len(truncations)} log truncation(s) reported although every record was read "
            f"exactly once: {truncations[:3]}"
        )


def fetch_error(address: str, partition: int, current_leader_epoch: int) -> int:
    """The error code of a Fetch of one partition from offset 0 with this current_leader_epoch."""
    from kafka.protocol.consumer import FetchRequest

    from .clients import RawConnection, api_versions, pick_version

    v = pick_version(api_versions(address), FetchRequest, cap=12)
    T = FetchRequest.FetchTopic
    request = FetchRequest(
        replica_id=-1,
        max_wait_ms=0,
        min_bytes=1,
        max_bytes=1 << 20,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[
            T(
                topic=TOPIC,
                partitions=[
                    T.FetchPartition(
                        partition=partition,
                        current_leader_epoch=current_leader_epoch,
                        fetch_offset=0,
                        log_start_offset=-1,
                        partition_max_bytes=1 << 20,
                    )
                ],
            )
        ],
        forgotten_topics_data=[],
        rack_id="",
    )
    with RawConnection(address, timeout_s=15) as conn:
        return conn.request(request, v, timeout_s=15).responses[0].partitions[0].error_code


def test_fetch_through_a_stateless_broker_fences_stale_leader_epochs(cluster: DevCluster) -> None:
    """Kafka's fencing (KIP-320), which consumers rely on after a leader change: a Fetch that
    names an older leader epoch than the partition's is FENCED_LEADER_EPOCH (74), a newer one
    UNKNOWN_LEADER_EPOCH (75). Every data broker answers so; a stateless broker must too."""
    from broker.protocol.errors import ErrorCode

    if stored_state(cluster, TOPIC, 0)[2] == 0:  # run alone: make a leader change first
        cluster.restart(0)
        wait_until(
            lambda: stored_state(cluster, TOPIC, 0)[1] == [0, 1, 2] and leader_of(cluster, TOPIC, 0) == 0,
            SETTLE_S,
            interval_s=0.5,
            what="broker 0 leading partition 0 again",
        )
    epoch = stored_state(cluster, TOPIC, 0)[2]
    assert epoch > 0
    answers = {
        node: (
            fetch_error(cluster.broker(node).bootstrap, 0, epoch - 1),
            fetch_error(cluster.broker(node).bootstrap, 0, epoch + 5),
            fetch_error(cluster.broker(node).bootstrap, 0, epoch),
        )
        for node in range(len(cluster.brokers))
    }
    expected = (ErrorCode.FENCED_LEADER_EPOCH, ErrorCode.UNKNOWN_LEADER_EPOCH, ErrorCode.NONE)
    assert all(answers[node] == expected for node in range(3)), f"data brokers: {answers}"
    assert all(answers[node] == expected for node in range(3, 6)), (
        f"(stale, future, current epoch) -> error codes by broker: {answers}"
    )
