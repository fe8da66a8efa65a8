"""The data directory's identity and lock: Kafka's `meta.properties` and `.lock`.

`identity.json` says whose data this is: `{"version": 1, "node_id": N, "cluster_id": "..."}`
(msgspec JSON, docs/formats.md). It is written atomically on a broker's first start, once the
cluster id is known, and also into a data dir that has none (a data dir from before this
file existed); on every later start a configured `node.id` that differs from it stops the
broker (exit 2) before it opens anything, and a metadata store of another cluster (or of no
cluster yet) before it opens any partition. Two brokers with one node id would overwrite
each other's registration and WAL object keys; a data dir moved to another node id or
cluster would serve partitions that are not its own.

`.lock` is held (`flock`, exclusive) for the broker process's lifetime, so a second broker on
the same data dir stops (exit 2) before it opens anything. The lock file holds the holder's
pid, for the message only: the lock is the flock, which the kernel releases when the process
ends, however it ends.
"""

from __future__ import annotations

import fcntl
import logging
import os
from pathlib import Path
from typing import BinaryIO

import msgspec

from .atomic_write import write_atomically
from .config import StartRefused

log = logging.getLogger(__name__)

IDENTITY_FILE = "identity.json"
IDENTITY_VERSION = 1
LOCK_FILE = ".lock"


class DataDirError(StartRefused):
    """The data dir belongs to another node or cluster, is in use, or its identity file
    cannot be read. The message names the file, what it says, and the fix."""


class DataDirIdentity(msgspec.Struct, frozen=True, forbid_unknown_fields=False):
    version: int
    node_id: int
    cluster_id: str


class _Versioned(msgspec.Struct):
    version: int


class DataDir:
    """An open data dir: locked until `close()` (or the process ends), identity checked."""

    def __init__(self, path: Path, lock: BinaryIO, node_id: int, identity: DataDirIdentity | None) -> None:
        self.path = path
        self.node_id = node_id
        self.identity = identity  # None until the first start has written it
        self._lock: BinaryIO | None = lock

    @classmethod
    def open(cls, path: Path, node_id: int) -> DataDir:
        """Lock the data dir (creating it if needed) and check the configured node id against
        its identity file, if it has one; DataDirError otherwise."""
        path.mkdir(parents=True, exist_ok=True)
        lock = _lock(path)
        try:
            identity = read_identity(path)
            if identity is not None and identity.node_id != node_id:
                raise DataDirError(
                    f"data dir {path} belongs to node.id {identity.node_id} ({path / IDENTITY_FILE}), but this "
                    f"broker is configured with node.id {node_id}: start it with node.id {identity.node_id}, "
                    f"or give node {node_id} a data dir of its own"
                )
        except BaseException:
            lock.close()
            raise
        return cls(path, lock, node_id, identity)

    @property
    def identity_path(self) -> Path:
        return self.path / IDENTITY_FILE

    def check_cluster(self, cluster_id: str, metadata: str) -> None:
        """Check the metadata store's cluster id against the identity file, or write the
        file (first start, or a data dir written before identity files existed)."""
        if self.identity is None:
            identity = DataDirIdentity(IDENTITY_VERSION, self.node_id, cluster_id)
            write_atomically(self.identity_path, msgspec.json.encode(identity))
            self.identity = identity
            log.info(
                "data dir %s now belongs to node.id %d of cluster %s (%s)",
                self.path,
                self.node_id,
                cluster_id,
                self.identity_path,
            )
            return
        if self.identity.cluster_id != cluster_id:
            raise DataDirError(
                f"data dir {self.path} belongs to cluster {self.identity.cluster_id} ({self.identity_path}), "
                f"but the metadata store ({metadata}) is cluster {cluster_id}: point metadata at cluster "
                f"{self.identity.cluster_id}'s store (or restore it), or give this broker an empty data dir to "
                f"join cluster {cluster_id}"
            )

    def refuse_new_cluster(self, metadata: str) -> None:
        """The metadata store holds no cluster yet: a data dir that belongs to a cluster must
        not be adopted into a new, empty one (its topics and partitions are not there)."""
        if self.identity is not None:
            raise DataDirError(
                f"data dir {self.path} belongs to cluster {self.identity.cluster_id} ({self.identity_path}), "
                f"but the metadata store ({metadata}) holds no cluster (it is new and empty): point metadata "
                f"at cluster {self.identity.cluster_id}'s store (or restore it), or give this broker an empty "
                f"data dir to start a new cluster"
            )

    def close(self) -> None:
        """Release the lock. Idempotent."""
        lock, self._lock = self._lock, None
        if lock is not None:
            lock.close()


def read_identity(path: Path) -> DataDirIdentity | None:
    """The identity file of data dir `path`, or None if it has none; DataDirError if it
    cannot be read or has a version this broker does not know."""
    file = path / IDENTITY_FILE
    try:
        raw = file.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise DataDirError(f"cannot read {file}: {exc.strerror}") from None
    try:
        version = msgspec.json.decode(raw, type=_Versioned).version
    except msgspec.DecodeError as exc:
        raise DataDirError(
            f"{file} is not a valid identity file ({exc}): restore it, or delete it to have it "
            "written again from this broker's node.id and cluster"
        ) from None
    if version != IDENTITY_VERSION:
        raise DataDirError(
            f"{file}: identity format version {version} is not supported (this broker reads "
            f"version {IDENTITY_VERSION}): the data dir was written by a newer Shoal; run that "
            "version"
        ) from None
    try:
        return msgspec.json.decode(raw, type=DataDirIdentity)
    except msgspec.DecodeError as exc:
        raise DataDirError(
            f"{file} is not a valid identity file ({exc}): restore it, or delete it to have it "
            "written again from this broker's node.id and cluster"
        ) from None


def _lock(path: Path) -> BinaryIO:
    """Take the data dir's lock for this process (the file object owns the descriptor, which
    is not inherited by child processes); DataDirError naming the holder's pid if another
    process has it."""
    file = path / LOCK_FILE
    fd = os.open(file, os.O_RDWR | os.O_CREAT, 0o644)
    lock = os.fdopen(fd, "r+b", buffering=0)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = _holder(fd)
        lock.close()
        raise DataDirError(
            f"data dir {path} is in use by another broker process ({holder} holds {file}): stop "
            "it first, or give this broker a data dir of its own"
        ) from None
    except OSError as exc:
        lock.close()
        raise DataDirError(f"cannot lock data dir {path} ({file}): {exc.strerror}") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return lock


def _holder(fd: int) -> str:
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        text = ""
    return f"pid {text}" if text.isdigit() else "a process whose pid it has not written yet"
