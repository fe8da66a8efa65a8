"""Local-directory object store (`file:///dir`): the embedded default.

Key `a/b/c` is the file `<root>/a/b/c`. Writes are atomic and durable: the bytes go to a
temporary file under `<root>/.shoal-tmp/`, which is fsynced and then renamed over the key
(`put`) or hard-linked to it (`put_if_absent`: `link` fails if the name exists, which makes
the conditional put atomic even between processes sharing the directory); the parent
directory is fsynced after. Readers therefore see a whole old or whole new object.

Differences from S3, all outside the contract: a key cannot be both an object and a
"directory" of other keys (`a` and `a/b`), which is reported as a non-retriable
ObjectStoreError; a key segment is limited by the file system (255 bytes on most).
Blocking file calls run in worker threads, at most `max_concurrency` at a time.
"""

from __future__ import annotations

import asyncio
import builtins
import itertools
import os
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TypeVar

from broker.atomic_write import fsync_directory, write_all
from broker.clock import Clock
from broker.objectstore.store import (
    DEFAULT_MAX_CONCURRENCY,
    MAX_DELETE_BATCH,
    MAX_LIST_PAGE,
    NotFound,
    ObjectInfo,
    ObjectStoreError,
    RequestObserver,
    RequestTimer,
    as_bytes,
    validate_key,
    validate_list_page_size,
    validate_max_concurrency,
    validate_range,
)
from broker.randomness import Random, new_uuid

T = TypeVar("T")

TMP_DIR_NAME = ".shoal-tmp"
# Temporary files older than this are leftovers of a crash and removed when a store opens
# (a younger one may belong to another process writing to the same directory right now).
STALE_TMP_AGE_S = 3600.0
# A concurrent delete can remove a parent directory between our mkdir and rename; retry.
_PARENT_RACE_ATTEMPTS = 5


