"""Thin, uniform wrappers over the three Python Kafka clients, plus a raw-socket client.

Every wrapper has a deadline: no call here can hang a test forever. Records are
normalised to `Rec` so one comparison works whatever client produced or consumed them.
Consumers use manual assignment only (no consumer groups); librdkafka still needs a
`group.id` and asks FindCoordinator, which is expected.
"""

from __future__ import annotations

import asyncio
import dataclasses
import socket
import struct
import threading
import time
import uuid
from collections import defaultdict

CALL_TIMEOUT_S = 30.0
CODECS = ("gzip", "snappy", "lz4", "zstd")


@dataclasses.dataclass(frozen=True)
class Rec:
    """A record as produced (offset None) or as consumed."""

    partition: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...]
    timestamp: int
    offset: int | None = None

    def content(self) -> tuple:
        """Everything but the offset: what must survive a produce/consume round trip."""
        return (self.partition, self.key, self.value, self.headers, self.timestamp)


def unique_topic(prefix: str = "t") -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def make_records(n: int, partitions: int, *, base_ts: int | None = None, tag: str = "r") -> list[Rec]:
    """Keyed records with headers (a repeated key, an empty value), some empty and some
    null values, and explicit increasing timestamps, spread round-robin over `partitions`."""
    if base_ts is None:
        base_ts = int(time.time() * 1000) - 3_600_000
    out = []
    for i in range(n):
        value = (
            b""
            if i % 17 == 5
            else None
            if i % 23 == 7  # empty and null values too
            else f"{tag}-value-{i:06d}-".encode() + b"x" * (i % 50)
        )
        headers = (("idx", str(i).encode()), ("dup", b"1"), ("dup", b"2"), ("empty", b""))
        out.append(
            Rec(
                partition=i % partitions,
                key=f"{tag}-key-{i}".encode(),
                value=value,
                headers=headers,
                timestamp=base_ts + i * 10,
            )
        )
    return out


def by_partition(recs) -> dict[int, list[Rec]]:
    out: dict[int, list[Rec]] = defaultdict(list)
    for r in recs:
        out[r.partition].append(r)
    return dict(out)


def assert_same_records(sent: list[Rec], got: list[Rec]) -> None:
    """Same records field by field, same order inside each partition, dense offsets."""
    sent_p, got_p = by_partition(sent), by_partition(got)
    assert sorted(got_p) == sorted(sent_p), f"partitions differ: {sorted(got_p)} != {sorted(sent_p)}"
    for p, expected in sent_p.items():
        actual = got_p[p]
        assert len(actual) == len(expected), f"partition {p}: {len(actual)} records, expected {len(expected)}"
        for i, (e, a) in enumerate(zip(expected, actual)):
            assert a.content() == e.content(), f"partition {p} record #{i}: got {a}, expected {e}"
        offsets = [r.offset for r in actual]
        assert offsets == list(range(offsets[0], offsets[0] + len(offsets))), (
            f"partition {p}: offsets not dense/increasing: {offsets[:20]}..."
        )


# -- kafka-python -------------------------------------------------------------------


def kp_admin(bootstrap: str):
    from kafka import KafkaAdminClient

    return KafkaAdminClient(
        bootstrap_servers=bootstrap, request_timeout_ms=10_000, bootstrap_timeout_ms=10_000, client_id="shoal-it-admin"
    )


def create_topic(
    bootstrap: str, name: str, partitions: int = 1, configs: dict[str, str] | None = None, client: str = "kafka-python"
) -> None:
    """Create a topic with one client's admin API and wait until it has leaders."""
    code = ADMINS[client](bootstrap, name, partitions, configs)
    assert code == 0, f"CreateTopics {name!r} via {client}: error code {code}"
    wait_topic_ready(bootstrap, name)


def produce_kafka_python(bootstrap: str, topic: str, recs: list[Rec], timeout_s: float = 60, **config) -> list[int]:
    """Send all records, wait for every ack; returns their offsets (in send order)."""
    from kafka import KafkaProducer

    cfg = dict(
        bootstrap_servers=bootstrap,
        linger_ms=5,
        request_timeout_ms=15_000,
        max_block_ms=15_000,
        delivery_timeout_ms=60_000,
        client_id="shoal-it-kp",
    )
    cfg.update(config)
    producer = KafkaProducer(**cfg)
    try:
        futures = [
            producer.send(
                topic,
                value=r.value,
                key=r.key,
                partition=r.partition,
                headers=list(r.headers),
                timestamp_ms=r.timestamp,
            )
            for r in recs
        ]
        producer.flush(timeout=timeout_s)
        return [f.get(timeout=CALL_TIMEOUT_S).offset for f in futures]
    finally:
        producer.close(timeout=5)


