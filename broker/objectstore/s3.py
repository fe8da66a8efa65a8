"""S3 object store over aiobotocore: any S3-compatible endpoint (AWS, MinIO, moto, ...).

Addressed as `s3://bucket/prefix?endpoint=http://host:port&region=us-east-1` (see
`broker.objectstore.open_object_store`); credentials come from botocore's usual chain
(environment, shared config/credentials files and profiles, container and instance
roles). The prefix is prepended to every key and stripped from listed keys, so several
clusters or tests can share one bucket.

Each request runs under a semaphore of `max_concurrency` slots (the HTTP connection pool
has the same size, so a request holding a slot always finds a connection), with a per-
attempt timeout, and through one retry loop (`RetryPolicy`; botocore's own retries are
off). A slot is held for one attempt, not while backing off. Every attempt is reported to
`on_request`.
"""

from __future__ import annotations

import asyncio
import base64
import builtins
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from typing import Any, TypeVar

import aiohttp
import botocore.exceptions
import crc32c
from aiobotocore.config import AioConfig
from aiobotocore.session import AioSession, get_session

from broker.clock import Clock
from broker.objectstore.retry import RetryPolicy
from broker.objectstore.store import (
    DEFAULT_MAX_CONCURRENCY,
    MAX_DELETE_BATCH,
    MAX_LIST_PAGE,
    NotFound,
    ObjectInfo,
    ObjectStoreError,
    ObjectStoreUnavailable,
    RequestObserver,
    RequestTimer,
    as_bytes,
    validate_key,
    validate_list_page_size,
    validate_max_concurrency,
    validate_range,
)
from broker.randomness import Random

T = TypeVar("T")

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


