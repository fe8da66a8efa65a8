"""Diskless topics on an S3 endpoint (moto), end to end with real clients and broker processes.

What these tests hold the broker to (DESIGN "Data flow" and "Invariants"):
- records produced concurrently by confluent-kafka, kafka-python and aiokafka (idempotent,
  acks=all, keys, headers, explicit timestamps) to 3 topics x 4 partitions are read back
  identical, exactly once and in per-producer order; their bytes went up in shared WAL objects:
  one PUT per sealed buffer, about one seal per `wal.linger.ms`, far fewer PUTs than produce
  requests (invariants 1-3);
- a consumer group's committed offsets on a diskless topic resume exactly, also after the broker
  is killed with SIGKILL (the records then come back from S3, not from the object cache);
- DescribeConfigs shows `diskless.enable=true` by default; AlterConfigs and
  IncrementalAlterConfigs that change it get INVALID_CONFIG (other configs still change); a topic
  created with `diskless.enable=false` is classic: it works and causes no PUT;
- kill -9 under steady idempotent produce, restart on the same data dir and bucket prefix: every
  acknowledged record is there, byte-identical and in order (invariant 1);
- through tests/s3proxy.py injecting 503 SlowDown and lost answers on PUTs, idempotent producers
  succeed with nothing lost, duplicated or reordered, and the broker's metrics show the retries;
  a restarted broker reads it all back through faulty GETs;
- when uploads fail beyond the store's retries, producers get KAFKA_STORAGE_ERROR (retriable),
  retry, and still nothing is duplicated (DESIGN: "Upload failure: every batch of that object
  fails with a retriable error and nothing is committed"; invariant 3);
- uploads slower than `wal.commit.deadline.ms` are not committed (invariant 4); producers retry
  and nothing is duplicated.
Every broker gets its own bucket prefix on the session's moto server.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import urllib.request
from collections import defaultdict
from dataclasses import dataclass, field

import pytest

from tests.s3proxy import configure_s3proxy, running_s3proxy, s3proxy_stats

from .clients import (
    BackgroundProducer,
    RawConnection,
    Rec,
    api_versions,
    assert_same_records,
    check_sequences,
    consume_confluent,
    create_topic,
    describe_topic_configs_confluent,
    describe_topic_configs_kafka_python,
    kp_admin,
    make_records,
    produce_kafka_python,
    raw_fetch,
    read_all,
    unique_topic,
)
from .groups_support import MemberFactory
from .harness import wait_until
from .test_groups import check_resumes_at, committed_offsets, produce

pytestmark = pytest.mark.integration

LINGER_MS = 100
SHARED_PLAN = 6000  # records each client produces in test_three_clients_concurrently_share_wal_objects
PARTITIONS = 4
INVALID_CONFIG = 40


# -- fixtures and helpers ------------------------------------------------------------------


@pytest.fixture
def s3_broker(broker_factory, moto_server):
    """make(name="broker", endpoint_port=None, extra=[...]) -> a started broker whose object
    store is the moto bucket under a fresh prefix (through `endpoint_port`, e.g. a proxy, if
    given). `aws_env` (a dependency of moto_server) puts the fake credentials in os.environ,
    which BrokerProcess passes to the broker."""

    def make(name: str = "broker", *, endpoint_port: int | None = None, extra: list[str] = (), **kwargs):
        prefix = unique_topic("it")
        url = (
            f"s3://{moto_server.bucket}/{prefix}?endpoint=http://127.0.0.1:"
            f"{endpoint_port or moto_server.port}&region=us-east-1"
        )
        return broker_factory(
            name, extra_args=["--object-store", url, "--set", f"wal.linger.ms={LINGER_MS}", *extra], **kwargs
        )

    return make


@pytest.fixture
def members(tmp_path):
    factory = MemberFactory(tmp_path / "members")
    yield factory
    factory.close_all()


def scrape(broker) -> dict[tuple[str, tuple], float]:
    """The broker's /metrics: {(sample name, sorted label items): value}."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://127.0.0.1:{broker.metrics_port}/metrics", timeout=5) as resp:
        text = resp.read().decode()
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def metric(snapshot, name: str, **labels) -> float:
    """Sum of the samples named `name` whose labels include `labels`."""
    want = set(labels.items())
    return sum(v for (n, ls), v in snapshot.items() if n == name and want <= set(ls))


