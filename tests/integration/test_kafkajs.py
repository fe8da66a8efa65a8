"""kafkajs against the broker, through the node scripts in tests/js (installed by `make
install`/`make test` with `npm ci`). kafkajs has no manual assignment: every read goes through
the consumer-group path (FindCoordinator, JoinGroup, SyncGroup, Heartbeat, OffsetFetch,
OffsetCommit, LeaveGroup).

Covered: kafkajs's own produce -> consume round trip (keys, values incl. null and empty,
repeated and empty headers, timestamps, partitions, order, offsets, committed group offsets)
uncompressed and with snappy and lz4 (the add-on codecs); records produced by kafkajs (also
gzip) and read by each Python client; records produced by Python clients (compressed too) and
read by kafkajs; kafkajs's read_committed default (and aiokafka's read_committed) after a
transactional producer's commits and abort.

Without node or the installed packages these tests skip, except under CI=true where they fail:
CI must run them.
"""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from tests.gates import missing

from .clients import CONSUMERS, PRODUCERS, Rec, assert_same_records, create_topic, make_records, unique_topic

pytestmark = pytest.mark.integration

JS_DIR = Path(__file__).resolve().parents[1] / "js"
NODE_TIMEOUT_S = 60


@pytest.fixture(scope="module")
def node():
    """The node binary, once kafkajs and the codecs are installed under tests/js."""
    node_bin = shutil.which("node")
    why = None
    if node_bin is None:
        why = "node is not installed"
    else:
        for pkg in ("kafkajs", "kafkajs-snappy", "kafkajs-lz4"):
            if not (JS_DIR / "node_modules" / pkg / "package.json").exists():
                why = (
                    f"{pkg} is not installed in {JS_DIR}/node_modules (run `make install`, or `cd tests/js && npm ci`)"
                )
                break
    if why:
        missing(f"kafkajs tests cannot run: {why}")
    return node_bin


def run_node(
    node: str, script: str, spec: dict, stdin: str | None = None, timeout_s: float = NODE_TIMEOUT_S
) -> list[dict]:
    """Run tests/js/<script> with a deadline; its stdout JSON lines."""
    try:
        done = subprocess.run(
            [node, str(JS_DIR / script), json.dumps(spec)],
            input=stdin,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            cwd=JS_DIR,
        )
    except subprocess.TimeoutExpired as exc:
        raise AssertionError(
            f"{script} did not finish within {timeout_s}s\nstderr: {(exc.stderr or b'')[-3000:]!r}"
        ) from None
    tail = done.stderr[-4000:]
    assert done.returncode == 0, f"{script} exited with {done.returncode}\nstderr:\n{tail}"
    lines = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    assert lines and lines[-1].get("done"), f"{script} printed no final line\nstderr:\n{tail}"
    return lines


def _b64(b: bytes | None) -> str | None:
    return None if b is None else base64.b64encode(b).decode()


def _unb64(s: str | None) -> bytes | None:
    return None if s is None else base64.b64decode(s)


def rec_to_json(r: Rec) -> dict:
    return {
        "partition": r.partition,
        "key": _b64(r.key),
        "value": _b64(r.value),
        "headers": [[k, _b64(v)] for k, v in r.headers],
        "timestamp": r.timestamp,
    }


def rec_from_json(d: dict) -> Rec:
    return Rec(
        d["partition"],
        _unb64(d["key"]),
        _unb64(d["value"]),
        tuple((k, _unb64(v)) for k, v in d["headers"]),
        d["timestamp"],
        d["offset"],
    )


def kafkajs_produce(
    node: str, bootstrap: str, topic: str, recs: list[Rec], codec: str = "none", create_partitions: int | None = None
) -> list[int]:
    spec = {
        "bootstrap": bootstrap,
        "topic": topic,
        "codec": codec,
        "timeoutMs": 30_000,
        "create": {"partitions": create_partitions} if create_partitions else None,
    }
    lines = run_node(node, "produce.js", spec, stdin=json.dumps([rec_to_json(r) for r in recs]))
    acks = lines[:-1]
    assert len(acks) == len(recs)
    assert [a["partition"] for a in acks] == [r.partition for r in recs]
    return [a["offset"] for a in acks]


def kafkajs_consume(
    node: str,
    bootstrap: str,
    topic: str,
    expected: int,
    group: str | None = None,
    timeout_s: float = 30,
    read_uncommitted: bool = False,
) -> list[Rec]:
    spec = {
        "readUncommitted": read_uncommitted,
        "bootstrap": bootstrap,
        "topic": topic,
        "expected": expected,
        "group": group or f"kafkajs-{uuid.uuid4().hex[:10]}",
        "timeoutMs": int(timeout_s * 1000),
        "settleMs": 500,
    }
    lines = run_node(node, "consume_group.js", spec, timeout_s=timeout_s + 30)
    final = lines[-1]
    recs = [rec_from_json(d) for d in lines[:-1]]
    assert final["count"] == len(recs)
    assert not final["timedOut"], f"kafkajs read {len(recs)} of {expected} records before its timeout"
    return recs


