"""Versioned metadata records and the keys they live under (one module for all keys)."""

from __future__ import annotations

import msgspec

RECORD_VERSION = 1
CLUSTER_KEY = "cluster"
PRODUCER_ID_KEY = "producer-ids/next"
TOPIC_PREFIX = "topics/"


class UnknownRecordVersion(ValueError):
    """A metadata record written by a newer broker."""


class ClusterRecord(msgspec.Struct, frozen=True):
    version: int
    cluster_id: str


class TopicRecord(msgspec.Struct, frozen=True):
    version: int
    name: str
    topic_id: str
    partitions: int
    configs: dict[str, str]
    internal: bool = False


class ProducerIdBlockRecord(msgspec.Struct, frozen=True):
    version: int
    next_producer_id: int


def topic_key(name: str) -> str:
    return TOPIC_PREFIX + name


def encode(record: msgspec.Struct) -> bytes:
    return msgspec.json.encode(record)


def decode(data: bytes, kind: type[msgspec.Struct]):  # type: ignore[no-untyped-def]
    record = msgspec.json.decode(data, type=kind)
    if record.version != RECORD_VERSION:
        raise UnknownRecordVersion(f"{kind.__name__} version {record.version} is not supported "
                                   f"(this broker reads version {RECORD_VERSION})")
    return record