def consume_kafka_python(
    bootstrap: str,
    topic: str,
    partitions: int,
    expected: int,
    timeout_s: float = CALL_TIMEOUT_S,
    settle_s: float = 0.5,
    **config,
) -> list[Rec]:
    """Read from the beginning of every partition with manual assignment until
    `expected` records arrived (then `settle_s` more, to catch extras) or timeout."""
    from kafka import KafkaConsumer, TopicPartition

    cfg = dict(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        request_timeout_ms=15_000,
        fetch_max_wait_ms=100,
        client_id="shoal-it-kc",
    )
    cfg.update(config)
    consumer = KafkaConsumer(**cfg)
    try:
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        out: list[Rec] = []

        def poll_once():
            for batch in consumer.poll(timeout_ms=200).values():
                for m in batch:
                    out.append(
                        Rec(
                            m.partition,
                            m.key,
                            m.value,
                            tuple((k, v) for k, v in (m.headers or [])),
                            m.timestamp,
                            m.offset,
                        )
                    )

        _poll_until(poll_once, lambda: len(out) >= expected, timeout_s, settle_s)
        return out
    finally:
        consumer.close(autocommit=False)


def _poll_until(poll_once, done, timeout_s: float, settle_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not done() and time.monotonic() < deadline:
        poll_once()
    settle_end = min(deadline, time.monotonic() + settle_s) if done() else 0
    while time.monotonic() < settle_end:
        poll_once()


# -- confluent-kafka (librdkafka) ----------------------------------------------------


def ck_admin(bootstrap: str):
    from confluent_kafka.admin import AdminClient

    return AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 10_000})


def produce_confluent(bootstrap: str, topic: str, recs: list[Rec], timeout_s: float = 60, **config) -> list[int]:
    from confluent_kafka import KafkaException, Producer

    cfg = {"bootstrap.servers": bootstrap, "linger.ms": 5, "message.timeout.ms": 60_000, "client.id": "shoal-it-ck"}
    cfg.update({k.replace("_", "."): v for k, v in config.items()})
    producer = Producer(cfg)
    offsets: list[int | None] = [None] * len(recs)
    errors: list = []

    def on_delivery(i):
        def cb(err, msg):
            if err is not None:
                errors.append((i, err))
            else:
                offsets[i] = msg.offset()

        return cb

    deadline = time.monotonic() + timeout_s
    for i, r in enumerate(recs):
        while True:
            try:
                producer.produce(
                    topic,
                    value=r.value,
                    key=r.key,
                    partition=r.partition,
                    timestamp=r.timestamp,
                    headers=list(r.headers),
                    on_delivery=on_delivery(i),
                )
                break
            except BufferError:
                if time.monotonic() > deadline:
                    raise TimeoutError("librdkafka queue stayed full")
                producer.poll(0.05)
        if i % 1000 == 0:
            producer.poll(0)
    remaining = producer.flush(max(1.0, deadline - time.monotonic()))
    producer.purge()
    del producer  # librdkafka has no close(): drop the handle now, not with a traceback
    if errors:
        raise KafkaException(errors[0][1])
    assert remaining == 0, f"{remaining} messages not delivered before the deadline"
    return offsets


def consume_confluent(
    bootstrap: str,
    topic: str,
    partitions: int,
    expected: int,
    timeout_s: float = CALL_TIMEOUT_S,
    settle_s: float = 0.5,
    **config,
) -> list[Rec]:
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

    cfg = {
        "bootstrap.servers": bootstrap,
        "group.id": f"shoal-it-{uuid.uuid4().hex[:8]}",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        "enable.partition.eof": False,
        "fetch.wait.max.ms": 100,
        "client.id": "shoal-it-cc",
    }
    cfg.update({k.replace("_", "."): v for k, v in config.items()})
    consumer = Consumer(cfg)
    try:
        consumer.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        out: list[Rec] = []

        def poll_once():
            for m in consumer.consume(num_messages=1000, timeout=0.2):
                if m.error() is not None:
                    if m.error().code() == KafkaError._PARTITION_EOF:
                        continue
                    raise KafkaException(m.error())
                out.append(
                    Rec(m.partition(), m.key(), m.value(), tuple(m.headers() or ()), m.timestamp()[1], m.offset())
                )

        _poll_until(poll_once, lambda: len(out) >= expected, timeout_s, settle_s)
        return out
    finally:
        consumer.close()