def assert_dense_acks(recs: list[Rec], offsets: list[int]) -> None:
    per_p: dict[int, list[int]] = {}
    for r, o in zip(recs, offsets):
        per_p.setdefault(r.partition, []).append(o)
    for p, offs in per_p.items():
        assert offs == list(range(len(offs))), f"partition {p}: acked offsets {offs[:20]}"


@pytest.mark.parametrize("codec", ["none", "snappy", "lz4"])
def test_kafkajs_roundtrip(node, module_broker, codec):
    """kafkajs creates the topic, produces, and reads everything back in a consumer group:
    every field, per-partition order, dense offsets from 0; then the next member of the same
    group reads only the records produced after that (kafkajs committed its offsets)."""
    bs = module_broker.bootstrap
    topic = unique_topic(f"js-rt-{codec}")
    recs = make_records(40, partitions=3, tag=f"js-{codec}")
    offsets = kafkajs_produce(node, bs, topic, recs, codec=codec, create_partitions=3)
    assert_dense_acks(recs, offsets)
    group = unique_topic("js-group")
    got = kafkajs_consume(node, bs, topic, len(recs), group=group)
    assert_same_records(recs, got)
    for p in range(3):
        offs = [r.offset for r in got if r.partition == p]
        assert offs == list(range(len(offs))), f"partition {p}: offsets {offs}"

    # The group committed its offsets: the next member of the group reads only newer records.
    more = make_records(6, partitions=3, tag=f"js-{codec}-more")
    more_offsets = kafkajs_produce(node, bs, topic, more, codec=codec)
    again = kafkajs_consume(node, bs, topic, len(more), group=group)
    assert_same_records(more, again)
    assert sorted((r.partition, r.offset) for r in again) == sorted(
        (r.partition, o) for r, o in zip(more, more_offsets)
    )


@pytest.mark.parametrize("codec", ["none", "gzip", "snappy", "lz4"])
def test_kafkajs_produces_python_reads(node, module_broker, codec):
    """Records produced by kafkajs are read identically by kafka-python, confluent-kafka and
    aiokafka (manual assignment)."""
    bs = module_broker.bootstrap
    topic = unique_topic(f"js-to-py-{codec}")
    create_topic(bs, topic, partitions=3)
    recs = make_records(45, partitions=3, tag=f"jspy-{codec}")
    offsets = kafkajs_produce(node, bs, topic, recs, codec=codec)
    assert_dense_acks(recs, offsets)
    for name, consume in CONSUMERS.items():
        got = consume(bs, topic, 3, len(recs), settle_s=0.2)
        assert_same_records(recs, got)


@pytest.mark.parametrize(
    "producer,codec", [("kafka-python", "none"), ("confluent", "snappy"), ("aiokafka", "lz4"), ("kafka-python", "gzip")]
)
def test_python_produces_kafkajs_reads(node, module_broker, producer, codec):
    """Records produced by a Python client (compressed with `codec`) are read identically by
    kafkajs."""
    bs = module_broker.bootstrap
    topic = unique_topic(f"py-to-js-{producer}-{codec}")
    create_topic(bs, topic, partitions=3)
    recs = make_records(45, partitions=3, tag=f"pyjs-{codec}")
    config = {}
    if codec != "none":
        config = {"compression.type" if producer == "confluent" else "compression_type": codec}
    PRODUCERS[producer](bs, topic, recs, **config)
    got = kafkajs_consume(node, bs, topic, len(recs))
    assert_same_records(recs, got)


@pytest.mark.parametrize("diskless", ["false", "true"])
def test_read_committed_kafkajs_and_aiokafka(node, module_broker, diskless):  # type: ignore[no-untyped-def]
    """A librdkafka transactional producer commits, aborts, commits (and leaves one more
    transaction open): kafkajs (read_committed by default) and aiokafka read_committed see
    the committed records, in order, and nothing of the aborted or open transactions;
    read_uncommitted they see every data record."""
    from confluent_kafka import Producer

    from .clients import consume_aiokafka

    bootstrap = module_broker.bootstrap
    topic = unique_topic("js-txn")
    create_topic(bootstrap, topic, partitions=1, configs={"diskless.enable": diskless})
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": f"js-txn-{diskless}", "linger.ms": 5})
    producer.init_transactions(15)
    for tag, commit in (("a", True), ("b", False), ("c", True), ("d", None)):
        producer.begin_transaction()
        for i in range(3):
            producer.produce(topic, key=b"k", value=f"{tag}{i}".encode(), partition=0)
        producer.flush(15)
        if commit is True:
            producer.commit_transaction(15)
        elif commit is False:
            producer.abort_transaction(15)
    committed = [f"{t}{i}".encode() for t in "ac" for i in range(3)]
    everything = [f"{t}{i}".encode() for t in "abcd" for i in range(3)]
    assert [r.value for r in kafkajs_consume(node, bootstrap, topic, len(committed))] == committed
    assert [
        r.value for r in consume_aiokafka(bootstrap, topic, 1, len(committed), isolation_level="read_committed")
    ] == committed
    uncommitted = kafkajs_consume(node, bootstrap, topic, len(everything), read_uncommitted=True)
    assert sorted(r.value for r in uncommitted) == sorted(everything)
    assert sorted(r.value for r in consume_aiokafka(bootstrap, topic, 1, len(everything))) == sorted(everything)
    producer.abort_transaction(15)
