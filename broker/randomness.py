"""Injected randomness: components draw random numbers and make ids from a `Random` they are
given (the broker's Environment.random, seeded in the simulation), so a seed fixes what a run
does. Nothing else in broker/ imports `random` or calls uuid4 (ruff's TID251 enforces it).

No component defaults to a source: each takes it as a required argument, so a forgotten
injection fails loudly (tests/unit/test_injected_sources.py keeps it so). `PROCESS_RANDOM` is
the source of a process that is not a broker (the Spark job, which passes it in itself); a
broker builds its own (Environment.for_process)."""

from __future__ import annotations

import os
import random
import uuid

Random = random.Random  # the type of an injected source

PROCESS_RANDOM = Random()
os.register_at_fork(after_in_child=PROCESS_RANDOM.seed)  # a forked child must not repeat its parent's draws


def new_uuid(rng: Random) -> uuid.UUID:
    """A random (version 4) UUID drawn from `rng`: topic ids, incarnations, member ids."""
    return uuid.UUID(int=rng.getrandbits(128), version=4)