class LocalObjectStore:
    def __init__(
        self,
        root: str | os.PathLike[str],
        *,
        max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
        on_request: RequestObserver | None = None,
        list_page_size: int = MAX_LIST_PAGE,
        clock: Clock,
        rng: Random,
    ) -> None:
        self._root = Path(root).absolute()
        self._clock = clock
        self._rng = rng  # temporary file names
        self._tmp = self._root / TMP_DIR_NAME
        self._semaphore = asyncio.Semaphore(validate_max_concurrency(max_concurrency))
        self._on_request = on_request
        self._list_page_size = validate_list_page_size(list_page_size)
        self._in_flight = 0
        self._tmp.mkdir(parents=True, exist_ok=True)
        self._remove_stale_tmp_files()

    @property
    def root(self) -> Path:
        return self._root

    @property
    def in_flight(self) -> int:
        """Requests currently running in a worker thread (bounded by max_concurrency)."""
        return self._in_flight

    async def put(self, key: str, data: bytes) -> None:
        path = self._path(key)
        payload = as_bytes(data)
        timer = RequestTimer(self._on_request, "put", self._clock)
        try:
            await self._run(self._write, path, payload, False)
        except BaseException:
            timer.done("error")
            raise
        timer.done("ok", len(payload))

    async def put_if_absent(self, key: str, data: bytes) -> bool:
        path = self._path(key)
        payload = as_bytes(data)
        timer = RequestTimer(self._on_request, "put_if_absent", self._clock)
        try:
            created = await self._run(self._write, path, payload, True)
        except BaseException:
            timer.done("error")
            raise
        timer.done("ok" if created else "exists", len(payload) if created else 0)
        return created

    async def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        path = self._path(key)
        first, stop = validate_range(start, end)
        timer = RequestTimer(self._on_request, "get", self._clock)
        try:
            data = await self._run(_read, path, first, stop)
        except NotFound:
            timer.done("not_found")
            raise
        except BaseException:
            timer.done("error")
            raise
        timer.done("ok", len(data))
        return data

    async def head(self, key: str) -> ObjectInfo | None:
        path = self._path(key)
        timer = RequestTimer(self._on_request, "head", self._clock)
        try:
            info = await self._run(_stat, path, key)
        except BaseException:
            timer.done("error")
            raise
        timer.done("ok" if info is not None else "not_found")
        return info

    async def delete_many(self, keys: Iterable[str]) -> list[str]:
        wanted = [validate_key(key) for key in keys]
        for index in range(0, len(wanted), MAX_DELETE_BATCH):
            batch = [self._path(key) for key in wanted[index : index + MAX_DELETE_BATCH]]
            timer = RequestTimer(self._on_request, "delete_many", self._clock)
            try:
                await self._run(self._delete_paths, batch)
            except BaseException:
                timer.done("error")
                raise
            timer.done("ok")
        return wanted

    async def list(self, prefix: str = "", start_after: str | None = None) -> AsyncIterator[ObjectInfo]:
        walk = self._walk_prefix(prefix, start_after)
        while True:
            timer = RequestTimer(self._on_request, "list", self._clock)
            try:
                page = await self._run(_take, walk, self._list_page_size)
            except BaseException:
                timer.done("error")
                raise
            timer.done("ok")
            for info in page:
                yield info
            if len(page) < self._list_page_size:
                return

    async def close(self) -> None:
        return None

    # -- helpers -------------------------------------------------------------------------

    def _path(self, key: str) -> Path:
        validate_key(key)  # no empty, '.' or '..' segments: the path stays under the root
        segments = key.split("/")
        if segments[0] == TMP_DIR_NAME:
            raise ValueError(f"object key {key!r}: {TMP_DIR_NAME!r} is reserved by the local store")
        return self._root.joinpath(*segments)

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        async with self._semaphore:
            self._in_flight += 1
            try:
                return await asyncio.to_thread(fn, *args)
            finally:
                self._in_flight -= 1

    def _write(self, path: Path, data: bytes, exclusive: bool) -> bool:
        """Atomically write `data` at `path`. With `exclusive`, only if nothing is there;
        then returns whether the path holds `data` (see ObjectWriter.put_if_absent)."""
        tmp = self._tmp / f"{new_uuid(self._rng).hex}.tmp"
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
            try:
                write_all(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
            for attempt in range(_PARENT_RACE_ATTEMPTS):
                created_dirs = self._make_parents(path)
                try:
                    if exclusive:
                        os.link(tmp, path)
                    else:
                        os.replace(tmp, path)
                except FileExistsError:
                    if path.is_dir():
                        raise _conflict(path, self._root) from None
                    return _holds(path, data)
                except IsADirectoryError:
                    raise _conflict(path, self._root) from None
                except FileNotFoundError:
                    if attempt == _PARENT_RACE_ATTEMPTS - 1:
                        raise
                    continue  # a delete removed the parent meanwhile
                fsync_directory(path.parent)
                if created_dirs:
                    parent = path.parent
                    while parent != self._root:
                        parent = parent.parent
                        fsync_directory(parent)
                return True
            raise AssertionError("unreachable")
        finally:
            tmp.unlink(missing_ok=True)

    def _make_parents(self, path: Path) -> bool:
        parent = path.parent
        if parent.is_dir():
            return False
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):
            raise _conflict(path, self._root) from None
        return True

    def _delete_paths(self, paths: builtins.list[Path]) -> None:
        parents: set[Path] = set()
        for path in paths:
            try:
                os.unlink(path)
            except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
                continue  # not an object: counts as deleted
            parents.add(path.parent)
        # Remove directories left empty so listings do not slow down over time.
        for parent in sorted(parents, key=lambda p: len(p.parts), reverse=True):
            while parent != self._root and parent.is_relative_to(self._root):
                try:
                    os.rmdir(parent)
                except OSError:
                    break
                parent = parent.parent

    def _walk_prefix(self, prefix: str, start_after: str | None) -> Iterator[ObjectInfo]:
        directory, _, name_prefix = prefix.rpartition("/")
        if directory:
            try:
                validate_key(directory)
            except ValueError:
                return iter(())  # no valid key can start with this prefix
            if directory.split("/")[0] == TMP_DIR_NAME:
                return iter(())
            return self._walk(self._root / directory, directory + "/", name_prefix, start_after)
        return self._walk(self._root, "", name_prefix, start_after)

    def _walk(
        self, directory: Path, key_prefix: str, name_prefix: str, start_after: str | None
    ) -> Iterator[ObjectInfo]:
        """Keys under `directory` in lexicographic order, streaming. Sorting a directory's
        entries with '/' appended to subdirectory names gives exactly the order of the full
        keys, since every key below `d` starts with `d/` and names hold no '/'."""
        try:
            with os.scandir(directory) as entries:
                items = []
                for entry in entries:
                    if not entry.name.startswith(name_prefix):
                        continue
                    if not key_prefix and entry.name == TMP_DIR_NAME:
                        continue
                    try:
                        is_dir = entry.is_dir(follow_symlinks=False)
                    except OSError:
                        continue
                    items.append((key_prefix + entry.name + ("/" if is_dir else ""), is_dir, entry.path))
        except (FileNotFoundError, NotADirectoryError):
            return
        items.sort()
        for full, is_dir, entry_path in items:
            if is_dir:
                # Every key below starts with `full`; skip the subtree if all of them sort
                # at or before start_after.
                if start_after is not None and full <= start_after and not start_after.startswith(full):
                    continue
                yield from self._walk(Path(entry_path), full, "", start_after)
                continue
            if start_after is not None and full <= start_after:
                continue
            try:
                stat = os.stat(entry_path)
            except FileNotFoundError:
                continue  # deleted meanwhile
            yield ObjectInfo(full, stat.st_size, stat.st_mtime_ns // 1_000_000)

    def _remove_stale_tmp_files(self) -> None:
        cutoff = self._clock.now_ms() / 1000 - STALE_TMP_AGE_S
        with os.scandir(self._tmp) as entries:
            for entry in entries:
                try:
                    if entry.is_file(follow_symlinks=False) and entry.stat().st_mtime < cutoff:
                        os.unlink(entry.path)
                except OSError:
                    continue


def _read(path: Path, start: int, end: int | None) -> bytes:
    try:
        with open(path, "rb") as file:
            if start:
                file.seek(start)
            if end is None:
                return file.read()
            return file.read(max(0, end - start))
    except (FileNotFoundError, NotADirectoryError, IsADirectoryError):
        raise NotFound(f"no object {path.name!r} at {path}") from None


def _holds(path: Path, data: bytes) -> bool:
    try:
        if os.stat(path).st_size != len(data):
            return False
        with open(path, "rb") as file:
            return file.read(len(data) + 1) == data
    except (FileNotFoundError, NotADirectoryError):
        return False  # deleted meanwhile; an answer of "not ours" is safe


def _stat(path: Path, key: str) -> ObjectInfo | None:
    try:
        stat = os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return None
    if not os.path.isfile(path):
        return None
    return ObjectInfo(key, stat.st_size, stat.st_mtime_ns // 1_000_000)


def _take(iterator: Iterator[ObjectInfo], count: int) -> list[ObjectInfo]:
    return list(itertools.islice(iterator, count))


def _conflict(path: Path, root: Path) -> ObjectStoreError:
    key = path.relative_to(root).as_posix()
    return ObjectStoreError(
        f"object key {key!r} conflicts with an existing key: the local store cannot hold both 'a' and 'a/b'",
        retriable=False,
    )
