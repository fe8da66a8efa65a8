"""open_object_store: URL parsing and the clear errors for bad URLs."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest

from broker.clock import SystemClock
from broker.objectstore import LocalObjectStore, MemoryObjectStore, RetryingObjectStore, open_object_store
from broker.objectstore.s3 import S3_FAILURES, S3ObjectStore, S3Requests
from broker.objectstore import parse_s3_url

CLOCK, RNG = SystemClock(), random.Random()  # what a broker process passes (Environment.for_process)


def test_memory() -> None:
    assert isinstance(open_object_store("memory://", clock=CLOCK, rng=RNG), MemoryObjectStore)
    assert isinstance(open_object_store("memory:", clock=CLOCK, rng=RNG), MemoryObjectStore)


def test_file(tmp_path: Path) -> None:
    store = open_object_store(f"file://{tmp_path}/objects", clock=CLOCK, rng=RNG)
    assert isinstance(store, LocalObjectStore)
    assert store.root == tmp_path / "objects"
    assert store._clock is CLOCK and store._rng is RNG
    assert (tmp_path / "objects").is_dir()
    spaced = open_object_store(f"file://localhost{tmp_path}/with%20space", clock=CLOCK, rng=RNG)
    assert spaced.root == tmp_path / "with space"  # type: ignore[union-attr]


def test_file_relative(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    store = open_object_store("file:data/objects", clock=CLOCK, rng=RNG)
    assert store.root == tmp_path / "data" / "objects"  # type: ignore[union-attr]


def test_s3() -> None:
    store = open_object_store(
        "s3://my-bucket/shoal/cluster-1/?endpoint=http://127.0.0.1:9000&region=eu-west-1",
        clock=CLOCK,
        rng=RNG,
        max_concurrency=7,
    )
    assert isinstance(store, S3ObjectStore) and isinstance(store, RetryingObjectStore), "S3 requests under retries"
    assert isinstance(store.inner, S3Requests)
    assert store.bucket == store.inner.bucket == "my-bucket"
    assert store.prefix == "shoal/cluster-1/"
    assert store.inner._config.max_pool_connections == 7 and store._slots._value == 7
    assert store._clock is CLOCK and store.policy.sleep == CLOCK.sleep and store.policy.random == RNG.random
    assert store._failures is S3_FAILURES and store._attempt_timeout_s == 30.0
    assert store.inner._config.s3 == {"addressing_style": "path", "payload_signing_enabled": False}
    asyncio.run(store.close())
    assert parse_s3_url("s3://my-bucket") == ("my-bucket", "", {})
    assert parse_s3_url("s3://my.bucket/p?addressing_style=virtual") == (
        "my.bucket",
        "p",
        {"addressing_style": "virtual"},
    )


@pytest.mark.parametrize(
    "url,message",
    [
        ("", "non-empty"),
        ("/var/lib/shoal", "no scheme"),
        ("ftp://host/dir", "unknown scheme"),
        ("memory://name", "memory store takes no path"),
        ("file://host/dir", "three slashes"),
        ("file://", "has no directory"),
        ("file:///dir?x=1", "no query"),
        ("s3://", "not a valid bucket name"),
        ("s3://Upper/prefix", "not a valid bucket name"),
        ("s3://ab/prefix", "not a valid bucket name"),
        ("s3://key:secret@bucket/p", "credentials"),
        ("s3://bucket/a//b", "bad prefix"),
        ("s3://bucket/a/../b", "bad prefix"),
        ("s3://bucket/p?endpint=http://x", "unknown option"),
        ("s3://bucket/p?endpoint=127.0.0.1:9000", "endpoint must be http(s)"),
        ("s3://bucket/p?region=", "exactly one non-empty value"),
        ("s3://bucket/p?region=a&region=b", "exactly one non-empty value"),
        ("s3://bucket/p?addressing_style=sideways", "addressing_style"),
    ],
)
def test_bad_urls(url: str, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        open_object_store(url, clock=CLOCK, rng=RNG)


def test_options_for_other_schemes_are_rejected() -> None:
    with pytest.raises(ValueError, match="s3:// URLs only"):
        open_object_store("memory://", clock=CLOCK, rng=RNG, request_timeout_ms=5)