# -- aiokafka -------------------------------------------------------------------------


def _run_async(coro, timeout_s: float):
    async def bounded():
        return await asyncio.wait_for(coro, timeout_s)

    return asyncio.run(bounded())


def produce_aiokafka(bootstrap: str, topic: str, recs: list[Rec], timeout_s: float = 60, **config) -> list[int]:
    from aiokafka import AIOKafkaProducer

    cfg = dict(bootstrap_servers=bootstrap, linger_ms=5, request_timeout_ms=15_000, client_id="shoal-it-ak")
    cfg.update(config)

    async def run():
        producer = AIOKafkaProducer(**cfg)
        await producer.start()
        try:
            futures = [
                await producer.send(
                    topic,
                    value=r.value,
                    key=r.key,
                    partition=r.partition,
                    timestamp_ms=r.timestamp,
                    headers=list(r.headers),
                )
                for r in recs
            ]
            return [(await f).offset for f in futures]
        finally:
            await producer.stop()

    return _run_async(run(), timeout_s)


def consume_aiokafka(
    bootstrap: str,
    topic: str,
    partitions: int,
    expected: int,
    timeout_s: float = CALL_TIMEOUT_S,
    settle_s: float = 0.5,
    **config,
) -> list[Rec]:
    from aiokafka import AIOKafkaConsumer, TopicPartition

    cfg = dict(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        request_timeout_ms=15_000,
        fetch_max_wait_ms=100,
        client_id="shoal-it-ac",
    )
    cfg.update(config)

    async def run():
        consumer = AIOKafkaConsumer(**cfg)
        await consumer.start()
        try:
            tps = [TopicPartition(topic, p) for p in range(partitions)]
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            out: list[Rec] = []
            deadline = time.monotonic() + timeout_s
            settle_end = None
            while time.monotonic() < deadline:
                if len(out) >= expected:
                    settle_end = settle_end or min(deadline, time.monotonic() + settle_s)
                    if time.monotonic() >= settle_end:
                        break
                for batch in (await consumer.getmany(timeout_ms=200)).values():
                    for m in batch:
                        out.append(Rec(m.partition, m.key, m.value, tuple(m.headers or ()), m.timestamp, m.offset))
            return out
        finally:
            await consumer.stop()

    return _run_async(run(), timeout_s + 20)


PRODUCERS = {"kafka-python": produce_kafka_python, "confluent": produce_confluent, "aiokafka": produce_aiokafka}
CONSUMERS = {"kafka-python": consume_kafka_python, "confluent": consume_confluent, "aiokafka": consume_aiokafka}


# -- raw protocol ----------------------------------------------------------------------


