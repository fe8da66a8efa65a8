"""S3 object store over aiobotocore: any S3-compatible endpoint (AWS, MinIO, moto, ...).

Addressed as `s3://bucket/prefix?endpoint=http://host:port&region=us-east-1` (see
`broker.objectstore.open_object_store`); credentials come from botocore's usual chain
(environment, shared config/credentials files and profiles, container and instance
roles). The prefix is prepended to every key and stripped from listed keys, so several
clusters or tests can share one bucket.

Two layers. `S3Requests` makes one HTTP request per call (per page of a listing, per
batch of a delete) and reports the requests S3 answered; it neither retries nor bounds
anything. `S3ObjectStore`, what `open_object_store` opens, is the shared retry layer
(`RetryingObjectStore`: concurrency slots, per-attempt timeout, `RetryPolicy`) over it,
with S3's classification of failures (`S3_FAILURES`); botocore's own retries are off, so
there is one retry loop and every attempt is counted. The HTTP connection pool has
`max_concurrency` connections, as many as the retry layer has slots, so an attempt holding
a slot always finds a connection.
"""

from __future__ import annotations

import asyncio
import base64
import builtins
import contextlib
from collections.abc import AsyncIterator, Iterable
from typing import Any

import aiohttp
import botocore.exceptions
import crc32c
from aiobotocore.config import AioConfig
from aiobotocore.session import AioSession, get_session

from broker.clock import Clock
from broker.objectstore.retry import RetryPolicy
from broker.objectstore.retrying import Failures, RetryingObjectStore, describe_error
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
from broker.randomness import Random

DEFAULT_REQUEST_TIMEOUT_MS = 30_000
DEFAULT_CONNECT_TIMEOUT_MS = 5_000

# HTTP statuses and S3 error codes worth another attempt: throttling, server faults,
# the server timing out our request, and a concurrent conditional write (409).
RETRIABLE_STATUSES = frozenset({429, 500, 502, 503, 504})
RETRIABLE_CODES = frozenset(
    {
        "SlowDown",
        "Throttling",
        "ThrottlingException",
        "RequestThrottled",
        "RequestLimitExceeded",
        "TooManyRequests",
        "ServiceUnavailable",
        "InternalError",
        "RequestTimeout",
        "ConditionalRequestConflict",
    }
)
_NOT_FOUND_CODES = frozenset({"NoSuchKey", "404", "NotFound"})
# The store asking us to slow down (S3's 503 SlowDown, 429 elsewhere): outcome "throttled".
THROTTLING_CODES = frozenset(
    {"SlowDown", "Throttling", "ThrottlingException", "RequestThrottled", "RequestLimitExceeded", "TooManyRequests"}
)


class _ShortRead(Exception):
    """The body ended before Content-Length bytes arrived (a dropped connection)."""


def is_retriable(exc: BaseException) -> bool:
    """The retry classification: throttling (429, 503 SlowDown), 500/502/504, connection
    errors and timeouts are retriable; other 4xx and everything else are not."""
    if isinstance(exc, botocore.exceptions.ClientError):
        status, code = _status_and_code(exc)
        return status in RETRIABLE_STATUSES or code in RETRIABLE_CODES
    return isinstance(
        exc,
        (
            botocore.exceptions.ConnectionError,  # endpoint unreachable, connect timeout
            botocore.exceptions.HTTPClientError,  # closed connection, read timeout
            botocore.exceptions.IncompleteReadError,
            aiohttp.ClientError,
            TimeoutError,  # asyncio.TimeoutError is TimeoutError since 3.11
            ConnectionError,
            _ShortRead,
        ),
    )


def is_throttled(exc: BaseException) -> bool:
    """The store throttled the request: HTTP 429, or a throttling error code (503 SlowDown)."""
    if not isinstance(exc, botocore.exceptions.ClientError):
        return False
    status, code = _status_and_code(exc)
    return status == 429 or code in THROTTLING_CODES


