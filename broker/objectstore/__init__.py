"""Object stores: where diskless topics keep their bytes (see docs/objectstore.md).

`open_object_store(url)` turns an operator-facing URL into a store:

    memory://                                   in-process, for tests
    file:///abs/dir   (or file:relative/dir)    a local directory, the embedded default
    s3://bucket[/prefix][?endpoint=URL&region=NAME&addressing_style=path|virtual|auto]

The S3 store is imported only when an s3:// URL is opened, so the embedded default does
not load botocore.
"""

from __future__ import annotations

import os
import re
from typing import Any, TypedDict
from urllib.parse import parse_qs, unquote, urlsplit

from broker.clock import Clock
from broker.objectstore.memory import MemoryObjectStore
from broker.objectstore.local import LocalObjectStore
from broker.objectstore.retry import RetryPolicy
from broker.objectstore.retrying import Failures, RetryingObjectStore
from broker.objectstore.store import (
    DEFAULT_MAX_CONCURRENCY,
    NotFound,
    ObjectDeleter,
    ObjectInfo,
    ObjectLister,
    ObjectReader,
    ObjectStore,
    ObjectStoreError,
    ObjectStoreUnavailable,
    ObjectWriter,
    RequestObserver,
    validate_key,
)
from broker.randomness import Random

__all__ = [
    "DEFAULT_MAX_CONCURRENCY",
    "Failures",
    "LocalObjectStore",
    "MemoryObjectStore",
    "NotFound",
    "ObjectDeleter",
    "ObjectInfo",
    "ObjectLister",
    "ObjectReader",
    "ObjectStore",
    "ObjectStoreError",
    "ObjectStoreUnavailable",
    "ObjectWriter",
    "RequestObserver",
    "RetryPolicy",
    "RetryingObjectStore",
    "object_store_scheme",
    "open_object_store",
    "validate_key",
]

S3_QUERY_KEYS = ("endpoint", "region", "addressing_style")
# S3 bucket naming rules (3-63 characters of lowercase letters, digits, '.', '-').
_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]$")


class S3UrlOptions(TypedDict, total=False):
    """The S3ObjectStore keyword arguments an s3:// URL's query string can set."""

    endpoint_url: str
    region: str
    addressing_style: str


def open_object_store(
    url: str,
    *,
    clock: Clock,
    rng: Random,
    max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
    on_request: RequestObserver | None = None,
    retry: RetryPolicy | None = None,
    **s3_options: Any,
) -> ObjectStore:
    """Open the store that `url` names. `max_concurrency` is `object.store.max.concurrency`
    (requests in flight per store); `on_request` receives every request attempt;
    `retry` applies to S3, which is the retry layer (`RetryingObjectStore`) over S3's requests
    (the other stores do not fail transiently and are not wrapped); `clock` and `rng`
    are the broker's time and random sources; `s3_options` go to S3ObjectStore (timeouts,
    page sizes, session). Raises ValueError for a bad URL."""
    scheme = object_store_scheme(url)
    if scheme != "s3" and s3_options:
        raise ValueError(f"options {sorted(s3_options)} apply to s3:// URLs only")
    if scheme == "memory":
        return MemoryObjectStore(clock=clock, on_request=on_request)
    if scheme == "file":
        return LocalObjectStore(
            _parse_file_url(url), max_concurrency=max_concurrency, on_request=on_request, clock=clock, rng=rng
        )
    from broker.objectstore.s3 import S3ObjectStore

    bucket, prefix, options = parse_s3_url(url)
    return S3ObjectStore(
        bucket,
        prefix,
        max_concurrency=max_concurrency,
        on_request=on_request,
        retry=retry,
        clock=clock,
        rng=rng,
        **options,
        **s3_options,
    )


