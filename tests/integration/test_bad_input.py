"""Bad input over raw sockets against a running broker. After every example the broker must
still answer ApiVersions on a fresh connection and a topic written earlier must still be
fully readable (DESIGN.md invariant 6). Degenerate bodies for every advertised version go
through dispatch in-process (tests/unit/test_degenerate_requests.py)."""

from __future__ import annotations

import socket
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from .clients import (
    RawConnection,
    api_versions,
    build_batch,
    build_legacy_batch,
    create_topic,
    decode_records,
    pick_version,
    raw_fetch,
    raw_produce,
    unique_topic,
)

pytestmark = pytest.mark.integration

CORRUPT_MESSAGE = 2
UNSUPPORTED_VERSION = 35
UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
INVALID_RECORD = 87
MESSAGE_TOO_LARGE = 10
# APIs a mutated frame must not turn into: they could delete or reconfigure the canary topic.
DESTRUCTIVE_API_KEYS = {20, 21, 33, 44}  # DeleteTopics, DeleteRecords, AlterConfigs, IncrementalAlterConfigs

# Fresh random inputs on every run (each run explores new ones; a failure prints the falsifying
# example and a @reproduce_failure blob to replay it, and `--hypothesis-seed=N` replays a run).
# No example database: CI starts clean anyway, and a local one would replay old failures first.
HYPOTHESIS = settings(
    max_examples=50,
    deadline=None,
    derandomize=False,
    database=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)


@pytest.fixture(scope="module")
def canary(module_broker):
    """A topic written before any bad input, with its expected values."""
    bs = module_broker.bootstrap
    topic = unique_topic("canary")
    create_topic(bs, topic, partitions=1)
    versions = api_versions(bs)
    values = []
    with RawConnection(bs) as conn:
        for b in range(3):
            batch_values = [f"canary-{b}-{i}".encode() for i in range(10)]
            assert raw_produce(conn, versions, topic, 0, build_batch([(None, v) for v in batch_values]))[0] == 0
            values += batch_values
    return topic, values


@pytest.fixture(scope="module")
def scratch(module_broker):
    """A topic the bad-batch tests write to (so the canary only ever gets valid data)."""
    topic = unique_topic("scratch")
    create_topic(module_broker.bootstrap, topic, partitions=1)
    return topic


def assert_healthy(broker, canary) -> dict:
    topic, values = canary
    assert broker.running(), "broker process died"
    versions = api_versions(broker.bootstrap)  # a fresh connection
    with RawConnection(broker.bootstrap) as conn:
        part = raw_fetch(conn, versions, topic, 0, 0)
    assert part.error_code == 0 and part.high_watermark == len(values)
    assert [r.value for r in decode_records(part.records)] == values
    return versions


def send_bytes(address: str, data: bytes, observe_s: float = 0.3) -> str:
    """Send raw bytes on a new connection, then read (and discard) whatever comes back for
    up to `observe_s`. Returns "closed" if the broker closed the connection, else "open"."""
    with RawConnection(address) as conn:
        try:
            conn.send_raw(data)
        except (BrokenPipeError, ConnectionResetError):
            return "closed"
        return "closed" if conn.closed_by_peer(observe_s) else "open"


def frame(payload: bytes) -> bytes:
    return struct.pack(">i", len(payload)) + payload


def request_header(api_key: int, version: int, correlation_id: int = 1, client_id: bytes = b"bad") -> bytes:
    """A v1 (non-flexible) request header."""
    return struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id


def valid_frames(versions: dict, scratch: str) -> list[bytes]:
    """Well-formed requests of several APIs and versions, to mutate."""
    from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest
    from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest
    from kafka.protocol.producer import ProduceRequest

    def enc(req, v):
        req.with_header(correlation_id=7, client_id="mut")
        return bytes(req.encode(version=v, header=True, framed=True))

    out = [
        enc(ApiVersionsRequest(), 0),
        enc(ApiVersionsRequest(client_software_name="m", client_software_version="1"), 3),
    ]
    mv = pick_version(versions, MetadataRequest, 12)
    for v in sorted({1, mv}):
        out.append(
            enc(
                MetadataRequest(
                    topics=[MetadataRequest.MetadataRequestTopic(name=scratch)], allow_auto_topic_creation=False
                ),
                v,
            )
        )
    P = ProduceRequest.TopicProduceData
    pv = pick_version(versions, ProduceRequest, 12)
    out.append(
        enc(
            ProduceRequest(
                transactional_id=None,
                acks=-1,
                timeout_ms=1000,
                topic_data=[
                    P(
                        name=scratch,
                        partition_data=[P.PartitionProduceData(index=0, records=build_batch([(b"k", b"mutant")]))],
                    )
                ],
            ),
            pv,
        )
    )
    T = FetchRequest.FetchTopic
    fv = pick_version(versions, FetchRequest, 12)
    out.append(
        enc(
            FetchRequest(
                replica_id=-1,
                max_wait_ms=0,
                min_bytes=1,
                max_bytes=1 << 20,
                isolation_level=0,
                session_id=0,
                session_epoch=-1,
                topics=[
                    T(
                        topic=scratch,
                        partitions=[
                            T.FetchPartition(
                                partition=0, fetch_offset=0, log_start_offset=-1, partition_max_bytes=1 << 20
                            )
                        ],
                    )
                ],
                forgotten_topics_data=[],
                rack_id="",
            ),
            fv,
        )
    )
    L = ListOffsetsRequest.ListOffsetsTopic
    lv = pick_version(versions, ListOffsetsRequest, 9)
    out.append(
        enc(
            ListOffsetsRequest(
                replica_id=-1,
                isolation_level=0,
                topics=[L(name=scratch, partitions=[L.ListOffsetsPartition(partition_index=0, timestamp=-1)])],
            ),
            lv,
        )
    )
    return out


