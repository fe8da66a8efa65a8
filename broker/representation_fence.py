"""A diskless partition leader's check that a representative's commit is not stale.

A client of one AZ produces to the broker that represents the partition for that AZ
(routing/). That broker changes when a broker of the AZ joins, leaves or drains: the client
refreshes its metadata and sends its next batches to the new representative while batches
it sent the old one may still be uploading there. Committed after the new representative's,
they would land behind batches the client sent later (cluster seed 200161: the old
representative's upload stalled 4.9 s in its controlled shutdown), which a Kafka client
never sees: a Kafka leader appends a request before it can lose the partition, and fails it
after.

Each commit therefore says who took its batches, for which client AZ, and at which cluster
view revision it decided it represents them (CommitPartition.represented_by). Per client AZ
the leader keeps the newest revision a commit came with and its representative; a commit
from another representative at an older revision is refused with NOT_LEADER_OR_FOLLOWER
(retriable: not appended, the client sends it again by its new route). Views are applied in
revision order, so a representative whose view is older than one that chose another broker
is the stale one, however the two views lag the store. Idempotent and transactional batches
are recorded but never refused: their sequence numbers already keep them in order.

The same goes for a batch taken in an older leader epoch than the partition's now (the
leader moved away and back while it uploaded, or the representative's view lagged): the
WAL writer refuses such batches itself when its view shows the change before the commit is
sent (its route check), the leader catches the rest.

Kept per leader epoch (a new leader starts empty) and bounded by the cluster's AZs:
representatives name an AZ no broker is in as None (routing/router.py `represented_az`).
"""

from __future__ import annotations

from typing import NamedTuple

from .protocol.errors import ApiError, ErrorCode


class Admission(NamedTuple):
    """How a representative took a partition's batches: who, for which client AZ, on which
    cluster view revision, and the partition's leader epoch in that view."""

    representative: int
    client_az: str | None
    view_revision: int
    leader_epoch: int


class RepresentationFence:
    """The newest (view revision, representative) seen per client AZ, for one partition."""

    def __init__(self) -> None:
        self._newest: dict[str | None, tuple[int, int]] = {}

    def admit(self, admission: Admission, leader_epoch: int, refuse: bool = True) -> None:
        """Record the admission, or (if `refuse`) raise NOT_LEADER_OR_FOLLOWER when it was
        made in an older leader epoch than `leader_epoch` (the partition's now), or when
        another representative already committed for the AZ as of a newer view."""
        node_id, client_az, view_revision, admitted_in = admission
        if refuse and 0 <= admitted_in < leader_epoch:
            raise ApiError(
                ErrorCode.NOT_LEADER_OR_FOLLOWER,
                f"broker {node_id} took these batches in leader epoch {admitted_in}, the partition is in epoch "
                f"{leader_epoch} now: not committed, refresh metadata and retry",
            )
        newest = self._newest.get(client_az)
        if newest is not None and view_revision < newest[0]:
            if refuse and node_id != newest[1]:
                raise ApiError(
                    ErrorCode.NOT_LEADER_OR_FOLLOWER,
                    f"broker {node_id} took these batches as representative for AZ {client_az} at view revision "
                    f"{view_revision}, but broker {newest[1]} has represented it since revision {newest[0]}: "
                    "not committed, refresh metadata and retry",
                )
            return
        self._newest[client_az] = (view_revision, node_id)

    def clear(self) -> None:
        self._newest.clear()
