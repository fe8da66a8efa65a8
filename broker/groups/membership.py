"""Classic consumer-group membership: the JoinGroup/SyncGroup/Heartbeat/LeaveGroup state machine.

This module owns one classic group's membership and rebalance protocol, with the semantics of
Apache Kafka's classic group coordinator (Kafka 3.x ``GroupCoordinator.scala`` /
``GroupMetadata.scala``; Kafka 4.x ``GroupMetadataManager.java`` classic parts and
``ClassicGroup.java``). It is sans-io: no asyncio, sockets, logs or clocks. Every call takes
``now_ms`` (one time base chosen by the driver; Kafka uses wall-clock milliseconds because
``current_state_timestamp_ms`` is persisted and shown), and requests that Kafka parks in a
purgatory come back as an opaque `Pending` token. Their answers appear later in
`ClassicGroup.take_completions`, produced by whichever call (join, sync, leave, tick, ...)
moved the group on. Every parked request is answered eventually: the state machine never drops
a `Pending` (see ``docs/groups.md``, "Classic group membership").

Protocol metadata and assignments are opaque bytes. Offsets are not this module's business;
`ClassicGroup.validate_offset_commit` only checks the member/generation part of OffsetCommit.

Persistence: Kafka writes the group's GroupMetadataValue at three points (leader SyncGroup,
static-member replacement in Stable, the group becoming Empty). At those points the group
records a `GroupSnapshot`; the driver takes it with `ClassicGroup.take_store_request` and should
write it before it sends the completions of the same call. `ClassicGroup.from_snapshot` loads a
group after coordinator failover; members get fresh session deadlines.

Settings (`membership_config`), answers (`results`) and the snapshot (`snapshot`; its record
is `offsets_records`') live in modules of their own; this one is the state machine.
"""

from __future__ import annotations

import enum
import itertools
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from broker.groups.membership_config import GroupConfig
from broker.groups.results import (
    GroupDescription,
    JoinMember,
    JoinResult,
    LeaveResult,
    MemberDescription,
    MemberView,
    Pending,
    SyncResult,
)
from broker.groups.snapshot import GroupSnapshot, MemberSnapshot
from broker.protocol.errors import ErrorCode

GROUP_MAX_SIZE_REACHED: int = ErrorCode.GROUP_MAX_SIZE_REACHED

UNKNOWN_MEMBER_ID = ""  # JoinGroupRequest.UNKNOWN_MEMBER_ID
MEMBER_ID_DELIMITER = "-"


# --------------------------------------------------------------------------------------------
# States
# --------------------------------------------------------------------------------------------


class GroupState(enum.Enum):
    """Classic group states; the values are the names Kafka prints (DescribeGroups, ListGroups)."""

    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"


_S = GroupState
# Kafka GroupMetadata.scala: each state's validPreviousStates.
VALID_PREVIOUS_STATES: dict[GroupState, frozenset[GroupState]] = {
    _S.PREPARING_REBALANCE: frozenset({_S.STABLE, _S.COMPLETING_REBALANCE, _S.EMPTY}),
    _S.COMPLETING_REBALANCE: frozenset({_S.PREPARING_REBALANCE}),
    _S.STABLE: frozenset({_S.COMPLETING_REBALANCE}),
    _S.EMPTY: frozenset({_S.PREPARING_REBALANCE}),
    _S.DEAD: frozenset(GroupState),
}


class IllegalGroupTransition(Exception):
    """A transition Kafka's table forbids: a bug in this module, never a client error."""


DEAD_GROUP_DESCRIPTION = GroupDescription(GroupState.DEAD.value, "", "", ())


# --------------------------------------------------------------------------------------------
# Internal state
# --------------------------------------------------------------------------------------------


@dataclass
class _Member:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    assignment: bytes | None = None
    join_pending: Pending | None = None
    sync_pending: Pending | None = None
    is_new: bool = False
    heartbeat_deadline_ms: int | None = None

    @property
    def awaiting_join(self) -> bool:
        return self.join_pending is not None

    @property
    def awaiting_sync(self) -> bool:
        return self.sync_pending is not None

    def protocol_names(self) -> list[str]:
        return [name for name, _ in self.protocols]

    def metadata(self, protocol: str) -> bytes:
        for name, meta in self.protocols:
            if name == protocol:
                return meta
        raise KeyError(f"member {self.member_id} does not support protocol {protocol}")

    def matches(self, protocols: list[tuple[str, bytes]]) -> bool:
        # MemberMetadata.matches: same protocols, same order, same metadata bytes.
        return self.protocols == protocols

    def has_satisfied_heartbeat(self) -> bool:
        # MemberMetadata.hasSatisfiedHeartbeat: at expiry time heartbeatSatisfied is false, so a
        # new member always expires; others survive only while awaiting a join or sync answer.
        if self.is_new:
            return False
        return self.awaiting_join or self.awaiting_sync


@dataclass
class _JoinTimer:
    """DelayedJoin (initial=False) or InitialDelayedJoin (initial=True)."""

    deadline_ms: int
    initial: bool
    delay_ms: int = 0
    remaining_ms: int = 0


@dataclass
class _SyncTimer:
    """DelayedSync: members that have not sent SyncGroup by the deadline are removed."""

    deadline_ms: int
    generation_id: int


def _dedupe_protocols(protocols: Iterable[tuple[str, bytes]]) -> list[tuple[str, bytes]]:
    seen: set[str] = set()
    out: list[tuple[str, bytes]] = []
    for name, meta in protocols:
        if name not in seen:
            seen.add(name)
            out.append((name, bytes(meta)))
    return out


def _join_error(member_id: str, error: int) -> JoinResult:
    return JoinResult(error_code=error, member_id=member_id)


# --------------------------------------------------------------------------------------------
# The group
# --------------------------------------------------------------------------------------------


