"""Every validation of broker and topic configuration, at its boundary: the lowest (and for
32-bit ints the highest) accepted value and one step past it, with the expected limits written
out here (Kafka's, or Shoal's documented ones), so a check that is dropped or moved fails."""

from __future__ import annotations

import pytest

from broker.config import ConfigError, load_config
from broker.protocol.errors import ApiError, ErrorCode
from broker.topic_config import TOPIC_CONFIGS, validate_overrides

INT_MAX = 2**31 - 1
LONG_MAX = 2**63 - 1

# topic config -> (lowest accepted, highest accepted or None for Long.MAX)
TOPIC_RANGES = {
    "retention.ms": (-1, None),
    "retention.bytes": (-1, None),
    "local.retention.ms": (-2, None),
    "local.retention.bytes": (-2, None),
    "segment.bytes": (14, INT_MAX),
    "segment.ms": (1, None),
    "segment.index.bytes": (4, INT_MAX),
    "index.interval.bytes": (0, INT_MAX),
    "max.message.bytes": (0, INT_MAX),
    "min.insync.replicas": (1, INT_MAX),
    "message.timestamp.before.max.ms": (0, None),
    "message.timestamp.after.max.ms": (0, None),
    "flush.messages": (1, None),
    "flush.ms": (0, None),
    "segment.jitter.ms": (0, None),
    "file.delete.delay.ms": (0, None),
    "delete.retention.ms": (0, None),
    "min.compaction.lag.ms": (0, None),
    "max.compaction.lag.ms": (1, None),
    "compression.lz4.level": (1, 17),
    "compression.zstd.level": (-131072, 22),
}
THROTTLED = (["", "*", "0:1,1:2", " 0:1 , 2:3 "], ["1", "*,0:1", "a:b", "0:1,x"])
TOPIC_CHOICES = {
    "cleanup.policy": (["delete"], ["compact", "compact,delete", "delete,compact", "Delete", ""]),
    "message.timestamp.type": (["CreateTime", "LogAppendTime"], ["createtime", "Whenever", ""]),
    "diskless.enable": (["true", "false", "TRUE", " false "], ["yes", "1", ""]),
    "remote.storage.enable": (["true", "false"], ["yes", ""]),
    "unclean.leader.election.enable": (["true", "false"], ["yes", ""]),
    "preallocate": (["true", "false"], ["yes", ""]),
    "remote.log.copy.disable": (["true", "false"], ["yes", ""]),
    "remote.log.delete.on.disable": (["true", "false"], ["yes", ""]),
    "compression.type": (
        ["producer", "uncompressed", "gzip", "snappy", "lz4", "zstd"],
        ["none", "GZIP", "brotli", ""],
    ),
    "compression.gzip.level": (["-1", "1", "9"], ["0", "-2", "10", "six"]),
    "min.cleanable.dirty.ratio": (["0", "0.5", "1", "1.0"], ["-0.1", "1.01", "half"]),
    "leader.replication.throttled.replicas": THROTTLED,
    "follower.replication.throttled.replicas": THROTTLED,
}


def test_every_topic_config_is_covered_here() -> None:
    assert set(TOPIC_RANGES) | set(TOPIC_CHOICES) == set(TOPIC_CONFIGS)


def refused(overrides: dict) -> ApiError:
    with pytest.raises(ApiError) as info:
        validate_overrides(overrides)
    assert info.value.code == ErrorCode.INVALID_CONFIG
    return info.value


@pytest.mark.parametrize("name", sorted(TOPIC_RANGES))
def test_topic_config_ranges(name: str) -> None:
    low, high = TOPIC_RANGES[name]
    assert validate_overrides({name: str(low)}) == {name: str(low)}
    assert validate_overrides({name: str(high if high is not None else LONG_MAX)})
    assert name in refused({name: str(low - 1)}).message
    if high is not None:
        assert name in refused({name: str(high + 1)}).message
    assert "Not a number" in refused({name: "ten"}).message


@pytest.mark.parametrize("name", sorted(TOPIC_CHOICES))
def test_topic_config_choices(name: str) -> None:
    good, bad = TOPIC_CHOICES[name]
    for value in good:
        assert validate_overrides({name: value})
    for value in bad:
        assert name in refused({name: value}).message


def test_compaction_lags_are_checked_against_each_other() -> None:
    """Kafka's LogConfig.validateValues, the one rule across two keys."""
    assert validate_overrides({"min.compaction.lag.ms": "5", "max.compaction.lag.ms": "5"})
    message = refused({"min.compaction.lag.ms": "6", "max.compaction.lag.ms": "5"}).message
    assert message == "conflict topic config setting min.compaction.lag.ms (6) > max.compaction.lag.ms (5)"


def test_unknown_and_null_topic_configs_are_refused() -> None:
    assert "Unknown topic config name: no.such" in refused({"no.such": "1"}).message
    assert "Null value" in refused({"retention.ms": None}).message


