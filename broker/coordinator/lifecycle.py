"""The lifecycle of one coordinator shard (the state of one internal partition), as a pure
state machine: the runtime asks it what a leadership change means and refuses any move the
table does not allow, so a shard is never served half-loaded or after it was unloaded.

    UNLOADED --lead--> LOADING --replayed--> ACTIVE --leadership moved--> UNLOADED
                          |
                          +--replay failed--> FAILED --lead again--> LOADING

Only ACTIVE shards serve requests (others answer NOT_COORDINATOR). Kafka's coordinator
runtime has the same states (CoordinatorState: INITIAL, LOADING, ACTIVE, FAILED, CLOSED).
"""

from __future__ import annotations

import enum


class ShardState(enum.Enum):
    UNLOADED = "unloaded"  # not led here: never was, or leadership moved away
    LOADING = "loading"  # replaying the partition's log into a new shard
    ACTIVE = "active"  # loaded: serves requests, writes, fires timers
    FAILED = "failed"  # the replay raised; loaded again when leadership comes back


_S = ShardState
ALLOWED_TRANSITIONS: dict[ShardState, frozenset[ShardState]] = {
    _S.UNLOADED: frozenset({_S.LOADING}),
    _S.LOADING: frozenset({_S.ACTIVE, _S.FAILED, _S.UNLOADED}),
    _S.ACTIVE: frozenset({_S.UNLOADED}),
    _S.FAILED: frozenset({_S.LOADING, _S.UNLOADED}),
}


class IllegalShardTransition(Exception):
    """A move the table forbids: a bug in the runtime, never a client error."""


def transition(current: ShardState, target: ShardState) -> ShardState:
    if target not in ALLOWED_TRANSITIONS[current]:
        raise IllegalShardTransition(f"coordinator shard: {current.value} -> {target.value}")
    return target


def on_leadership(current: ShardState, leads: bool) -> ShardState | None:
    """The state a role change of the partition asks for; None when nothing is to be done.
    A new leader epoch while this broker keeps leading changes nothing: the shard already
    holds everything the log holds."""
    if leads:
        return _S.LOADING if current in (_S.UNLOADED, _S.FAILED) else None
    return _S.UNLOADED if current is not _S.UNLOADED else None
