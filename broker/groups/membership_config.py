"""Broker-wide settings of classic groups (session and rebalance bounds, group size): the one
input of the membership state machine that is not a request."""

from __future__ import annotations

import msgspec


class GroupConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Broker-wide classic group settings (Kafka's names and defaults)."""

    initial_rebalance_delay_ms: int = 3000  # group.initial.rebalance.delay.ms
    min_session_timeout_ms: int = 6000  # group.min.session.timeout.ms
    max_session_timeout_ms: int = 1_800_000  # group.max.session.timeout.ms
    max_size: int = 2**31 - 1  # group.max.size
    # GroupCoordinator.NewMemberJoinTimeoutMs (4.x: group.classic.new.member.join.timeout.ms
    # internally): a new member's parked JoinGroup is answered UNKNOWN_MEMBER_ID after this.
    new_member_join_timeout_ms: int = 300_000

    def __post_init__(self) -> None:
        if self.initial_rebalance_delay_ms < 0:
            raise ValueError("group.initial.rebalance.delay.ms must be >= 0")
        if self.min_session_timeout_ms < 0:
            raise ValueError("group.min.session.timeout.ms must be >= 0")
        if self.max_session_timeout_ms < self.min_session_timeout_ms:
            raise ValueError("group.max.session.timeout.ms must be >= group.min.session.timeout.ms")
        if self.max_size < 1:
            raise ValueError("group.max.size must be >= 1")
        if self.new_member_join_timeout_ms < 1:
            raise ValueError("new_member_join_timeout_ms must be >= 1")