# -- random and mutated frames ----------------------------------------------------------


@HYPOTHESIS
@given(payload=st.binary(max_size=400))
def test_random_frames(module_broker, canary, payload):
    if len(payload) >= 2 and struct.unpack(">h", payload[:2])[0] in DESTRUCTIVE_API_KEYS:
        payload = b"\x7f" + payload[1:]
    send_bytes(module_broker.bootstrap, frame(payload))
    assert_healthy(module_broker, canary)


@HYPOTHESIS
@given(data=st.data())
def test_random_bodies_for_advertised_apis(module_broker, canary, data):
    """A well-formed header for an advertised API and version, then a random body: reaches
    every request decoder, not just the framing."""
    versions = api_versions(module_broker.bootstrap)
    key = data.draw(st.sampled_from(sorted(set(versions) - DESTRUCTIVE_API_KEYS)), label="api_key")
    lo, hi = versions[key]
    version = data.draw(st.integers(lo, hi), label="version")
    body = data.draw(st.binary(max_size=300), label="body")
    send_bytes(module_broker.bootstrap, frame(request_header(key, version, client_id=b"fuzz") + body))
    assert_healthy(module_broker, canary)


@HYPOTHESIS
@given(data=st.data())
def test_mutated_frames(module_broker, canary, scratch, data):
    versions = api_versions(module_broker.bootstrap)
    base = bytearray(data.draw(st.sampled_from(valid_frames(versions, scratch)), label="frame")[4:])
    for _ in range(data.draw(st.integers(1, 4), label="mutations")):
        kind = data.draw(st.sampled_from(["flip", "set", "insert", "delete", "truncate"]))
        pos = data.draw(st.integers(0, max(0, len(base) - 1)))
        if kind == "flip" and base:
            base[pos] ^= 1 << data.draw(st.integers(0, 7))
        elif kind == "set" and base:
            base[pos] = data.draw(st.sampled_from([0x00, 0xFF, 0x7F, 0x80]))
        elif kind == "insert":
            base[pos:pos] = data.draw(st.binary(min_size=1, max_size=8))
        elif kind == "delete":
            del base[pos : pos + data.draw(st.integers(1, 8))]
        elif kind == "truncate":
            del base[pos:]
    if len(base) >= 2 and struct.unpack(">h", bytes(base[:2]))[0] in DESTRUCTIVE_API_KEYS:
        base[0] = 0x7F
    send_bytes(module_broker.bootstrap, frame(bytes(base)))
    assert_healthy(module_broker, canary)


# -- lying length prefixes ----------------------------------------------------------------


def test_length_larger_than_data_then_close(module_broker, canary):
    versions = assert_healthy(module_broker, canary)
    real = valid_frames(versions, canary[0])[0][4:]
    with RawConnection(module_broker.bootstrap) as conn:
        conn.send_raw(struct.pack(">i", len(real) + 1000) + real)
    assert_healthy(module_broker, canary)


@pytest.mark.parametrize(
    "length",
    [-1, -(2**31), 0, 3, 2**31 - 1, 200 * 1024 * 1024],
    ids=["minus1", "int32min", "zero", "shorter-than-header", "int32max", "200MiB"],
)
def test_bad_length_prefix_closes_connection(module_broker, canary, length):
    """Negative, empty, too-short-for-a-header and over-the-limit (> socket.request.max.bytes,
    100 MiB by default) frames close that connection; nothing else is affected."""
    body = b"\x00\x12\x00\x00\x00\x00\x00\x01" if length > 0 else b""
    body = body[:length] if 0 < length < len(body) else body
    assert send_bytes(module_broker.bootstrap, struct.pack(">i", length) + body, observe_s=5) == "closed"
    assert_healthy(module_broker, canary)


