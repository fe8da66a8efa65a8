"""Replica fetch sessions: KIP-227's incremental fetch, for replication.

Without a session a follower names every partition it follows on a leader in every round,
and the leader looks at each of them: three idle brokers with 3,000 partitions of
replication factor 3 spent about a quarter of a core each doing that (issue 28). With a
session both sides remember the last round:

- the follower names only the partitions whose position changed since its last request
  (log end offset, last fetched epoch, leader epoch, log start), and those it stopped
  following (`forgotten`);
- the leader looks only at those and at the partitions something happened to since it last
  answered (an append, a moved high watermark or log start: `FetchWaiters` tells it), and
  answers only the ones with entries or news; every other partition of the session is
  *steady*: its follower holds the leader's whole log.

Kafka's epochs guard the exchange: a request carries the session's id and the epoch the
leader expects next; one lost answer (a timeout, a broken connection, a restarted leader)
makes the follower start a new session with a full request, and the leader answers an
unknown id or a wrong epoch with FETCH_SESSION_ID_NOT_FOUND / INVALID_FETCH_SESSION_EPOCH.
A request with epoch SESSIONLESS (followers from before sessions) is answered in full, as
before; a leader at `max.incremental.fetch.session.cache.slots` answers a new session's
request in full without opening one (session id 0), as Kafka does, and the follower goes on
with full requests.

This module is the bookkeeping of both sides, without sockets or partitions.
"""

from __future__ import annotations

import asyncio
from typing import Iterable

from ..partition_ids import TopicPartition
from .messages import FetchPartition

SESSIONLESS = -1  # request epoch: a full request outside any session (Kafka's FINAL_EPOCH)
NEW_SESSION = 0  # request epoch: a full request that opens a session (Kafka's INITIAL_EPOCH)
NO_SESSION_ID = 0
# A session no request has used for this long is closed (its follower died or left); a new
# request from that follower opens another one.
SESSION_IDLE_MS = 120_000

PartitionKey = tuple[str, int]  # (topic id, partition), as replica fetch messages name one


def key_of(wanted: FetchPartition) -> PartitionKey:
    return (wanted.topic_id, wanted.partition)


class LeaderSession:
    """What a leader remembers of one follower's session."""

    def __init__(self, session_id: int, replica_id: int, now_ms: int) -> None:
        self.id = session_id
        self.replica_id = replica_id
        self.next_epoch = NEW_SESSION  # the epoch the request being taken carries; then the next one's
        self.last_request_ms = now_ms  # when the latest request arrived: steady partitions were caught up then
        self.wants: dict[PartitionKey, FetchPartition] = {}
        self.names: dict[PartitionKey, TopicPartition] = {}  # for the leader's notifications, which use names
        # (high watermark, log start across tiers) last sent per partition
        self.told: dict[PartitionKey, tuple[int, int]] = {}
        self.dirty: dict[PartitionKey, None] = {}  # to look at in the next pass (a dict: ordered, deterministic)
        self.steady: dict[PartitionKey, None] = {}  # the follower holds the whole log; nothing to look at
        self._wake: asyncio.Future[None] | None = None

    def update(self, wanted: Iterable[FetchPartition], forgotten: Iterable[PartitionKey]) -> list[PartitionKey]:
        """Apply a request's changes; returns the keys it named, in its order."""
        for key in forgotten:
            self.forget(key)
        named = []
        for partition in wanted:
            key = key_of(partition)
            self.wants[key] = partition
            self.steady.pop(key, None)
            named.append(key)
        return named

    def forget(self, key: PartitionKey) -> None:
        self.wants.pop(key, None)
        self.names.pop(key, None)
        self.told.pop(key, None)
        self.dirty.pop(key, None)
        self.steady.pop(key, None)

    def take_dirty(self) -> list[PartitionKey]:
        keys = list(self.dirty)
        self.dirty.clear()
        return keys

    def touched(self, key: PartitionKey) -> None:
        """Something happened to the partition on the leader: look at it, and wake a held request."""
        self.steady.pop(key, None)
        self.dirty[key] = None
        self.wake()

    def wake(self) -> None:
        """A held request answers now."""
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    async def wait(self, timeout_s: float) -> None:
        """Return when a partition of the session is touched, or after `timeout_s`."""
        if self.dirty:
            return
        self._wake = asyncio.get_running_loop().create_future()
        try:
            await asyncio.wait((self._wake,), timeout=timeout_s)
        finally:
            self._wake = None