def _status_and_code(exc: botocore.exceptions.ClientError) -> tuple[int | None, str]:
    response = exc.response or {}
    status = response.get("ResponseMetadata", {}).get("HTTPStatusCode")
    code = str(response.get("Error", {}).get("Code", ""))
    return status, code


def _is_not_found(exc: BaseException) -> bool:
    if not isinstance(exc, botocore.exceptions.ClientError):
        return False
    status, code = _status_and_code(exc)
    return status == 404 or code in _NOT_FOUND_CODES


class S3Requests:
    """One S3 request per call: `put`, `put_if_absent`, `get`, `head` one each, `list` one
    per page, `delete_many` one per batch of `delete_batch_size` keys. Answers are reported
    to `on_request`; failures are raised as botocore/aiohttp exceptions for the retry layer
    to classify (`S3_FAILURES`). `put_if_absent` answers False for any existing object (S3's
    412 does not look at the bytes): the retry layer checks whether they are ours."""

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        addressing_style: str | None = None,
        max_connections: int = DEFAULT_MAX_CONCURRENCY,
        on_request: RequestObserver | None = None,
        request_timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS,
        connect_timeout_ms: int = DEFAULT_CONNECT_TIMEOUT_MS,
        list_page_size: int = MAX_LIST_PAGE,
        delete_batch_size: int = MAX_DELETE_BATCH,
        session: AioSession | None = None,
        clock: Clock,
    ) -> None:
        """`clock` times requests."""
        if not bucket:
            raise ValueError("S3 bucket name must not be empty")
        if prefix and not prefix.endswith("/"):
            prefix += "/"
        if prefix:
            validate_key(prefix[:-1])
        if not 1 <= delete_batch_size <= MAX_DELETE_BATCH:
            raise ValueError(f"delete batch size must be in [1, {MAX_DELETE_BATCH}], got {delete_batch_size}")
        if request_timeout_ms <= 0 or connect_timeout_ms <= 0:
            raise ValueError("S3 timeouts must be > 0 ms")
        self.bucket = bucket
        self.prefix = prefix
        self.endpoint_url = endpoint_url
        self._region = region
        self._clock = clock
        self._on_request = on_request
        self._list_page_size = validate_list_page_size(list_page_size)
        self._delete_batch_size = delete_batch_size
        self._session = session or get_session()
        self._config = AioConfig(
            max_pool_connections=validate_max_concurrency(max_connections),
            connect_timeout=connect_timeout_ms / 1000.0,
            read_timeout=request_timeout_ms / 1000.0,
            retries={"total_max_attempts": 1, "mode": "standard"},  # the retry layer retries
            # Checksums only where S3 requires them: widest compatibility with
            # S3-compatible endpoints that reject the newer default trailers.
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
            # No SHA-256 of every body for SigV4 (about 20 ms of event-loop time per 8 MiB PUT):
            # bodies go UNSIGNED-PAYLOAD with a CRC32C checksum header the store verifies.
            s3={
                "addressing_style": addressing_style or ("path" if endpoint_url else "auto"),
                "payload_signing_enabled": False,
            },
        )
        self._client: Any = None
        self._exit_stack: contextlib.AsyncExitStack | None = None
        self._client_lock = asyncio.Lock()
        self._closed = False

    def __repr__(self) -> str:
        return f"S3Requests(bucket={self.bucket!r}, prefix={self.prefix!r}, endpoint={self.endpoint_url!r})"

    # -- operations ----------------------------------------------------------------------

    async def put(self, key: str, data: bytes) -> None:
        payload = as_bytes(data)
        full = self._full_key(key)
        client, timer = await self._start("put")
        await client.put_object(Bucket=self.bucket, Key=full, Body=payload, ChecksumCRC32C=_crc32c_header(payload))
        timer.done("ok", len(payload))

    async def put_if_absent(self, key: str, data: bytes) -> bool:
        payload = as_bytes(data)
        full = self._full_key(key)
        checksum = _crc32c_header(payload)
        client, timer = await self._start("put_if_absent")
        try:
            await client.put_object(
                Bucket=self.bucket, Key=full, Body=payload, IfNoneMatch="*", ChecksumCRC32C=checksum
            )
        except botocore.exceptions.ClientError as exc:
            status, code = _status_and_code(exc)
            if status == 412 or code == "PreconditionFailed":
                timer.done("exists")
                return False
            raise
        timer.done("ok", len(payload))
        return True

    async def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        full = self._full_key(key)
        first, stop = validate_range(start, end)
        if stop is not None and stop == first:
            if await self.head(key) is None:
                raise NotFound(f"no object {key!r} in s3://{self.bucket}/{self.prefix}")
            return b""
        kwargs: dict[str, Any] = {"Bucket": self.bucket, "Key": full}
        if first > 0 or stop is not None:
            kwargs["Range"] = f"bytes={first}-{'' if stop is None else stop - 1}"
        client, timer = await self._start("get")
        try:
            response = await client.get_object(**kwargs)
        except botocore.exceptions.ClientError as exc:
            status, code = _status_and_code(exc)
            if _is_not_found(exc):
                timer.done("not_found")
                raise NotFound(f"no object {key!r} in s3://{self.bucket}/{self.prefix}") from None
            if status == 416 or code == "InvalidRange":
                timer.done("ok")  # the range starts at or past the end of the object
                return b""
            raise
        async with response["Body"] as body:
            data = await body.read()
        expected = response.get("ContentLength")
        if expected is not None and len(data) != expected:
            raise _ShortRead(f"got {len(data)} of {expected} bytes of {full!r}")
        timer.done("ok", len(data))
        return data

    async def head(self, key: str) -> ObjectInfo | None:
        full = self._full_key(key)
        client, timer = await self._start("head")
        try:
            response = await client.head_object(Bucket=self.bucket, Key=full)
        except botocore.exceptions.ClientError as exc:
            if _is_not_found(exc):
                timer.done("not_found")
                return None
            raise
        timer.done("ok")
        return ObjectInfo(key, int(response["ContentLength"]), _ms(response["LastModified"]))

    async def delete_many(self, keys: Iterable[str]) -> list[str]:
        wanted = [validate_key(key) for key in keys]
        failed: set[str] = set()
        for index in range(0, len(wanted), self._delete_batch_size):
            batch = sorted(set(wanted[index : index + self._delete_batch_size]))
            failed.update(await self._delete_batch(batch))
        return [key for key in wanted if key not in failed]

    async def list(self, prefix: str = "", start_after: str | None = None) -> AsyncIterator[ObjectInfo]:
        token: str | None = None
        strip = len(self.prefix)
        while True:
            kwargs: dict[str, Any] = {
                "Bucket": self.bucket,
                "Prefix": self.prefix + prefix,
                "MaxKeys": self._list_page_size,
            }
            if token is not None:
                kwargs["ContinuationToken"] = token
            elif start_after is not None:
                kwargs["StartAfter"] = self.prefix + start_after
            client, timer = await self._start("list")
            response = await client.list_objects_v2(**kwargs)
            timer.done("ok")
            for item in response.get("Contents", ()):
                yield ObjectInfo(item["Key"][strip:], int(item["Size"]), _ms(item["LastModified"]))
            token = response.get("NextContinuationToken")
            if not response.get("IsTruncated") or not token:
                return

    async def close(self) -> None:
        self._closed = True
        async with self._client_lock:
            if self._exit_stack is not None:
                stack, self._exit_stack, self._client = self._exit_stack, None, None
                await stack.aclose()

    # -- machinery -----------------------------------------------------------------------

    def _full_key(self, key: str) -> str:
        return self.prefix + validate_key(key)

    async def _start(self, operation: str) -> tuple[Any, RequestTimer]:
        """The client, and a timer started once it is there (creating it is not a request)."""
        client = await self._get_client()
        return client, RequestTimer(self._on_request, operation, self._clock)

    async def _delete_batch(self, keys: builtins.list[str]) -> builtins.list[str]:
        """One DeleteObjects request; returns the keys S3 reported as failed. NoSuchKey is
        not a failure: a missing key counts as deleted."""
        if not keys:
            return []
        client, timer = await self._start("delete_many")
        response = await client.delete_objects(
            Bucket=self.bucket,
            Delete={"Objects": [{"Key": self.prefix + key} for key in keys], "Quiet": True},
        )
        timer.done("ok")
        strip = len(self.prefix)
        return [error["Key"][strip:] for error in response.get("Errors", ()) if error.get("Code") != "NoSuchKey"]

    async def _get_client(self) -> Any:
        if self._client is not None:
            return self._client
        async with self._client_lock:
            if self._closed:
                raise ObjectStoreError("object store is closed", retriable=False)
            if self._client is None:
                stack = contextlib.AsyncExitStack()
                self._client = await stack.enter_async_context(
                    self._session.create_client(
                        "s3",
                        endpoint_url=self.endpoint_url,
                        region_name=self._region,
                        config=self._config,
                    )
                )
                self._exit_stack = stack
        return self._client