def delta(before, after, name: str, **labels) -> float:
    return metric(after, name, **labels) - metric(before, name, **labels)


# WAL objects are uploaded with a conditional PUT (the writer never overwrites a key).
UPLOAD = "put_if_absent"


def store_requests(snapshot, operation: str, outcome: str) -> float:
    """Object store request attempts of one operation (put, get, ...) with one outcome
    (ok, throttled, retry, error, ...)."""
    return metric(snapshot, "shoal_object_store_requests_total", operation=operation, outcome=outcome)


def store_retries(snapshot, operation: str) -> float:
    """Attempts that failed and were retried: throttled (503 SlowDown, 429) or otherwise."""
    return store_requests(snapshot, operation, "throttled") + store_requests(snapshot, operation, "retry")


def produce_errors(snapshot) -> dict[str, float]:
    """Failed produce partitions by Kafka error name."""
    return {dict(ls)["error"]: v for (n, ls), v in snapshot.items() if n == "shoal_produce_errors_total"}


# -- paced idempotent producers of the three clients ---------------------------------------------


@dataclass
class Planned:
    topic: str
    rec: Rec


@dataclass
class ProduceRun:
    """What one producer sent (a prefix of its plan, in order) and how each send ended."""

    client: str
    plan: list[Planned]
    sent: int = 0
    offsets: list[int | None] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0

    def expected(self) -> dict[tuple[str, int], list[Rec]]:
        out: dict[tuple[str, int], list[Rec]] = defaultdict(list)
        for item in self.plan[: self.sent]:
            out[(item.topic, item.rec.partition)].append(item.rec)
        return out


