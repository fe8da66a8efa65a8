"""Versioned metadata records and the keys they live under (one module for all keys)."""

from __future__ import annotations

from typing import TypeVar

import msgspec

from ..partition_ids import TopicIdPartition

RECORD_VERSION = 1
CLUSTER_KEY = "cluster"
PRODUCER_ID_KEY = "producer-ids/next"
TOPIC_PREFIX = "topics/"
BROKER_PREFIX = "brokers/"
CONTROLLER_KEY = "controller"
PARTITION_PREFIX = "partitions/"
NO_LEADER = -1


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
    # The mode its partitions had when created (their mode until a mode marker); None in
    # records written before topics could switch, whose diskless.enable never changed.
    created_diskless: bool | None = None


class ProducerIdBlockRecord(msgspec.Struct, frozen=True):
    version: int
    next_producer_id: int


class BrokerRecord(msgspec.Struct, frozen=True):
    """A live broker: written with the broker's lease, so it vanishes when the broker does."""

    version: int
    node_id: int
    az: str | None
    host: str  # Kafka listener, as advertised to clients
    port: int
    rpc_host: str | None  # inter-broker RPC listener; None for a broker that has none
    rpc_port: int
    stateless: bool
    software_version: str
    incarnation: str  # new on every start: a restart is a new registration
    # Controlled shutdown under way: still serving, but the controller moves its leaderships
    # away and never gives it new ones, nor does it stand for controller. Absent (False) in
    # records written before controlled shutdown; older brokers ignore the field.
    draining: bool = False


class ControllerRecord(msgspec.Struct, frozen=True):
    """The elected controller: written with its lease, created only when absent."""

    version: int
    node_id: int
    incarnation: str


class PartitionStateRecord(msgspec.Struct, frozen=True):
    """Assignment and leadership of one partition. Changed only by compare-and-set on the
    key's revision: the controller elects leaders, the leader changes the ISR."""

    version: int
    replicas: list[int]  # assignment; the first is the preferred leader
    leader: int  # NO_LEADER when no eligible replica is alive
    leader_epoch: int
    isr: list[int]
    partition_epoch: int = 0  # bumped by every change, as KRaft does
    # The mode its leader switched it to and the offset of that switch's mode marker, once
    # committed (modes/switch.py); None / -1: the topic's creation mode, never switched.
    diskless: bool | None = None
    mode_offset: int = -1


def topic_key(name: str) -> str:
    return TOPIC_PREFIX + name


def broker_key(node_id: int) -> str:
    return f"{BROKER_PREFIX}{node_id}"


def partition_key(topic_id: str, index: int) -> str:
    return f"{PARTITION_PREFIX}{topic_id}/{index}"


def parse_partition_key(key: str) -> TopicIdPartition:
    """The partition a partition-state key names."""
    topic_id, _, index = key[len(PARTITION_PREFIX) :].rpartition("/")
    return TopicIdPartition(topic_id, int(index))


def encode(record: msgspec.Struct) -> bytes:
    return msgspec.json.encode(record)


Record = TypeVar(
    "Record", ClusterRecord, TopicRecord, ProducerIdBlockRecord, BrokerRecord, ControllerRecord, PartitionStateRecord
)


def decode(data: bytes, kind: type[Record]) -> Record:
    record = msgspec.json.decode(data, type=kind)
    if record.version != RECORD_VERSION:
        raise UnknownRecordVersion(
            f"{kind.__name__} version {record.version} is not supported (this broker reads version {RECORD_VERSION})"
        )
    return record
