"""`make soak`: an hour under faults (issue 28 item 7). Not a test, not in `make test`.

The cluster: 3 brokers in 3 AZs plus a stateless broker per AZ (tests' DevCluster), etcd,
and moto behind tests/s3proxy.py (20 ms per PUT, 10 ms per GET); --partitions partitions of
RF 3, half diskless, half classic, in topics of 100. For --minutes:
  - an idempotent producer and a plain one (acks=all) write --rate records/s each (50) to
    every partition in turn, through the brokers of their AZ; a transactional producer writes transactions of 10
    records over 5 partitions, committing three in four and aborting the fourth;
  - a consumer group of two members reads the classic topics and commits every 5 s;
  - a read_committed reader tails every partition from the start;
  - every --kill-every-s a data broker (in turn) is killed (-9) and started again 10-30 s
    later; every 7 minutes the object store answers 20% of requests with 503 for 30 s, then
    takes 500 ms per PUT for 30 s; etcd restarts once, half-way.
Every 10 s each broker's RSS, open descriptors and event-loop lag (the largest bucket the
window's samples reached in shoal_event_loop_lag_seconds) go to samples.csv.

Then the faults stop and the auditor reads every partition from its start, read_committed,
with a fresh consumer: every acknowledged record is there, at most once for the idempotent
and transactional producers and in each producer's order per partition, no aborted record
is; the group's committed offsets never moved back (checked every 30 s, from the store's
answer to OffsetFetch); and per broker the median RSS and descriptor count of the last ten
minutes are compared with those of minutes 20-30 (samples within 3 minutes of the broker's
own restart left out): more than 10% and 32 MiB (or 10% and 50 descriptors) is an upward
trend. It prints a report and exits 1 if anything failed.
"""

from __future__ import annotations

import argparse
import csv
import itertools
import os
import random
import signal
import statistics
import struct
import sys
import tempfile
import threading
import time
import urllib.request
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from broker.devcluster.brokers import BrokerProcess
from broker.devcluster.cluster import DevCluster
from tests.s3proxy import configure_s3proxy

from .diskless import object_store_url, s3_endpoint

RECORD = struct.Struct(">Bq")  # producer kind, sequence
IDEMPOTENT, PLAIN, TRANSACTIONAL = 1, 2, 3
KIND_NAMES = {IDEMPOTENT: "idempotent", PLAIN: "plain", TRANSACTIONAL: "transactional"}
TOPIC_PARTITIONS = 100
SAMPLE_S = 10.0
DELAYS = {"PUT": 20, "GET": 10}
# leadership moving or a broker restarting: ask again
MOVING = {
    KafkaError.NOT_LEADER_FOR_PARTITION,
    KafkaError.LEADER_NOT_AVAILABLE,
    KafkaError.REQUEST_TIMED_OUT,
    KafkaError._TIMED_OUT,
    KafkaError._TRANSPORT,
}
QUIET = {"log_level": 2}  # librdkafka logs every disconnect of a killed broker at level 3-6


