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
    # The follower's log start offset across tiers, which DeleteRecords waits for (-1: unknown,
    # a follower of an older version).
    log_start_offset: int = -1


class ReplicaFetchRequest(msgspec.Struct, tag="replica_fetch", array_like=True, frozen=True):
    version: int
    replica_id: int
    max_wait_ms: int
    max_bytes: int
    partitions: list[FetchPartition]  # in a session: only those whose position changed
    # Replica fetch sessions (fetch_sessions.py); the defaults are a sessionless request, as a
    # follower from before sessions sends it (msgspec ignores trailing fields it does not know).
    session_id: int = 0
    session_epoch: int = -1
    forgotten: list[tuple[str, int]] = []  # (topic id, partition) no longer followed here


class FetchedPartition(msgspec.Struct, array_like=True, frozen=True):
    topic_id: str
    partition: int
    error_code: int
    high_watermark: int
    log_start_offset: int
    diverging_epoch: int = NO_DIVERGENCE  # with diverging_end_offset: where the logs part
    diverging_end_offset: int = NO_DIVERGENCE
    entries: list[tuple[int, bytes]] = []
    # With OFFSET_OUT_OF_RANGE below the leader's local log: the leader's tiered segments
    # (remote_segments.py snapshot), so a follower starting over there knows them too.
    remote_segments: bytes = b""
    modes: bytes = b""  # likewise its mode markers (log/modes.py snapshot)
    # The leader's log start offset across tiers (`log_start_offset` above is its local log's):
    # where DeleteRecords moved it, so followers serve nothing below it either. -1: unknown.
    partition_log_start_offset: int = -1
    # With OFFSET_OUT_OF_RANGE, also the leader's producer state at its log start
    # (producers/snapshot.py file bytes; empty: none): transactions open there, epochs and
    # sequences, which the entries above it assume
    producer_snapshot: bytes = b""


class ReplicaFetchResponse(msgspec.Struct, tag="replica_fetch_response", array_like=True, frozen=True):
    version: int
    partitions: list[FetchedPartition]  # in a session: only those with entries or news, and those named
    session_id: int = 0  # 0: no session (answered in full)
    error_code: int = 0  # FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH: start a new session
