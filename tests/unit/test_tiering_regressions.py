"""Regressions the tiering simulation found (tests/sim/scenarios/tiering.py), reduced.

- Seed 36: a replica whose first marker was one it appended as leader (so `applied_through`
  started there) lost that marker to a truncation when it became a follower, and then
  ignored the new leader's markers below that offset: it never learned two tiered segments.
- Seed 1: a segment whose COPY_SEGMENT_FINISHED was appended but not yet committed (the high
  watermark waits for the followers) looked abandoned (still STARTED, its job done) and was
  deleted, after its range had been dropped locally: acknowledged records lost.
"""

from __future__ import annotations

from pathlib import Path

from broker.log.markers import EVENT_VERSION, RemoteSegmentEvent, RemoteSegmentState
from broker.log.remote_segments import RemoteSegments

STARTED, FINISHED = RemoteSegmentState.COPY_SEGMENT_STARTED, RemoteSegmentState.COPY_SEGMENT_FINISHED


def event(state: RemoteSegmentState, segment_id: str, base: int, end: int, epoch: int = 1) -> RemoteSegmentEvent:
    return RemoteSegmentEvent(EVENT_VERSION, state, segment_id, base, end, epoch, 100, 1)


def test_markers_below_a_truncated_first_marker_still_apply(tmp_path: Path) -> None:
    segments = RemoteSegments.open(tmp_path)
    segments.on_append(28, 2, event(STARTED, "lost", 0, 20, epoch=2))  # appended as leader, never committed
    segments.on_truncate(23)  # a follower again: the divergent tail goes
    segments.on_append(23, 3, event(STARTED, "kept", 0, 15, epoch=3))
    segments.on_append(26, 3, event(FINISHED, "kept", 0, 15, epoch=3))
    segments.commit_through(30)
    assert [s.segment_id for s in segments.readable] == ["kept"]
    reopened = RemoteSegments.open(tmp_path)
    assert [s.segment_id for s in reopened.readable] == ["kept"]


def test_a_truncation_is_remembered_across_a_crash(tmp_path: Path) -> None:
    segments = RemoteSegments.open(tmp_path)
    segments.on_append(28, 2, event(STARTED, "lost", 0, 20, epoch=2))
    segments.on_truncate(23)
    assert RemoteSegments.open(tmp_path).applied_through == 23  # a restart replays the log from 23


def test_a_finished_marker_waiting_to_commit_is_pending() -> None:
    segments = RemoteSegments()
    segments.on_append(5, 1, event(STARTED, "s", 0, 4))
    segments.commit_through(6)
    segments.on_append(9, 1, event(FINISHED, "s", 0, 4))
    assert [s.state for s in segments.segments] == [STARTED]
    assert segments.has_pending("s") and not segments.has_pending("other")
    segments.commit_through(10)
    assert not segments.has_pending("s") and [s.segment_id for s in segments.readable] == ["s"]