# broker config key -> lowest accepted value (and None: no lower bound checked beyond the type)
BROKER_MINIMUMS = {
    "node.id": 0,
    "object.store.max.concurrency": 1,
    "wal.buffer.max.bytes": 1024,
    "wal.linger.ms": 0,
    "wal.commit.deadline.ms": 1,
    "cache.max.bytes": 0,
    "socket.request.max.bytes": 1,
    "connections.max.idle.ms": 1,
    "queued.max.requests": 1,
    "num.partitions": 1,
    "default.replication.factor": 1,
    "log.segment.bytes": 14,
    "log.roll.ms": 1,
    "log.retention.ms": -1,
    "log.retention.bytes": -1,
    "log.flush.interval.messages": 1,
    "log.flush.interval.ms": 0,
    "log.index.interval.bytes": 0,
    "log.index.size.max.bytes": 4,
    "message.max.bytes": 0,
    "min.insync.replicas": 1,
    "log.message.timestamp.before.max.ms": 0,
    "log.message.timestamp.after.max.ms": 0,
    "broker.session.timeout.ms": 2000,
    "broker.heartbeat.interval.ms": 1,
    "replica.lag.time.max.ms": 1,
    "replica.fetch.max.bytes": 1,
    "replica.fetch.wait.max.ms": 0,
    "replica.fetch.backoff.ms": 0,
    "leader.imbalance.check.interval.seconds": 1,
    "offsets.topic.replication.factor": 1,
    "offsets.topic.num.partitions": 1,
    "offsets.topic.segment.bytes": 14,
    "offsets.topic.compaction.min.records": 1,
    "offsets.commit.timeout.ms": 1,
    "offsets.retention.minutes": 1,
    "offsets.retention.check.interval.ms": 1,
    "offset.metadata.max.bytes": 0,
    "group.initial.rebalance.delay.ms": 0,
    "group.min.session.timeout.ms": 0,
    "group.max.session.timeout.ms": 0,
    "group.max.size": 1,
    "log.retention.check.interval.ms": 1,
    "log.flush.scheduler.interval.ms": 1,
    "producer.id.expiration.ms": 1,
    "producer.id.expiration.check.interval.ms": 1,
}
# Settings other keys need so that the key under test is the only thing off.
CONTEXT = {
    "wal.buffer.max.bytes": {"wal.max.inflight.bytes": "1024"},
    "broker.heartbeat.interval.ms": {"broker.session.timeout.ms": "2000"},
    "broker.session.timeout.ms": {"broker.heartbeat.interval.ms": "1"},
}


def load(**overrides: str):  # type: ignore[no-untyped-def]
    return load_config(overrides=overrides, environ={})


@pytest.mark.parametrize("key", sorted(BROKER_MINIMUMS))
def test_broker_config_minimums(key: str) -> None:
    low = BROKER_MINIMUMS[key]
    context = CONTEXT.get(key, {})
    assert getattr(load(**context, **{key: str(low)}), key.replace(".", "_")) == low
    with pytest.raises(ConfigError, match=key.replace(".", r"\.")):
        load(**context, **{key: str(low - 1)})


def test_wal_inflight_must_hold_a_buffer() -> None:
    assert load(**{"wal.buffer.max.bytes": "4096", "wal.max.inflight.bytes": "4096"})
    with pytest.raises(ConfigError, match=r"wal\.max\.inflight\.bytes \(4095\) must be at least wal\.buffer"):
        load(**{"wal.buffer.max.bytes": "4096", "wal.max.inflight.bytes": "4095"})


def test_heartbeat_interval_must_be_below_the_session_timeout() -> None:
    assert load(**{"broker.session.timeout.ms": "6000", "broker.heartbeat.interval.ms": "5999"})
    for interval in ("6000", "6001"):
        with pytest.raises(ConfigError, match=r"broker\.heartbeat\.interval\.ms .* must be below broker\.session"):
            load(**{"broker.session.timeout.ms": "6000", "broker.heartbeat.interval.ms": interval})


def test_etcd_metadata_needs_an_rpc_listener() -> None:
    assert load(metadata="etcd://127.0.0.1:2379/x", **{"rpc.listen": "127.0.0.1:0"})
    with pytest.raises(ConfigError, match=r"rpc\.listen is required with etcd metadata"):
        load(metadata="etcd://127.0.0.1:2379/x")


@pytest.mark.parametrize("metadata", ["zookeeper://x", "local", "etcd:/x", ""])
def test_metadata_url_scheme(metadata: str) -> None:
    with pytest.raises(ConfigError, match="metadata must be local: or etcd://"):
        load(metadata=metadata)


def test_stateless_needs_etcd_and_a_shared_store_and_no_data_dir() -> None:
    shared = {
        "metadata": "etcd://127.0.0.1:2379/x",
        "rpc.listen": "127.0.0.1:0",
        "object.store": "s3://bucket/prefix?endpoint=http://127.0.0.1:1",
    }
    config = load(stateless="true", **shared)
    assert config.stateless and config.data_dir is None
    with pytest.raises(ConfigError, match="--stateless and data.dir are exclusive"):
        load(stateless="true", **{"data.dir": "/tmp/somewhere"}, **shared)
    for missing in ("metadata", "object.store"):
        partial = {k: v for k, v in shared.items() if k != missing}
        with pytest.raises(ConfigError, match="a stateless broker keeps nothing locally"):
            load(stateless="true", **partial)


@pytest.mark.parametrize("key", ["listen", "advertise", "metrics.listen", "rpc.listen", "rpc.advertise"])
@pytest.mark.parametrize("value", ["localhost", ":9092", "host:", "host:65536", "host:x"])
def test_addresses_must_be_host_port(key: str, value: str) -> None:
    assert load(**{key: "127.0.0.1:65535"})
    with pytest.raises(ConfigError, match=rf"{key.replace('.', '[.]')} must be HOST:PORT"):
        load(**{key: value})


@pytest.mark.parametrize("value", ["CreateTime", "LogAppendTime"])
def test_broker_timestamp_type(value: str) -> None:
    assert load(**{"log.message.timestamp.type": value}).log_message_timestamp_type == value
    with pytest.raises(ConfigError, match="log.message.timestamp.type must be CreateTime or LogAppendTime"):
        load(**{"log.message.timestamp.type": value.lower()})
