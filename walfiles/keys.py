"""Object keys: every key format Shoal writes to the object store, as `format_*`/`parse_*` pairs.

One module owns all key formats (STYLE 5) so that the writers (broker uploader, tiering jobs)
and the readers (fetch path, WAL file manager, tiering reads) can never disagree on a layout,
and so that a listing can be interpreted without guessing. Every number is zero-padded to a
fixed width, so lexicographic listing order (S3's order) is numeric order.

WAL objects (DESIGN "Formats")::

    <prefix>/wal/<cluster-id>/<created_ms:013d>-<node_id:010d>-<sequence:010d>

- ``created_ms``: wall-clock milliseconds since the epoch when the writer created the object.
  It comes first so that a listing is in creation order and the WAL file manager can list
  "everything created before T" (`wal_list_start_after`) without reading any object. 13 digits
  last until the year 2286.
- ``node_id``: the writing broker's node id (a non-negative Kafka int32, 10 digits). Node ids
  are unique among live brokers (a broker does not start while another process holds its
  node id's registration), so two brokers do not produce the same key, with no coordination;
  it also tells an operator who wrote an object.
- ``sequence``: a per-process counter of the writer (`WalKeyAllocator`), 10 digits, wrapping at
  10**10, starting at a random value in each process. Together with ``created_ms`` it separates
  objects the same broker creates within one millisecond, and the random start keeps apart
  the keys of two processes that share a node id and a millisecond (a duplicate node id, or a
  restart after the clock stepped back): colliding would take the same millisecond and the
  same counter value out of 10**10. Uploads are conditional anyway (the WAL writer never
  overwrites an object; it takes a fresh key), so uniqueness is not a safety assumption.

Why fixed-width decimal fields rather than a ULID: the creation time, the writer and the order
are readable in a plain `ls`, the format is trivially parsed without a base32 codec, and the
uniqueness a ULID buys with 80 random bits we get from the node id, which the cluster already
keeps unique. The price is 36 characters instead of 26, which is irrelevant next to S3's 1024.

Tiered segments (reserved here for tiering/, Kafka's remote-storage file set)::

    <prefix>/tiered/<cluster-id>/<topic-id>/<partition:010d>/<base_offset:020d>-<segment-uuid><suffix>

with ``<suffix>`` one of `SegmentFile` (``.log``, ``.index``, ``.timeindex``, ``.txnindex``,
``.snapshot``, ``.leader-epoch-checkpoint``, ``.manifest``). Topic id and segment id are
canonical lowercase UUID strings. All files of one segment share one stem, so they list
together and in offset order.

Tiering plans (a leader's instructions to a tiering job; deleted once the job is done)::

    <prefix>/tiering-plans/<cluster-id>/<plan-uuid>.plan

``<prefix>`` is the deployment's key prefix inside the bucket; it may be empty (keys then start
with ``wal/`` or ``tiered/``) or contain ``/``. Parsers split from the right, so a prefix may
even contain a ``wal`` or ``tiered`` segment. Malformed keys raise ValueError naming the key.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

WAL_DIR = "wal"
TIERED_DIR = "tiered"
PLANS_DIR = "tiering-plans"

CREATED_MS_DIGITS = 13
NODE_ID_DIGITS = 10
SEQUENCE_DIGITS = 10
PARTITION_DIGITS = 10
OFFSET_DIGITS = 20

MAX_CREATED_MS = 10**CREATED_MS_DIGITS - 1
MAX_NODE_ID = 2**31 - 1  # Kafka node ids are int32
SEQUENCE_MODULUS = 10**SEQUENCE_DIGITS
MAX_PARTITION = 2**31 - 1  # Kafka partitions are int32
MAX_OFFSET = 2**63 - 1  # Kafka offsets are int64

# Cluster ids are Kafka's 22-character base64url UUIDs in practice; accept any name that is
# safe as one key segment.
# All patterns are ASCII-only: `\d` would also match other scripts' digits.
_CLUSTER_ID = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]*", re.ASCII)
_WAL_ID = re.compile(rf"(\d{{{CREATED_MS_DIGITS}}})-(\d{{{NODE_ID_DIGITS}}})-(\d{{{SEQUENCE_DIGITS}}})", re.ASCII)
_UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
_PARTITION = re.compile(rf"\d{{{PARTITION_DIGITS}}}", re.ASCII)
_SEGMENT_NAME = re.compile(rf"(\d{{{OFFSET_DIGITS}}})-({_UUID})(\..+)", re.ASCII)
_UUID_RE = re.compile(_UUID, re.ASCII)


class SegmentFile(Enum):
    """The files of one tiered segment; the value is the key suffix. Part of the key format:
    never change a value."""

    LOG = ".log"
    OFFSET_INDEX = ".index"
    TIME_INDEX = ".timeindex"
    TXN_INDEX = ".txnindex"
    PRODUCER_SNAPSHOT = ".snapshot"
    LEADER_EPOCH_CHECKPOINT = ".leader-epoch-checkpoint"
    MANIFEST = ".manifest"


_SEGMENT_FILES = {f.value: f for f in SegmentFile}


@dataclass(frozen=True, slots=True)
class WalKey:
    """The parts of a WAL object key. Within one prefix and cluster, the lexicographic order of
    formatted keys is the order of `sort_key` (creation time, writer, sequence)."""

    prefix: str
    cluster_id: str
    created_ms: int
    node_id: int
    sequence: int

    @property
    def sort_key(self) -> tuple[int, int, int]:
        return (self.created_ms, self.node_id, self.sequence)

    @property
    def object_id(self) -> str:
        """The time-sortable id (last key segment): unique within the cluster."""
        return format_wal_id(self.created_ms, self.node_id, self.sequence)

    def format(self) -> str:
        return format_wal_key(self.prefix, self.cluster_id, self.created_ms, self.node_id, self.sequence)


@dataclass(frozen=True, slots=True)
class TieredSegmentKey:
    """The parts of a tiered-segment file key."""

    prefix: str
    cluster_id: str
    topic_id: uuid.UUID
    partition: int
    base_offset: int
    segment_id: uuid.UUID
    file: SegmentFile

    def format(self) -> str:
        return format_tiered_segment_key(
            self.prefix,
            self.cluster_id,
            self.topic_id,
            self.partition,
            self.base_offset,
            self.segment_id,
            self.file,
        )


# --- validation -----------------------------------------------------------------------------


def _check_prefix(prefix: str) -> str:
    if not isinstance(prefix, str):
        raise TypeError(f"key prefix must be str, not {type(prefix).__name__}")
    if prefix == "":
        return prefix
    for segment in prefix.split("/"):
        if segment in ("", ".", ".."):
            raise ValueError(
                f"key prefix {prefix!r} has an empty, '.' or '..' segment "
                "(use 'a/b' without leading, trailing or doubled '/', or '' for none)"
            )
    if "\x00" in prefix:
        raise ValueError(f"key prefix {prefix!r} contains NUL")
    return prefix


def _check_cluster_id(cluster_id: str) -> str:
    if not isinstance(cluster_id, str) or not _CLUSTER_ID.fullmatch(cluster_id):
        raise ValueError(
            f"cluster id {cluster_id!r} must be non-empty and use only letters, digits, '_', '-', '.'"
            " (not starting with '.')"
        )
    return cluster_id


def _check_int(name: str, value: int, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be int, not {type(value).__name__}")
    if not low <= value <= high:
        raise ValueError(f"{name} must be in [{low}, {high}], got {value}")
    return value


def _join(prefix: str, *segments: str) -> str:
    return "/".join((prefix, *segments)) if prefix else "/".join(segments)


def _split(key: str, tail_segments: int, kind: str) -> tuple[str, list[str]]:
    """Split off the last `tail_segments` segments; the rest (possibly '') is the prefix."""
    if not isinstance(key, str):
        raise TypeError(f"object key must be str, not {type(key).__name__}")
    parts = key.split("/")
    if len(parts) < tail_segments:
        raise ValueError(f"not a {kind} key (too few '/'-separated segments): {key!r}")
    head = parts[:-tail_segments]
    prefix = "/".join(head)
    if head and any(segment in ("", ".", "..") for segment in head):
        raise ValueError(f"not a {kind} key (empty, '.' or '..' segment in the prefix): {key!r}")
    return prefix, parts[-tail_segments:]


# --- WAL objects ----------------------------------------------------------------------------


def format_wal_id(created_ms: int, node_id: int, sequence: int) -> str:
    """The time-sortable id, the last segment of a WAL key."""
    _check_int("created_ms", created_ms, 0, MAX_CREATED_MS)
    _check_int("node_id", node_id, 0, MAX_NODE_ID)
    _check_int("sequence", sequence, 0, SEQUENCE_MODULUS - 1)
    return f"{created_ms:0{CREATED_MS_DIGITS}d}-{node_id:0{NODE_ID_DIGITS}d}-{sequence:0{SEQUENCE_DIGITS}d}"


def parse_wal_id(object_id: str) -> tuple[int, int, int]:
    """(created_ms, node_id, sequence) of a WAL object id; ValueError if malformed."""
    match = _WAL_ID.fullmatch(object_id) if isinstance(object_id, str) else None
    if match is None:
        raise ValueError(
            f"not a WAL object id (expected <created_ms:13 digits>-<node_id:10>-<sequence:10>): {object_id!r}"
        )
    created_ms, node_id, sequence = (int(g) for g in match.groups())
    if node_id > MAX_NODE_ID:
        raise ValueError(f"WAL object id {object_id!r} has node id {node_id} > {MAX_NODE_ID}")
    return created_ms, node_id, sequence


def wal_prefix(prefix: str, cluster_id: str) -> str:
    """The listing prefix of all of a cluster's WAL objects (ends with '/')."""
    return _join(_check_prefix(prefix), WAL_DIR, _check_cluster_id(cluster_id)) + "/"


