"""When the broker freezes its heap out of full garbage collections, and when it takes it
back (broker/heap.py, issue 28 item 2), with a collector that records the calls."""

from __future__ import annotations

import gc

from broker.heap import FREEZE_EVERY, RECLAIM_FRACTION, HeapFreezer


class Recorder:
    def __init__(self) -> None:
        self.calls: list[str] = []

    def collect(self, generation: int = 2) -> int:
        self.calls.append(f"collect{generation}")
        return 0

    def freeze(self) -> None:
        self.calls.append("freeze")

    def unfreeze(self) -> None:
        self.calls.append("unfreeze")


def test_freezes_after_every_batch_of_opened_partitions() -> None:
    recorder = Recorder()
    heap = HeapFreezer(recorder)
    for _ in range(FREEZE_EVERY - 1):
        heap.opened()
    assert recorder.calls == []
    heap.opened()
    assert recorder.calls == ["collect1", "freeze"], "young garbage is collected, not frozen"
    for _ in range(FREEZE_EVERY * 2):
        heap.opened()
    assert recorder.calls.count("freeze") == 3


def test_a_start_freezes_the_loaded_metadata_before_opening_partitions() -> None:
    recorder = Recorder()
    HeapFreezer(recorder).settled()
    assert recorder.calls == ["collect1", "freeze"]


def test_removals_unfreeze_collect_once_and_freeze_again() -> None:
    recorder = Recorder()
    heap = HeapFreezer(recorder)
    heap.opened(FREEZE_EVERY * RECLAIM_FRACTION * 2)  # one freeze of 20,000 partitions
    recorder.calls.clear()
    threshold = FREEZE_EVERY * 2  # a tenth of those frozen
    heap.removed(threshold - 1)
    assert recorder.calls == [], "a few deleted partitions' cycles may wait in the frozen heap"
    heap.removed()
    assert recorder.calls == ["unfreeze", "collect2", "collect1", "freeze"]
    recorder.calls.clear()
    heap.removed(threshold * 9 // 10 - 1)  # a tenth of the 18,000 left
    assert recorder.calls == [], "the count starts again after the collection"
    heap.removed()
    assert recorder.calls[-1] == "freeze"


def test_the_real_collector_keeps_what_is_frozen_alive_and_walks_less() -> None:
    heap = HeapFreezer()
    kept = [[index] for index in range(1000)]
    before = gc.get_freeze_count()
    try:
        heap.opened(FREEZE_EVERY)
        assert gc.get_freeze_count() >= before + len(kept)
        assert all(item == [index] for index, item in enumerate(kept))
    finally:
        gc.unfreeze()
