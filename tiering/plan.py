"""The offload plan a partition leader writes for a tiering job, and the result manifest the
job writes for each segment it assembled (docs/formats.md "Tiering").

A plan is one object in the store (msgpack, with a version) listing ranges: per range, the
partition, the offsets [base_offset, next_offset), the planning leader's epoch, the segment id
the job must use, the leader-epoch lineage and the producer state at the range end, and per
batch its authoritative 61-byte header plus where its bytes are (a WAL object range), or the
whole batch inline for batches the partition log holds itself (markers), and (version 2) the
aborted transactions whose ABORT marker lies in the range, which the job writes as the
segment's `.txnindex`. Everything the job needs is in the plan: it never talks to a broker.

A result manifest (JSON, one per segment, written after every other file of the segment) is
what makes a segment exist for the leader: a job that dies half-way leaves no manifest, and a
re-run writes the same keys with the same bytes, because the segment id comes from the plan.
"""

from __future__ import annotations

import uuid

import msgspec

PLAN_VERSION = 2  # 2: aborted_txns; a job refuses a newer plan rather than drop its transaction index
MIN_PLAN_VERSION = 1  # a version-1 plan (planned before the upgrade) reads with no aborted transactions
MANIFEST_VERSION = 1
_PLAN_MAGIC = b"SHTP"


class PlanFormatError(ValueError):
    """A plan or manifest this code cannot read (unknown version, garbage)."""


class PlannedBatch(msgspec.Struct, array_like=True, frozen=True):
    """One batch of a range: its header as committed, and its bytes' location (object_id,
    offset, length) or the whole batch (`inline`)."""

    header: bytes
    object_id: str | None = None
    offset: int = 0
    length: int = 0
    inline: bytes | None = None


class ProducerState(msgspec.Struct, array_like=True, frozen=True):
    producer_id: int
    epoch: int
    last_sequence: int
    last_offset: int
    offset_delta: int
    timestamp_ms: int


class PlannedAbortedTxn(msgspec.Struct, array_like=True, frozen=True):
    """One entry of the segment's `.txnindex` (broker/log/txn_index.py AbortedTxn)."""

    producer_id: int
    first_offset: int
    last_offset: int  # the ABORT marker's offset, in the range
    last_stable_offset: int


class RangePlan(msgspec.Struct, frozen=True):
    topic: str
    topic_id: str
    partition: int
    base_offset: int
    next_offset: int  # exclusive
    leader_epoch: int  # the planning leader's epoch: a commit under another epoch is refused
    segment_id: str
    index_interval_bytes: int
    epochs: list[tuple[int, int]]  # (epoch, start offset), the lineage up to next_offset
    producers: list[ProducerState]
    batches: list[PlannedBatch]
    aborted_txns: list[PlannedAbortedTxn] = []  # in marker order; none in a version-1 plan

    @property
    def size_bytes(self) -> int:
        return sum(len(b.inline) if b.inline is not None else b.length for b in self.batches)

    @property
    def references_wal(self) -> bool:
        """Whether any batch is read from a WAL object (a diskless range) rather than inline."""
        return any(b.inline is None for b in self.batches)


class Plan(msgspec.Struct, frozen=True):
    version: int
    plan_id: str
    cluster_id: str
    node_id: int  # the broker that planned (and commits)
    created_ms: int
    ranges: list[RangePlan]


class FileInfo(msgspec.Struct, frozen=True):
    size: int
    crc32c: int


class SegmentManifest(msgspec.Struct, frozen=True):
    """The result manifest of one assembled segment (`.manifest`)."""

    version: int
    plan_id: str
    segment_id: str
    topic_id: str
    partition: int
    base_offset: int
    end_offset: int  # inclusive, as KIP-405's RemoteLogSegmentMetadata.endOffset
    size_bytes: int
    max_timestamp_ms: int
    leader_epochs: list[tuple[int, int]]
    files: dict[str, FileInfo]  # suffix (".log", ...) -> size and CRC32C
    txn_index_empty: bool = True  # no ".txnindex" file (KIP-405: the index is optional)


_PLAN_ENCODER = msgspec.msgpack.Encoder()
_PLAN_DECODER = msgspec.msgpack.Decoder(Plan)
_JSON_ENCODER = msgspec.json.Encoder()
_MANIFEST_DECODER = msgspec.json.Decoder(SegmentManifest)


def segment_id_for(topic_id: str, partition: int, base_offset: int, leader_epoch: int, plan_id: str) -> str:
    """A segment id fixed by the plan, so a re-run of the same plan writes the same keys."""
    return str(uuid.uuid5(uuid.NAMESPACE_URL, f"shoal:{topic_id}:{partition}:{base_offset}:{leader_epoch}:{plan_id}"))


def encode_plan(plan: Plan) -> bytes:
    return _PLAN_MAGIC + _PLAN_ENCODER.encode(plan)


def decode_plan(data: bytes) -> Plan:
    if data[:4] != _PLAN_MAGIC:
        raise PlanFormatError("not a tiering plan (bad magic)")
    try:
        plan = _PLAN_DECODER.decode(data[4:])
    except msgspec.DecodeError as exc:
        raise PlanFormatError(f"unreadable tiering plan: {exc}") from None
    if not MIN_PLAN_VERSION <= plan.version <= PLAN_VERSION:
        raise PlanFormatError(
            f"tiering plan version {plan.version} is not supported (this code reads {MIN_PLAN_VERSION}..{PLAN_VERSION})"
        )
    return plan


def encode_manifest(manifest: SegmentManifest) -> bytes:
    return _JSON_ENCODER.encode(manifest)


def decode_manifest(data: bytes) -> SegmentManifest:
    try:
        manifest = _MANIFEST_DECODER.decode(data)
    except msgspec.DecodeError as exc:
        raise PlanFormatError(f"unreadable segment manifest: {exc}") from None
    if manifest.version != MANIFEST_VERSION:
        raise PlanFormatError(
            f"segment manifest version {manifest.version} is not supported (this code reads {MANIFEST_VERSION})"
        )
    return manifest
