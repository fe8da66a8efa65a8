"""A topic's mode, and a partition's on the way from one mode to the other.

Handlers ask the mode how a partition is appended to and served (`appends_to_wal`,
`serves_by_az`) instead of branching on the stored `diskless.enable` flag. A topic is
served in the mode `diskless.enable` names from the moment it changes; each partition's
leader then switches its log (modes/switch.py), and until that is committed the partition is
in a transitional state, which keeps its source mode's data paths: its leader still accepts
only the old mode's appends, and refuses the new mode's retriably until it switches.
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


_SERVED_AS = {
    TopicMode.CLASSIC: TopicMode.CLASSIC,
    TopicMode.DISKLESS: TopicMode.DISKLESS,
    TopicMode.CLASSIC_TO_DISKLESS: TopicMode.CLASSIC,
    TopicMode.DISKLESS_TO_CLASSIC: TopicMode.DISKLESS,
}


def partition_mode(diskless: bool, wanted_diskless: bool) -> TopicMode:
    """A partition's mode: the one its log is in (`diskless`), or on the way to the topic's."""
    if diskless == wanted_diskless:
        return TopicMode.DISKLESS if diskless else TopicMode.CLASSIC
    return TopicMode.DISKLESS_TO_CLASSIC if diskless else TopicMode.CLASSIC_TO_DISKLESS


def mode_of(settings: TopicSettings) -> TopicMode:
    """The mode a topic is served in: its `diskless.enable`."""
    return TopicMode.DISKLESS if settings.diskless else TopicMode.CLASSIC
