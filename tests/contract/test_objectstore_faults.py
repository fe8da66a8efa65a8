"""The S3 store through faults: a fault-injecting proxy (faultproxy.py) in front of moto.

Throttling, server errors, dropped connections and stalls are retried with backoff (the
sleeps are recorded, not slept); 4xx answers are not; retries are bounded; a conditional
put whose answer was lost is recognised as our own write; and the concurrency bound
holds on the wire.
"""

from __future__ import annotations

import asyncio
import base64
import random
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import crc32c
import pytest

from broker.clock import SystemClock
from broker.objectstore import NotFound, ObjectStoreError, ObjectStoreUnavailable, RetryPolicy
from broker.objectstore.s3 import S3ObjectStore

from tests.contract.faultproxy import FaultProxy
from tests.contract.test_objectstore import Requests, _session

T = TypeVar("T")


def run_through_proxy(
    moto_server: Any,
    body: Callable[[S3ObjectStore, FaultProxy, list[float]], Awaitable[T]],
    **options: Any,
) -> T:
    sleeps: list[float] = []

    async def fake_sleep(seconds: float) -> None:
        sleeps.append(seconds)

    async def main() -> T:
        proxy = FaultProxy(moto_server.host, moto_server.port)
        await proxy.start()
        options.setdefault(
            "retry",
            RetryPolicy(max_attempts=4, base_delay_ms=100, max_delay_ms=1000, random=lambda: 0.5, sleep=fake_sleep),
        )
        store = S3ObjectStore(
            moto_server.bucket,
            f"faults/{id(proxy)}",
            endpoint_url=proxy.endpoint,
            region="us-east-1",
            session=_session(),
            clock=SystemClock(),
            rng=random.Random(),
            **options,
        )
        try:
            return await body(store, proxy, sleeps)
        finally:
            await store.close()
            await proxy.stop()

    return asyncio.run(main())


def test_slow_down_is_retried_with_backoff(moto_server: Any) -> None:
    requests = Requests()

    async def body(store: S3ObjectStore, proxy: FaultProxy, sleeps: list[float]) -> None:
        proxy.fail(2, 503, "SlowDown")
        await store.put("k", b"value")
        assert sleeps == [0.05, 0.1]  # 0.5 * 100 ms, 0.5 * 200 ms
        assert len(proxy.requests) == 3
        assert await store.get("k") == b"value"

    run_through_proxy(moto_server, body, on_request=requests)
    assert [(op, outcome) for op, outcome, _ in requests.calls] == [
        ("put", "throttled"),
        ("put", "throttled"),
        ("put", "ok"),
        ("get", "ok"),
    ]


@pytest.mark.parametrize(
    "status,code", [(500, "InternalError"), (502, "BadGateway"), (504, "GatewayTimeout"), (429, "TooManyRequests")]
)
def test_server_errors_are_retried(moto_server: Any, status: int, code: str) -> None:
    async def body(store: S3ObjectStore, proxy: FaultProxy, sleeps: list[float]) -> None:
        await store.put("k", b"value")
        proxy.fail(1, status, code)
        assert await store.get("k") == b"value"
        proxy.fail(1, status, code)
        assert (await store.head("k")).size == 5  # type: ignore[union-attr]
        proxy.fail(1, status, code)
        assert [i.key async for i in store.list()] == ["k"]
        proxy.fail(1, status, code)
        assert await store.delete_many(["k"]) == ["k"]
        assert len(sleeps) == 4

    run_through_proxy(moto_server, body)


def test_client_errors_are_not_retried(moto_server: Any) -> None:
    requests = Requests()

    async def body(store: S3ObjectStore, proxy: FaultProxy, sleeps: list[float]) -> None:
        proxy.fail(1, 403, "AccessDenied")
        with pytest.raises(ObjectStoreError) as caught:
            await store.put("k", b"value")
        assert caught.value.retriable is False
        assert "AccessDenied" in str(caught.value)
        with pytest.raises(NotFound):  # a real 404 from moto
            await store.get("missing")
        assert sleeps == []
        assert len(proxy.requests) == 2

    run_through_proxy(moto_server, body, on_request=requests)
    assert [(op, outcome) for op, outcome, _ in requests.calls] == [("put", "error"), ("get", "not_found")]


