"""The leader's side of commit streams (broker/wal/commit_streams.py): a representative's
commits are applied in order, and nothing after one that is missing."""

from __future__ import annotations

from broker.wal.commit_streams import CommitStream, CommitStreams


def commit(sequence: int, number: int = 0, node_id: int = 5, incarnation: str = "a") -> CommitStream:
    return CommitStream(node_id, incarnation, number, sequence)


def test_commits_in_order_are_applied() -> None:
    streams = CommitStreams()
    assert [streams.admit(commit(s)) for s in range(4)] == [None] * 4


def test_a_missing_commit_closes_the_stream_from_its_position() -> None:
    streams = CommitStreams()
    assert streams.admit(commit(0)) is None
    assert streams.admit(commit(2)) == 1  # 1 never arrived: refused from 1 on
    assert streams.admit(commit(3)) == 1
    assert streams.admit(commit(1)) == 1, "late: it was declared lost, so it is refused too"


def test_the_next_stream_is_applied_and_the_closed_one_stays_refused() -> None:
    streams = CommitStreams()
    streams.admit(commit(0))
    streams.admit(commit(2))
    assert streams.admit(commit(0, number=1)) is None
    assert streams.admit(commit(1, number=1)) is None
    assert streams.admit(commit(3, number=0)) == 3, "a stream the representative has left"


def test_a_stream_first_seen_past_its_start_is_refused_from_there_only() -> None:
    """Its first commits never arrived, or this leader process started after applying them:
    the leader can vouch only for what it refuses itself."""
    streams = CommitStreams()
    assert streams.admit(commit(7, number=2)) == 7
    assert streams.admit(commit(8, number=2)) == 7
    assert streams.admit(commit(0, number=3)) is None


def test_a_restarted_representative_starts_over_and_representatives_are_independent() -> None:
    streams = CommitStreams()
    for s in range(3):
        streams.admit(commit(s, number=4))
    assert streams.admit(commit(0, incarnation="b")) is None
    assert streams.admit(commit(0, node_id=6)) is None
    assert streams.admit(commit(1, incarnation="b")) is None


def test_a_commit_refused_as_a_whole_closes_the_stream() -> None:
    streams = CommitStreams()
    assert streams.admit(commit(0)) is None
    assert streams.close(commit(0)) == 0
    assert streams.admit(commit(1)) == 0


def test_bounded_a_forgotten_stream_is_refused_and_the_next_one_applied() -> None:
    streams = CommitStreams(max_peers=2)
    for node_id in (1, 2, 3):
        assert streams.admit(commit(0, node_id=node_id)) is None
    assert streams.admit(commit(1, node_id=1)) == 1, "node 1's stream was dropped at the bound"
    assert streams.admit(commit(0, number=1, node_id=1)) is None