def format_wal_key(prefix: str, cluster_id: str, created_ms: int, node_id: int, sequence: int) -> str:
    return wal_prefix(prefix, cluster_id) + format_wal_id(created_ms, node_id, sequence)


def parse_wal_key(key: str) -> WalKey:
    """Split a WAL object key into its parts; ValueError naming the key if it is malformed."""
    prefix, (wal_dir, cluster_id, object_id) = _split(key, 3, "WAL object")
    if wal_dir != WAL_DIR:
        raise ValueError(f"not a WAL object key (expected '.../{WAL_DIR}/<cluster-id>/<id>'): {key!r}")
    try:
        _check_cluster_id(cluster_id)
        created_ms, node_id, sequence = parse_wal_id(object_id)
    except ValueError as e:
        raise ValueError(f"malformed WAL object key {key!r}: {e}") from None
    return WalKey(prefix, cluster_id, created_ms, node_id, sequence)


def wal_list_start_after(prefix: str, cluster_id: str, created_ms: int) -> str:
    """A `start_after` for ListObjectsV2 that skips every WAL object created before
    `created_ms`: the listing then starts at the first object created at or after it."""
    _check_int("created_ms", created_ms, 0, MAX_CREATED_MS)
    # "<ms>" (13 digits) sorts before every "<ms>-<node>-<seq>" (a proper prefix of it) and
    # after every id of an earlier millisecond (smaller at some digit), and start_after is
    # exclusive.
    return wal_prefix(prefix, cluster_id) + f"{created_ms:0{CREATED_MS_DIGITS}d}"