def object_store_scheme(url: str) -> str:
    """Check `url` as `open_object_store` would, without opening anything; return its scheme.
    Raises ValueError with a message for the operator (config validation uses this)."""
    if not isinstance(url, str) or not url:
        raise ValueError("object store URL must be a non-empty string, e.g. file:///var/lib/shoal/objects")
    scheme, sep, _ = url.partition(":")
    scheme = scheme.lower()
    if not sep:
        raise ValueError(f"object store URL {url!r} has no scheme: use file:///dir, s3://bucket/prefix or memory://")
    if scheme == "memory":
        if url.lower() not in ("memory:", "memory://"):
            raise ValueError(f"object store URL {url!r}: a memory store takes no path or options, use memory://")
    elif scheme == "file":
        _parse_file_url(url)
    elif scheme == "s3":
        parse_s3_url(url)
    else:
        raise ValueError(
            f"object store URL {url!r}: unknown scheme {scheme!r}; use file:///dir, s3://bucket/prefix or memory://"
        )
    return scheme


def _parse_file_url(url: str) -> str:
    parts = urlsplit(url)
    if parts.query or parts.fragment:
        raise ValueError(f"object store URL {url!r}: file URLs take no query or fragment")
    if parts.netloc not in ("", "localhost"):
        raise ValueError(
            f"object store URL {url!r}: file URLs name a local directory; write file:///abs/dir "
            f"(three slashes), not a host {parts.netloc!r}"
        )
    path = unquote(parts.path)
    if not path:
        raise ValueError(f"object store URL {url!r} has no directory, e.g. file:///var/lib/shoal/objects")
    if "\x00" in path:
        raise ValueError(f"object store URL {url!r}: the path contains NUL")
    return os.path.normpath(path)


def parse_s3_url(url: str) -> tuple[str, str, S3UrlOptions]:
    """`s3://bucket/prefix?endpoint=...&region=...` -> (bucket, prefix, S3ObjectStore kwargs)."""
    parts = urlsplit(url)
    if parts.scheme.lower() != "s3":
        raise ValueError(f"not an s3:// URL: {url!r}")
    if parts.fragment:
        raise ValueError(f"object store URL {url!r}: s3 URLs take no fragment")
    bucket = parts.netloc
    if "@" in bucket:
        raise ValueError(
            f"object store URL {url!r}: do not put credentials in the URL; they come from the "
            "AWS environment variables, config files or instance role"
        )
    if not _BUCKET_RE.match(bucket) or ".." in bucket:
        raise ValueError(
            f"object store URL {url!r}: {bucket!r} is not a valid bucket name "
            "(3-63 lowercase letters, digits, '.' or '-'), e.g. s3://my-bucket/shoal"
        )
    prefix = unquote(parts.path).strip("/")
    if prefix:
        try:
            validate_key(prefix)
        except ValueError as exc:
            raise ValueError(f"object store URL {url!r}: bad prefix: {exc}") from None
    try:
        query = parse_qs(parts.query, keep_blank_values=True, strict_parsing=bool(parts.query))
    except ValueError:
        raise ValueError(f"object store URL {url!r}: malformed query string {parts.query!r}") from None
    unknown = sorted(set(query) - set(S3_QUERY_KEYS))
    if unknown:
        raise ValueError(f"object store URL {url!r}: unknown option(s) {unknown}; known: {list(S3_QUERY_KEYS)}")
    options: dict[str, str] = {}
    for name, values in query.items():
        if len(values) != 1 or not values[0]:
            raise ValueError(f"object store URL {url!r}: option {name!r} needs exactly one non-empty value")
        options[name] = values[0]
    kwargs: S3UrlOptions = {}
    if "endpoint" in options:
        endpoint = urlsplit(options["endpoint"])
        if endpoint.scheme not in ("http", "https") or not endpoint.netloc:
            raise ValueError(
                f"object store URL {url!r}: endpoint must be http(s)://host[:port], got {options['endpoint']!r}"
            )
        kwargs["endpoint_url"] = options["endpoint"]
    if "region" in options:
        kwargs["region"] = options["region"]
    if "addressing_style" in options:
        if options["addressing_style"] not in ("path", "virtual", "auto"):
            raise ValueError(
                f"object store URL {url!r}: addressing_style must be path, virtual or auto, "
                f"got {options['addressing_style']!r}"
            )
        kwargs["addressing_style"] = options["addressing_style"]
    return bucket, prefix, kwargs
