"""Injected randomness: components draw random numbers and make ids from a `Random` they are
given (the broker's Environment.random, seeded in the simulation), so a seed fixes what a run
does. Nothing else in broker/ imports `random` or calls uuid4 (ruff's TID251 enforces it).

`PROCESS_RANDOM` is the default of components that can also be built without an Environment
(unit tests, tools); a broker always passes its own source."""

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


def process_uuid() -> uuid.UUID:
    """A random UUID from PROCESS_RANDOM (the default id source where none is injected)."""
    return new_uuid(PROCESS_RANDOM)
