"""Replication RPC messages (msgspec, versioned): a follower fetches partition-log entries
from the leader, as Kafka's replica Fetch does. Entries travel exactly as the leader stores
them: (entry kind, 61-byte batch header with offset and leader epoch + payload), so a
diskless entry costs about 120 bytes on the wire whatever the size of its batch.
"""

from __future__ import annotations

import msgspec

REPLICATION_VERSION = 1
NO_DIVERGENCE = -1


class FetchPartition(msgspec.Struct, array_like=True, frozen=True):
    topic_id: str
    partition: int
    fetch_offset: int  # the follower's log end offset
    last_fetched_epoch: int  # leader epoch of the follower's last entry; -1 if none
    current_leader_epoch: int  # the epoch the follower believes the leader has


class ReplicaFetchRequest(msgspec.Struct, tag="replica_fetch", array_like=True, frozen=True):
    version: int
    replica_id: int
    max_wait_ms: int
    max_bytes: int
    partitions: list[FetchPartition]


class FetchedPartition(msgspec.Struct, array_like=True, frozen=True):
    topic_id: str
    partition: int
    error_code: int
    high_watermark: int
    log_start_offset: int
    diverging_epoch: int = NO_DIVERGENCE  # with diverging_end_offset: where the logs part
    diverging_end_offset: int = NO_DIVERGENCE
    entries: list[tuple[int, bytes]] = []


class ReplicaFetchResponse(msgspec.Struct, tag="replica_fetch_response", array_like=True, frozen=True):
    version: int
    partitions: list[FetchedPartition]


class ReadPartition(msgspec.Struct, array_like=True, frozen=True):
    topic_id: str
    partition: int
    fetch_offset: int
    max_bytes: int


class ReplicaReadRequest(msgspec.Struct, tag="replica_read", array_like=True, frozen=True):
    """A broker without a replica of a diskless partition asks one (in its own AZ) for the
    committed entries of an offset range, then reads the batches from the object store."""

    version: int
    max_wait_ms: int
    partitions: list[ReadPartition]


class ReadResult(msgspec.Struct, array_like=True, frozen=True):
    topic_id: str
    partition: int
    error_code: int
    high_watermark: int
    log_start_offset: int
    entries: list[tuple[int, bytes]] = []


class ReplicaReadResponse(msgspec.Struct, tag="replica_read_response", array_like=True, frozen=True):
    version: int
    partitions: list[ReadResult]


class KafkaForwardRequest(msgspec.Struct, tag="kafka_forward", array_like=True, frozen=True):
    """A Kafka request (ListOffsets, OffsetForLeaderEpoch) about diskless partitions that the
    broker the client asked does not host, sent on to one that does; the body is the Kafka
    encoding of the request for `api_version`."""

    version: int
    api_key: int
    api_version: int
    client_id: str | None
    body: bytes


class KafkaForwardResponse(msgspec.Struct, tag="kafka_forward_response", array_like=True, frozen=True):
    version: int
    body: bytes  # the Kafka encoding of the response
