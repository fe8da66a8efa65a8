"""Shared helpers for the classic group membership tests (ManualClock, deterministic ids)."""

from __future__ import annotations

import itertools

from broker.clock import ManualClock
from broker.groups import ClassicGroup, GroupConfig, JoinResult, Pending, SyncResult

SESSION_MS = 10_000
REBALANCE_MS = 30_000


def make_group(clock: ManualClock | None = None, **config) -> tuple[ClassicGroup, ManualClock]:
    clock = clock or ManualClock()
    counter = itertools.count(1)
    group = ClassicGroup("g", GroupConfig(**config), new_uuid=lambda: f"u{next(counter)}", now_ms=clock.now_ms())
    return group, clock


def protocols(tag: str, names=("range",)) -> list[tuple[str, bytes]]:
    return [(name, f"{name}:{tag}".encode()) for name in names]


def join(
    group: ClassicGroup,
    clock: ManualClock,
    *,
    member_id: str = "",
    instance: str | None = None,
    client: str = "client",
    tag: str = "x",
    names=("range",),
    session_ms: int = SESSION_MS,
    rebalance_ms: int = REBALANCE_MS,
    protocol_type: str = "consumer",
    require_known: bool = False,
    skip: bool = False,
    protos=None,
) -> JoinResult | Pending:
    return group.join(
        clock.now_ms(),
        member_id=member_id,
        group_instance_id=instance,
        client_id=client,
        client_host="/10.0.0.1",
        session_timeout_ms=session_ms,
        rebalance_timeout_ms=rebalance_ms,
        protocol_type=protocol_type,
        protocols=protos if protos is not None else protocols(tag, names),
        require_known_member_id=require_known,
        supports_skip_assignment=skip,
    )


def sync(
    group: ClassicGroup,
    clock: ManualClock,
    member_id: str,
    generation: int,
    *,
    instance: str | None = None,
    assignments=None,
    protocol_type=None,
    protocol_name=None,
):
    return group.sync(
        clock.now_ms(),
        member_id=member_id,
        group_instance_id=instance,
        generation_id=generation,
        protocol_type=protocol_type,
        protocol_name=protocol_name,
        assignments=assignments,
    )


def heartbeat(
    group: ClassicGroup, clock: ManualClock, member_id: str, generation: int, instance: str | None = None
) -> int:
    return group.heartbeat(clock.now_ms(), member_id=member_id, group_instance_id=instance, generation_id=generation)


def advance(group: ClassicGroup, clock: ManualClock, ms: int) -> dict[Pending, JoinResult | SyncResult]:
    clock.advance(ms)
    group.tick(clock.now_ms())
    return dict(group.take_completions())


def completions(group: ClassicGroup) -> dict[Pending, JoinResult | SyncResult]:
    return dict(group.take_completions())