def test_huge_length_is_not_buffered(module_broker, canary):
    """A frame announcing 200 MiB is refused up front: the broker closes the connection
    while the client is still sending, instead of buffering it."""
    with RawConnection(module_broker.bootstrap) as conn:
        conn.send_raw(struct.pack(">i", 200 * 1024 * 1024))
        sent = 0
        try:
            for _ in range(64):  # at most 64 MiB, then give up
                conn.sock.sendall(b"\0" * (1 << 20))
                sent += 1
        except (BrokenPipeError, ConnectionResetError, socket.timeout, TimeoutError):
            pass
        assert sent < 64 or conn.closed_by_peer(5), "broker kept reading a 200 MiB frame"
    assert_healthy(module_broker, canary)


# -- unknown APIs and versions ------------------------------------------------------------


def test_api_versions_unknown_version_answers_v0_unsupported(module_broker, canary):
    """The client-facing contract (CLIENTS.md): UNSUPPORTED_VERSION in the v0 body format,
    listing the supported ranges, so the client can retry lower."""
    from kafka.protocol.metadata import ApiVersionsResponse

    versions = assert_healthy(module_broker, canary)
    for v in (versions[18][1] + 1, 99, 32767):
        with RawConnection(module_broker.bootstrap) as conn:
            conn.send_raw(frame(request_header(18, v, correlation_id=42) + b"\x00" * 8))
            data = conn.recv_frame(5)
        assert data is not None, f"ApiVersions v{v}: connection closed instead of an answer"
        resp = ApiVersionsResponse.decode(data, version=0, header=True)
        assert resp.header.correlation_id == 42
        assert resp.error_code == UNSUPPORTED_VERSION, f"ApiVersions v{v}: error {resp.error_code}"
        assert {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys} == versions


def test_api_versions_every_version_agrees(module_broker, canary):
    """ApiVersions v0..max (what each client sends first) all list the same ranges."""
    versions = assert_healthy(module_broker, canary)
    lo, hi = versions[18]
    assert lo == 0 and hi >= 3, f"ApiVersions range {lo}..{hi}: librdkafka needs v3, aiokafka v0"
    for v in range(lo, hi + 1):
        assert api_versions(module_broker.bootstrap, version=v) == versions, f"ApiVersions v{v}"


@pytest.mark.parametrize(
    "api_key,version", [(9999, 0), (-1, 0), (32767, 3), (0, 99), (1, 99), (3, 99), (3, 32767), (1, -1)]
)
def test_unknown_api_or_version(module_broker, canary, api_key, version):
    """Either UNSUPPORTED_VERSION (answered with the request's correlation id) or a closed
    connection; the broker keeps serving either way."""
    with RawConnection(module_broker.bootstrap) as conn:
        conn.send_raw(frame(request_header(api_key, version, correlation_id=77) + b"\x00" * 16))
        try:
            data = conn.recv_frame(5)
        except (socket.timeout, TimeoutError):
            pytest.fail(f"api_key={api_key} v{version}: no answer and connection left open")
    if data is not None:
        assert struct.unpack(">i", data[:4])[0] == 77, "answer with a wrong correlation id"
        # The body layout of an unknown API/version is undefined; look for the code anywhere.
        assert struct.pack(">h", UNSUPPORTED_VERSION) in data[4:], (
            f"answer without UNSUPPORTED_VERSION: {data[:32].hex()}"
        )
    assert_healthy(module_broker, canary)


# -- corrupt batches ----------------------------------------------------------------------


def _high_watermark(broker, topic: str, versions) -> int:
    with RawConnection(broker.bootstrap) as conn:
        return raw_fetch(conn, versions, topic, 0, 0).high_watermark


def _recompute_crc(batch: bytearray) -> bytearray:
    from kafka.record._crc32c import crc as crc32c

    struct.pack_into(">I", batch, 17, crc32c(bytes(batch[21:])))
    return batch


def test_bad_crc_is_corrupt_message(module_broker, canary, scratch):
    versions = assert_healthy(module_broker, canary)
    hw = _high_watermark(module_broker, scratch, versions)
    batch = bytearray(build_batch([(b"k", b"value-with-bad-crc")]))
    batch[-1] ^= 0xFF  # inside the CRC-covered part
    with RawConnection(module_broker.bootstrap) as conn:
        assert raw_produce(conn, versions, scratch, 0, bytes(batch))[0] == CORRUPT_MESSAGE
        # The same connection keeps working.
        assert raw_produce(conn, versions, scratch, 0, build_batch([(b"k", b"good")])) == (0, hw)
    assert _high_watermark(module_broker, scratch, versions) == hw + 1
    assert_healthy(module_broker, canary)