class WalKeyAllocator:
    """Hands out unique, increasing WAL keys for one broker process.

    `created_ms` is the injected wall clock, but never goes backwards within the process (a
    clock step back reuses the last value), so keys from one writer are strictly increasing.
    The sequence increments per key and wraps at 10**10: a repeat would need 10**10 objects
    within one millisecond. Uniqueness across brokers comes from the node id; between two
    processes with one node id (a duplicate, or a restart after the clock stepped back) from
    the sequence's start, which the broker draws at random (its Environment's source).
    """

    def __init__(
        self,
        prefix: str,
        cluster_id: str,
        node_id: int,
        now_ms: Callable[[], int],
        first_sequence: int,
    ) -> None:
        self._prefix = _check_prefix(prefix)
        self._cluster_id = _check_cluster_id(cluster_id)
        self._node_id = _check_int("node_id", node_id, 0, MAX_NODE_ID)
        self._now_ms = now_ms
        self._sequence = _check_int("first_sequence", first_sequence, 0, SEQUENCE_MODULUS - 1)
        self._last_ms = 0

    def next(self) -> WalKey:
        created_ms = max(self._now_ms(), self._last_ms)
        self._last_ms = created_ms
        key = WalKey(self._prefix, self._cluster_id, created_ms, self._node_id, self._sequence)
        self._sequence = (self._sequence + 1) % SEQUENCE_MODULUS
        return key


