"""Replacing a small state file so that a crash leaves the old file or the new one, never a torn one.

Partition-log checkpoints, producer-state snapshots, the local metadata store and the data
directory's identity all need the same sequence: write a temporary file
beside the target, fsync it, rename it over the target, then fsync the directory, without which
the rename itself may not survive a crash. A crash in the middle leaves at most a stray
`<name>.tmp`, which the next write starts over. The leader-epoch cache writes without the
fsyncs (`replace_file`) and syncs before the log's recovery point passes its entries.
"""

from __future__ import annotations

import os
from pathlib import Path

TMP_SUFFIX = ".tmp"


def write_atomically(path: Path, data: bytes) -> None:
    """Replace `path` with `data` durably: `<name>.tmp` written and fsynced, renamed over
    `path`, directory fsynced."""
    _replace(path, data, durable=True)


def replace_file(path: Path, data: bytes) -> None:
    """Replace `path` with `data` without fsync: a crash of the process leaves the old file or
    the new one, a power loss may also leave an empty or torn one. For state that can be
    rebuilt after a power loss and is made durable later with `sync_file`."""
    _replace(path, data, durable=False)


def sync_file(path: Path) -> None:
    """Make `path`'s contents and its name durable (after `replace_file`)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    fsync_directory(path.parent)


def _replace(path: Path, data: bytes, durable: bool) -> None:
    tmp = path.with_name(path.name + TMP_SUFFIX)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    try:
        write_all(fd, data)
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    if durable:
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
