"""An independent reader of Kafka's coordinator records, for the tests: the field lists of
Kafka's message definitions transcribed by hand here (not taken from the broker's codec, which
is kafka-python's compiled codec over its own transcription), and a small generic decoder
written from Kafka's protocol rules (docs "The Protocol": INT8..INT64, STRING and
COMPACT_STRING, NULLABLE_*, BYTES, ARRAY and COMPACT_ARRAY, UNSIGNED_VARINT, tagged fields).
What this reads is what Kafka's own tools would read.

Sources (Apache Kafka, trunk of 2024-10-25, 4.0.0-SNAPSHOT; Kafka 4.0 renamed the key's
"version" to a record type with the same bytes):
- group-coordinator/src/main/resources/common/message/OffsetCommitKey.json
- group-coordinator/src/main/resources/common/message/OffsetCommitValue.json
- group-coordinator/src/main/resources/common/message/GroupMetadataKey.json
- group-coordinator/src/main/resources/common/message/GroupMetadataValue.json
- transaction-coordinator/src/main/resources/common/message/TransactionLogKey.json
- transaction-coordinator/src/main/resources/common/message/TransactionLogValue.json
Framing: coordinator-common CoordinatorRecordSerde (key: int16 record type + key; value:
int16 version + value; null value: tombstone).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

ALL = (0, 0x7FFF)


@dataclass(frozen=True)
class F:
    """A field: name, type, versions [lo, hi], nullable from version, tag (tagged fields)."""

    name: str
    type: str
    lo: int = 0
    hi: int = 0x7FFF
    nullable_from: int | None = None
    tag: int | None = None
    fields: tuple["F", ...] = ()


@dataclass(frozen=True)
class Schema:
    name: str
    versions: tuple[int, int]
    flexible_from: int | None  # None: never flexible
    fields: tuple[F, ...] = field(default_factory=tuple)


# group-coordinator/.../OffsetCommitKey.json ("validVersions": "0-1", not flexible)
OFFSET_COMMIT_KEY = Schema(
    "OffsetCommitKey", (0, 1), None, (F("group", "string"), F("topic", "string"), F("partition", "int32"))
)
# group-coordinator/.../OffsetCommitValue.json ("0-4", flexible "4+")
OFFSET_COMMIT_VALUE = Schema(
    "OffsetCommitValue",
    (0, 4),
    4,
    (
        F("offset", "int64"),
        F("leaderEpoch", "int32", 3),
        F("metadata", "string"),
        F("commitTimestamp", "int64"),
        F("expireTimestamp", "int64", 1, 1),
    ),
)
# group-coordinator/.../GroupMetadataKey.json ("2", not flexible)
GROUP_METADATA_KEY = Schema("GroupMetadataKey", (2, 2), None, (F("group", "string"),))
# group-coordinator/.../GroupMetadataValue.json ("0-4", flexible "4+")
GROUP_METADATA_VALUE = Schema(
    "GroupMetadataValue",
    (0, 4),
    4,
    (
        F("protocolType", "string"),
        F("generation", "int32"),
        F("protocol", "string", nullable_from=0),
        F("leader", "string", nullable_from=0),
        F("currentStateTimestamp", "int64", 2),
        F(
            "members",
            "[]struct",
            fields=(
                F("memberId", "string"),
                F("groupInstanceId", "string", 3, nullable_from=3),
                F("clientId", "string"),
                F("clientHost", "string"),
                F("rebalanceTimeout", "int32", 1),
                F("sessionTimeout", "int32"),
                F("subscription", "bytes"),
                F("assignment", "bytes"),
            ),
        ),
    ),
)
# transaction-coordinator/.../TransactionLogKey.json ("0", not flexible)
TRANSACTION_LOG_KEY = Schema("TransactionLogKey", (0, 0), None, (F("TransactionalId", "string"),))
# transaction-coordinator/.../TransactionLogValue.json ("0-1", flexible "1+")
TRANSACTION_LOG_VALUE = Schema(
    "TransactionLogValue",
    (0, 1),
    1,
    (
        F("ProducerId", "int64"),
        F("PreviousProducerId", "int64", 1, tag=0),
        F("NextProducerId", "int64", 1, tag=1),
        F("ProducerEpoch", "int16"),
        F("TransactionTimeoutMs", "int32"),
        F("TransactionStatus", "int8"),
        F(
            "TransactionPartitions",
            "[]struct",
            nullable_from=0,
            fields=(F("Topic", "string"), F("PartitionIds", "[]int32")),
        ),
        F("TransactionLastUpdateTimestampMs", "int64"),
        F("TransactionStartTimestampMs", "int64"),
        F("ClientTransactionVersion", "int16", 1, tag=2),
    ),
)

# record type (the key's int16) -> (key schema, value schema), as each coordinator's serde maps them
GROUP_RECORDS = {
    0: (OFFSET_COMMIT_KEY, OFFSET_COMMIT_VALUE),
    1: (OFFSET_COMMIT_KEY, OFFSET_COMMIT_VALUE),
    2: (GROUP_METADATA_KEY, GROUP_METADATA_VALUE),
}
TRANSACTION_RECORDS = {0: (TRANSACTION_LOG_KEY, TRANSACTION_LOG_VALUE)}
RECORDS_BY_TOPIC = {"__consumer_offsets": GROUP_RECORDS, "__transaction_state": TRANSACTION_RECORDS}

_FIXED = {"int8": ">b", "int16": ">h", "int32": ">i", "int64": ">q"}


class Reader:
    def __init__(self, data: bytes) -> None:
        self.data, self.pos = data, 0

    def fixed(self, fmt: str) -> int:
        (value,) = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += struct.calcsize(fmt)
        return value

    def uvarint(self) -> int:
        value = shift = 0
        while True:
            byte = self.data[self.pos]
            self.pos += 1
            value |= (byte & 0x7F) << shift
            if not byte & 0x80:
                return value
            shift += 7

    def take(self, n: int) -> bytes:
        if self.pos + n > len(self.data):
            raise ValueError(f"{n} bytes wanted at {self.pos}, {len(self.data) - self.pos} left")
        out = self.data[self.pos : self.pos + n]
        self.pos += n
        return out

    def length(self, compact: bool, nullable: bool, width: str) -> int | None:
        """A string/bytes/array length: compact = unsigned varint N+1 (0 is null)."""
        n = self.uvarint() - 1 if compact else self.fixed(width)
        if n < 0:
            if not nullable:
                raise ValueError("null where the schema allows none")
            return None
        return n


def decode(schema: Schema, version: int, data: bytes) -> dict[str, Any]:
    """Decode `data` (without its version prefix) as `schema` at `version`; all bytes must be used."""
    lo, hi = schema.versions
    if not lo <= version <= hi:
        raise ValueError(f"{schema.name} has no version {version}")
    flexible = schema.flexible_from is not None and version >= schema.flexible_from
    reader = Reader(data)
    out = _struct(reader, schema.fields, version, flexible)
    if reader.pos != len(data):
        raise ValueError(f"{schema.name} v{version}: {len(data) - reader.pos} bytes left over")
    return out


def _struct(reader: Reader, fields: tuple[F, ...], version: int, flexible: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for f in fields:
        if f.tag is None and f.lo <= version <= f.hi:
            out[f.name] = _value(reader, f, version, flexible)
    if flexible:
        tagged = {f.tag: f for f in fields if f.tag is not None and f.lo <= version <= f.hi}
        out["_unknown_tags"] = {}
        for _ in range(reader.uvarint()):
            tag, size = reader.uvarint(), reader.uvarint()
            raw = reader.take(size)
            if tag in tagged:
                sub = Reader(raw)
                out[tagged[tag].name] = _value(sub, tagged[tag], version, flexible)
                assert sub.pos == size
            else:
                out["_unknown_tags"][tag] = raw
    return out


def _value(reader: Reader, f: F, version: int, flexible: bool) -> Any:
    nullable = f.nullable_from is not None and version >= f.nullable_from
    if f.type in _FIXED:
        return reader.fixed(_FIXED[f.type])
    if f.type in ("string", "bytes"):
        n = reader.length(flexible, nullable, ">h" if f.type == "string" else ">i")
        if n is None:
            return None
        raw = reader.take(n)
        return raw.decode("utf-8") if f.type == "string" else raw
    if f.type.startswith("[]"):
        n = reader.length(flexible, nullable, ">i")
        if n is None:
            return None
        if f.type == "[]struct":
            return [_struct(reader, f.fields, version, flexible) for _ in range(n)]
        return [reader.fixed(_FIXED[f.type[2:]]) for _ in range(n)]
    raise ValueError(f"type {f.type}")


@dataclass
class DecodedRecord:
    partition: int
    offset: int
    record_type: int
    key: dict[str, Any]
    value_version: int | None  # None: tombstone
    value: dict[str, Any] | None


def decode_record(
    records: dict[int, tuple[Schema, Schema]], partition: int, offset: int, key: bytes, value: bytes | None
) -> DecodedRecord:
    """One record of an internal topic; raises on anything Kafka's serde would not read."""
    (record_type,) = struct.unpack_from(">h", key)
    if record_type not in records:
        raise ValueError(
            f"partition {partition} offset {offset}: unknown record type {record_type} (key {key[:16].hex()})"
        )
    key_schema, value_schema = records[record_type]
    decoded_key = decode(key_schema, record_type, key[2:])
    if value is None:
        return DecodedRecord(partition, offset, record_type, decoded_key, None, None)
    (version,) = struct.unpack_from(">h", value)
    return DecodedRecord(partition, offset, record_type, decoded_key, version, decode(value_schema, version, value[2:]))


def read_internal_topic(bootstrap: str, topic: str, timeout_s: float = 30) -> list[DecodedRecord]:
    """Every record of every partition of `topic` from its log start, decoded (kafka-python
    consumer, read_uncommitted: transactional records too; control batches are the client's)."""
    import time

    from kafka import KafkaConsumer, TopicPartition

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False, group_id=None)
    try:
        partitions = consumer.partitions_for_topic(topic) or set()
        assert partitions, f"{topic} has no partitions"
        tps = [TopicPartition(topic, p) for p in sorted(partitions)]
        consumer.assign(tps)
        consumer.seek_to_beginning(*tps)
        ends = consumer.end_offsets(tps)
        out: list[DecodedRecord] = []
        deadline = time.monotonic() + timeout_s
        while any(consumer.position(tp) < ends[tp] for tp in tps):
            assert time.monotonic() < deadline, {tp.partition: (consumer.position(tp), ends[tp]) for tp in tps}
            for tp, msgs in consumer.poll(timeout_ms=500).items():
                out += [decode_record(RECORDS_BY_TOPIC[topic], tp.partition, m.offset, m.key, m.value) for m in msgs]
        return out
    finally:
        consumer.close()
