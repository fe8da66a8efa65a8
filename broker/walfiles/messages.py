"""What the WAL file manager asks every data broker, and what the operator asks the manager
(msgspec, versioned; a broker rejects a version it does not know).

`WalReferencesRequest` -> `WalReferencesResponse`: every diskless replica the broker hosts
(leader or follower) with the creation time of the oldest WAL object its log references,
plus, for each WAL object the broker uploaded since it was last asked, the partitions that
reference it for good (committed: acks=all and replicated) and those that may (appended but
not known to be replicated, or the leader's answer was lost). The manager then rarely reads
an object's index, and a partition whose commit was refused never pins it.

`WalQueryRequest` -> `WalQueryResponse`: for objects that partitions may reference (from
the uploader's report, or only from the index when the uploader died or its report was lost)
and created after such a partition's oldest reference: which of them each hosted replica
references, committed (below its high watermark: for good) or not yet.

A broker that has not opened every replica it hosts yet (starting, or stopping) answers
neither question (an error, `reporter.NotReady`): its logs on disk may reference anything,
and an answer from the partitions it has open would say "nothing". The manager pauses.
"""

from __future__ import annotations

import msgspec

WALGC_VERSION = 1
NO_REFERENCE = -1


class WalReferencesRequest(msgspec.Struct, tag="wal_references", array_like=True, frozen=True):
    version: int
    manager_id: int  # the asking broker: uploads are reported to the manager that asked


class ReplicaReference(msgspec.Struct, array_like=True, frozen=True):
    topic_id: str
    partition: int
    oldest_created_ms: int  # NO_REFERENCE: the log references no WAL object
    referenced_bytes: int  # batch bytes the log references (leaders only count in the totals)
    leader: bool


class UploadedObject(msgspec.Struct, array_like=True, frozen=True):
    object_id: str
    committed: list[tuple[str, int]]  # (topic id, partition) that reference it for good
    maybe: list[tuple[str, int]]  # that may reference it


class WalReferencesResponse(msgspec.Struct, tag="wal_references_response", array_like=True, frozen=True):
    version: int
    node_id: int
    now_ms: int  # the broker's wall clock when it answered: commits it accepts later are of
    # objects created after now_ms - wal.commit.deadline.ms
    commit_deadline_ms: int
    replicas: list[ReplicaReference]
    uploaded: list[UploadedObject] = []
    # Every partition the broker has open, diskless or not (topic id -> indexes): the manager
    # pauses unless it covers every replica its view gives the broker (cluster.py). None: a
    # broker older than this field, which may answer before it has opened its logs.
    opened: dict[str, list[int]] | None = None


class ObjectsQuery(msgspec.Struct, array_like=True, frozen=True):
    topic_id: str
    partition: int
    object_ids: list[str]


class WalQueryRequest(msgspec.Struct, tag="wal_query", array_like=True, frozen=True):
    version: int
    partitions: list[ObjectsQuery]


class ObjectsFound(msgspec.Struct, array_like=True, frozen=True):
    topic_id: str
    partition: int
    committed: list[str]  # referenced below the replica's high watermark: for good
    uncommitted: list[str]  # referenced above it (may still be truncated away)


class WalQueryResponse(msgspec.Struct, tag="wal_query_response", array_like=True, frozen=True):
    version: int
    node_id: int
    found: list[ObjectsFound]  # per hosted partition asked about


# -- the operator's view (shoal walfiles status|gc): JSON over the admin API -----------------


class WalFilesStatus(msgspec.Struct, frozen=True):
    """What `shoal walfiles status` prints. Byte and object counts are from the last cycle."""

    manager_id: int  # the broker that runs the manager (the controller)
    active: bool  # False: this broker does not run the manager (ask the controller)
    paused: bool
    paused_reason: str | None
    objects: int = 0  # WAL objects in the store at the last cycle
    bytes: int = 0
    referenced_bytes: int = 0  # batch bytes the partition leaders reference
    dead_bytes: int = 0  # bytes of objects kept for other batches (shared with a longer retention)
    unreferenced_objects: int = 0  # found unreferenced, waiting out the grace period
    unreferenced_bytes: int = 0
    oldest_object_age_ms: int = -1
    last_success_ms: int = -1  # wall clock of the last completed cycle; -1: none yet
    last_success_age_ms: int = -1
    deleted_objects_last_hour: int = 0
    deleted_bytes_last_hour: int = 0
    delete_failures_last_hour: int = 0
    next_cycle_in_ms: int = -1


class PlannedDelete(msgspec.Struct, frozen=True):
    key: str
    size: int
    reason: str
    ready_in_ms: int  # 0: deleted by this cycle (or would be, in a dry run)


class CycleReport(msgspec.Struct, frozen=True):
    """What `shoal walfiles gc [--dry-run]` prints: the cycle it ran and its decisions."""

    dry_run: bool
    status: WalFilesStatus
    deleted_objects: int = 0
    deleted_bytes: int = 0
    failed_deletes: int = 0
    planned: list[PlannedDelete] = []  # at most PLANNED_SHOWN, oldest first
    planned_total: int = 0
    kept: dict[str, int] = {}  # why objects were kept -> how many


PLANNED_SHOWN = 1000