class S3ObjectStore(RetryingObjectStore):
    """The S3 store users run: the shared retry layer over `S3Requests`, both configured
    from one set of options. `max_concurrency` bounds attempts in flight (and sizes the
    connection pool); `request_timeout_ms` bounds each attempt (body read included) and
    botocore's read timeout; `retry` defaults to `RetryPolicy` paced by `clock`, its jitter
    drawn from `rng`."""

    def __init__(
        self,
        bucket: str,
        prefix: str = "",
        *,
        endpoint_url: str | None = None,
        region: str | None = None,
        addressing_style: str | None = None,
        max_concurrency: int = DEFAULT_MAX_CONCURRENCY,
        retry: RetryPolicy | None = None,
        on_request: RequestObserver | None = None,
        request_timeout_ms: int = DEFAULT_REQUEST_TIMEOUT_MS,
        connect_timeout_ms: int = DEFAULT_CONNECT_TIMEOUT_MS,
        list_page_size: int = MAX_LIST_PAGE,
        delete_batch_size: int = MAX_DELETE_BATCH,
        session: AioSession | None = None,
        clock: Clock,
        rng: Random,
    ) -> None:
        requests = S3Requests(
            bucket,
            prefix,
            endpoint_url=endpoint_url,
            region=region,
            addressing_style=addressing_style,
            max_connections=max_concurrency,
            on_request=on_request,
            request_timeout_ms=request_timeout_ms,
            connect_timeout_ms=connect_timeout_ms,
            list_page_size=list_page_size,
            delete_batch_size=delete_batch_size,
            session=session,
            clock=clock,
        )
        super().__init__(
            requests,
            retry or RetryPolicy(random=rng.random, sleep=clock.sleep),
            clock=clock,
            failures=S3_FAILURES,
            attempt_timeout_s=request_timeout_ms / 1000.0,
            max_concurrency=max_concurrency,
            on_request=on_request,
            list_page_size=list_page_size,
            delete_batch_size=delete_batch_size,
            name="S3",
        )
        self.bucket = requests.bucket
        self.prefix = requests.prefix
        self._endpoint_url = endpoint_url

    def __repr__(self) -> str:
        return f"S3ObjectStore(bucket={self.bucket!r}, prefix={self.prefix!r}, endpoint={self._endpoint_url!r})"


def _describe(exc: BaseException) -> str:
    if isinstance(exc, botocore.exceptions.ClientError):
        status, code = _status_and_code(exc)
        return f"{code or 'error'} (HTTP {status}): {exc}"
    return describe_error(exc)


S3_FAILURES = Failures(retriable=is_retriable, throttled=is_throttled, describe=_describe)


def _ms(moment: Any) -> int:
    return int(moment.timestamp() * 1000)


def _crc32c_header(payload: bytes) -> str:
    """`x-amz-checksum-crc32c`: base64 of the big-endian CRC32C (computed in C, ~0.5 ms per 8 MiB)."""
    return base64.b64encode(crc32c.crc32c(payload).to_bytes(4, "big")).decode()
