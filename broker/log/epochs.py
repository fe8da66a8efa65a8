"""The leader-epoch cache: which leader epoch started at which offset, for one partition.

Kafka's LeaderEpochFileCache. Entries `(epoch, start_offset)` are strictly increasing in both
fields; the last entry's epoch is the latest epoch the replica knows. Leaders use it to answer
"where does epoch N end in your log?" (`end_offset_for`), which is how a follower finds where
its log diverges from the leader's (KIP-101, KIP-279, KIP-320; see `divergence`).

Persisted as ``leader-epoch-checkpoint`` in the partition directory, in Kafka's text layout
with our own version number::

    1                 version (Kafka writes 0; files from Kafka are rejected, not misread)
    2                 number of entries
    0 0               epoch start_offset, one line per entry, ascending
    3 1200

Every change replaces the file without fsync (Kafka's KAFKA-15046): a leader election or the
first batch of a new epoch would otherwise cost two fsyncs on the event loop, 20,000 of them
when a broker with 20,000 partitions restarts (issue 28). A process crash keeps every write
(the page cache survives it); what a power loss can lose is recovered from the log, which
holds each batch's epoch in its header:
- the log's flush calls `sync` before its recovery point moves, so entries for offsets below
  the recovery point are durable;
- after an unclean stop `rebuild` drops the entries from where the log's recovery verified
  onwards and assigns them again from the batches there (Kafka's LogSegment.recover);
- a torn or garbled file is rebuilt from the whole log (`TornEpochCheckpointError`).
Truncations that throw away the whole log (a follower starting over at its leader's log
start) sync at once: the rebuild keeps entries below the recovery point, and those would be
the old log's. A cache built without a path (tests, simulations) keeps the same rules in
memory only.
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable, NamedTuple

from broker.atomic_write import replace_file, sync_file

CHECKPOINT_FILE = "leader-epoch-checkpoint"
CHECKPOINT_VERSION = 1

UNDEFINED_EPOCH = -1  # Kafka's OffsetsForLeaderEpochResponse.UNDEFINED_EPOCH
UNDEFINED_EPOCH_OFFSET = -1  # Kafka's OffsetsForLeaderEpochResponse.UNDEFINED_EPOCH_OFFSET


class EpochCheckpointError(ValueError):
    """The leader-epoch checkpoint has a version this broker does not read."""


class TornEpochCheckpointError(EpochCheckpointError):
    """The leader-epoch checkpoint is malformed (torn by a power loss, garbage): the partition
    rebuilds it from its log."""


class EpochEntry(NamedTuple):
    epoch: int
    start_offset: int


class LeaderEpochCache:
    """Ordered (epoch, start_offset) entries with Kafka's assign/lookup/truncate rules."""

    def __init__(self, path: Path | None = None, entries: Iterable[EpochEntry] = ()) -> None:
        self._path = path
        self._entries: list[EpochEntry] = list(entries)
        self._unsynced = False  # the file was replaced since the last sync (sync() may run on a worker thread)

    @classmethod
    def open(cls, directory: Path) -> "LeaderEpochCache":
        """Load the partition directory's checkpoint (empty cache if there is none yet)."""
        path = Path(directory) / CHECKPOINT_FILE
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return cls(path)
        return cls(path, _parse(path, raw))

    @property
    def path(self) -> Path | None:
        return self._path

    def entries(self) -> list[EpochEntry]:
        return list(self._entries)

    @property
    def latest_epoch(self) -> int:
        """The latest known epoch, or UNDEFINED_EPOCH (-1) when the cache is empty."""
        return self._entries[-1].epoch if self._entries else UNDEFINED_EPOCH

    def epoch_start(self, epoch: int) -> int | None:
        """The start offset of exactly `epoch`, or None if the cache has no such entry."""
        for entry in self._entries:
            if entry.epoch == epoch:
                return entry.start_offset
        return None

    def assign(self, epoch: int, start_offset: int) -> None:
        """Record that `epoch` starts at `start_offset` (a leader election, or a follower
        appending the first batch of an epoch).

        Kafka's assign: nothing changes when the latest entry already has this epoch at the
        same or a lower start offset. Otherwise entries that would break monotonicity are
        dropped from the end -- those with epoch >= `epoch` or start_offset >= `start_offset`
        -- and the new entry is appended. So a lower epoch than the latest replaces the later
        entries (modern Kafka; the "warn and ignore" rule was Kafka 1.x and let the cache
        disagree with the log it describes).
        """
        if epoch < 0 or start_offset < 0:
            raise ValueError(f"invalid leader epoch entry ({epoch}, {start_offset})")
        if self._entries:
            last = self._entries[-1]
            if last.epoch == epoch and start_offset >= last.start_offset:
                return
        while self._entries and (self._entries[-1].epoch >= epoch or self._entries[-1].start_offset >= start_offset):
            self._entries.pop()
        self._entries.append(EpochEntry(epoch, start_offset))
        self._persist()

    def end_offset_for(self, requested_epoch: int, log_end_offset: int) -> tuple[int, int]:
        """(epoch, end_offset) for `requested_epoch`, exactly Kafka's endOffsetFor.

        - requested is UNDEFINED_EPOCH: (-1, -1).
        - requested is the latest epoch: (requested, log_end_offset); the latest epoch is
          still being written, so it ends at the log end.
        - no epoch above requested (requested > latest, or the cache is empty): (-1, -1).
        - no epoch at or below requested (it was removed with old log segments):
          (requested, start offset of the first epoch above it).
        - otherwise: (largest epoch <= requested, start offset of the first epoch above it).
        """
        if requested_epoch == UNDEFINED_EPOCH:
            return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET
        if self._entries and self._entries[-1].epoch == requested_epoch:
            return requested_epoch, log_end_offset
        floor: EpochEntry | None = None
        for entry in self._entries:
            if entry.epoch > requested_epoch:
                if floor is None:
                    return requested_epoch, entry.start_offset
                return floor.epoch, entry.start_offset
            floor = entry
        return UNDEFINED_EPOCH, UNDEFINED_EPOCH_OFFSET

    def truncate_from_end(self, end_offset: int) -> None:
        """The log was truncated to `end_offset`: drop entries starting at or after it.

        Call it on every truncation, even one that leaves the log as it was: an epoch this
        replica assigned as leader but never wrote to starts at the log end and must go
        (Kafka's UnifiedLog.truncateTo does the same).
        """
        if end_offset < 0:
            raise ValueError(f"negative end offset {end_offset}")
        kept = [e for e in self._entries if e.start_offset < end_offset]
        if len(kept) != len(self._entries):
            self._entries = kept
            self._persist()

    def truncate_from_start(self, start_offset: int) -> None:
        """The log start moved to `start_offset`: entries wholly below it go and the epoch
        spanning it now starts there (Kafka's truncateFromStart)."""
        if start_offset < 0:
            raise ValueError(f"negative start offset {start_offset}")
        below = [e for e in self._entries if e.start_offset <= start_offset]
        if not below:
            return
        entries = [EpochEntry(below[-1].epoch, start_offset)] + self._entries[len(below) :]
        if entries != self._entries:
            self._entries = entries
            self._persist()

    def rebuild(self, from_offset: int, batches: Iterable[tuple[int, int]]) -> None:
        """Recover what a power loss may have taken: drop the entries from `from_offset` (where
        the log's recovery verified from) and assign again from `batches`, the (leader epoch,
        base offset) of every batch from there, in order (Kafka's LogSegment.recover). What it
        assigns is synced at once: the recovery has already moved the log's recovery point past
        those batches. Dropping needs no sync (an entry a power loss brings back lies at or
        above that recovery point too, and the next rebuild drops it again)."""
        self.truncate_from_end(from_offset)
        assigned = False
        for epoch, base_offset in batches:
            if epoch > self.latest_epoch:
                self.assign(epoch, base_offset)
                assigned = True
        if assigned:
            self.sync()

    def sync(self) -> None:
        """Make the last write durable (before the log's recovery point moves past entries it
        holds). Safe on a worker thread: a write racing it marks the file unsynced again."""
        if not self._unsynced or self._path is None:
            return
        self._unsynced = False
        try:
            sync_file(self._path)
        except BaseException:
            self._unsynced = True
            raise

    def _persist(self) -> None:
        if self._path is not None:
            replace_file(self._path, _format(self._entries))
            self._unsynced = True


