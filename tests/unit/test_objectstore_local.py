"""Local-directory store details outside the shared contract: the file layout, temporary
files, key/directory conflicts and cleanup of empty directories."""

from __future__ import annotations

import asyncio
import os
import random
import time
from pathlib import Path

import pytest

from broker.clock import SystemClock
from broker.objectstore import LocalObjectStore, ObjectStoreError
from broker.objectstore.local import STALE_TMP_AGE_S, TMP_DIR_NAME


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


def test_keys_are_files_under_the_root_and_no_temporary_file_is_left(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path, clock=SystemClock(), rng=random.Random())

    async def body() -> None:
        await store.put("wal/cluster/0001", b"abc")
        assert await store.put_if_absent("wal/cluster/0001", b"other") is False
        assert await store.put_if_absent("wal/cluster/0002", b"new") is True

    run(body())
    assert (tmp_path / "wal" / "cluster" / "0001").read_bytes() == b"abc"
    assert (tmp_path / "wal" / "cluster" / "0002").read_bytes() == b"new"
    assert list((tmp_path / TMP_DIR_NAME).iterdir()) == []


def test_reserved_tmp_dir_is_neither_a_key_nor_listed(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path, clock=SystemClock(), rng=random.Random())
    (tmp_path / TMP_DIR_NAME / "junk.tmp").write_bytes(b"partial")

    async def body() -> None:
        with pytest.raises(ValueError, match="reserved"):
            await store.put(f"{TMP_DIR_NAME}/x", b"x")
        assert [i.key async for i in store.list()] == []
        assert [i.key async for i in store.list(TMP_DIR_NAME + "/")] == []

    run(body())


def test_stale_temporary_files_are_removed_on_open(tmp_path: Path) -> None:
    LocalObjectStore(tmp_path, clock=SystemClock(), rng=random.Random())
    stale = tmp_path / TMP_DIR_NAME / "stale.tmp"
    fresh = tmp_path / TMP_DIR_NAME / "fresh.tmp"
    stale.write_bytes(b"old")
    fresh.write_bytes(b"maybe another writer's")
    old = time.time() - STALE_TMP_AGE_S - 60
    os.utime(stale, (old, old))
    LocalObjectStore(tmp_path, clock=SystemClock(), rng=random.Random())
    assert not stale.exists()
    assert fresh.exists()


def test_object_and_directory_of_the_same_name_conflict(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path, clock=SystemClock(), rng=random.Random())

    async def body() -> None:
        await store.put("a/b", b"x")
        with pytest.raises(ObjectStoreError, match="conflicts") as caught:
            await store.put("a/b/c", b"y")
        assert caught.value.retriable is False
        with pytest.raises(ObjectStoreError, match="conflicts"):
            await store.put("a", b"y")
        with pytest.raises(ObjectStoreError, match="conflicts"):
            await store.put_if_absent("a", b"y")
        assert await store.get("a/b") == b"x"

    run(body())


def test_delete_removes_empty_directories(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path, clock=SystemClock(), rng=random.Random())

    async def body() -> None:
        await store.put("x/y/z/1", b"1")
        await store.put("x/keep", b"2")
        assert await store.delete_many(["x/y/z/1"]) == ["x/y/z/1"]
        assert not (tmp_path / "x" / "y").exists()
        assert (tmp_path / "x" / "keep").exists()
        await store.put("x/y/z/1", b"again")
        assert await store.get("x/y/z/1") == b"again"

    run(body())


def test_concurrency_is_bounded(tmp_path: Path) -> None:
    store = LocalObjectStore(tmp_path, clock=SystemClock(), rng=random.Random(), max_concurrency=2)
    peak = 0

    async def watch() -> None:
        nonlocal peak
        for _ in range(200):
            peak = max(peak, store.in_flight)
            await asyncio.sleep(0)

    async def body() -> None:
        await asyncio.gather(watch(), *(store.put(f"k/{i}", b"x" * 1000) for i in range(40)))

    run(body())
    assert 1 <= peak <= 2


def test_max_concurrency_must_be_positive(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="object.store.max.concurrency"):
        LocalObjectStore(tmp_path, clock=SystemClock(), rng=random.Random(), max_concurrency=0)