class ClassicGroup:
    """One classic group. Not thread-safe: the driver serialises calls per group."""

    def __init__(
        self,
        group_id: str,
        config: GroupConfig | None = None,
        *,
        new_uuid: Callable[[], str],
        now_ms: int = 0,
    ) -> None:
        self.group_id = group_id
        self.config = config or GroupConfig()
        self._new_uuid = new_uuid  # member ids
        self._state = GroupState.EMPTY
        self._state_timestamp_ms: int | None = None
        self._now_ms = now_ms
        self._generation_id = 0
        self._protocol_type: str | None = None
        self._protocol_name: str | None = None
        self._leader_id: str | None = None
        self._members: dict[str, _Member] = {}
        self._static_members: dict[str, str] = {}  # group_instance_id -> member_id
        self._pending_members: dict[str, int] = {}  # MEMBER_ID_REQUIRED ids -> expiry deadline
        self._pending_sync: set[str] = set()
        self._new_member_added = False
        self._join_timer: _JoinTimer | None = None
        self._sync_timer: _SyncTimer | None = None
        self._ids = itertools.count(1)
        self._completions: list[tuple[Pending, JoinResult | SyncResult]] = []
        self._store_request: GroupSnapshot | None = None

    # ---- read-only views --------------------------------------------------------------------

    @property
    def state(self) -> GroupState:
        return self._state

    @property
    def generation_id(self) -> int:
        return self._generation_id

    @property
    def protocol_type(self) -> str | None:
        return self._protocol_type

    @property
    def protocol_name(self) -> str | None:
        return self._protocol_name

    @property
    def leader_id(self) -> str | None:
        return self._leader_id

    @property
    def current_state_timestamp_ms(self) -> int | None:
        return self._state_timestamp_ms

    @property
    def is_empty(self) -> bool:
        return self._state is GroupState.EMPTY

    @property
    def size(self) -> int:
        return len(self._members)

    @property
    def members(self) -> tuple[MemberView, ...]:
        return tuple(self._view(m) for m in self._members.values())

    @property
    def pending_member_ids(self) -> frozenset[str]:
        """Member ids handed out with MEMBER_ID_REQUIRED that have not joined yet."""
        return frozenset(self._pending_members)

    @property
    def pending_sync_member_ids(self) -> frozenset[str]:
        return frozenset(self._pending_sync)

    def member(self, member_id: str) -> MemberView | None:
        m = self._members.get(member_id)
        return self._view(m) if m else None

    def static_member_id(self, group_instance_id: str) -> str | None:
        return self._static_members.get(group_instance_id)

    @staticmethod
    def _view(m: _Member) -> MemberView:
        return MemberView(
            m.member_id,
            m.group_instance_id,
            m.client_id,
            m.client_host,
            m.rebalance_timeout_ms,
            m.session_timeout_ms,
            m.protocol_type,
            tuple(m.protocols),
            m.assignment,
            m.awaiting_join,
            m.awaiting_sync,
            m.heartbeat_deadline_ms,
        )

    def describe(self) -> GroupDescription:
        """Kafka ``GroupMetadata.summary``: metadata and assignments only when Stable."""
        if self._state is GroupState.DEAD:
            return DEAD_GROUP_DESCRIPTION
        if self._state is GroupState.STABLE:
            assert self._protocol_name is not None
            protocol = self._protocol_name
            members = tuple(
                MemberDescription(
                    m.member_id,
                    m.group_instance_id,
                    m.client_id,
                    m.client_host,
                    m.metadata(protocol),
                    m.assignment or b"",
                )
                for m in self._members.values()
            )
            return GroupDescription(self._state.value, self._protocol_type or "", protocol, members)
        members = tuple(
            MemberDescription(m.member_id, m.group_instance_id, m.client_id, m.client_host, b"", b"")
            for m in self._members.values()
        )
        return GroupDescription(self._state.value, self._protocol_type or "", "", members)

    # ---- driver interface -------------------------------------------------------------------

    def take_completions(self) -> list[tuple[Pending, JoinResult | SyncResult]]:
        """Answers for earlier parked requests, in the order they were produced."""
        out, self._completions = self._completions, []
        return out

    def take_store_request(self) -> GroupSnapshot | None:
        """The GroupMetadataValue to persist, if a Kafka store point was reached since last call."""
        out, self._store_request = self._store_request, None
        return out

    def next_deadline_ms(self) -> int | None:
        """When `tick` must run next; None when no timer is armed."""
        deadlines = [d for d, _, _ in self._timers()]
        return min(deadlines) if deadlines else None

    def tick(self, now_ms: int) -> None:
        """Fire every timer due at or before ``now_ms`` (in deadline order)."""
        self._advance(now_ms)

    # ---- JoinGroup --------------------------------------------------------------------------

    def join(
        self,
        now_ms: int,
        *,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protocols: Iterable[tuple[str, bytes]],
        require_known_member_id: bool = False,
        supports_skip_assignment: bool = False,
    ) -> JoinResult | Pending:
        """JoinGroup. ``require_known_member_id``: request version >= 4 (KIP-394);
        ``supports_skip_assignment``: version >= 9 (KIP-814). Version 0 callers pass
        ``rebalance_timeout_ms = session_timeout_ms``, as Kafka does."""
        self._advance(now_ms)
        now = self._now_ms
        pending = Pending(next(self._ids), "join")
        result = self._join(
            now,
            pending,
            member_id,
            group_instance_id,
            client_id,
            client_host,
            session_timeout_ms,
            rebalance_timeout_ms,
            protocol_type,
            _dedupe_protocols(protocols),
            require_known_member_id,
            supports_skip_assignment,
        )
        return self._finish(now, pending, result)

    def _join(
        self,
        now: int,
        pending: Pending,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        require_known_member_id: bool,
        supports_skip_assignment: bool,
    ) -> JoinResult | None:
        cfg = self.config
        if not cfg.min_session_timeout_ms <= session_timeout_ms <= cfg.max_session_timeout_ms:
            return _join_error(member_id, ErrorCode.INVALID_SESSION_TIMEOUT)
        if not self._accept_joining_member(member_id):
            self._remove(member_id, ErrorCode.UNKNOWN_MEMBER_ID)
            result: JoinResult | None = _join_error(UNKNOWN_MEMBER_ID, GROUP_MAX_SIZE_REACHED)
        elif member_id == UNKNOWN_MEMBER_ID:
            result = self._join_new_member(
                now,
                pending,
                group_instance_id,
                client_id,
                client_host,
                session_timeout_ms,
                rebalance_timeout_ms,
                protocol_type,
                protocols,
                require_known_member_id,
                supports_skip_assignment,
            )
        else:
            result = self._join_current_member(
                now,
                pending,
                member_id,
                group_instance_id,
                client_id,
                client_host,
                session_timeout_ms,
                rebalance_timeout_ms,
                protocol_type,
                protocols,
            )
        if self._state is GroupState.PREPARING_REBALANCE:
            self._try_complete_join(now)
        return result

    def _accept_joining_member(self, member_id: str) -> bool:
        # GroupCoordinator.acceptJoiningMember
        state = self._state
        if state in (GroupState.EMPTY, GroupState.DEAD):
            return True
        m = self._members.get(member_id)
        if state is GroupState.PREPARING_REBALANCE:
            return (m is not None and m.awaiting_join) or (self._num_awaiting_join() < self.config.max_size)
        return m is not None or len(self._members) < self.config.max_size

    def _join_new_member(
        self,
        now: int,
        pending: Pending,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
        require_known_member_id: bool,
        supports_skip_assignment: bool,
    ) -> JoinResult | None:
        if self._state is GroupState.DEAD:
            return _join_error(UNKNOWN_MEMBER_ID, ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if not self._supports_protocols(protocol_type, protocols):
            return _join_error(UNKNOWN_MEMBER_ID, ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        prefix = group_instance_id if group_instance_id is not None else client_id
        new_member_id = f"{prefix}{MEMBER_ID_DELIMITER}{self._new_uuid()}"
        if group_instance_id is not None:
            old_member_id = self._static_members.get(group_instance_id)
            if old_member_id is not None:
                return self._update_static_member_and_rebalance(
                    now,
                    pending,
                    old_member_id,
                    new_member_id,
                    group_instance_id,
                    protocols,
                    rebalance_timeout_ms,
                    session_timeout_ms,
                    supports_skip_assignment,
                )
        elif require_known_member_id:
            # KIP-394: hand out the id, remember it as pending, and ask for a second join.
            self._pending_members[new_member_id] = now + session_timeout_ms
            return _join_error(new_member_id, ErrorCode.MEMBER_ID_REQUIRED)
        self._add_member_and_rebalance(
            now,
            pending,
            new_member_id,
            group_instance_id,
            client_id,
            client_host,
            session_timeout_ms,
            rebalance_timeout_ms,
            protocol_type,
            protocols,
        )
        return None

    def _join_current_member(
        self,
        now: int,
        pending: Pending,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
    ) -> JoinResult | None:
        if self._state is GroupState.DEAD:
            return _join_error(member_id, ErrorCode.COORDINATOR_NOT_AVAILABLE)
        if not self._supports_protocols(protocol_type, protocols):
            return _join_error(member_id, ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        if member_id in self._pending_members:
            if group_instance_id is not None:
                # Kafka throws IllegalStateException here (pending members are never static).
                return _join_error(member_id, ErrorCode.UNKNOWN_SERVER_ERROR)
            self._add_member_and_rebalance(
                now,
                pending,
                member_id,
                None,
                client_id,
                client_host,
                session_timeout_ms,
                rebalance_timeout_ms,
                protocol_type,
                protocols,
            )
            return None
        error = self._validate_current_member(member_id, group_instance_id)
        if error is not None:
            return _join_error(member_id, error)
        m = self._members[member_id]
        state = self._state
        if state is GroupState.PREPARING_REBALANCE:
            self._update_member_and_rebalance(now, m, protocols, rebalance_timeout_ms, session_timeout_ms, pending)
            return None
        if state is GroupState.COMPLETING_REBALANCE:
            if m.matches(protocols):
                # The member lost the JoinGroup response: answer with the current generation.
                return self._current_generation_result(m, for_leader_metadata=True)
            self._update_member_and_rebalance(now, m, protocols, rebalance_timeout_ms, session_timeout_ms, pending)
            return None
        if state is GroupState.STABLE:
            if self._leader_id == member_id or not m.matches(protocols):
                # A leader's JoinGroup always forces a rebalance (e.g. topic metadata changed).
                self._update_member_and_rebalance(now, m, protocols, rebalance_timeout_ms, session_timeout_ms, pending)
                return None
            return self._current_generation_result(m, for_leader_metadata=False)
        # Empty: unexpected for a known member; let it reset and rejoin.
        return _join_error(member_id, ErrorCode.UNKNOWN_MEMBER_ID)

    def _current_generation_result(self, m: _Member, *, for_leader_metadata: bool) -> JoinResult:
        is_leader = for_leader_metadata and self._leader_id == m.member_id
        return JoinResult(
            error_code=ErrorCode.NONE,
            member_id=m.member_id,
            generation_id=self._generation_id,
            protocol_type=self._protocol_type,
            protocol_name=self._protocol_name,
            leader=self._leader_id or "",
            members=self._current_member_metadata() if is_leader else (),
        )

    def _update_static_member_and_rebalance(
        self,
        now: int,
        pending: Pending,
        old_member_id: str,
        new_member_id: str,
        group_instance_id: str,
        protocols: list[tuple[str, bytes]],
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        supports_skip_assignment: bool,
    ) -> JoinResult | None:
        current_leader = self._leader_id
        m = self._replace_static_member(group_instance_id, old_member_id, new_member_id)
        # The old id's heartbeat expectation is gone with it; schedule one for the new id.
        m.heartbeat_deadline_ms = now + m.session_timeout_ms
        self._update_member(m, protocols, rebalance_timeout_ms, session_timeout_ms, pending)
        state = self._state
        if state is GroupState.STABLE:
            if self._protocol_name == self._select_protocol():
                # The known static member keeps its place and assignment: no rebalance.
                m.join_pending = None
                self._record_store_point()
                if supports_skip_assignment:
                    is_leader = self._leader_id == new_member_id
                    return JoinResult(
                        error_code=ErrorCode.NONE,
                        member_id=new_member_id,
                        generation_id=self._generation_id,
                        protocol_type=self._protocol_type,
                        protocol_name=self._protocol_name,
                        leader=self._leader_id or "",
                        skip_assignment=is_leader,
                        members=self._current_member_metadata() if is_leader else (),
                    )
                # Before JoinGroup v9 the old leader id is returned so that a restarted leader
                # does not run a (useless) assignment for a Stable group.
                return JoinResult(
                    error_code=ErrorCode.NONE,
                    member_id=new_member_id,
                    generation_id=self._generation_id,
                    protocol_type=self._protocol_type,
                    protocol_name=self._protocol_name,
                    leader=current_leader or "",
                )
            self._maybe_prepare_rebalance(now)
        elif state is GroupState.COMPLETING_REBALANCE:
            # The leader may already hold the old member id in its assignment: start over.
            self._prepare_rebalance(now)
        # PreparingRebalance: the member simply waits with the others.
        return None

    def _replace_static_member(self, group_instance_id: str, old_id: str, new_id: str) -> _Member:
        m = self._members.pop(old_id)
        # Fence a duplicate still waiting on the old id.
        if m.join_pending is not None:
            self._complete(m.join_pending, _join_error(old_id, ErrorCode.FENCED_INSTANCE_ID))
            m.join_pending = None
        if m.sync_pending is not None:
            self._complete(m.sync_pending, SyncResult(ErrorCode.FENCED_INSTANCE_ID))
            m.sync_pending = None
        m.member_id = new_id
        self._members[new_id] = m
        if self._leader_id == old_id:
            self._leader_id = new_id
        if old_id in self._pending_sync:
            # Deviation: Kafka leaves the stale id in pendingSyncMembers, which later forces a
            # rebalance at the sync deadline; the new id inherits the obligation instead.
            self._pending_sync.discard(old_id)
            self._pending_sync.add(new_id)
        self._static_members[group_instance_id] = new_id
        return m

    def _add_member_and_rebalance(
        self,
        now: int,
        pending: Pending,
        member_id: str,
        group_instance_id: str | None,
        client_id: str,
        client_host: str,
        session_timeout_ms: int,
        rebalance_timeout_ms: int,
        protocol_type: str,
        protocols: list[tuple[str, bytes]],
    ) -> None:
        m = _Member(
            member_id=member_id,
            group_instance_id=group_instance_id,
            client_id=client_id,
            client_host=client_host,
            rebalance_timeout_ms=rebalance_timeout_ms,
            session_timeout_ms=session_timeout_ms,
            protocol_type=protocol_type,
            protocols=protocols,
            is_new=True,
        )
        if self._state is GroupState.PREPARING_REBALANCE and self._generation_id == 0:
            self._new_member_added = True  # lets InitialDelayedJoin extend the delay
        self._add(m, pending)
        # New members cannot heartbeat yet; their parked join times out instead.
        m.heartbeat_deadline_ms = now + self.config.new_member_join_timeout_ms
        self._maybe_prepare_rebalance(now)

    def _add(self, m: _Member, pending: Pending | None) -> None:
        if m.group_instance_id is not None:
            if m.group_instance_id in self._static_members:
                raise IllegalGroupTransition(f"static member {m.group_instance_id} already exists")
            self._static_members[m.group_instance_id] = m.member_id
        if not self._members:
            self._protocol_type = m.protocol_type
        if self._leader_id is None:
            self._leader_id = m.member_id
        self._members[m.member_id] = m
        m.join_pending = pending
        self._pending_members.pop(m.member_id, None)

    def _update_member_and_rebalance(
        self,
        now: int,
        m: _Member,
        protocols: list[tuple[str, bytes]],
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        pending: Pending,
    ) -> None:
        self._update_member(m, protocols, rebalance_timeout_ms, session_timeout_ms, pending)
        self._maybe_prepare_rebalance(now)

    def _update_member(
        self,
        m: _Member,
        protocols: list[tuple[str, bytes]],
        rebalance_timeout_ms: int,
        session_timeout_ms: int,
        pending: Pending | None,
    ) -> None:
        m.protocols = protocols
        m.rebalance_timeout_ms = rebalance_timeout_ms
        m.session_timeout_ms = session_timeout_ms
        if m.join_pending is not None and m.join_pending is not pending:
            # Kafka silently replaces the callback; we answer the superseded request so it
            # is never left hanging. The client treats REBALANCE_IN_PROGRESS as "rejoin".
            self._complete(m.join_pending, _join_error(m.member_id, ErrorCode.REBALANCE_IN_PROGRESS))
        m.join_pending = pending

    def _supports_protocols(self, protocol_type: str, protocols: list[tuple[str, bytes]]) -> bool:
        # GroupMetadata.supportsProtocols
        names = [name for name, _ in protocols]
        if self._state is GroupState.EMPTY:
            return bool(protocol_type) and bool(names)
        if self._protocol_type != protocol_type:
            return False
        n = len(self._members)
        return any(self._protocol_support_count(name) == n for name in names)

    def _protocol_support_count(self, name: str) -> int:
        return sum(1 for m in self._members.values() if name in m.protocol_names())

    def _candidate_protocols(self) -> set[str]:
        n = len(self._members)
        names: set[str] = set()
        for m in self._members.values():
            names.update(m.protocol_names())
        return {p for p in names if self._protocol_support_count(p) == n}

    def _select_protocol(self) -> str:
        """A protocol every member supports, chosen by the members' preference votes.

        Kafka breaks vote ties arbitrarily (hash order); here the protocol that got its first
        vote earliest (member insertion order) wins a tie, so the choice is deterministic.
        """
        if not self._members:
            raise IllegalGroupTransition("cannot select a protocol for an empty group")
        candidates = self._candidate_protocols()
        votes: dict[str, int] = {}
        for m in self._members.values():
            vote = next(name for name in m.protocol_names() if name in candidates)
            votes[vote] = votes.get(vote, 0) + 1
        best = max(votes.values())
        return next(name for name, count in votes.items() if count == best)

    def _current_member_metadata(self) -> tuple[JoinMember, ...]:
        assert self._protocol_name is not None
        protocol = self._protocol_name
        return tuple(JoinMember(m.member_id, m.group_instance_id, m.metadata(protocol)) for m in self._members.values())

    def _validate_current_member(self, member_id: str, group_instance_id: str | None) -> int | None:
        # GroupCoordinator.validateCurrentMember / ClassicGroup.validateMember
        if group_instance_id is not None:
            current = self._static_members.get(group_instance_id)
            if current is None:
                return ErrorCode.UNKNOWN_MEMBER_ID
            if current != member_id:
                return ErrorCode.FENCED_INSTANCE_ID
        if member_id not in self._members:
            return ErrorCode.UNKNOWN_MEMBER_ID
        return None

    # ---- rebalance machinery ----------------------------------------------------------------

    def _num_awaiting_join(self) -> int:
        return sum(1 for m in self._members.values() if m.awaiting_join)

    def _has_all_members_joined(self) -> bool:
        return self._num_awaiting_join() == len(self._members) and not self._pending_members

    def _rebalance_timeout_ms(self) -> int:
        # Floor at 0: a negative timeout from a client must not arm a deadline in the past.
        return max([0, *(m.rebalance_timeout_ms for m in self._members.values())])

    def _maybe_prepare_rebalance(self, now: int) -> None:
        if self._state in VALID_PREVIOUS_STATES[GroupState.PREPARING_REBALANCE]:
            self._prepare_rebalance(now)

    def _prepare_rebalance(self, now: int) -> None:
        if self._state is GroupState.COMPLETING_REBALANCE:
            self._reset_and_propagate_assignment_error(now, ErrorCode.REBALANCE_IN_PROGRESS)
        self._sync_timer = None
        if self._state is GroupState.EMPTY:
            delay = self.config.initial_rebalance_delay_ms
            timer = _JoinTimer(
                deadline_ms=now + delay,
                initial=True,
                delay_ms=delay,
                remaining_ms=max(self._rebalance_timeout_ms() - delay, 0),
            )
        else:
            timer = _JoinTimer(deadline_ms=now + self._rebalance_timeout_ms(), initial=False)
        self._transition(GroupState.PREPARING_REBALANCE, now)
        self._join_timer = timer
        self._try_complete_join(now)

    def _try_complete_join(self, now: int) -> None:
        # DelayedJoin.tryComplete (InitialDelayedJoin never completes early).
        t = self._join_timer
        if (
            t is not None
            and not t.initial
            and self._state is GroupState.PREPARING_REBALANCE
            and self._has_all_members_joined()
        ):
            self._join_timer = None
            self._on_complete_join(now)

    def _fire_join_timer(self, at: int) -> None:
        t = self._join_timer
        assert t is not None
        if t.initial and self._new_member_added and t.remaining_ms != 0:
            # InitialDelayedJoin.onComplete: new members arrived, wait a little longer.
            self._new_member_added = False
            delay = min(self.config.initial_rebalance_delay_ms, t.remaining_ms)
            remaining = max(t.remaining_ms - t.delay_ms, 0)
            self._join_timer = _JoinTimer(at + delay, True, delay, remaining)
            return
        self._join_timer = None
        self._on_complete_join(at)

    def _on_complete_join(self, now: int) -> None:
        # Dynamic members that did not rejoin in time are dropped; static ones are kept (their
        # session timeout decides).
        for m in list(self._members.values()):
            if not m.awaiting_join and m.group_instance_id is None:
                self._remove(m.member_id, ErrorCode.UNKNOWN_MEMBER_ID)
        if self._state is GroupState.DEAD:
            return
        if not self._maybe_elect_new_joined_leader() and self._members:
            # Nobody rejoined (only absent static members remain): try again later; their
            # session expiry removes them meanwhile. (A zero timeout would spin: use >= 1 ms.)
            self._join_timer = _JoinTimer(now + max(1, self._rebalance_timeout_ms()), False)
            return
        self._init_next_generation(now)
        if self._state is GroupState.EMPTY:
            self._record_store_point()
            return
        for m in self._members.values():
            result = JoinResult(
                error_code=ErrorCode.NONE,
                member_id=m.member_id,
                generation_id=self._generation_id,
                protocol_type=self._protocol_type,
                protocol_name=self._protocol_name,
                leader=self._leader_id or "",
                members=self._current_member_metadata() if self._leader_id == m.member_id else (),
            )
            if m.join_pending is not None:
                self._complete(m.join_pending, result)
                m.join_pending = None
            m.heartbeat_deadline_ms = now + m.session_timeout_ms
            m.is_new = False
            self._pending_sync.add(m.member_id)
        self._sync_timer = _SyncTimer(now + self._rebalance_timeout_ms(), self._generation_id)

    def _maybe_elect_new_joined_leader(self) -> bool:
        if self._leader_id is None:
            return False
        if self._members[self._leader_id].awaiting_join:
            return True
        for m in self._members.values():
            if m.awaiting_join:
                self._leader_id = m.member_id
                return True
        return False

    def _init_next_generation(self, now: int) -> None:
        self._generation_id += 1
        if self._members:
            self._protocol_name = self._select_protocol()
            for m in self._members.values():
                m.assignment = None
            self._transition(GroupState.COMPLETING_REBALANCE, now)
        else:
            self._protocol_name = None
            self._transition(GroupState.EMPTY, now)
        self._pending_sync.clear()

    def _reset_and_propagate_assignment_error(self, now: int, error: int) -> None:
        for m in self._members.values():
            m.assignment = None
        self._propagate_assignment(now, error)

    def _propagate_assignment(self, now: int, error: int) -> None:
        ok = error == ErrorCode.NONE
        for m in self._members.values():
            if m.sync_pending is not None:
                self._complete(
                    m.sync_pending,
                    SyncResult(
                        error_code=error,
                        protocol_type=self._protocol_type if ok else None,
                        protocol_name=self._protocol_name if ok else None,
                        assignment=(m.assignment or b"") if ok else b"",
                    ),
                )
                m.sync_pending = None
                m.heartbeat_deadline_ms = now + m.session_timeout_ms

    def _fire_sync_timer(self, at: int) -> None:
        t = self._sync_timer
        assert t is not None
        self._sync_timer = None
        if t.generation_id != self._generation_id or self._state not in (
            GroupState.COMPLETING_REBALANCE,
            GroupState.STABLE,
        ):
            return
        if self._pending_sync:
            for member_id in list(self._pending_sync):
                self._remove(member_id, ErrorCode.UNKNOWN_MEMBER_ID)
            self._prepare_rebalance(at)

    def _sync_timer_live(self) -> bool:
        # DelayedSync.tryComplete: done once everybody synced or the group moved on.
        t = self._sync_timer
        if t is None:
            return False
        if (
            t.generation_id != self._generation_id
            or self._state not in (GroupState.COMPLETING_REBALANCE, GroupState.STABLE)
            or not self._pending_sync
        ):
            self._sync_timer = None
            return False
        return True

    def _fire_heartbeat(self, at: int, member_id: str) -> None:
        m = self._members[member_id]
        m.heartbeat_deadline_ms = None
        if not m.has_satisfied_heartbeat():
            self._remove_member_and_update_group(at, m)

    def _fire_pending_member(self, at: int, member_id: str) -> None:
        self._pending_members.pop(member_id, None)
        if self._state is GroupState.PREPARING_REBALANCE:
            self._try_complete_join(at)

    def _remove(self, member_id: str, join_error: int) -> None:
        """GroupMetadata.remove, plus answering whatever the member still has parked."""
        m = self._members.pop(member_id, None)
        if m is not None:
            if m.group_instance_id is not None and (self._static_members.get(m.group_instance_id) == member_id):
                del self._static_members[m.group_instance_id]
            if m.join_pending is not None:
                self._complete(m.join_pending, _join_error(UNKNOWN_MEMBER_ID, join_error))
                m.join_pending = None
            if m.sync_pending is not None:
                self._complete(m.sync_pending, SyncResult(ErrorCode.UNKNOWN_MEMBER_ID))
                m.sync_pending = None
        if self._leader_id == member_id:
            self._leader_id = next(iter(self._members), None)
        self._pending_members.pop(member_id, None)
        self._pending_sync.discard(member_id)

    def _remove_member_and_update_group(self, now: int, m: _Member) -> None:
        self._remove(m.member_id, ErrorCode.UNKNOWN_MEMBER_ID)
        state = self._state
        if state in (GroupState.STABLE, GroupState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance(now)
        elif state is GroupState.PREPARING_REBALANCE:
            self._try_complete_join(now)

    def _transition(self, target: GroupState, now: int) -> None:
        if self._state not in VALID_PREVIOUS_STATES[target]:
            raise IllegalGroupTransition(f"group {self.group_id}: {self._state.value} -> {target.value}")
        self._state = target
        self._state_timestamp_ms = now

    # ---- SyncGroup --------------------------------------------------------------------------

    def sync(
        self,
        now_ms: int,
        *,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        protocol_type: str | None = None,
        protocol_name: str | None = None,
        assignments: Mapping[str, bytes] | None = None,
    ) -> SyncResult | Pending:
        """SyncGroup. ``protocol_type``/``protocol_name`` are checked when given (v5+);
        ``assignments`` is only read from the leader."""
        self._advance(now_ms)
        now = self._now_ms
        pending = Pending(next(self._ids), "sync")
        result = self._sync(
            now, pending, member_id, group_instance_id, generation_id, protocol_type, protocol_name, assignments or {}
        )
        return self._finish(now, pending, result)

    def _sync(
        self,
        now: int,
        pending: Pending,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        protocol_type: str | None,
        protocol_name: str | None,
        assignments: Mapping[str, bytes],
    ) -> SyncResult | None:
        if self._state is GroupState.DEAD:
            return SyncResult(ErrorCode.COORDINATOR_NOT_AVAILABLE)
        error = self._validate_current_member(member_id, group_instance_id)
        if error is not None:
            return SyncResult(error)
        if generation_id != self._generation_id:
            return SyncResult(ErrorCode.ILLEGAL_GENERATION)
        if protocol_type is not None and protocol_type != self._protocol_type:
            return SyncResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        if protocol_name is not None and protocol_name != self._protocol_name:
            return SyncResult(ErrorCode.INCONSISTENT_GROUP_PROTOCOL)
        state = self._state
        if state is GroupState.EMPTY:
            return SyncResult(ErrorCode.UNKNOWN_MEMBER_ID)
        if state is GroupState.PREPARING_REBALANCE:
            return SyncResult(ErrorCode.REBALANCE_IN_PROGRESS)
        m = self._members[member_id]
        if state is GroupState.COMPLETING_REBALANCE:
            if m.sync_pending is not None:
                self._complete(m.sync_pending, SyncResult(ErrorCode.REBALANCE_IN_PROGRESS))
            m.sync_pending = pending
            self._pending_sync.discard(member_id)
            if self._leader_id == member_id:
                # Missing members get an empty assignment; unknown ids are ignored.
                for other in self._members.values():
                    other.assignment = bytes(assignments.get(other.member_id, b""))
                self._record_store_point()
                self._propagate_assignment(now, ErrorCode.NONE)
                self._transition(GroupState.STABLE, now)
            return None
        # Stable: hand out the current assignment.
        self._pending_sync.discard(member_id)
        m.heartbeat_deadline_ms = now + m.session_timeout_ms
        return SyncResult(ErrorCode.NONE, self._protocol_type, self._protocol_name, m.assignment or b"")

    # ---- Heartbeat --------------------------------------------------------------------------

    def heartbeat(self, now_ms: int, *, member_id: str, group_instance_id: str | None, generation_id: int) -> int:
        self._advance(now_ms)
        now = self._now_ms
        error = self._heartbeat(now, member_id, group_instance_id, generation_id)
        self._advance(now)
        return error

    def _heartbeat(self, now: int, member_id: str, group_instance_id: str | None, generation_id: int) -> int:
        if self._state is GroupState.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        error = self._validate_current_member(member_id, group_instance_id)
        if error is not None:
            return error
        if generation_id != self._generation_id:
            return ErrorCode.ILLEGAL_GENERATION
        if self._state is GroupState.EMPTY:
            return ErrorCode.UNKNOWN_MEMBER_ID
        m = self._members[member_id]
        m.heartbeat_deadline_ms = now + m.session_timeout_ms
        if self._state is GroupState.PREPARING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        return ErrorCode.NONE

    # ---- LeaveGroup -------------------------------------------------------------------------

    def leave(self, now_ms: int, members: Iterable[tuple[str, str | None]]) -> LeaveResult:
        """LeaveGroup (v3+ batches, KIP-345). Each entry is (member_id, group_instance_id); an
        empty member id with an instance id removes that static member (admin removal)."""
        self._advance(now_ms)
        now = self._now_ms
        leaving = list(members)
        if self._state is GroupState.DEAD:
            return LeaveResult(ErrorCode.COORDINATOR_NOT_AVAILABLE, ())
        errors: list[int] = []
        for member_id, group_instance_id in leaving:
            if member_id == UNKNOWN_MEMBER_ID:
                current = self._static_members.get(group_instance_id) if group_instance_id is not None else None
                if current is None:
                    errors.append(ErrorCode.UNKNOWN_MEMBER_ID)
                else:
                    self._remove_member_and_update_group(now, self._members[current])
                    errors.append(ErrorCode.NONE)
            elif member_id in self._pending_members:
                self._fire_pending_member(now, member_id)
                errors.append(ErrorCode.NONE)
            else:
                error = self._validate_current_member(member_id, group_instance_id)
                if error is None:
                    self._remove_member_and_update_group(now, self._members[member_id])
                    errors.append(ErrorCode.NONE)
                else:
                    errors.append(error)
        self._advance(now)
        return LeaveResult(ErrorCode.NONE, tuple(errors))

    # ---- OffsetCommit membership check --------------------------------------------------------

    def validate_offset_commit(
        self,
        now_ms: int,
        *,
        member_id: str,
        group_instance_id: str | None,
        generation_id: int,
        is_transactional: bool = False,
    ) -> int:
        """The membership part of OffsetCommit / TxnOffsetCommit (Kafka 4.x
        ``ClassicGroup.validateOffsetCommit``). A valid commit from a member also counts as a
        heartbeat, as in Kafka 3.x."""
        self._advance(now_ms)
        now = self._now_ms
        if self._state is GroupState.DEAD:
            return ErrorCode.COORDINATOR_NOT_AVAILABLE
        if generation_id < 0 and self._state is GroupState.EMPTY:
            return ErrorCode.NONE  # admin client / manual assignment: Kafka only stores offsets
        if generation_id >= 0 or member_id != UNKNOWN_MEMBER_ID or group_instance_id is not None:
            error = self._validate_current_member(member_id, group_instance_id)
            if error is not None:
                return error
            if generation_id != self._generation_id:
                return ErrorCode.ILLEGAL_GENERATION
        elif not is_transactional and self._state is not GroupState.EMPTY:
            return ErrorCode.UNKNOWN_MEMBER_ID
        if not is_transactional and self._state is GroupState.COMPLETING_REBALANCE:
            return ErrorCode.REBALANCE_IN_PROGRESS
        m = self._members.get(member_id)
        if m is not None and self._state in (GroupState.STABLE, GroupState.PREPARING_REBALANCE):
            m.heartbeat_deadline_ms = now + m.session_timeout_ms
        return ErrorCode.NONE

    # ---- unload -----------------------------------------------------------------------------

    def unload(self, now_ms: int, error: int = ErrorCode.NOT_COORDINATOR) -> None:
        """The coordinator gives the group up (emigration, deletion): Dead, everything parked is
        answered with ``error`` (Kafka ``onGroupUnloaded``: NOT_COORDINATOR)."""
        self._now_ms = max(self._now_ms, now_ms)
        self._transition(GroupState.DEAD, self._now_ms)
        for m in self._members.values():
            if m.join_pending is not None:
                self._complete(m.join_pending, _join_error(m.member_id, error))
                m.join_pending = None
            if m.sync_pending is not None:
                self._complete(m.sync_pending, SyncResult(error))
                m.sync_pending = None
            m.heartbeat_deadline_ms = None
        self._join_timer = None
        self._sync_timer = None
        self._pending_members.clear()

    # ---- snapshot ---------------------------------------------------------------------------

    def to_snapshot(self) -> GroupSnapshot:
        protocol = self._protocol_name
        members = tuple(
            MemberSnapshot(
                member_id=m.member_id,
                group_instance_id=m.group_instance_id,
                client_id=m.client_id,
                client_host=m.client_host,
                rebalance_timeout_ms=m.rebalance_timeout_ms,
                session_timeout_ms=m.session_timeout_ms,
                subscription=dict(m.protocols).get(protocol, b"") if protocol else b"",
                assignment=m.assignment or b"",
            )
            for m in self._members.values()
        )
        return GroupSnapshot(
            group_id=self.group_id,
            protocol_type=self._protocol_type,
            generation_id=self._generation_id,
            protocol_name=protocol,
            leader_id=self._leader_id,
            current_state_timestamp_ms=self._state_timestamp_ms,
            members=members,
        )

    @classmethod
    def from_snapshot(
        cls,
        snapshot: GroupSnapshot,
        config: GroupConfig | None,
        now_ms: int,
        *,
        new_uuid: Callable[[], str],
    ) -> ClassicGroup:
        """Load a group (Kafka ``GroupMetadata.loadGroup`` + ``onGroupLoaded``): Stable with its
        members or Empty; every member gets a fresh session deadline; a group above
        ``group.max.size`` starts a rebalance."""
        group = cls(snapshot.group_id, config, new_uuid=new_uuid, now_ms=now_ms)
        group._generation_id = snapshot.generation_id
        group._protocol_type = snapshot.protocol_type or None
        group._protocol_name = snapshot.protocol_name
        group._state_timestamp_ms = snapshot.current_state_timestamp_ms
        if snapshot.members:
            if not snapshot.protocol_name or not snapshot.protocol_type:
                raise ValueError("group snapshot has members but no protocol type/name")
            group._state = GroupState.STABLE
        for ms in snapshot.members:
            m = _Member(
                member_id=ms.member_id,
                group_instance_id=ms.group_instance_id,
                client_id=ms.client_id,
                client_host=ms.client_host,
                rebalance_timeout_ms=ms.rebalance_timeout_ms,
                session_timeout_ms=ms.session_timeout_ms,
                protocol_type=snapshot.protocol_type or "",
                protocols=[(snapshot.protocol_name or "", bytes(ms.subscription))],
                assignment=bytes(ms.assignment),
            )
            group._add(m, None)
        if snapshot.leader_id in group._members:
            group._leader_id = snapshot.leader_id
        if len(group._members) > group.config.max_size:
            group._prepare_rebalance(now_ms)
        for m in group._members.values():
            m.heartbeat_deadline_ms = now_ms + m.session_timeout_ms
        return group

    # ---- plumbing ---------------------------------------------------------------------------

    def _record_store_point(self) -> None:
        self._store_request = self.to_snapshot()

    def _complete(self, pending: Pending, result: JoinResult | SyncResult) -> None:
        self._completions.append((pending, result))

    def _finish(self, now: int, pending: Pending, result: JoinResult | SyncResult | None):
        self._advance(now)  # timers armed with a zero delay fire now
        if result is not None:
            return result
        for i, (p, r) in enumerate(self._completions):
            if p is pending:
                del self._completions[i]
                return r
        return pending

    def _timers(self) -> list[tuple[int, int, str]]:
        """Armed timers as (deadline, kind order, key); kind order breaks deadline ties."""
        out: list[tuple[int, int, str]] = []
        if self._join_timer is not None:
            out.append((self._join_timer.deadline_ms, 2, ""))
        if self._sync_timer_live():
            assert self._sync_timer is not None
            out.append((self._sync_timer.deadline_ms, 3, ""))
        for m in self._members.values():
            if m.heartbeat_deadline_ms is not None:
                out.append((m.heartbeat_deadline_ms, 0, m.member_id))
        for member_id, deadline in self._pending_members.items():
            out.append((deadline, 1, member_id))
        return out

    def _advance(self, now_ms: int) -> None:
        """Fire, in deadline order, every timer due at or before ``now_ms``; each fires at its own
        deadline, so the outcome does not depend on how often the driver ticks."""
        self._now_ms = max(self._now_ms, now_ms)
        if self._state is GroupState.DEAD:
            return
        while True:
            due = [t for t in self._timers() if t[0] <= self._now_ms]
            if not due:
                return
            deadline, kind, key = min(due)
            at = max(deadline, 0)
            if kind == 0:
                self._fire_heartbeat(at, key)
            elif kind == 1:
                self._fire_pending_member(at, key)
            elif kind == 2:
                self._fire_join_timer(at)
            else:
                self._fire_sync_timer(at)

    # ---- test support -----------------------------------------------------------------------

    def check_invariants(self) -> None:
        """Raise AssertionError if an internal invariant is broken (used by property tests)."""
        s = self._state
        assert self._leader_id is None or self._leader_id in self._members, "leader not a member"
        if self._members:
            assert self._leader_id is not None, "members but no leader"
        for iid, mid in self._static_members.items():
            assert mid in self._members and self._members[mid].group_instance_id == iid
        for m in self._members.values():
            if m.awaiting_join:
                assert s is GroupState.PREPARING_REBALANCE, f"parked join in {s.value}"
            if m.awaiting_sync:
                assert s is GroupState.COMPLETING_REBALANCE, f"parked sync in {s.value}"
            if s is GroupState.STABLE:
                assert m.assignment is not None, "Stable member without assignment"
        if s is GroupState.PREPARING_REBALANCE:
            assert self._join_timer is not None, "PreparingRebalance without a join timer"
        if s is GroupState.EMPTY:
            assert not self._members
        if s is GroupState.COMPLETING_REBALANCE:
            assert self._leader_id is not None
            leader = self._members[self._leader_id]
            if not leader.awaiting_sync:
                assert self._sync_timer_live(), "CompletingRebalance can stall"
        assert not (set(self._pending_members) & set(self._members))
        assert self._pending_sync <= set(self._members)


__all__ = [
    "DEAD_GROUP_DESCRIPTION",
    "GROUP_MAX_SIZE_REACHED",
    "UNKNOWN_MEMBER_ID",
    "VALID_PREVIOUS_STATES",
    "ClassicGroup",
    "GroupState",
    "IllegalGroupTransition",
]
