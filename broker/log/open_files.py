"""A broker-wide bound on open segment files (`log.open.files.max`).

Each segment holds at most one descriptor, its `.log` file's, opened on first use; its
index files are opened only for the moment they are written (segment.py). Without a bound a
broker holds one descriptor per segment it has read or written since it started, so the
partition count, not the load, decides when it runs out (issue 28: at about 6,700
partitions every diskless produce failed, because the WAL writer could not open its file).
Kafka has no such bound; a Shoal broker's partitions are mostly idle (a diskless log holds
only batch headers), so closing the least recently used file and reopening it on its next
use costs one `open` on a path that is rarely taken.

Owner-thread only: segments open, use and release their descriptor on the event loop's
thread. A flush on a worker thread syncs through descriptors of its own (Segment.sync), so
closing one here never pulls a descriptor from under it.
"""

from __future__ import annotations

import errno
import os
import resource
from collections import OrderedDict
from collections.abc import Callable
from typing import Protocol

OUT_OF_DESCRIPTORS = (errno.EMFILE, errno.ENFILE)


class HoldsFile(Protocol):
    def release_file(self) -> None:
        """Close the descriptor; the next use opens it again."""


class OpenFiles:
    """The segments holding an open file, least recently used first, at most `limit` (None:
    unbounded). `on_reopen` is told of each file opened again after it was closed for the
    bound (the metric that says the bound is too tight for the load)."""

    def __init__(self, limit: int | None, on_reopen: Callable[[], object] | None = None) -> None:
        if limit is not None and limit < 1:
            raise ValueError(f"log.open.files.max must be at least 1, not {limit}")
        self.limit = limit
        self._on_reopen = on_reopen
        self._open: OrderedDict[HoldsFile, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._open)

    def used(self, holder: HoldsFile) -> None:
        self._open.move_to_end(holder)

    def opened(self, holder: HoldsFile, reopened: bool = False) -> None:
        """`holder` opened its file: close the least recently used others beyond the bound."""
        self._open[holder] = None
        self._open.move_to_end(holder)
        if reopened and self._on_reopen is not None:
            self._on_reopen()
        if self.limit is not None:
            while len(self._open) > self.limit:
                self._close_oldest()

    def closed(self, holder: HoldsFile) -> None:
        self._open.pop(holder, None)

    def shed(self) -> bool:
        """The process is out of descriptors (EMFILE, ENFILE): close half of the open files,
        oldest first, so the open that failed can be tried again. False if none was open."""
        count = (len(self._open) + 1) // 2
        for _ in range(count):
            self._close_oldest()
        return count > 0

    def _close_oldest(self) -> None:
        holder, _ = self._open.popitem(last=False)
        holder.release_file()


def open_with_room(files: OpenFiles, path: os.PathLike[str] | str, flags: int, mode: int = 0o644) -> int:
    """`os.open`, closing idle segment files and trying once more when the process is out of
    descriptors: running out must not fail a produce to a partition for another's idle file."""
    try:
        return os.open(path, flags, mode)
    except OSError as exc:
        if exc.errno not in OUT_OF_DESCRIPTORS or not files.shed():
            raise
    return os.open(path, flags, mode)


RESERVED_DESCRIPTORS = 1024  # sockets (clients, peers, etcd, S3), WAL files, checkpoints, the interpreter's own


def log_file_bound(configured: int, reserved: int = RESERVED_DESCRIPTORS) -> int:
    """The bound on open segment files: `log.open.files.max`, or with 0 half of what the
    process may open. Raises the soft RLIMIT_NOFILE to the hard limit first (as Kafka's
    packaging asks operators to), and refuses a bound that leaves fewer than `reserved`
    descriptors for everything else."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        soft = hard
    available = soft if soft != resource.RLIM_INFINITY else 1 << 20
    if configured == 0:
        return max(available // 2, 1)
    if configured + reserved > available:
        raise ValueError(
            f"log.open.files.max={configured} leaves fewer than {reserved} of the process's {available} file "
            f"descriptors (RLIMIT_NOFILE) for sockets and other files: lower it (0 takes half of them) or raise "
            "the limit (ulimit -n, systemd LimitNOFILE=, the container's nofile ulimit)"
        )
    return configured
