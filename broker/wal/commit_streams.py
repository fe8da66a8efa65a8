"""Commit streams: a partition leader applies one representative's commits as a Kafka leader
handles one connection's requests, in order, and nothing after one that is missing.

Why: a Kafka leader sees an idempotent producer's batches in the order the producer sent them
and never takes batch N+1 while N is still on its way: on one connection a lost request fails
every later one. Clients rely on that (librdkafka answers OUT_OF_ORDER_SEQUENCE_NUMBER by
bumping its epoch and sending every unacknowledged message again, and a producer the leader
does not know yet is taken with any sequence, KIP-360). A representative's commits to a
leader are pipelined over the inter-broker RPC; one can be lost (a connection that broke, a
request never delivered) while the next is applied, and the producers' batches in the lost
one are then missing behind later ones (cluster seed 8010: a new producer's sequence 4 taken
at offset 0, sequences 0-3 refused afterwards).

So each remote commit carries its stream (the representative's node id and incarnation, a
stream number, and its position in the stream), and the leader applies a commit only when it
is the next of its stream. Anything else closes the stream: the leader refuses that commit
and every later one of the stream, and answers from which position on it refuses them, so
the representative knows at once that those commits were not applied and never will be (it
fails their batches, holds back their producers' later ones, producers/barriers.py, and
opens the next stream). A commit that the leader refuses as a whole (past
`wal.commit.deadline.ms`) closes the stream too.

Bounded: one stream per representative broker, at most MAX_PEERS (an entry dropped at the
bound is a stream the leader no longer knows: its next commit closes it, and the
representative opens another).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

import msgspec

MAX_PEERS = 4096  # representative brokers a leader follows streams of (one entry each)
OPEN = -1


class CommitStream(msgspec.Struct, array_like=True, frozen=True):
    """Where a commit belongs: the representative's stream to this leader."""

    node_id: int
    incarnation: str  # the representative process's: a restart opens new streams
    number: int  # increases each time the representative opens a stream to this leader
    sequence: int  # the commit's position in the stream, from 0


@dataclass(slots=True)
class _Followed:
    incarnation: str
    number: int
    next_sequence: int = 0
    closed_from: int = OPEN  # >= 0: commits from this position on are refused


class CommitStreams:
    """The leader's side: which commit of each representative's stream comes next."""

    def __init__(self, max_peers: int = MAX_PEERS) -> None:
        self._max_peers = max_peers
        self._streams: OrderedDict[int, _Followed] = OrderedDict()

    def admit(self, stream: CommitStream) -> int | None:
        """None: apply the commit now (it is the next of its stream). Otherwise the position
        from which this stream's commits are refused: this one is among them."""
        held = self._streams.get(stream.node_id)
        if held is None or held.incarnation != stream.incarnation or stream.number > held.number:
            held = self._follow(stream)  # the representative (re)started, or opened its next stream
            if stream.sequence != 0:
                # Its first commits never arrived, or came before this leader process: refuse
                # from here on (what this process never saw is not its to vouch for).
                held.closed_from = stream.sequence
        elif stream.number < held.number:  # a stream the representative has left
            return stream.sequence
        if held.closed_from == OPEN:
            if stream.sequence == held.next_sequence:
                held.next_sequence += 1
                return None
            held.closed_from = held.next_sequence  # the missing commit and everything after it
            return held.closed_from
        return min(held.closed_from, stream.sequence)

    def close(self, stream: CommitStream) -> int:
        """The admitted commit was refused as a whole: refuse the stream from it on."""
        held = self._streams.get(stream.node_id)
        if held is not None and (held.incarnation, held.number) == (stream.incarnation, stream.number):
            if held.closed_from == OPEN or stream.sequence < held.closed_from:
                held.closed_from = stream.sequence
        return stream.sequence

    def _follow(self, stream: CommitStream) -> _Followed:
        held = self._streams[stream.node_id] = _Followed(stream.incarnation, stream.number)
        self._streams.move_to_end(stream.node_id)
        while len(self._streams) > self._max_peers:
            self._streams.popitem(last=False)
        return held