@pytest.mark.parametrize("magic", [0, 1])
def test_old_magic_is_unsupported_for_message_format(module_broker, canary, scratch, magic):
    versions = assert_healthy(module_broker, canary)
    hw = _high_watermark(module_broker, scratch, versions)
    with RawConnection(module_broker.bootstrap) as conn:
        err, _ = raw_produce(conn, versions, scratch, 0, build_legacy_batch([(b"k", b"old")], magic=magic))
    assert err == UNSUPPORTED_FOR_MESSAGE_FORMAT
    assert _high_watermark(module_broker, scratch, versions) == hw
    assert_healthy(module_broker, canary)


@pytest.mark.parametrize(
    "field", ["record_count", "last_offset_delta", "batch_length_short", "batch_length_long", "trailing_garbage"]
)
def test_inconsistent_batch_is_rejected(module_broker, canary, scratch, field):
    """Batches whose header disagrees with their records (CRC recomputed where it covers the
    change) are rejected with CORRUPT_MESSAGE or INVALID_RECORD and not stored."""
    versions = assert_healthy(module_broker, canary)
    hw = _high_watermark(module_broker, scratch, versions)
    batch = bytearray(build_batch([(b"k", b"a"), (b"k", b"b"), (b"k", b"c")]))
    if field == "record_count":
        struct.pack_into(">i", batch, 57, 5)
        _recompute_crc(batch)
    elif field == "last_offset_delta":
        struct.pack_into(">i", batch, 23, 7)
        _recompute_crc(batch)
    elif field == "batch_length_short":
        struct.pack_into(">i", batch, 8, struct.unpack_from(">i", batch, 8)[0] - 5)
    elif field == "batch_length_long":
        struct.pack_into(">i", batch, 8, struct.unpack_from(">i", batch, 8)[0] + 5)
    elif field == "trailing_garbage":
        batch += b"\x01\x02\x03"
    with RawConnection(module_broker.bootstrap) as conn:
        err, _ = raw_produce(conn, versions, scratch, 0, bytes(batch))
    assert err in (CORRUPT_MESSAGE, INVALID_RECORD), f"{field}: error {err}"
    assert _high_watermark(module_broker, scratch, versions) == hw
    assert_healthy(module_broker, canary)


@HYPOTHESIS
@given(data=st.data())
def test_mutated_batches(module_broker, canary, scratch, data):
    """Any byte mutation of a batch is either accepted as a valid batch (fields outside the
    CRC: base offset, leader epoch) or rejected with a batch error code; the partition stays
    readable, with valid CRCs, by a real client."""
    versions = api_versions(module_broker.bootstrap)
    batch = bytearray(build_batch([(b"key", b"value-%d" % i) for i in range(3)]))
    for _ in range(data.draw(st.integers(1, 3), label="mutations")):
        pos = data.draw(st.integers(0, len(batch) - 1), label="pos")
        batch[pos] = data.draw(st.integers(0, 255).filter(lambda b, p=pos: b != batch[p]), label="byte")
    with RawConnection(module_broker.bootstrap) as conn:
        err, _ = raw_produce(conn, versions, scratch, 0, bytes(batch))
        assert err in (0, CORRUPT_MESSAGE, INVALID_RECORD, UNSUPPORTED_FOR_MESSAGE_FORMAT, MESSAGE_TOO_LARGE), (
            f"unexpected error {err}"
        )
        part = raw_fetch(conn, versions, scratch, 0, 0)
    stored = decode_records(part.records)  # checks every stored batch's CRC
    assert [r.offset for r in stored] == list(range(part.high_watermark))
    assert_healthy(module_broker, canary)


def test_scratch_topic_readable_by_client_after_all(module_broker, canary, scratch):
    """Runs last in this module: everything the bad-batch tests got accepted is readable by
    kafka-python (which checks CRCs), offsets dense."""
    from .clients import consume_kafka_python

    versions = assert_healthy(module_broker, canary)
    hw = _high_watermark(module_broker, scratch, versions)
    got = consume_kafka_python(module_broker.bootstrap, scratch, 1, hw, check_crcs=True)
    assert [r.offset for r in got] == list(range(hw))


def test_no_internal_errors_logged(module_broker, canary):
    """Runs last: bad input may close connections, but must never reach a handler as an
    ill-typed request (a traceback / "internal error" in the broker log)."""
    assert_healthy(module_broker, canary)
    lines = module_broker.log_path.read_text(errors="replace").splitlines()
    bad = [l for l in lines if "internal error" in l or "handler for API" in l]
    assert not bad, f"{len(bad)} internal errors while handling bad input, e.g.:\n" + "\n".join(bad[:10])