class RawConnection:
    """One plain TCP connection speaking Kafka frames, for requests no client would send.

    Uses kafka-python's message classes to encode/decode well-formed requests; anything
    else is sent as bytes.
    """

    def __init__(self, address: str, timeout_s: float = 5.0):
        host, port = address.rsplit(":", 1)
        self.sock = socket.create_connection((host, int(port)), timeout=timeout_s)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.timeout_s = timeout_s
        self.correlation_id = 0

    @classmethod
    def wrap(cls, sock: socket.socket, timeout_s: float = 5.0) -> "RawConnection":
        """Use an already connected socket (e.g. in the proxy self-tests)."""
        conn = cls.__new__(cls)
        conn.sock, conn.timeout_s, conn.correlation_id = sock, timeout_s, 0
        return conn

    def close(self) -> None:
        self.sock.close()

    def __enter__(self) -> "RawConnection":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def send_raw(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _recv_exact(self, n: int) -> bytes | None:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(n - len(buf))
            if not chunk:
                return None
            buf += chunk
        return bytes(buf)

    def recv_frame(self, timeout_s: float | None = None) -> bytes | None:
        """The next response frame without its length prefix; None if the peer closed.
        Raises socket.timeout if nothing arrives in time."""
        self.sock.settimeout(timeout_s or self.timeout_s)
        try:
            head = self._recv_exact(4)
            if head is None:
                return None
            (size,) = struct.unpack(">i", head)
            return self._recv_exact(size)
        except ConnectionResetError:
            return None

    def closed_by_peer(self, timeout_s: float = 5.0) -> bool:
        """True if the broker closes (or resets) the connection within the timeout,
        discarding anything it sends first."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.sock.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                if not self.sock.recv(65536):
                    return True
            except (ConnectionResetError, BrokenPipeError):
                return True
            except (socket.timeout, TimeoutError):
                return False
        return False

    def send_request(self, request, version: int, client_id: str = "shoal-it-raw") -> int:
        self.correlation_id += 1
        request.with_header(correlation_id=self.correlation_id, client_id=client_id)
        self.send_raw(bytes(request.encode(version=version, header=True, framed=True)))
        return self.correlation_id

    def request(self, request, version: int, timeout_s: float | None = None):
        """Send a request and decode its response (checking the correlation id)."""
        cid = self.send_request(request, version)
        frame = self.recv_frame(timeout_s)
        if frame is None:
            raise ConnectionError(
                f"broker closed the connection instead of answering {type(request).__name__} v{version}"
            )
        response_class = _response_class(request)
        response = response_class.decode(frame, version=version, header=True)
        got = response.header.correlation_id
        assert got == cid, f"correlation id {got} != {cid}"
        return response


def _response_class(request):
    import kafka.protocol.admin as admin
    import kafka.protocol.consumer as consumer
    import kafka.protocol.metadata as metadata
    import kafka.protocol.producer as producer

    name = type(request).__name__.split("_v")[0].replace("Request", "Response")
    for module in (metadata, producer, consumer, admin):
        if hasattr(module, name):
            return getattr(module, name)
    raise LookupError(name)


def api_versions(address: str, version: int = 3, timeout_s: float = 5.0) -> dict[int, tuple[int, int]]:
    """ApiVersions on a fresh connection: {api_key: (min_version, max_version)}."""
    from kafka.protocol.metadata import ApiVersionsRequest

    kwargs = {"client_software_name": "shoal-it", "client_software_version": "1"} if version >= 3 else {}
    with RawConnection(address, timeout_s) as conn:
        resp = conn.request(ApiVersionsRequest(**kwargs), version)
    assert resp.error_code == 0, f"ApiVersions v{version} error {resp.error_code}"
    return {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}


def pick_version(versions: dict[int, tuple[int, int]], request_class, cap: int) -> int:
    """The highest version both the broker and kafka-python know, at most `cap`."""
    lo, hi = versions[request_class.API_KEY]
    v = min(hi, request_class.max_version, cap)
    assert v >= lo, f"{request_class.__name__}: broker range {lo}..{hi}, cap {cap}"
    return v


def build_batch(
    records: list[tuple[bytes | None, bytes | None]],
    *,
    timestamp_ms: int | None = None,
    timestamps: list[int] | None = None,
    compression: int = 0,
    transactional: bool = False,
    producer_id: int = -1,
    producer_epoch: int = -1,
    base_sequence: int = -1,
) -> bytes:
    """A magic-2 batch with base offset 0 (the broker assigns offsets); one timestamp
    for all records, or one per record; idempotent or transactional with a producer id."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    ts = timestamp_ms if timestamp_ms is not None else int(time.time() * 1000)
    builder = DefaultRecordBatchBuilder(
        magic=2,
        compression_type=compression,
        is_transactional=transactional,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        base_sequence=base_sequence,
        batch_size=1 << 30,
    )
    for i, (key, value) in enumerate(records):
        builder.append(i, timestamp=timestamps[i] if timestamps else ts, key=key, value=value, headers=[])
    return bytes(builder.build())


def build_legacy_batch(records: list[tuple[bytes | None, bytes | None]], magic: int = 1) -> bytes:
    from kafka.record.legacy_records import LegacyRecordBatchBuilder

    builder = LegacyRecordBatchBuilder(magic=magic, compression_type=0, batch_size=1 << 30)
    ts = int(time.time() * 1000)
    for i, (key, value) in enumerate(records):
        builder.append(i, timestamp=ts if magic else None, key=key, value=value)
    return bytes(builder.build())


def raw_produce(conn: RawConnection, versions, topic: str, partition: int, records: bytes, acks: int = -1):
    """One Produce request with `records` as the partition's record bytes; returns
    (error_code, base_offset) of that partition."""
    from kafka.protocol.producer import ProduceRequest

    v = pick_version(versions, ProduceRequest, cap=12)  # v13+ addresses topics by id
    P = ProduceRequest.TopicProduceData
    req = ProduceRequest(
        transactional_id=None,
        acks=acks,
        timeout_ms=10_000,
        topic_data=[P(name=topic, partition_data=[P.PartitionProduceData(index=partition, records=records)])],
    )
    resp = conn.request(req, v, timeout_s=15)
    part = resp.responses[0].partition_responses[0]
    return part.error_code, part.base_offset


def raw_fetch(
    conn: RawConnection,
    versions,
    topic: str,
    partition: int,
    offset: int,
    *,
    max_wait_ms: int = 0,
    min_bytes: int = 1,
    max_bytes: int = 50 << 20,
    timeout_s: float = 15,
):
    """One Fetch; returns the partition's response data."""
    from kafka.protocol.consumer import FetchRequest

    v = pick_version(versions, FetchRequest, cap=12)  # v13+ addresses topics by id
    T = FetchRequest.FetchTopic
    req = FetchRequest(
        replica_id=-1,
        max_wait_ms=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        isolation_level=0,
        session_id=0,
        session_epoch=-1,
        topics=[
            T(
                topic=topic,
                partitions=[
                    T.FetchPartition(
                        partition=partition,
                        current_leader_epoch=-1,
                        fetch_offset=offset,
                        log_start_offset=-1,
                        partition_max_bytes=max_bytes,
                    )
                ],
            )
        ],
        forgotten_topics_data=[],
        rack_id="",
    )
    resp = conn.request(req, v, timeout_s=timeout_s)
    assert resp.error_code == 0, f"Fetch top-level error {resp.error_code}"
    return resp.responses[0].partitions[0]


def decode_records(data) -> list:
    """Records of a Fetch response's record set (kafka-python checks CRCs on the way)."""
    from kafka.record.memory_records import MemoryRecords

    if not data:
        return []
    out = []
    records = MemoryRecords(bytes(data))
    while True:
        batch = records.next_batch()
        if batch is None:
            break
        assert batch.validate_crc(), "batch with bad CRC in a fetch response"
        out.extend(batch)
    return out


# -- admin: create topics (returning the wire error code) and describe configs ---------


def create_topics_kafka_python(
    bootstrap: str, name: str, partitions: int = 1, configs: dict[str, str] | None = None
) -> int:
    admin = kp_admin(bootstrap)
    try:
        result = admin.create_topics(
            {name: {"num_partitions": partitions, "replication_factor": 1, "configs": configs or {}}},
            timeout_ms=10_000,
            raise_errors=False,
        )
        (topic,) = result["topics"]
        return topic["error_code"]
    finally:
        admin.close()


def create_topics_confluent(
    bootstrap: str, name: str, partitions: int = 1, configs: dict[str, str] | None = None
) -> int:
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import NewTopic

    admin = ck_admin(bootstrap)
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=1, config=configs or {})],
        operation_timeout=10,
        request_timeout=15,
    )
    try:
        futures[name].result(timeout=CALL_TIMEOUT_S)
        return 0
    except KafkaException as exc:
        return exc.args[0].code()


