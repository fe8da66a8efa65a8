"""Replacing a small state file so that a crash leaves the old file or the new one, never a torn one.

Partition-log checkpoints, leader-epoch caches, producer-state snapshots, the local metadata
store and the data directory's identity all need the same sequence: write a temporary file
beside the target, fsync it, rename it over the target, then fsync the directory, without which
the rename itself may not survive a crash. A crash in the middle leaves at most a stray
`<name>.tmp`, which the next write starts over.
"""

from __future__ import annotations

import os
from pathlib import Path

TMP_SUFFIX = ".tmp"


def write_atomically(path: Path, data: bytes) -> None:
    """Replace `path` with `data` durably: `<name>.tmp` written and fsynced, renamed over
    `path`, directory fsynced."""
    tmp = path.with_name(path.name + TMP_SUFFIX)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        write_all(fd, data)
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    fsync_directory(path.parent)


def write_all(fd: int, data: bytes) -> None:
    """Write all of `data` to `fd` (os.write may write less than it is given)."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def fsync_directory(directory: Path) -> None:
    """Make the entries created, renamed or removed in `directory` durable."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