@dataclass
class Ledger:
    """What producers were told and what the tail reader saw (guarded by `lock`)."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    acked: dict[int, dict[int, tuple[str, int]]] = field(default_factory=lambda: defaultdict(dict))  # kind -> seq -> tp
    aborted: set[int] = field(default_factory=set)  # transactional sequences of aborted transactions
    failed: dict[int, int] = field(default_factory=lambda: defaultdict(int))  # kind -> definite failures
    errors: dict[str, int] = field(default_factory=lambda: defaultdict(int))  # error name -> count
    tailed: int = 0
    commits: dict[tuple[str, int], int] = field(default_factory=dict)  # committed offsets seen so far
    went_back: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def count_failure(self, kind: int, error: KafkaError) -> None:
        with self.lock:
            self.failed[kind] += 1
            self.errors[f"{KIND_NAMES[kind]}: {error.name()}"] += 1
            if error.fatal():
                self.problems.append(f"{KIND_NAMES[kind]} producer: fatal error {error}")


def partitions_of(names: list[str]) -> list[tuple[str, int]]:
    return [(name, i) for name in names for i in range(TOPIC_PARTITIONS)]


def produce_loop(
    kind: int, bootstrap: str, targets: list[tuple[str, int]], per_s: float, ledger: Ledger, stop: threading.Event
) -> None:
    config = {**QUIET, "bootstrap.servers": bootstrap, "acks": "all", "message.timeout.ms": 120_000}
    if kind == IDEMPOTENT:
        config["enable.idempotence"] = True
    producer = Producer(config)
    seqs = itertools.count()

    def delivered(err: KafkaError | None, msg: Message) -> None:
        seq = RECORD.unpack(msg.value())[1]
        if err is not None:
            ledger.count_failure(kind, err)
            return
        with ledger.lock:
            ledger.acked[kind][seq] = (msg.topic(), msg.partition())

    cycle = itertools.cycle(targets)
    while not stop.is_set():
        started = time.monotonic()
        for _ in range(max(1, int(per_s / 10))):
            topic, index = next(cycle)
            producer.produce(topic, RECORD.pack(kind, next(seqs)), partition=index, on_delivery=delivered)
        producer.poll(0)
        time.sleep(max(0.0, 0.1 - (time.monotonic() - started)))
    producer.flush(180)


def transactional_producer(bootstrap: str, stop: threading.Event) -> Producer | None:
    """A new instance of the soak's transactional id, initialised; init_transactions is
    retried while the coordinator is busy (CONCURRENT_TRANSACTIONS while it aborts the
    previous instance's transaction) or moving. None once `stop` is set."""
    while not stop.is_set():
        producer = Producer(
            {**QUIET, "bootstrap.servers": bootstrap, "transactional.id": "soak-txn", "transaction.timeout.ms": 60_000}
        )
        try:
            producer.init_transactions(120)
            return producer
        except KafkaException as exc:
            if not exc.args[0].retriable():
                raise
        stop.wait(2.0)
    return None


def transactions_loop(bootstrap: str, targets: list[tuple[str, int]], ledger: Ledger, stop: threading.Event) -> None:
    rng = random.Random(7)
    producer = transactional_producer(bootstrap, stop)
    seqs = itertools.count()
    for n in itertools.count():
        if producer is None or stop.is_set():
            return
        chosen = rng.sample(targets, 5)
        sent: list[tuple[int, tuple[str, int]]] = []
        try:
            producer.begin_transaction()
            for i in range(10):
                topic, index = chosen[i % 5]
                seq = next(seqs)
                producer.produce(topic, RECORD.pack(TRANSACTIONAL, seq), partition=index)
                sent.append((seq, (topic, index)))
            if n % 4 == 3:
                producer.abort_transaction(120)
                with ledger.lock:
                    ledger.aborted.update(seq for seq, _tp in sent)
            else:
                producer.commit_transaction(120)
                with ledger.lock:
                    ledger.acked[TRANSACTIONAL].update(dict(sent))
        except KafkaException as exc:  # an unknown outcome: its records may be read or not, neither is checked
            ledger.count_failure(TRANSACTIONAL, exc.args[0])
            try:
                producer.abort_transaction(120)
            except KafkaException:
                producer = transactional_producer(bootstrap, stop)  # fences the old instance
        stop.wait(2.0)


def group_loop(bootstrap: str, topics: list[str], member: int, ledger: Ledger, stop: threading.Event) -> None:
    consumer = Consumer(
        {
            **QUIET,
            "bootstrap.servers": bootstrap,
            "group.id": "soak-group",
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            "client.id": f"soak-member-{member}",
        }
    )
    consumer.subscribe(topics)
    last_commit = time.monotonic()
    while not stop.is_set():
        msg = consumer.poll(0.5)
        if msg is not None and msg.error():
            with ledger.lock:
                ledger.errors[f"group: {msg.error().name()}"] += 1
        if time.monotonic() - last_commit >= 5.0:
            try:
                consumer.commit(asynchronous=False)
            except Exception:
                pass  # nothing to commit yet, or a rebalance: the next round commits
            last_commit = time.monotonic()
    consumer.close()


def watch_commits(bootstrap: str, topics: list[str], ledger: Ledger, stop: threading.Event) -> None:
    """Every 30 s: the group's committed offsets (OffsetFetch) never below what was seen."""
    consumer = Consumer(
        {**QUIET, "bootstrap.servers": bootstrap, "group.id": "soak-group", "enable.auto.commit": False}
    )
    tps = [TopicPartition(t, i) for t in topics for i in range(TOPIC_PARTITIONS)]
    while not stop.wait(30.0):
        try:
            committed = consumer.committed(tps, timeout=30)
        except Exception:
            continue  # the coordinator is moving: ask again next round
        with ledger.lock:
            for tp in committed:
                if tp.offset < 0:
                    continue
                key = (tp.topic, tp.partition)
                before = ledger.commits.get(key, -1)
                if tp.offset < before:
                    ledger.went_back.append(f"{key}: {before} -> {tp.offset}")
                ledger.commits[key] = max(before, tp.offset)
    consumer.close()


def tail_loop(bootstrap: str, targets: list[tuple[str, int]], ledger: Ledger, stop: threading.Event) -> None:
    """Reads everything as it comes, read_committed, checking each producer's order."""
    consumer = Consumer(
        {
            **QUIET,
            "bootstrap.servers": bootstrap,
            "group.id": "soak-tail",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    consumer.assign([TopicPartition(t, i, OFFSET_BEGINNING) for t, i in targets])
    last: dict[tuple[str, int, int], int] = {}
    while not stop.is_set():
        for msg in consumer.consume(1000, 0.5):
            if msg.error():
                with ledger.lock:
                    ledger.errors[f"tail: {msg.error().name()}"] += 1
                continue
            kind, seq = RECORD.unpack(msg.value())
            key = (msg.topic(), msg.partition(), kind)
            if seq < last.get(key, -1) and kind != PLAIN:
                with ledger.lock:
                    ledger.problems.append(f"tail: {key} read {seq} after {last[key]}")
            last[key] = max(seq, last.get(key, -1))
            with ledger.lock:
                ledger.tailed += 1
    consumer.close()


def high_watermark(consumer: Consumer, tp: tuple[str, int], within_s: float = 300.0) -> int:
    """The partition's high watermark, asking again while its leadership moves (the first
    soak's audit died of a NOT_LEADER_FOR_PARTITION here)."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            return int(consumer.get_watermark_offsets(TopicPartition(*tp), timeout=60)[1])
        except KafkaException as exc:
            error = exc.args[0]
            if not (error.retriable() or error.code() in MOVING) or time.monotonic() > deadline:
                raise
            time.sleep(1.0)


def audit(bootstrap: str, targets: list[tuple[str, int]], ledger: Ledger) -> list[str]:
    """Read every partition to its end; compare with the ledger."""
    consumer = Consumer(
        {
            **QUIET,
            "bootstrap.servers": bootstrap,
            "group.id": "soak-audit",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
        }
    )
    ends = {tp: high_watermark(consumer, tp) for tp in targets}
    consumer.assign([TopicPartition(t, i, OFFSET_BEGINNING) for t, i in targets])
    seen: dict[int, dict[int, int]] = defaultdict(lambda: defaultdict(int))
    order: dict[tuple[str, int, int], int] = {}
    problems: list[str] = []
    reached: dict[tuple[str, int], int] = {}
    deadline = time.monotonic() + 600
    while any(reached.get(tp, -1) < end - 1 for tp, end in ends.items() if end > 0) and time.monotonic() < deadline:
        for msg in consumer.consume(5000, 1.0):
            if msg.error():
                continue
            tp = (msg.topic(), msg.partition())
            reached[tp] = max(reached.get(tp, -1), msg.offset())
            kind, seq = RECORD.unpack(msg.value())
            seen[kind][seq] += 1
            key = (*tp, kind)
            if kind != PLAIN and seq < order.get(key, -1):
                problems.append(f"{key}: {seq} after {order[key]} (reordered)")
            order[key] = max(order.get(key, -1), seq)
        # a partition whose last offsets are control records never delivers them
        for tp, end in ends.items():
            if reached.get(tp, -1) < end - 1:
                position = consumer.position([TopicPartition(*tp)])[0].offset
                if position >= end:
                    reached[tp] = end - 1
    consumer.close()
    if time.monotonic() >= deadline:
        problems.append("the audit did not reach every partition's end in 600 s")
    for kind, name in ((IDEMPOTENT, "idempotent"), (PLAIN, "plain"), (TRANSACTIONAL, "transactional")):
        acked = ledger.acked[kind]
        lost = [s for s in acked if seen[kind].get(s, 0) == 0]
        dup = [s for s, n in seen[kind].items() if n > 1] if kind != PLAIN else []
        if lost:
            problems.append(f"{name}: {len(lost)} acknowledged records lost, e.g. {lost[:5]}")
        if dup:
            problems.append(f"{name}: {len(dup)} records read more than once, e.g. {dup[:5]}")
    aborted_read = [s for s in ledger.aborted if seen[TRANSACTIONAL].get(s, 0) and s not in ledger.acked[TRANSACTIONAL]]
    if aborted_read:
        problems.append(f"transactional: {len(aborted_read)} aborted records read, e.g. {aborted_read[:5]}")
    return problems


class Sampler:
    """RSS, open descriptors and event-loop lag of every broker process, every SAMPLE_S."""

    def __init__(self, cluster: DevCluster, path: Path, started: float) -> None:
        self.cluster = cluster
        self.path = path
        self.started = started
        self.rows: list[dict[str, float | int | str]] = []
        self.restarts: dict[int, list[float]] = defaultdict(list)
        self._lag: dict[int, list[float]] = {}

    def sample(self) -> None:
        minute = (time.monotonic() - self.started) / 60
        for b in self.cluster.brokers:
            pid = b.pid
            if pid is None or not b.running:
                continue
            try:
                rss = (
                    int(
                        next(
                            line
                            for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                            if line.startswith("VmRSS")
                        ).split()[1]
                    )
                    // 1024
                )
                fds = len(os.listdir(f"/proc/{pid}/fd"))
            except (OSError, StopIteration):
                continue
            self.rows.append(
                {
                    "minute": round(minute, 2),
                    "broker": b.node_id,
                    "rss_mib": rss,
                    "fds": fds,
                    "lag_s": self._loop_lag(b),
                }
            )
        with self.path.open("w", newline="") as out:
            writer = csv.DictWriter(out, ["minute", "broker", "rss_mib", "fds", "lag_s"])
            writer.writeheader()
            writer.writerows(self.rows)

    def _loop_lag(self, b: BrokerProcess) -> float:
        """The upper bound of the largest lag bucket that gained samples since the last call."""
        try:
            text = urllib.request.urlopen(f"http://127.0.0.1:{b.metrics_port}/metrics", timeout=5).read().decode()
        except OSError:
            return -1.0
        buckets = []
        for line in text.splitlines():
            if line.startswith("shoal_event_loop_lag_seconds_bucket"):
                bound = line.split('le="')[1].split('"')[0]
                buckets.append((float("inf") if bound == "+Inf" else float(bound), float(line.rsplit(" ", 1)[1])))
        counts = [c for _b, c in buckets]
        before = self._lag.get(b.node_id)
        self._lag[b.node_id] = counts
        if before is None or len(before) != len(counts) or counts[-1] < before[-1]:
            return -1.0  # first look, or the broker restarted
        below = [bound for (bound, c), c0 in zip(buckets, before) if c - c0 == counts[-1] - before[-1]]
        return min(below) if below else -1.0

    def trends(self, minutes: float) -> list[str]:
        """Per broker: the last ten minutes' medians against minutes 20-30 (or the run's
        second and last sixth when shorter), restarts' first 3 minutes left out."""
        early = (minutes / 3, minutes / 2) if minutes < 60 else (20.0, 30.0)
        late = (minutes - min(10.0, minutes / 6), minutes)
        problems, lines = [], []
        for node in sorted({int(r["broker"]) for r in self.rows}):

            def window(bounds: tuple[float, float], metric: str) -> list[float]:
                return [
                    float(r[metric])
                    for r in self.rows
                    if r["broker"] == node
                    and bounds[0] <= float(r["minute"]) < bounds[1]
                    and not any(0 <= float(r["minute"]) - t < 3 for t in self.restarts[node])
                ]

            for metric, floor in (("rss_mib", 32.0), ("fds", 50.0)):
                a, z = window(early, metric), window(late, metric)
                if not a or not z:
                    continue
                before, after = statistics.median(a), statistics.median(z)
                lines.append(f"  broker {node} {metric}: {before:.0f} -> {after:.0f}")
                if after > before * 1.1 and after - before > floor:
                    problems.append(f"broker {node}: {metric} grew from {before:.0f} to {after:.0f}")
        print("\n".join(lines))
        return problems


def faults(
    cluster: DevCluster, proxy_port: int, args: argparse.Namespace, sampler: Sampler, stop: threading.Event
) -> None:
    rng = random.Random(args.seed)
    started = time.monotonic()
    victims = itertools.cycle(range(3))
    next_kill = args.kill_every_s
    next_burst = 7 * 60.0
    etcd_restarted = False
    while not stop.wait(1.0):
        now = time.monotonic() - started
        if now >= next_kill:
            victim = next(victims)
            print(f"[{now / 60:5.1f} min] kill -9 broker {victim}", flush=True)
            cluster.kill(victim)
            time.sleep(rng.uniform(10, 30))
            cluster.broker(victim).start(wait=True, timeout_s=600)
            sampler.restarts[victim].append((time.monotonic() - sampler.started) / 60)
            print(f"[{(time.monotonic() - started) / 60:5.1f} min] broker {victim} is back", flush=True)
            next_kill += args.kill_every_s
        elif now >= next_burst:
            print(f"[{now / 60:5.1f} min] object store: 20% 503 for 30 s, then 500 ms PUTs for 30 s", flush=True)
            configure_s3proxy(proxy_port, fail_fraction=0.2)
            stop.wait(30)
            configure_s3proxy(proxy_port, fail_fraction=0.0, delay_ms={"PUT": 500, "GET": DELAYS["GET"]})
            stop.wait(30)
            configure_s3proxy(proxy_port, delay_ms=DELAYS)
            next_burst += 7 * 60.0
        elif not etcd_restarted and now >= args.minutes * 30:
            print(f"[{now / 60:5.1f} min] etcd restarts", flush=True)
            assert cluster.etcd is not None
            cluster.etcd.restart()
            etcd_restarted = True


def main() -> None:
    signal.signal(signal.SIGTERM, lambda _signum, _frame: sys.exit("soak: stopped by SIGTERM"))  # children stop too
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--minutes", type=float, default=60.0)
    parser.add_argument("--partitions", type=int, default=5000)
    parser.add_argument("--kill-every-s", type=float, default=300.0)
    parser.add_argument(
        "--rate", type=float, default=50.0, help="records/s of the idempotent and of the plain producer"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--report-dir", default=None, help="where samples.csv goes (default: a new temporary dir)")
    args = parser.parse_args()
    report_dir = Path(args.report_dir or tempfile.mkdtemp(prefix="shoal-soak-"))
    report_dir.mkdir(parents=True, exist_ok=True)
    topics = args.partitions // TOPIC_PARTITIONS
    diskless = [f"soak-d{n}" for n in range(topics // 2)]
    classic = [f"soak-c{n}" for n in range(topics - topics // 2)]
    targets = partitions_of(diskless + classic)
    with (
        tempfile.TemporaryDirectory(prefix="shoal-soak-s3-") as s3_dir,
        s3_endpoint(s3_dir) as (proxy_port, _moto, _proxy),
    ):
        configure_s3proxy(proxy_port, delay_ms=DELAYS)
        settings = {"object.store": object_store_url(proxy_port)}
        with DevCluster(3, 3, stateless_per_az=1, settings=settings) as cluster:
            admin = AdminClient({"bootstrap.servers": cluster.bootstrap})
            for names, mode in ((diskless, "true"), (classic, "false")):
                for name in names:
                    admin.create_topics([NewTopic(name, TOPIC_PARTITIONS, 3, config={"diskless.enable": mode})])[
                        name
                    ].result(300)
            print(
                f"soak: {len(targets):,} partitions ({len(diskless)} diskless and {len(classic)} classic topics), "
                f"{args.minutes:.0f} minutes; samples in {report_dir / 'samples.csv'}",
                flush=True,
            )
            ledger, stop, stop_faults = Ledger(), threading.Event(), threading.Event()
            az = cluster.bootstrap_by_az
            started = time.monotonic()
            sampler = Sampler(cluster, report_dir / "samples.csv", started)
            workers = [
                threading.Thread(target=produce_loop, args=(IDEMPOTENT, az["az1"], targets, args.rate, ledger, stop)),
                threading.Thread(target=produce_loop, args=(PLAIN, az["az2"], targets, args.rate, ledger, stop)),
                threading.Thread(target=transactions_loop, args=(az["az3"], targets, ledger, stop)),
                threading.Thread(target=group_loop, args=(cluster.bootstrap, classic, 0, ledger, stop)),
                threading.Thread(target=group_loop, args=(cluster.bootstrap, classic, 1, ledger, stop)),
                threading.Thread(target=watch_commits, args=(cluster.bootstrap, classic, ledger, stop)),
                threading.Thread(target=tail_loop, args=(cluster.bootstrap, targets, ledger, stop)),
            ]
            fault_thread = threading.Thread(target=faults, args=(cluster, proxy_port, args, sampler, stop_faults))
            for thread in [*workers, fault_thread]:
                thread.start()
            while time.monotonic() - started < args.minutes * 60:
                time.sleep(SAMPLE_S)
                sampler.sample()
                if int(time.monotonic() - started) % 60 < SAMPLE_S:  # a progress line a minute
                    with ledger.lock:
                        acked = sum(len(v) for v in ledger.acked.values())
                        print(
                            f"[{(time.monotonic() - started) / 60:5.1f} min] acked {acked:,} "
                            f"tailed {ledger.tailed:,} failed {dict(ledger.errors)}",
                            flush=True,
                        )
            stop_faults.set()
            fault_thread.join()
            stop.set()
            for thread in workers:
                thread.join(300)
            problems = audit(cluster.bootstrap, targets, ledger)
            problems += ledger.problems + [f"committed offset moved back: {w}" for w in ledger.went_back]
            problems += sampler.trends(args.minutes)
            print(
                f"soak done: {sum(len(v) for v in ledger.acked.values()):,} acknowledged records "
                f"({', '.join(f'{k}: {len(v):,}' for k, v in sorted(ledger.acked.items()))}), "
                f"{len(ledger.aborted):,} aborted, definite failures {dict(ledger.errors) or 'none'}, "
                f"commits checked on {len(ledger.commits):,} partitions"
            )
    if problems:
        print("FAILED:\n  " + "\n  ".join(problems))
        sys.exit(1)
    print("PASSED")


if __name__ == "__main__":
    main()