def _format(entries: list[EpochEntry]) -> bytes:
    lines = [str(CHECKPOINT_VERSION), str(len(entries))] + [f"{e.epoch} {e.start_offset}" for e in entries]
    return ("\n".join(lines) + "\n").encode("ascii")


def _parse(path: Path, raw: bytes) -> list[EpochEntry]:
    """Strict: any deviation from the layout (including a missing final newline) is an error."""

    def bad(why: str) -> EpochCheckpointError:
        return TornEpochCheckpointError(f"{path}: malformed leader-epoch checkpoint: {why}")

    try:
        lines = raw.decode("ascii").split("\n")
    except UnicodeDecodeError:
        raise bad("not ASCII text") from None
    if len(lines) < 3 or lines[-1] != "":
        raise bad("truncated (missing lines or final newline)")
    version, count, *body = lines[:-1]
    if not _is_number(version):
        raise bad(f"version line {version!r} is not a number")
    if int(version) != CHECKPOINT_VERSION:
        raise EpochCheckpointError(
            f"{path}: leader-epoch checkpoint version {int(version)} is not supported "
            f"(this broker reads {CHECKPOINT_VERSION})"
        )
    if not _is_number(count) or int(count) != len(body):
        raise bad(f"count line {count!r} does not match {len(body)} entry lines")
    entries: list[EpochEntry] = []
    for line in body:
        fields = line.split(" ")
        if len(fields) != 2 or not all(_is_number(f) for f in fields):
            raise bad(f"entry line {line!r} is not 'epoch start_offset'")
        entry = EpochEntry(int(fields[0]), int(fields[1]))
        if entries and (entry.epoch <= entries[-1].epoch or entry.start_offset <= entries[-1].start_offset):
            raise bad(f"entry {tuple(entry)} does not follow {tuple(entries[-1])}")
        entries.append(entry)
    return entries


def _is_number(text: str) -> bool:
    return text.isascii() and text.isdigit()
