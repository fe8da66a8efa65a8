"""RetryPolicy (capped exponential backoff, full jitter) and the S3 retry classification.

Sleep and randomness are injected: nothing here waits.
"""

from __future__ import annotations

import asyncio

import botocore.exceptions
import pytest

from broker.objectstore.retry import RetryPolicy
from broker.objectstore.s3 import is_retriable, is_throttled


def client_error(status: int, code: str) -> botocore.exceptions.ClientError:
    return botocore.exceptions.ClientError(
        {"Error": {"Code": code, "Message": "test"}, "ResponseMetadata": {"HTTPStatusCode": status}},
        "PutObject",
    )


def exc_id(exc: BaseException) -> str:
    if isinstance(exc, botocore.exceptions.ClientError):
        return f"{exc.response['ResponseMetadata']['HTTPStatusCode']}-{exc.response['Error']['Code']}"
    return type(exc).__name__


class Scripted:
    """An operation that fails with the given errors, then returns "done"."""

    def __init__(self, *errors: BaseException) -> None:
        self.errors = list(errors)
        self.attempts: list[int] = []

    async def __call__(self, number: int) -> str:
        self.attempts.append(number)
        if self.errors:
            raise self.errors.pop(0)
        return "done"


def policy(sleeps: list[float], **overrides: object) -> RetryPolicy:
    async def fake_sleep(seconds: float) -> None:
        sleeps.append(seconds)

    options: dict[str, object] = {
        "max_attempts": 4,
        "base_delay_ms": 100,
        "max_delay_ms": 1000,
        "random": lambda: 1.0,
        "sleep": fake_sleep,
    }
    options.update(overrides)
    return RetryPolicy(**options)  # type: ignore[arg-type]


def test_backoff_is_exponential_capped_and_jittered() -> None:
    full = policy([])
    assert [full.backoff_s(n) for n in range(1, 7)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    half = policy([], random=lambda: 0.5)
    assert [half.backoff_s(n) for n in (1, 2, 3)] == [0.05, 0.1, 0.2]
    assert policy([], random=lambda: 0.0).backoff_s(3) == 0.0
    assert full.backoff_s(10_000) == 1.0  # no overflow for absurd attempt numbers


def test_503_is_retried_then_succeeds() -> None:
    sleeps: list[float] = []
    operation = Scripted(client_error(503, "SlowDown"), client_error(503, "SlowDown"))
    assert asyncio.run(policy(sleeps).run(operation, is_retriable)) == "done"
    assert operation.attempts == [1, 2, 3]
    assert sleeps == [0.1, 0.2]


def test_404_is_not_retried() -> None:
    sleeps: list[float] = []
    operation = Scripted(client_error(404, "NoSuchKey"))
    with pytest.raises(botocore.exceptions.ClientError):
        asyncio.run(policy(sleeps).run(operation, is_retriable))
    assert operation.attempts == [1]
    assert sleeps == []


def test_attempts_are_bounded() -> None:
    sleeps: list[float] = []
    operation = Scripted(*[client_error(500, "InternalError")] * 10)
    with pytest.raises(botocore.exceptions.ClientError) as caught:
        asyncio.run(policy(sleeps).run(operation, is_retriable))
    assert caught.value.response["Error"]["Code"] == "InternalError"
    assert operation.attempts == [1, 2, 3, 4]
    assert sleeps == [0.1, 0.2, 0.4]


def test_one_attempt_policy_never_retries() -> None:
    sleeps: list[float] = []
    operation = Scripted(client_error(503, "SlowDown"))
    with pytest.raises(botocore.exceptions.ClientError):
        asyncio.run(policy(sleeps, max_attempts=1).run(operation, is_retriable))
    assert operation.attempts == [1]
    assert sleeps == []


def test_will_retry() -> None:
    retry = policy([])
    assert retry.will_retry(1, True) and retry.will_retry(3, True)
    assert not retry.will_retry(4, True)
    assert not retry.will_retry(1, False)


@pytest.mark.parametrize(
    "exc",
    [
        client_error(503, "SlowDown"),
        client_error(503, "ServiceUnavailable"),
        client_error(500, "InternalError"),
        client_error(502, "BadGateway"),
        client_error(504, "GatewayTimeout"),
        client_error(429, "TooManyRequests"),
        client_error(400, "RequestTimeout"),
        client_error(409, "ConditionalRequestConflict"),
        botocore.exceptions.EndpointConnectionError(endpoint_url="http://127.0.0.1:1"),
        botocore.exceptions.ConnectTimeoutError(endpoint_url="http://127.0.0.1:1"),
        botocore.exceptions.ReadTimeoutError(endpoint_url="http://127.0.0.1:1"),
        botocore.exceptions.ConnectionClosedError(endpoint_url="http://127.0.0.1:1"),
        asyncio.TimeoutError(),
        ConnectionResetError(),
    ],
    ids=exc_id,
)
def test_retriable(exc: BaseException) -> None:
    assert is_retriable(exc)


@pytest.mark.parametrize(
    "exc",
    [
        client_error(400, "InvalidArgument"),
        client_error(403, "AccessDenied"),
        client_error(404, "NoSuchKey"),
        client_error(404, "NoSuchBucket"),
        client_error(412, "PreconditionFailed"),
        client_error(416, "InvalidRange"),
        botocore.exceptions.NoCredentialsError(),
        ValueError("bug"),
    ],
    ids=exc_id,
)
def test_not_retriable(exc: BaseException) -> None:
    assert not is_retriable(exc)


@pytest.mark.parametrize(
    "options",
    [{"max_attempts": 0}, {"base_delay_ms": -1}, {"base_delay_ms": 10, "max_delay_ms": 5}],
)
def test_policy_validation(options: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        policy([], **options)


def test_throttling_is_told_apart() -> None:
    """shoal_object_store_requests_total{outcome="throttled"}: the store asking us to slow down."""
    assert is_throttled(client_error(503, "SlowDown"))
    assert is_throttled(client_error(429, "TooManyRequests"))
    assert is_throttled(client_error(400, "ThrottlingException"))
    assert not is_throttled(client_error(503, "ServiceUnavailable"))
    assert not is_throttled(client_error(500, "InternalError"))
    assert not is_throttled(asyncio.TimeoutError())