def create_topics_aiokafka(
    bootstrap: str, name: str, partitions: int = 1, configs: dict[str, str] | None = None
) -> int:
    from aiokafka.admin import AIOKafkaAdminClient, NewTopic

    async def run():
        admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap, request_timeout_ms=15_000)
        await admin.start()
        try:
            resp = await admin.create_topics(
                [NewTopic(name, partitions, 1, topic_configs=configs or {})], timeout_ms=10_000
            )
            (entry,) = resp.topic_errors  # (name, error_code[, error_message])
            return entry[1]
        finally:
            await admin.close()

    return _run_async(run(), CALL_TIMEOUT_S)


ADMINS = {
    "kafka-python": create_topics_kafka_python,
    "confluent": create_topics_confluent,
    "aiokafka": create_topics_aiokafka,
}


def wait_topic_ready(bootstrap: str, name: str) -> None:
    admin = kp_admin(bootstrap)
    try:
        admin.wait_for_topics([name], timeout_ms=10_000)
    finally:
        admin.close()


def describe_topic_configs_kafka_python(bootstrap: str, topic: str) -> dict[str, str | None]:
    from kafka.admin import ConfigResource, ConfigResourceType

    admin = kp_admin(bootstrap)
    try:
        res = admin.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)], config_filter="all")
        return {k: v["value"] for k, v in res["topic"][topic].items()}
    finally:
        admin.close()