# --- tiered segments ------------------------------------------------------------------------


def _check_uuid(name: str, value: uuid.UUID) -> uuid.UUID:
    if not isinstance(value, uuid.UUID):
        raise TypeError(f"{name} must be uuid.UUID, not {type(value).__name__}")
    return value


def tiered_partition_prefix(prefix: str, cluster_id: str, topic_id: uuid.UUID, partition: int) -> str:
    """The listing prefix of one partition's tiered segments (ends with '/')."""
    _check_uuid("topic_id", topic_id)
    _check_int("partition", partition, 0, MAX_PARTITION)
    return (
        _join(
            _check_prefix(prefix),
            TIERED_DIR,
            _check_cluster_id(cluster_id),
            str(topic_id),
            f"{partition:0{PARTITION_DIGITS}d}",
        )
        + "/"
    )


def format_tiered_segment_key(
    prefix: str,
    cluster_id: str,
    topic_id: uuid.UUID,
    partition: int,
    base_offset: int,
    segment_id: uuid.UUID,
    file: SegmentFile,
) -> str:
    _check_int("base_offset", base_offset, 0, MAX_OFFSET)
    _check_uuid("segment_id", segment_id)
    if not isinstance(file, SegmentFile):
        raise TypeError(f"file must be a SegmentFile, not {type(file).__name__}")
    return (
        tiered_partition_prefix(prefix, cluster_id, topic_id, partition)
        + f"{base_offset:0{OFFSET_DIGITS}d}-{segment_id}{file.value}"
    )


def parse_tiered_segment_key(key: str) -> TieredSegmentKey:
    """Split a tiered-segment file key into its parts; ValueError naming the key if malformed."""
    prefix, (tiered_dir, cluster_id, topic, partition, name) = _split(key, 5, "tiered-segment")
    if tiered_dir != TIERED_DIR:
        raise ValueError(
            f"not a tiered-segment key "
            f"(expected '.../{TIERED_DIR}/<cluster-id>/<topic-id>/<partition>/<file>'): {key!r}"
        )
    try:
        _check_cluster_id(cluster_id)
        if not _UUID_RE.fullmatch(topic):
            raise ValueError(f"topic id {topic!r} is not a lowercase canonical UUID")
        if not _PARTITION.fullmatch(partition) or int(partition) > MAX_PARTITION:
            raise ValueError(f"partition {partition!r} is not {PARTITION_DIGITS} digits <= {MAX_PARTITION}")
        match = _SEGMENT_NAME.fullmatch(name)
        if match is None:
            raise ValueError(f"file name {name!r} is not <base_offset:20 digits>-<segment-uuid><suffix>")
        base_offset = int(match.group(1))
        if base_offset > MAX_OFFSET:
            raise ValueError(f"base offset {base_offset} > {MAX_OFFSET}")
        file = _SEGMENT_FILES.get(match.group(3))
        if file is None:
            raise ValueError(f"unknown segment file suffix {match.group(3)!r} (known: {sorted(_SEGMENT_FILES)})")
    except ValueError as e:
        raise ValueError(f"malformed tiered-segment key {key!r}: {e}") from None
    return TieredSegmentKey(
        prefix,
        cluster_id,
        uuid.UUID(topic),
        int(partition),
        base_offset,
        uuid.UUID(match.group(2)),
        file,
    )


# --- tiering plans --------------------------------------------------------------------------

PLAN_SUFFIX = ".plan"


def plans_prefix(prefix: str, cluster_id: str) -> str:
    """The listing prefix of a cluster's tiering plans (ends with '/')."""
    return _join(_check_prefix(prefix), PLANS_DIR, _check_cluster_id(cluster_id)) + "/"


def format_plan_key(prefix: str, cluster_id: str, plan_id: uuid.UUID) -> str:
    _check_uuid("plan_id", plan_id)
    return plans_prefix(prefix, cluster_id) + f"{plan_id}{PLAN_SUFFIX}"
