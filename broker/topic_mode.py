"""A topic's mode as a lifecycle: classic, diskless, and the transitional states an online
switch between them passes through.

Handlers ask the mode how a partition is appended to and served (`appends_to_wal`,
`serves_by_az`) instead of branching on the stored `diskless.enable` flag, so the switch
(a later issue) changes what the mode answers, not every handler. A transitional state
keeps its source mode's data paths: the switch flips them when it completes, and may be
abandoned back to the source mode. `transition` is the only legal way from one mode to
another; today only the settled modes occur (the mode is fixed when a topic is created).
"""

from __future__ import annotations

from enum import Enum

from .topic_config import TopicSettings


class TopicMode(Enum):
    CLASSIC = "classic"  # records in replicated local logs; the leader serves produce and fetch
    DISKLESS = "diskless"  # records in shared WAL objects; logs hold their coordinates
    CLASSIC_TO_DISKLESS = "classic-to-diskless"  # switching: still served as classic
    DISKLESS_TO_CLASSIC = "diskless-to-classic"  # switching: still served as diskless

    @property
    def appends_to_wal(self) -> bool:
        """Produce: batches go into shared WAL objects through the client's AZ representative
        and the leader commits their coordinates; otherwise the leader appends the records."""
        return _SERVED_AS[self] is TopicMode.DISKLESS

    @property
    def serves_by_az(self) -> bool:
        """Clients are served by their AZ's representative, which need not lead or host the
        partition: metadata advertises it, its fetches read any replica (one in its AZ when
        it hosts none), and it sends offset queries on to the leader. Otherwise only the
        leader serves, from its own log."""
        return _SERVED_AS[self] is TopicMode.DISKLESS


class IllegalModeTransition(ValueError):
    """A move the lifecycle does not allow (say, diskless straight to classic)."""


_SERVED_AS = {
    TopicMode.CLASSIC: TopicMode.CLASSIC,
    TopicMode.DISKLESS: TopicMode.DISKLESS,
    TopicMode.CLASSIC_TO_DISKLESS: TopicMode.CLASSIC,
    TopicMode.DISKLESS_TO_CLASSIC: TopicMode.DISKLESS,
}

TRANSITIONS: dict[TopicMode, frozenset[TopicMode]] = {
    TopicMode.CLASSIC: frozenset({TopicMode.CLASSIC_TO_DISKLESS}),
    TopicMode.CLASSIC_TO_DISKLESS: frozenset({TopicMode.DISKLESS, TopicMode.CLASSIC}),  # complete, or abandon
    TopicMode.DISKLESS: frozenset({TopicMode.DISKLESS_TO_CLASSIC}),
    TopicMode.DISKLESS_TO_CLASSIC: frozenset({TopicMode.CLASSIC, TopicMode.DISKLESS}),  # complete, or abandon
}


def transition(current: TopicMode, target: TopicMode) -> TopicMode:
    """`target`, if the lifecycle allows moving there from `current` (IllegalModeTransition if not)."""
    if target not in TRANSITIONS[current]:
        raise IllegalModeTransition(f"a topic cannot go from {current.value} to {target.value}")
    return target


def mode_of(settings: TopicSettings) -> TopicMode:
    """The mode stored today: `diskless.enable`, fixed when the topic was created."""
    return TopicMode.DISKLESS if settings.diskless else TopicMode.CLASSIC