class S3ObjectStore:
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
        """`clock` times requests and paces the default retry policy, whose jitter `rng` draws."""
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
        self._endpoint_url = endpoint_url
        self._region = region
        self._max_concurrency = validate_max_concurrency(max_concurrency)
        self._semaphore = asyncio.Semaphore(self._max_concurrency)
        self._clock = clock
        self._retry = retry or RetryPolicy(random=rng.random, sleep=clock.sleep)
        self._on_request = on_request
        self._request_timeout_s = request_timeout_ms / 1000.0
        self._list_page_size = validate_list_page_size(list_page_size)
        self._delete_batch_size = delete_batch_size
        self._session = session or get_session()
        self._config = AioConfig(
            max_pool_connections=self._max_concurrency,
            connect_timeout=connect_timeout_ms / 1000.0,
            read_timeout=request_timeout_ms / 1000.0,
            retries={"total_max_attempts": 1, "mode": "standard"},  # RetryPolicy retries
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
        self._in_flight = 0

    def __repr__(self) -> str:
        return f"S3ObjectStore(bucket={self.bucket!r}, prefix={self.prefix!r}, endpoint={self._endpoint_url!r})"

    @property
    def in_flight(self) -> int:
        """Request attempts holding a concurrency slot right now."""
        return self._in_flight

    # -- operations ----------------------------------------------------------------------

    async def put(self, key: str, data: bytes) -> None:
        payload = as_bytes(data)
        full = self._full_key(key)
        checksum = _crc32c_header(payload)

        async def attempt(client: Any, timer: RequestTimer) -> None:
            await client.put_object(Bucket=self.bucket, Key=full, Body=payload, ChecksumCRC32C=checksum)
            timer.done("ok", len(payload))

        await self._request("put", attempt)

    async def put_if_absent(self, key: str, data: bytes) -> bool:
        payload = as_bytes(data)
        full = self._full_key(key)
        checksum = _crc32c_header(payload)

        async def attempt(client: Any, timer: RequestTimer) -> bool:
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

        if await self._request("put_if_absent", attempt):
            return True
        # Something is there. It may be our own write whose answer was lost: a retry of
        # ours, or the HTTP layer's own silent resend of an idempotent PUT when the
        # connection drops (aiohttp does that once). Same bytes: idempotent success.
        info = await self.head(key)
        if info is None or info.size != len(payload):
            return False
        with contextlib.suppress(NotFound):
            return await self.get(key) == payload
        return False

    async def get(self, key: str, start: int | None = None, end: int | None = None) -> bytes:
        full = self._full_key(key)
        first, stop = validate_range(start, end)
        if stop is not None and stop == first:
            if await self.head(key) is None:
                raise NotFound(f"no object {key!r} in s3://{self.bucket}/{self.prefix}")
            return b""
        ranged = first > 0 or stop is not None
        header = f"bytes={first}-{'' if stop is None else stop - 1}"

        async def attempt(client: Any, timer: RequestTimer) -> bytes:
            kwargs: dict[str, Any] = {"Bucket": self.bucket, "Key": full}
            if ranged:
                kwargs["Range"] = header
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

        return await self._request("get", attempt)

    async def head(self, key: str) -> ObjectInfo | None:
        full = self._full_key(key)

        async def attempt(client: Any, timer: RequestTimer) -> ObjectInfo | None:
            try:
                response = await client.head_object(Bucket=self.bucket, Key=full)
            except botocore.exceptions.ClientError as exc:
                if _is_not_found(exc):
                    timer.done("not_found")
                    return None
                raise
            timer.done("ok")
            return ObjectInfo(key, int(response["ContentLength"]), _ms(response["LastModified"]))

        return await self._request("head", attempt)

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

            async def attempt(client: Any, timer: RequestTimer, kwargs: dict[str, Any] = kwargs) -> dict[str, Any]:
                response = await client.list_objects_v2(**kwargs)
                timer.done("ok")
                return response

            response = await self._request("list", attempt)
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

    async def _delete_batch(self, keys: builtins.list[str]) -> builtins.list[str]:
        """One DeleteObjects request (retried as a whole); returns the keys S3 reported as
        failed. NoSuchKey is not a failure: a missing key counts as deleted."""

        async def attempt(client: Any, timer: RequestTimer) -> list[str]:
            response = await client.delete_objects(
                Bucket=self.bucket,
                Delete={"Objects": [{"Key": self.prefix + key} for key in keys], "Quiet": True},
            )
            timer.done("ok")
            strip = len(self.prefix)
            return [error["Key"][strip:] for error in response.get("Errors", ()) if error.get("Code") != "NoSuchKey"]

        if not keys:
            return []
        return await self._request("delete_many", attempt)

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
                        endpoint_url=self._endpoint_url,
                        region_name=self._region,
                        config=self._config,
                    )
                )
                self._exit_stack = stack
        return self._client

    async def _request(self, operation: str, attempt: Callable[[Any, RequestTimer], Awaitable[T]]) -> T:
        """Run `attempt` under the retry policy, a concurrency slot and a timeout, and
        translate what finally escapes into ObjectStoreError kinds."""
        client = await self._get_client()
        retry = self._retry

        async def one(number: int) -> T:
            async with self._semaphore:
                self._in_flight += 1
                timer = RequestTimer(self._on_request, operation, self._clock)
                try:
                    async with asyncio.timeout(self._request_timeout_s):
                        return await attempt(client, timer)
                except NotFound:
                    raise
                except Exception as exc:
                    if not retry.will_retry(number, is_retriable(exc)):
                        timer.done("error")
                    else:
                        timer.done("throttled" if is_throttled(exc) else "retry")
                    raise
                finally:
                    self._in_flight -= 1

        try:
            return await retry.run(one, is_retriable)
        except ObjectStoreError:
            raise
        except Exception as exc:
            if is_retriable(exc):
                raise ObjectStoreUnavailable(
                    f"S3 {operation} failed after {retry.max_attempts} attempts: {_describe(exc)}"
                ) from exc
            raise ObjectStoreError(f"S3 {operation} failed: {_describe(exc)}", retriable=False) from exc


def _describe(exc: BaseException) -> str:
    if isinstance(exc, botocore.exceptions.ClientError):
        status, code = _status_and_code(exc)
        return f"{code or 'error'} (HTTP {status}): {exc}"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__


def _ms(moment: Any) -> int:
    return int(moment.timestamp() * 1000)


def _crc32c_header(payload: bytes) -> str:
    """`x-amz-checksum-crc32c`: base64 of the big-endian CRC32C (computed in C, ~0.5 ms per 8 MiB)."""
    return base64.b64encode(crc32c.crc32c(payload).to_bytes(4, "big")).decode()
