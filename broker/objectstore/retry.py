"""Retry policy for object store requests: capped exponential backoff with full jitter.

Used by the retry layer (retrying.py), over S3 and in the simulation (botocore's own
retries are switched off so there is exactly one retry loop, and every attempt is counted). The random source and the sleep are injected
(the broker's Environment.random and Clock.sleep) so tests run the loop without waiting
(STYLE 9).

Full jitter (AWS Architecture Blog, "Exponential Backoff And Jitter"): before attempt
n+1 sleep `random() * min(max_delay, base_delay * 2**(n-1))` seconds. Many brokers
throttled at once then spread their retries instead of stampeding together.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class RetryPolicy:
    """At most `max_attempts` attempts (the first one included) per request."""

    max_attempts: int = 6
    base_delay_ms: float = 50.0
    max_delay_ms: float = 5_000.0
    random: Callable[[], float] = field(kw_only=True, repr=False)
    sleep: Callable[[float], Awaitable[None]] = field(kw_only=True, repr=False)

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {self.max_attempts}")
        if self.base_delay_ms < 0 or self.max_delay_ms < 0:
            raise ValueError("retry delays must be >= 0")
        if self.max_delay_ms < self.base_delay_ms:
            raise ValueError(f"max_delay_ms ({self.max_delay_ms}) must be >= base_delay_ms ({self.base_delay_ms})")

    def backoff_s(self, failed_attempt: int) -> float:
        """Seconds to wait after attempt number `failed_attempt` (1-based) failed."""
        exponent = min(failed_attempt - 1, 62)  # 2**62 ms is far past any cap
        cap_ms = min(self.max_delay_ms, self.base_delay_ms * (2**exponent))
        return self.random() * cap_ms / 1000.0

    def will_retry(self, failed_attempt: int, retriable: bool) -> bool:
        return retriable and failed_attempt < self.max_attempts

    async def run(
        self,
        attempt: Callable[[int], Awaitable[T]],
        is_retriable: Callable[[BaseException], bool],
    ) -> T:
        """Call `attempt(n)` for n = 1, 2, ... until it returns, raises a non-retriable
        error, or `max_attempts` attempts failed; the last error is re-raised as is."""
        number = 1
        while True:
            try:
                return await attempt(number)
            except Exception as exc:
                if not self.will_retry(number, is_retriable(exc)):
                    raise
            await self.sleep(self.backoff_s(number))
            number += 1
