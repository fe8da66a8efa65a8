"""Seeded randomness, seeded ids, and a safety net against hidden sources of nondeterminism.

A seed must fix everything a run does. The broker takes its clock, ids and random sources by
injection (STYLE 9; no component defaults to a real one, tests/unit/test_injected_sources.py),
and `determinism_guard` still patches the process-wide sources for the duration of one run,
against what a library or a slip reads behind the injection's back:

- `random` module functions: the hidden global instance is reseeded from the run's seed
  and restored afterwards (this also covers `from random import random` and bound methods
  captured at import); so is `broker.randomness.PROCESS_RANDOM`, the process's own source
  (the Spark job's; no broker component uses it).
- `uuid.uuid4` / `uuid.uuid1` and `os.urandom`: drawn from the seeded rng.
- `time.time`/`time_ns` (virtual wall clock), `time.monotonic`/`monotonic_ns` and
  `time.perf_counter`/`perf_counter_ns` (virtual): perf_counter feeds only metrics today,
  but metrics end up in traces and assertions, so it is virtual too. `time.sleep` raises.
- `threading.Thread.start` and `socket.socket(...)` raise SimForbidden.

What it cannot catch (listed in the report to the lead): `datetime.now()` (C code reads the
system clock directly), `random.SystemRandom`/`secrets` (they hold their own urandom), module
attributes bound before the patch (`from time import monotonic`), and iteration over sets of
objects hashed by id() (their order follows memory addresses).

Hash randomization: str hashes, and so the iteration order of sets of str, differ between
processes unless PYTHONHASHSEED is fixed. Within one process a seed replays exactly; to
replay it in another process (the CLI, a colleague's machine) both must use the same hash
seed. `fixed_hash_seed()` tells whether this process has one; the CLI re-executes itself
with PYTHONHASHSEED=0 when it does not.
"""

from __future__ import annotations

import contextlib
import os
import random
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

from broker.randomness import PROCESS_RANDOM

from .loop import NS_PER_MS, NS_PER_S, SimForbidden


class SimRandom(random.Random):
    """random.Random with named, independent sub-streams: `fork("objectstore")` gives the same
    stream for the same (seed, name) whatever else draws numbers, so adding a fault seam or
    a producer does not reshuffle the rest of a scenario."""

    def __init__(self, seed: int | str) -> None:
        super().__init__(seed)  # an int or str seed is hashed with sha512: no PYTHONHASHSEED dependence
        self.seed_value = seed

    def fork(self, name: str) -> SimRandom:
        return SimRandom(f"{self.seed_value}/{name}")

    def chance(self, probability: float) -> bool:
        """True with `probability`; draws nothing when it is 0 (so a switched-off fault
        leaves the stream, and so the rest of the run, unchanged)."""
        return probability > 0 and self.random() < probability

    def between(self, bounds: tuple[float, float]) -> float:
        low, high = bounds
        return low if high <= low else self.uniform(low, high)


class SimIds:
    """Ids from a seeded rng: uuid4s, hex tokens and random bytes."""

    def __init__(self, rng: random.Random) -> None:
        self._rng = rng

    def uuid4(self) -> uuid.UUID:
        return uuid.UUID(int=self._rng.getrandbits(128), version=4)

    def hex(self, nbytes: int = 16) -> str:
        return self.bytes(nbytes).hex()

    def bytes(self, nbytes: int) -> bytes:
        return self._rng.randbytes(nbytes)


def fixed_hash_seed() -> int | None:
    """This process's PYTHONHASHSEED if it is fixed (a decimal number), else None."""
    value = os.environ.get("PYTHONHASHSEED", "")
    return int(value) if value.isdigit() else None


class _ForbiddenSocket(socket.socket):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        raise SimForbidden("opening a socket inside a simulation (use tests.sim.network for RPC)")


def _forbidden_thread_start(self: threading.Thread) -> None:
    raise SimForbidden(
        f"starting thread {self.name!r} inside a simulation: everything runs on the sim loop "
        "(run_in_executor and asyncio.to_thread run inline)"
    )


def _forbidden_sleep(seconds: float) -> None:
    raise SimForbidden(f"time.sleep({seconds}) inside a simulation would block the loop: use asyncio.sleep")


@contextlib.contextmanager
def determinism_guard(now_ns: Callable[[], int], epoch_ms: int, rng: random.Random) -> Iterator[None]:
    """Patch the process-wide sources of time, randomness and ids (see the module docstring)
    for the duration of a run; everything is restored on exit, also after an exception.
    `now_ns` is the loop's virtual time, `epoch_ms` the wall clock at virtual time 0."""
    ids = SimIds(random.Random(rng.getrandbits(64)))
    epoch_ns = epoch_ms * NS_PER_MS
    patches: list[tuple[Any, str, Any]] = [
        (uuid, "uuid4", ids.uuid4),
        (uuid, "uuid1", lambda *args, **kwargs: ids.uuid4()),
        (os, "urandom", ids.bytes),
        (time, "time", lambda: (epoch_ns + now_ns()) / NS_PER_S),
        (time, "time_ns", lambda: epoch_ns + now_ns()),
        (time, "monotonic", lambda: now_ns() / NS_PER_S),
        (time, "monotonic_ns", now_ns),
        (time, "perf_counter", lambda: now_ns() / NS_PER_S),
        (time, "perf_counter_ns", now_ns),
        (time, "sleep", _forbidden_sleep),
        (threading.Thread, "start", _forbidden_thread_start),
        (socket, "socket", _ForbiddenSocket),
    ]
    saved = [(owner, name, getattr(owner, name)) for owner, name, _ in patches]
    random_state, process_state = random.getstate(), PROCESS_RANDOM.getstate()
    random.seed(rng.getrandbits(64))
    PROCESS_RANDOM.setstate(random.getstate())  # seeded without another draw from `rng`
    try:
        for owner, name, value in patches:
            setattr(owner, name, value)
        yield
    finally:
        for owner, name, value in saved:
            setattr(owner, name, value)
        random.setstate(random_state)
        PROCESS_RANDOM.setstate(process_state)
