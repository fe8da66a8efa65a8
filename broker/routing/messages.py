"""AZ-routing RPC messages (msgspec, versioned): what a broker asks another on behalf of a
client it serves without hosting the partition. Entry reads for a broker without a replica
(reads/remote.py asks, reads/read_service.py answers) and Kafka partition requests
sent on to the leader (routing/request_forwarding.py asks, dispatch.py answers). Versioned apart
from replica fetching (replication/messages.py); every message is tagged, so the peer RPC
decodes them and the replication messages with one union (peer_service.py).
"""

from __future__ import annotations

import msgspec

ROUTING_VERSION = 1
READ_COMMITTED = 1  # ReadPartition.isolation_level


class ReadPartition(msgspec.Struct, array_like=True, frozen=True):
    topic_id: str
    partition: int
    fetch_offset: int
    max_bytes: int
    # 1: read_committed: entries up to the replica's last stable offset, and the aborted
    # transactions of the range. Trailing with a default: older peers send and skip it.
    isolation_level: int = 0


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
    # The offset lies in a tiered segment: its description (remote_segments.py RemoteSegment,
    # msgpack), and the asking broker reads the segment from the object store itself.
    tiered: bytes = b""
    # The replica's last stable offset (-1 from a replica that predates transactions), and
    # for read_committed the aborted transactions overlapping the entries: [producer id,
    # first offset, last offset].
    last_stable_offset: int = -1
    aborted: list[tuple[int, int, int]] = []


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
