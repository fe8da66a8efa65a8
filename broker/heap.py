"""Keeping Python's full garbage collections short on a broker with many partitions.

A full (generation 2) collection walks every object the collector tracks, and a broker's
partitions are most of them: about 80 objects each, so 1.6 million at 20,000 partitions and
a walk of about half a second with the event loop held, several times while they open
(issue 28: the longest stall of a start was such a collection). Partition state lives as
long as the partition, so when a start has loaded the metadata and after every FREEZE_EVERY
partitions opened, the broker moves what exists into the collector's permanent generation
(`gc.freeze()`), which full collections skip; they then walk only what came since.

Frozen objects are never collected, so a reference cycle among them that becomes garbage
(a deleted partition's) stays in memory. Once partitions removed since the last freeze
reach a tenth of those frozen (at least FREEZE_EVERY), the broker unfreezes, collects once
(one full walk, as every collection was before), and freezes again: memory stays within a
tenth of the partitions' worth of what deletions leave behind.

Simulations and in-process tests run many brokers in one interpreter and pass no freezer.
"""

from __future__ import annotations

import gc
import logging
from typing import Protocol

log = logging.getLogger(__name__)

FREEZE_EVERY = 1000  # partitions opened between freezes
RECLAIM_FRACTION = 10  # unfreeze and collect once removals reach 1/10 of the frozen partitions


class Collector(Protocol):
    """The part of the `gc` module this uses (a test passes a recorder)."""

    def collect(self, generation: int = 2) -> int: ...

    def freeze(self) -> None: ...

    def unfreeze(self) -> None: ...


class HeapFreezer:
    def __init__(self, collector: Collector = gc) -> None:
        self._gc = collector
        self._opened = 0  # partitions opened since the last freeze
        self._frozen = 0  # partitions open at the last freeze
        self._removed = 0  # partitions removed since the last freeze

    def opened(self, count: int = 1) -> None:
        self._opened += count
        if self._opened >= FREEZE_EVERY:
            self._freeze()

    def settled(self) -> None:
        """What exists now lives long (a start has loaded the cluster's metadata and is about
        to open its partitions): freeze it."""
        self._freeze()

    def removed(self, count: int = 1) -> None:
        self._removed += count
        if self._removed >= max(self._frozen // RECLAIM_FRACTION, FREEZE_EVERY):
            self._gc.unfreeze()
            self._gc.collect()
            log.info("%d partitions removed since the last heap freeze: collected once", self._removed)
            self._freeze()

    def _freeze(self) -> None:
        self._gc.collect(1)  # young garbage goes first; only what survives is frozen
        self._gc.freeze()
        self._frozen += self._opened - self._removed
        self._opened = self._removed = 0