def test_retries_are_bounded(moto_server: Any) -> None:
    requests = Requests()

    async def body(store: S3ObjectStore, proxy: FaultProxy, sleeps: list[float]) -> None:
        proxy.fail(10, 503, "SlowDown")
        with pytest.raises(ObjectStoreUnavailable) as caught:
            await store.get("k")
        assert caught.value.retriable is True
        assert len(proxy.requests) == 4  # max_attempts
        assert sleeps == [0.05, 0.1, 0.2]
        proxy.faults.clear()

    run_through_proxy(moto_server, body, on_request=requests)
    assert [outcome for _, outcome, _ in requests.calls] == ["throttled", "throttled", "throttled", "error"]


def test_dropped_connections_and_stalls_are_retried(moto_server: Any) -> None:
    async def body(store: S3ObjectStore, proxy: FaultProxy, sleeps: list[float]) -> None:
        proxy.reset(2)
        await store.put("k", b"value")
        # aiohttp itself resends an idempotent request once after a dropped connection;
        # the second drop (at least) reaches our retry loop.
        assert len(proxy.requests) == 3
        assert 1 <= len(sleeps) <= 2
        retried = len(sleeps)
        proxy.stall(1)  # longer than request_timeout_ms: the attempt times out
        assert await store.get("k", 1, 3) == b"al"
        assert len(sleeps) == retried + 1

    run_through_proxy(moto_server, body, request_timeout_ms=300)


def test_conditional_put_with_lost_answer_is_ours(moto_server: Any) -> None:
    async def body(store: S3ObjectStore, proxy: FaultProxy, sleeps: list[float]) -> None:
        # moto stores the object, the client sees a reset; the resend (by aiohttp or by
        # our retry loop) finds it there and must recognise it as its own write.
        proxy.lose_answer(2)
        assert await store.put_if_absent("cond", b"mine") is True
        assert len([r for r in proxy.requests if r[0] == "PUT"]) == 3
        proxy.lose_answer(1)
        assert await store.put_if_absent("cond", b"someone else's") is False
        assert await store.get("cond") == b"mine"

    run_through_proxy(moto_server, body)


def test_concurrency_is_bounded_on_the_wire(moto_server: Any) -> None:
    async def body(store: S3ObjectStore, proxy: FaultProxy, sleeps: list[float]) -> None:
        proxy.hold_s = 0.02
        await asyncio.gather(*(store.put(f"c/{index:03d}", b"x") for index in range(24)))
        assert proxy.peak_in_flight == 3
        assert store.in_flight == 0

    run_through_proxy(moto_server, body, max_concurrency=3)


def test_put_bodies_are_not_hashed_for_signing_but_carry_a_crc32c(moto_server: Any) -> None:
    """SHA-256 of every body cost ~20 ms of event loop per 8 MiB PUT; the store sends
    UNSIGNED-PAYLOAD with x-amz-checksum-crc32c instead, which S3 verifies."""
    body = bytes(range(256)) * 4096

    async def puts(store: S3ObjectStore, proxy: FaultProxy, sleeps: list[float]) -> list[dict[str, str]]:
        await store.put("k", body)
        assert await store.put_if_absent("k2", body)
        assert await store.get("k") == body
        return [h for (method, _), h in zip(proxy.requests, proxy.headers) if method == "PUT"]

    proxy_headers = run_through_proxy(moto_server, puts)
    expected = base64.b64encode(crc32c.crc32c(body).to_bytes(4, "big")).decode()
    assert len(proxy_headers) == 2
    for headers in proxy_headers:
        assert headers["x-amz-content-sha256"] == "UNSIGNED-PAYLOAD"
        assert headers["x-amz-checksum-crc32c"] == expected