class LeaderSessions:
    """A leader's sessions, one per follower broker, at most `max_sessions`."""

    def __init__(self, max_sessions: int) -> None:
        self._max = max_sessions
        self.by_replica: dict[int, LeaderSession] = {}
        # partition name -> the followers whose session holds it, for notifications
        self._watchers: dict[TopicPartition, dict[int, PartitionKey]] = {}

    def __len__(self) -> int:
        return len(self.by_replica)

    def open(self, session_id: int, replica_id: int, now_ms: int) -> LeaderSession | None:
        """A new session for `replica_id`, replacing its old one; None at the bound."""
        self.close_idle(now_ms)
        self.close(replica_id)
        if len(self.by_replica) >= self._max:
            return None
        session = LeaderSession(session_id, replica_id, now_ms)
        self.by_replica[replica_id] = session
        return session

    def close(self, replica_id: int) -> None:
        session = self.by_replica.pop(replica_id, None)
        if session is not None:
            for key in list(session.wants):
                self.unwatch(session, key)

    def close_idle(self, now_ms: int) -> None:
        for replica_id, session in list(self.by_replica.items()):
            if now_ms - session.last_request_ms > SESSION_IDLE_MS:
                self.close(replica_id)

    def watch(self, session: LeaderSession, key: PartitionKey, name: TopicPartition) -> None:
        old = session.names.get(key)
        if old == name:
            return
        if old is not None:
            self._watchers.get(old, {}).pop(session.replica_id, None)
        session.names[key] = name
        self._watchers.setdefault(name, {})[session.replica_id] = key

    def unwatch(self, session: LeaderSession, key: PartitionKey) -> None:
        name = session.names.get(key)
        if name is not None:
            watchers = self._watchers.get(name)
            if watchers is not None:
                watchers.pop(session.replica_id, None)
                if not watchers:
                    del self._watchers[name]
        session.forget(key)

    def watching(self, name: TopicPartition) -> list[tuple[LeaderSession, PartitionKey]]:
        """The sessions holding partition `name`, with its key in each."""
        watchers = self._watchers.get(name)
        if not watchers:
            return []
        return [(self.by_replica[replica_id], key) for replica_id, key in watchers.items()]


class FollowerSession:
    """What a follower remembers of its session with one leader."""

    def __init__(self) -> None:
        self.id = NO_SESSION_ID
        self.epoch = NEW_SESSION
        self.sent: dict[PartitionKey, FetchPartition] = {}  # the positions the leader holds for us
        self.unapplied: dict[PartitionKey, None] = {}  # answers not applied since the last request
        self.refused = 0  # answers in a row that refused the session (the fetcher then backs off)

    def request(
        self, current: dict[PartitionKey, FetchPartition]
    ) -> tuple[int, int, list[FetchPartition], list[PartitionKey]]:
        """(session id, epoch, partitions to name, partitions to forget) for a request whose
        wanted positions are `current`."""
        if self.id == NO_SESSION_ID:
            return NO_SESSION_ID, NEW_SESSION, list(current.values()), []
        changed = [wanted for key, wanted in current.items() if self.sent.get(key) != wanted]
        forgotten = [key for key in self.sent if key not in current]
        forgotten += [key for key in self.unapplied if key not in current and key not in self.sent]
        return self.id, self.epoch, changed, forgotten

    def answered(self, current: dict[PartitionKey, FetchPartition], session_id: int, error_code: int) -> None:
        """The leader answered the request built from `current`."""
        self.refused = self.refused + 1 if error_code else 0
        if error_code or session_id == NO_SESSION_ID:
            self.reset()
            return
        if session_id != self.id:  # the leader opened a session (a full request)
            self.id, self.epoch = session_id, NEW_SESSION
        self.epoch += 1
        self.sent = dict(current)
        self.unapplied = {}

    def unapplied_answer(self, topic_id: str, partition: int) -> None:
        """This partition's answer was not applied (an error it now backs off from, or it
        moved on while the request was in flight). The next request forgets it if it is not
        part of it (backing off: a leader holding a follower that is behind would send it
        entries in every answer, at once, a busy loop until the backoff ended; `tiered_delete_
        records` seed 990015), and names it whatever its position once it is part of one
        again (the leader, having answered it, would otherwise never look at it again; seed
        987001)."""
        key = (topic_id, partition)
        self.sent.pop(key, None)
        self.unapplied[key] = None

    def reset(self) -> None:
        """Start over with a full request (an answer was lost, or the leader forgot us)."""
        self.id, self.epoch, self.sent, self.unapplied = NO_SESSION_ID, NEW_SESSION, {}, {}
