"""Which broker of a client's AZ represents a diskless partition: rendezvous (highest random
weight) hashing of the partition over the AZ's live brokers. Deterministic on every broker
that sees the same membership, about even across the AZ's brokers, and a join or leave moves
only the partitions that the new broker wins or the leaving one held.
"""

from __future__ import annotations

import hashlib
from collections.abc import Collection


def _weight(topic_id: str, partition: int, node_id: int) -> int:
    digest = hashlib.blake2b(f"{topic_id}/{partition}/{node_id}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


def representative(topic_id: str, partition: int, candidates: Collection[int]) -> int | None:
    """The candidate (node id) that represents the partition; None if there is none."""
    if not candidates:
        return None
    return max(candidates, key=lambda node_id: (_weight(topic_id, partition, node_id), node_id))