def describe_topic_configs_confluent(bootstrap: str, topic: str) -> dict[str, str | None]:
    from confluent_kafka.admin import ConfigResource, ResourceType

    admin = ck_admin(bootstrap)
    futures = admin.describe_configs([ConfigResource(ResourceType.TOPIC, topic)], request_timeout=15)
    (future,) = futures.values()
    return {k: e.value for k, e in future.result(timeout=CALL_TIMEOUT_S).items()}


DESCRIBE_CONFIGS = {"kafka-python": describe_topic_configs_kafka_python, "confluent": describe_topic_configs_confluent}


# -- ListOffsets through each client -----------------------------------------------------


def list_offsets_kafka_python(bootstrap: str, topic: str, partition: int, timestamps: list[int]):
    """{"earliest": int, "latest": int, "by_ts": {ts: (offset, timestamp) | None}}"""
    from kafka import KafkaConsumer, TopicPartition

    tp = TopicPartition(topic, partition)
    consumer = KafkaConsumer(
        bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False, request_timeout_ms=15_000
    )
    try:
        t = 15_000
        by_ts = {}
        for ts in timestamps:
            found = consumer.offsets_for_times({tp: ts}, timeout_ms=t)[tp]
            by_ts[ts] = None if found is None else (found.offset, found.timestamp)
        return {
            "earliest": consumer.beginning_offsets([tp], timeout_ms=t)[tp],
            "latest": consumer.end_offsets([tp], timeout_ms=t)[tp],
            "by_ts": by_ts,
        }
    finally:
        consumer.close(autocommit=False)


def list_offsets_confluent(bootstrap: str, topic: str, partition: int, timestamps: list[int]):
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"shoal-it-{uuid.uuid4().hex[:8]}", "enable.auto.commit": False}
    )
    try:
        by_ts = {}
        for ts in timestamps:
            (found,) = consumer.offsets_for_times([TopicPartition(topic, partition, ts)], timeout=15)
            assert found.error is None, found.error
            # librdkafka reports "no such record" as OFFSET_END (-1); no timestamp is exposed
            by_ts[ts] = None if found.offset < 0 else (found.offset, None)
        low, high = consumer.get_watermark_offsets(TopicPartition(topic, partition), timeout=15, cached=False)
        return {"earliest": low, "latest": high, "by_ts": by_ts}
    finally:
        consumer.close()


def list_offsets_aiokafka(bootstrap: str, topic: str, partition: int, timestamps: list[int]):
    from aiokafka import AIOKafkaConsumer, TopicPartition

    tp = TopicPartition(topic, partition)

    async def run():
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap, group_id=None, enable_auto_commit=False, request_timeout_ms=15_000
        )
        await consumer.start()
        try:
            by_ts = {}
            for ts in timestamps:
                found = (await consumer.offsets_for_times({tp: ts}))[tp]
                by_ts[ts] = None if found is None else (found.offset, found.timestamp)
            return {
                "earliest": (await consumer.beginning_offsets([tp]))[tp],
                "latest": (await consumer.end_offsets([tp]))[tp],
                "by_ts": by_ts,
            }
        finally:
            await consumer.stop()

    return _run_async(run(), CALL_TIMEOUT_S)


LIST_OFFSETS = {
    "kafka-python": list_offsets_kafka_python,
    "confluent": list_offsets_confluent,
    "aiokafka": list_offsets_aiokafka,
}


# -- a producer that keeps sending while the test does something to the broker -------------