def plan_records(client: str, topics: list[str], partitions: int, n: int, base_ts: int) -> list[Planned]:
    """Record i of `client` goes to topic i % len(topics), partition (i // len(topics)) % partitions;
    its value and headers name the producer and the sequence number i."""
    out = []
    for i in range(n):
        value = f"{client}|{i:08d}|".encode() + b"v" * (i % 40)
        headers = (("producer", client.encode()), ("seq", str(i).encode()))
        rec = Rec(
            partition=(i // len(topics)) % partitions,
            key=f"{client}-key-{i % 7}".encode(),
            value=value,
            headers=headers,
            timestamp=base_ts + i,
        )
        out.append(Planned(topics[i % len(topics)], rec))
    return out


def _paced(plan: list[Planned], duration_s: float, rate: float):
    """The plan's items at `rate` per second until `duration_s` passed (or the plan ends)."""
    start = time.monotonic()
    for i, item in enumerate(plan):
        elapsed = time.monotonic() - start
        if elapsed >= duration_s:
            return
        ahead = i / rate - elapsed
        if ahead > 0.005:
            time.sleep(ahead)
        yield item


def _run_kafka_python(run: ProduceRun, bootstrap: str, duration_s: float, rate: float, timeout_s: float) -> None:
    from kafka import KafkaProducer

    producer = KafkaProducer(
        bootstrap_servers=bootstrap,
        enable_idempotence=True,
        acks="all",
        linger_ms=5,
        request_timeout_ms=15_000,
        delivery_timeout_ms=int(timeout_s * 1000),
        max_block_ms=15_000,
        client_id="shoal-it-dl-kp",
    )
    futures = []
    try:
        for item in _paced(run.plan, duration_s, rate):
            r = item.rec
            futures.append(
                producer.send(
                    item.topic,
                    value=r.value,
                    key=r.key,
                    partition=r.partition,
                    headers=list(r.headers),
                    timestamp_ms=r.timestamp,
                )
            )
        run.sent = len(futures)
        producer.flush(timeout=timeout_s)
        for f in futures:
            try:
                run.offsets.append(f.get(timeout=1).offset)
            except Exception as exc:  # noqa: BLE001 - recorded, the test asserts on it
                run.offsets.append(None)
                run.errors.append(repr(exc))
    finally:
        producer.close(timeout=5)


def _run_confluent(run: ProduceRun, bootstrap: str, duration_s: float, rate: float, timeout_s: float) -> None:
    from confluent_kafka import Producer

    producer = Producer(
        {
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "message.timeout.ms": int(timeout_s * 1000),
            "client.id": "shoal-it-dl-ck",
        }
    )
    results: dict[int, object] = {}

    def on_delivery(i):
        def cb(err, msg):
            results[i] = err if err is not None else msg.offset()

        return cb

    count = 0
    for item in _paced(run.plan, duration_s, rate):
        r = item.rec
        while True:
            try:
                producer.produce(
                    item.topic,
                    value=r.value,
                    key=r.key,
                    partition=r.partition,
                    timestamp=r.timestamp,
                    headers=list(r.headers),
                    on_delivery=on_delivery(count),
                )
                break
            except BufferError:
                producer.poll(0.05)
        count += 1
        if count % 50 == 0:
            producer.poll(0)
    run.sent = count
    remaining = producer.flush(timeout_s)
    if remaining:
        producer.purge()
        producer.flush(5)
    for i in range(count):
        value = results.get(i, "not delivered before the deadline")
        run.offsets.append(value if isinstance(value, int) else None)
        if not isinstance(value, int):
            run.errors.append(str(value))
    del producer


def _run_aiokafka(run: ProduceRun, bootstrap: str, duration_s: float, rate: float, timeout_s: float) -> None:
    from aiokafka import AIOKafkaProducer

    async def main():
        producer = AIOKafkaProducer(
            bootstrap_servers=bootstrap,
            enable_idempotence=True,
            acks="all",
            linger_ms=5,
            request_timeout_ms=15_000,
            client_id="shoal-it-dl-ak",
        )
        await producer.start()
        futures = []
        try:
            start = time.monotonic()
            for i, item in enumerate(run.plan):
                elapsed = time.monotonic() - start
                if elapsed >= duration_s:
                    break
                if i / rate - elapsed > 0.005:
                    await asyncio.sleep(i / rate - elapsed)
                r = item.rec
                futures.append(
                    await producer.send(
                        item.topic,
                        value=r.value,
                        key=r.key,
                        partition=r.partition,
                        timestamp_ms=r.timestamp,
                        headers=list(r.headers),
                    )
                )
            run.sent = len(futures)
            for res in await asyncio.gather(*futures, return_exceptions=True):
                ok = not isinstance(res, BaseException)
                run.offsets.append(res.offset if ok else None)
                if not ok:
                    run.errors.append(repr(res))
        finally:
            await producer.stop()

    asyncio.run(asyncio.wait_for(main(), timeout_s + 30))


RUNNERS = {"kafka-python": _run_kafka_python, "confluent": _run_confluent, "aiokafka": _run_aiokafka}


def produce_concurrently(
    bootstrap: str,
    clients: list[str],
    topics: list[str],
    *,
    duration_s: float,
    rate: float,
    max_records: int,
    timeout_s: float = 90,
) -> list[ProduceRun]:
    """One thread per client, each producing its own plan at `rate` records/s for `duration_s`
    (at most `max_records`), then waiting for every answer (at most `timeout_s`)."""
    base_ts = int(time.time() * 1000) - 600_000
    runs = [ProduceRun(c, plan_records(c, topics, PARTITIONS, max_records, base_ts)) for c in clients]
    crashes: list[str] = []

    def body(run: ProduceRun) -> None:
        start = time.monotonic()
        try:
            RUNNERS[run.client](run, bootstrap, duration_s, rate, timeout_s)
        except Exception as exc:  # noqa: BLE001
            crashes.append(f"{run.client}: {exc!r}")
        run.elapsed_s = time.monotonic() - start

    threads = [threading.Thread(target=body, args=(r,), name=f"produce-{r.client}", daemon=True) for r in runs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(duration_s + timeout_s + 60)
    assert not any(t.is_alive() for t in threads), "a producer thread did not finish in time"
    assert not crashes, crashes
    return runs


def check_runs(bootstrap: str, topics: list[str], runs: list[ProduceRun]) -> int:
    """Every acknowledged record is in the log once, identical, in its producer's order; nothing
    else is there; offsets are dense from 0. Returns the number of records read."""
    expected: dict[tuple[str, int], dict[str, list[Rec]]] = defaultdict(dict)
    acked_at: dict[tuple[str, int], dict[int, bytes]] = defaultdict(dict)
    for run in runs:
        offsets = iter(run.offsets)
        for (topic, p), recs in run.expected().items():
            expected[(topic, p)][run.client] = recs
        for item in run.plan[: run.sent]:
            off = next(offsets)
            if off is not None:
                acked_at[(item.topic, item.rec.partition)][off] = item.rec.value
    total = 0
    for topic in topics:
        got = read_all(bootstrap, topic, PARTITIONS)
        for p in range(PARTITIONS):
            recs = got[p]
            total += len(recs)
            assert [r.offset for r in recs] == list(range(len(recs))), f"{topic}[{p}]: offsets not dense"
            per_producer: dict[str, list[Rec]] = defaultdict(list)
            for r in recs:
                per_producer[dict(r.headers)["producer"].decode()].append(r)
            want = expected.get((topic, p), {})
            assert sorted(per_producer) == sorted(want), f"{topic}[{p}]: producers {sorted(per_producer)}"
            for client, sent in want.items():
                read = per_producer[client]
                seqs = [int(dict(r.headers)["seq"]) for r in read]
                assert len(read) == len(sent), (
                    f"{topic}[{p}] {client}: read {len(read)} records, sent {len(sent)} "
                    f"(duplicates: {len(seqs) - len(set(seqs))})"
                )
                for i, (s, r) in enumerate(zip(sent, read)):
                    assert r.content() == s.content(), f"{topic}[{p}] {client} #{i}: got {r}, sent {s}"
            stored = {r.offset: r.value for r in recs}
            moved = [o for o, v in acked_at[(topic, p)].items() if stored.get(o) != v]
            assert not moved, f"{topic}[{p}]: acknowledged offsets {moved[:5]} hold other records"
    return total


def count_batches(bootstrap: str, topic: str, partitions: int) -> int:
    """Record batches stored in the topic (each one a coordinates entry of a diskless topic)."""
    from kafka.record.memory_records import MemoryRecords

    versions = api_versions(bootstrap)
    total = 0
    with RawConnection(bootstrap, timeout_s=20) as conn:
        for p in range(partitions):
            offset = 0
            for _ in range(10_000):  # bounded: each round moves forward
                data = raw_fetch(conn, versions, topic, p, offset, max_bytes=1 << 20)
                assert data.error_code == 0, f"{topic}[{p}] fetch error {data.error_code}"
                records = MemoryRecords(bytes(data.records or b""))
                start = offset
                while (batch := records.next_batch()) is not None:
                    total += 1
                    offset = batch.base_offset + batch.last_offset_delta + 1
                if offset == start or offset >= data.high_watermark:
                    break
    return total


def segment_bytes(broker, topic: str, partitions: int) -> int:
    return sum(f.stat().st_size for p in range(partitions) for f in broker.partition_dir(topic, p).glob("*.log"))


# -- a. three clients, shared WAL objects ------------------------------------------------------


def test_three_clients_concurrently_share_wal_objects(s3_broker):
    """confluent-kafka, kafka-python and aiokafka produce at once (idempotent, acks=all, paced)
    to 3 topics x 4 partitions: every record is read back identical, once, in producer order,
    and the records went up in a few shared WAL objects: one PUT per seal, many batches and
    produce requests per PUT, little in the partition logs. (PUTs per second are measured by
    `make bench`, tests/bench/diskless.py.)"""
    broker = s3_broker()
    bs = broker.bootstrap
    topics = [unique_topic(f"dl3-{i}") for i in range(3)]
    for t in topics:
        create_topic(bs, t, partitions=PARTITIONS)
    before = scrape(broker)
    # Each client sends its whole plan (about 7.5 s at 800 records/s; the 60 s cap is only a
    # bound on a stuck run): the traffic is fixed, whatever the machine's speed.
    runs = produce_concurrently(
        bs, ["confluent", "kafka-python", "aiokafka"], topics, duration_s=60, rate=800, max_records=SHARED_PLAN
    )
    after = scrape(broker)
    for run in runs:
        assert not run.errors, f"{run.client}: {len(run.errors)} failed sends, e.g. {run.errors[:3]}"
        assert run.sent == SHARED_PLAN, f"{run.client} sent {run.sent} of {SHARED_PLAN} records"
    total = check_runs(bs, topics, runs)
    assert total == sum(r.sent for r in runs)

    puts = store_requests(after, UPLOAD, "ok") - store_requests(before, UPLOAD, "ok")
    seals = delta(before, after, "shoal_wal_seals_total")
    linger_seals = delta(before, after, "shoal_wal_seals_total", reason="linger")
    forced_seals = seals - linger_seals  # size or backpressure
    committed = delta(before, after, "shoal_wal_objects_total", outcome="committed")
    produce_requests = delta(before, after, "shoal_requests_total", api="Produce")
    batches = sum(count_batches(bs, t, PARTITIONS) for t in topics)
    summary = (
        f"{total} records in {batches} batches, {produce_requests:.0f} produce requests, "
        f"{puts:.0f} PUTs, seals {linger_seals:.0f} linger + {forced_seals:.0f} forced, "
        f"in {max(r.elapsed_s for r in runs):.1f} s"
    )
    print(summary)
    assert store_retries(after, UPLOAD) - store_retries(before, UPLOAD) == 0, summary
    assert puts <= seals and puts == committed, summary  # one PUT per sealed buffer
    # Objects are shared: many produce requests (of all three clients) and batches per PUT.
    assert puts * 3 < produce_requests and puts * 10 < batches, f"objects are not shared: {summary}"
    # The record bytes went to S3; the partition logs hold headers and coordinates only.
    produced_bytes = delta(before, after, "shoal_produced_bytes_total")
    assert delta(before, after, "shoal_object_store_bytes_total", direction="up") >= produced_bytes > 0
    local = sum(segment_bytes(broker, t, PARTITIONS) for t in topics)
    print(f"{produced_bytes:.0f} bytes produced, partition logs {local} bytes")
    assert local < produced_bytes / 2, f"partition logs hold {local} bytes for {produced_bytes} produced"


# -- b. consumer group offsets -------------------------------------------------------------------


def test_group_offsets_resume_on_diskless_topic(s3_broker, members):
    """Committed offsets resume exactly on a diskless topic: a member reads and commits 40
    records, the next one resumes there; after kill -9 of the broker a third one resumes again
    and reads the rest, including records written before the crash, which now come from S3."""
    broker = s3_broker(extra=["--set", "group.initial.rebalance.delay.ms=0"])
    bs = broker.bootstrap
    partitions, client = 3, "confluent"
    topic = unique_topic("dl-grp")
    create_topic(bs, topic, partitions=partitions)
    assert describe_topic_configs_kafka_python(bs, topic)["diskless.enable"] == "true"
    group = unique_topic("dl-grp-g")
    produced = produce(bs, topic, 90, partitions, tag="dl-1")
    assert store_requests(scrape(broker), UPLOAD, "ok") > 0

    first = members(client, bs, topic, group, commit=True, max_records=40, name="first")
    assert first.wait_exit(60) == 0, first.stderr_tail()
    assert len(first.records()) == 40
    nxt = check_resumes_at(first, {})
    assert committed_offsets(bs, group, topic) == nxt

    second = members(client, bs, topic, group, commit=True, max_records=25, name="second")
    assert second.wait_exit(60) == 0, second.stderr_tail()
    nxt = check_resumes_at(second, nxt)
    assert committed_offsets(bs, group, topic) == nxt

    broker.restart(graceful=False)  # kill -9; same data dir and bucket prefix
    assert committed_offsets(bs, group, topic) == nxt, "committed offsets lost by a broker crash"
    produced.update(produce(bs, topic, 30, partitions, tag="dl-2"))

    third = members(client, bs, topic, group, commit=True, max_records=len(produced) - 65, name="third")
    assert third.wait_exit(60) == 0, third.stderr_tail()
    nxt = check_resumes_at(third, nxt)
    ends = {p: sum(1 for (pp, _o) in produced if pp == p) for p in range(partitions)}
    assert nxt == ends and committed_offsets(bs, group, topic) == ends
    read = [(p, o, k) for mem in (first, second, third) for p, o, k, _v in mem.records()]
    assert len(read) == len({(p, o) for p, o, _k in read}) == len(produced)
    assert {(p, o): k for p, o, k in read} == produced
    assert store_requests(scrape(broker), "get", "ok") > 0, "records from before the crash not read from S3"


# -- c. the diskless.enable config -----------------------------------------------------------------


def _alter(bootstrap: str, topic: str, configs: dict, incremental: bool) -> str:
    from kafka.admin import ConfigResource, ConfigResourceType

    admin = kp_admin(bootstrap)
    try:
        res = admin.alter_configs(
            [ConfigResource(ConfigResourceType.TOPIC, topic, configs=configs)],
            raise_on_unknown=False,
            incremental=incremental,
        )
        return res["topic"][topic]
    finally:
        admin.close()


def _incremental_confluent(bootstrap: str, topic: str, name: str, value: str) -> int:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

    admin = AdminClient({"bootstrap.servers": bootstrap})
    resource = ConfigResource(
        ResourceType.TOPIC,
        topic,
        incremental_configs=[ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)],
    )
    (future,) = admin.incremental_alter_configs([resource], request_timeout=15).values()
    try:
        future.result(timeout=30)
        return 0
    except KafkaException as exc:
        return exc.args[0].code()


def test_diskless_enable_config(s3_broker):
    broker = s3_broker()
    bs = broker.bootstrap
    topic = unique_topic("dl-cfg")
    create_topic(bs, topic, partitions=2)
    assert describe_topic_configs_kafka_python(bs, topic)["diskless.enable"] == "true"
    assert describe_topic_configs_confluent(bs, topic)["diskless.enable"] == "true"

    # The mode switches online through every path (issue 16); a value that is not a boolean is refused.
    for value, incremental in (("false", False), ("true", True)):
        assert _alter(bs, topic, {"diskless.enable": value}, incremental) == "OK", (value, incremental)
        assert describe_topic_configs_confluent(bs, topic)["diskless.enable"] == value
    assert _incremental_confluent(bs, topic, "diskless.enable", "false") == 0
    assert _incremental_confluent(bs, topic, "diskless.enable", "true") == 0
    result = _alter(bs, topic, {"diskless.enable": "maybe"}, incremental=True)
    assert "InvalidConfigurationError" in result and "[Error 40]" in result, result
    assert _incremental_confluent(bs, topic, "diskless.enable", "maybe") == INVALID_CONFIG
    assert _alter(bs, topic, {"retention.ms": "7200000"}, incremental=True) == "OK"
    assert _incremental_confluent(bs, topic, "retention.bytes", "1073741824") == 0
    configs = describe_topic_configs_kafka_python(bs, topic)
    assert (configs["diskless.enable"], configs["retention.ms"], configs["retention.bytes"]) == (
        "true",
        "7200000",
        "1073741824",
    )

    # A topic created with diskless.enable=false is classic: it works and causes no PUT.
    classic = unique_topic("dl-cfg-classic")
    create_topic(bs, classic, partitions=2, configs={"diskless.enable": "false"})
    assert describe_topic_configs_confluent(bs, classic)["diskless.enable"] == "false"
    recs = make_records(500, partitions=2)
    before = scrape(broker)
    produce_kafka_python(bs, classic, recs, acks="all")
    assert_same_records(recs, consume_confluent(bs, classic, 2, len(recs)))
    after = scrape(broker)
    assert delta(before, after, "shoal_produced_bytes_total") > 0
    assert store_requests(after, UPLOAD, "ok") == store_requests(before, UPLOAD, "ok")
    assert delta(before, after, "shoal_wal_seals_total") == 0
    assert segment_bytes(broker, classic, 2) > sum(len(r.value or b"") for r in recs)  # bytes are local

    # ... while the diskless topic next to it does PUT (so the zero above means something).
    produce_kafka_python(bs, topic, make_records(50, partitions=2, tag="d"), acks="all")
    assert store_requests(scrape(broker), UPLOAD, "ok") - store_requests(after, UPLOAD, "ok") > 0


# -- d. kill -9 under load ---------------------------------------------------------------------


def test_kill9_under_idempotent_produce(s3_broker):
    """Acknowledged records survive kill -9 of an S3-backed broker: records with keys and
    headers acknowledged before, and a steady idempotent producer acknowledged around the crash.
    After the restart (same data dir, same bucket prefix) they are read from S3."""
    broker = s3_broker()
    bs = broker.bootstrap
    fixed, steady = unique_topic("dl-k9-fixed"), unique_topic("dl-k9-steady")
    create_topic(bs, fixed, partitions=2)
    create_topic(bs, steady, partitions=2)
    recs = make_records(2000, partitions=2)
    produce_kafka_python(bs, fixed, recs, acks="all", enable_idempotence=True)

    producer = BackgroundProducer(bs, steady, 2).start()
    try:
        wait_until(lambda: producer.acked_count() >= 3000, 60, what="3000 acks")
        acked_before_kill = producer.acked_count()
        broker.kill()
        producer.halt()
        broker.start()
        producer.close(30)  # pending batches retried after the restart
    finally:
        producer.close(0)
    assert producer.close_error is None, producer.close_error
    assert producer.acked_count() > acked_before_kill

    assert_same_records(recs, consume_confluent(bs, fixed, 2, len(recs), settle_s=1.0))
    check_sequences(read_all(bs, steady, 2), producer.acked)
    assert store_requests(scrape(broker), "get", "ok") > 0, "after the restart the records must come from S3"
    more = make_records(2, partitions=2, tag="after")
    assert produce_kafka_python(bs, fixed, more) == [1000, 1000]


# -- e. faults between the broker and S3 ------------------------------------------------------------


@pytest.fixture
def proxied_s3_broker(s3_broker, moto_server, tmp_path):
    """make(extra=[], **faults) -> (proxy port, broker): a broker whose S3 endpoint is
    tests/s3proxy.py (faults on PUTs only, seeded) in front of moto. The broker is stopped
    before the proxy."""
    with contextlib.ExitStack() as stack:

        def make(extra: list[str] = (), **faults):
            port = stack.enter_context(
                running_s3proxy(
                    moto_server.port, log_path=tmp_path / "s3proxy.log", fail_methods="PUT", seed=7, **faults
                )
            )
            broker = s3_broker(endpoint_port=port, extra=list(extra))
            stack.callback(broker.stop)
            return port, broker

        yield make


def test_produce_through_s3_faults(proxied_s3_broker):
    """20% of PUTs answered 503 SlowDown, 5% forwarded but their answer lost: idempotent
    confluent and kafka-python producers all succeed; nothing lost, duplicated or reordered.
    (The store's retries absorb nearly all of it; an object failing all its attempts would
    just be retried by the producers.)"""
    port, broker = proxied_s3_broker(fail_fraction=0.2, lose_fraction=0.05)
    bs = broker.bootstrap
    topics = [unique_topic("dl-flt")]
    create_topic(bs, topics[0], partitions=PARTITIONS)
    runs = produce_concurrently(bs, ["confluent", "kafka-python"], topics, duration_s=8, rate=600, max_records=6000)
    for run in runs:
        assert not run.errors, f"{run.client}: {len(run.errors)} failed sends, e.g. {run.errors[:3]}"
    assert check_runs(bs, topics, runs) == sum(r.sent for r in runs)
    stats = s3proxy_stats(port)
    after = scrape(broker)
    failed_objects = metric(after, "shoal_wal_objects_total", outcome="upload_failed")
    print(
        f"proxy: {stats}\nput retries {store_retries(after, UPLOAD):.0f}, produce errors "
        f"{produce_errors(after)}, upload_failed {failed_objects:.0f}"
    )
    assert stats["failed"].get("PUT", 0) > 0 and stats["lost"].get("PUT", 0) > 0, stats
    assert store_requests(after, UPLOAD, "throttled") > 0, "the broker never retried a throttled PUT"

    # Read it all again from S3 (a restarted broker has an empty object cache) with faulty GETs.
    broker.restart()
    configure_s3proxy(port, fail_fraction=0.2, lose_fraction=0.05, fail_methods="GET")
    assert check_runs(bs, topics, runs) == sum(r.sent for r in runs)
    stats = s3proxy_stats(port)
    assert stats["failed"].get("GET", 0) > 0, stats
    assert store_retries(scrape(broker), "get") > 0


def _produce_through_window(
    broker, port: int, topics: list[str], start_window, end_window, window_until
) -> list[ProduceRun]:
    """Two idempotent producers (confluent, kafka-python) for 9 s; after the first uploads,
    `start_window()`, wait for `window_until()` (bounded), one more second, `end_window()`."""
    outcome: dict[str, object] = {}

    def background() -> None:
        try:
            outcome["runs"] = produce_concurrently(
                broker.bootstrap, ["confluent", "kafka-python"], topics, duration_s=9, rate=400, max_records=4000
            )
        except BaseException as exc:  # noqa: BLE001 - re-raised below
            outcome["error"] = exc

    thread = threading.Thread(target=background, name="window-producers", daemon=True)
    thread.start()
    try:
        wait_until(lambda: store_requests(scrape(broker), UPLOAD, "ok") >= 5, 30, what="first uploads")
        start_window()
        wait_until(window_until, 20, what="the fault to show in the broker's metrics")
        time.sleep(1.0)
    finally:
        end_window()
    thread.join(180)
    assert not thread.is_alive(), "producers did not finish"
    if "error" in outcome:
        raise outcome["error"]
    runs = outcome["runs"]
    for run in runs:
        assert not run.errors, f"{run.client}: {len(run.errors)} failed sends, e.g. {run.errors[:3]}"
    return runs


def test_upload_failure_beyond_retries(proxied_s3_broker):
    """Every PUT fails (503) until at least two WAL objects failed all the store's attempts, and
    one more second: producers get KAFKA_STORAGE_ERROR for those objects' batches, retry them
    once PUTs work again, and every record is committed exactly once, in order."""
    port, broker = proxied_s3_broker()
    bs = broker.bootstrap
    topics = [unique_topic("dl-out")]
    create_topic(bs, topics[0], partitions=PARTITIONS)
    runs = _produce_through_window(
        broker,
        port,
        topics,
        lambda: configure_s3proxy(port, fail_fraction=1.0),
        lambda: configure_s3proxy(port, fail_fraction=0.0),
        lambda: metric(scrape(broker), "shoal_wal_objects_total", outcome="upload_failed") >= 2,
    )
    assert check_runs(bs, topics, runs) == sum(r.sent for r in runs)
    after = scrape(broker)
    print(
        f"proxy: {s3proxy_stats(port)}\nproduce errors {produce_errors(after)}, upload_failed "
        f"{metric(after, 'shoal_wal_objects_total', outcome='upload_failed'):.0f}"
    )
    assert metric(after, "shoal_produce_errors_total", error="KAFKA_STORAGE_ERROR") > 0
    assert store_requests(after, UPLOAD, "error") > 0
    assert s3proxy_stats(port)["failed"].get("PUT", 0) > 0


def test_commit_deadline_rejects_slow_uploads(proxied_s3_broker):
    """Invariant 4 seen from outside: with wal.commit.deadline.ms=1000 and PUTs delayed 1.5 s,
    the leader refuses to commit the (late) objects; producers get a retriable error, retry once
    PUTs are fast again, and every record is committed exactly once, in order."""
    port, broker = proxied_s3_broker(extra=["--set", "wal.commit.deadline.ms=1000"])
    bs = broker.bootstrap
    topics = [unique_topic("dl-late")]
    create_topic(bs, topics[0], partitions=PARTITIONS)
    runs = _produce_through_window(
        broker,
        port,
        topics,
        lambda: configure_s3proxy(port, delay_ms={"put": 1500}),
        lambda: configure_s3proxy(port, delay_ms={}),
        lambda: produce_errors(scrape(broker)).get("REQUEST_TIMED_OUT", 0) >= 2,
    )
    assert check_runs(bs, topics, runs) == sum(r.sent for r in runs)
    after = scrape(broker)
    print(f"produce errors {produce_errors(after)}")
    assert metric(after, "shoal_wal_objects_total", outcome="upload_failed") == 0
