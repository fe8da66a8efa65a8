"""Rack-aware replica placement: one replica per AZ first, then spread (Kafka's rule).

Brokers are ordered by alternating AZs (a1, b1, c1, a2, b2, ...); partition p's leader is the
broker at (start + p) in that order and its followers are the next brokers that add an AZ
not yet used, then any, so replicas span as many AZs as the replication factor allows and
leaders spread evenly.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..protocol.errors import ApiError, ErrorCode


def rack_alternated(brokers: Sequence[tuple[int, str | None]]) -> list[tuple[int, str | None]]:
    """(node id, az) ordered by taking one broker of each AZ in turn, AZs and ids sorted."""
    by_az: dict[str, list[int]] = {}
    for node_id, az in sorted(brokers):
        by_az.setdefault(az or "", []).append(node_id)
    queues = [(az, ids) for az, ids in sorted(by_az.items())]
    ordered: list[tuple[int, str | None]] = []
    for round_ in range(max((len(ids) for _, ids in queues), default=0)):
        for az, ids in queues:
            if round_ < len(ids):
                ordered.append((ids[round_], az or None))
    return ordered


def assign_replicas(
    partitions: Sequence[int], replication_factor: int, brokers: Sequence[tuple[int, str | None]], start: int = 0
) -> dict[int, list[int]]:
    """Replica lists for the given partition indexes over the (node id, az) brokers."""
    if replication_factor < 1:
        raise ApiError(ErrorCode.INVALID_REPLICATION_FACTOR, "Replication factor must be larger than 0.")
    if replication_factor > len(brokers):
        raise ApiError(
            ErrorCode.INVALID_REPLICATION_FACTOR,
            f"Replication factor: {replication_factor} larger than available brokers: {len(brokers)}.",
        )
    ordered = rack_alternated(brokers)
    count = len(ordered)
    assignment: dict[int, list[int]] = {}
    for index in partitions:
        first = (start + index) % count
        rotation = [ordered[(first + step) % count] for step in range(count)]
        replicas = [rotation[0][0]]
        used = {rotation[0][1]}
        for node_id, az in rotation[1:]:  # first pass: one replica per AZ
            if len(replicas) < replication_factor and az not in used:
                replicas.append(node_id)
                used.add(az)
        for node_id, _az in rotation[1:]:  # then spread the rest in order
            if len(replicas) < replication_factor and node_id not in replicas:
                replicas.append(node_id)
        assignment[index] = replicas
    return assignment