class BackgroundProducer:
    """kafka-python (idempotent, acks=all) sending values b"%08d" % seq round-robin over
    partitions from a thread, at a modest rate, until stopped or `max_records` sent.
    `acked[partition]` lists (seq, offset) in ack order."""

    def __init__(self, bootstrap: str, topic: str, partitions: int, max_records: int = 200_000, **config):
        from kafka import KafkaProducer

        cfg = dict(
            bootstrap_servers=bootstrap,
            linger_ms=5,
            request_timeout_ms=5_000,
            max_block_ms=2_000,
            delivery_timeout_ms=20_000,
            reconnect_backoff_max_ms=500,
            client_id="shoal-it-bg",
        )
        cfg.update(config)
        self.producer = KafkaProducer(**cfg)
        self.topic, self.partitions, self.max_records = topic, partitions, max_records
        self.acked: dict[int, list[tuple[int, int]]] = defaultdict(list)
        self.failed = 0  # records that were sent and then failed (the delivery errback)
        self.refused = 0  # send() raised: never sent (broker gone, buffer full, metadata timeout)
        self.sent = 0
        self.close_error: Exception | None = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name="bg-producer", daemon=True)

    def start(self) -> "BackgroundProducer":
        self._thread.start()
        return self

    def acked_count(self) -> int:
        with self._lock:
            return sum(len(v) for v in self.acked.values())

    def assert_all_delivered(self) -> None:
        """After close(): every record that was sent got acknowledged; none failed and the
        final flush completed."""
        assert self.close_error is None, f"the final flush failed: {self.close_error!r}"
        with self._lock:
            acked = sum(len(v) for v in self.acked.values())
            assert self.failed == 0, f"{self.failed} of {self.sent} sent records failed"
            assert acked == self.sent, f"{acked} of {self.sent} sent records acknowledged"

    def _on_ack(self, seq, md) -> None:
        with self._lock:
            self.acked[md.partition].append((seq, md.offset))

    def _on_error(self, _exc) -> None:
        with self._lock:
            self.failed += 1

    def _run(self) -> None:
        for seq in range(self.max_records):
            if self._stop.is_set():
                return
            try:
                f = self.producer.send(self.topic, value=b"%08d" % seq, partition=seq % self.partitions)
            except Exception:  # noqa: BLE001 - broker gone: buffer full / metadata timeout
                with self._lock:
                    self.refused += 1
                time.sleep(0.05)
                continue
            f.add_callback(lambda md, seq=seq: self._on_ack(seq, md))
            f.add_errback(self._on_error)
            self.sent += 1
            if seq % 50 == 49:
                time.sleep(0.005)  # keep the rate modest (~10k records/s at most)

    def halt(self, timeout_s: float = 10.0) -> None:
        """Stop sending new records (pending ones stay in the producer)."""
        self._stop.set()
        self._thread.join(timeout_s)

    def close(self, timeout_s: float = 30.0) -> None:
        """Halt, then flush what is pending and close. kafka-python's close() raises if the
        flush times out (e.g. the broker is gone); that is recorded, not raised."""
        self.halt()
        try:
            self.producer.close(timeout=timeout_s)
        except Exception as exc:  # noqa: BLE001
            self.close_error = exc
            self.producer._sender.force_close()  # no public way to give up on a flush


def read_all(bootstrap: str, topic: str, partitions: int, timeout_s: float = 60) -> dict[int, list[Rec]]:
    """Every record of the topic up to each partition's log end offset, per partition."""
    ends = [list_offsets_kafka_python(bootstrap, topic, p, [])["latest"] for p in range(partitions)]
    got = by_partition(consume_confluent(bootstrap, topic, partitions, sum(ends), timeout_s=timeout_s))
    out = {p: got.get(p, []) for p in range(partitions)}
    for p in range(partitions):
        assert len(out[p]) == ends[p], f"partition {p}: read {len(out[p])} records, log end offset {ends[p]}"
    return out


def check_sequences(per_partition: dict[int, list[Rec]], acked: dict[int, list[tuple[int, int]]]) -> None:
    """Values are b"%08d" % seq: each partition's seqs strictly increase (no duplicate, no
    reordering), offsets are dense, and every acknowledged (seq, offset) is there."""
    for p, recs in per_partition.items():
        offsets = [r.offset for r in recs]
        assert offsets == list(range(len(recs))), f"partition {p}: offsets not dense from 0"
        seqs = [int(r.value) for r in recs]
        bad = [i for i in range(1, len(seqs)) if seqs[i] <= seqs[i - 1]]
        assert not bad, (
            f"partition {p}: order broken/duplicates at offsets {bad[:10]} "
            f"(seqs around: {seqs[max(0, bad[0] - 3) : bad[0] + 3]})"
        )
        stored = dict(zip(offsets, seqs))
        missing = [(s, o) for s, o in acked.get(p, []) if stored.get(o) != s]
        assert not missing, (
            f"partition {p}: {len(missing)} acknowledged records missing or moved, e.g. (seq, offset) {missing[:5]}"
        )
