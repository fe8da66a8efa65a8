"""Whether the object store can be used at all: one LIST of a prefix nothing is written under.

A LIST rather than a HEAD: S3 answers a HEAD in a bucket that does not exist with a bare
404, exactly as for a missing key, while a LIST says NoSuchBucket. Wrong credentials, an
unreachable endpoint and a missing bucket all fail it; an empty answer means usable.
"""

from __future__ import annotations

from .store import ObjectStore

PROBE_PREFIX = "shoal-health-check"


async def store_problem(store: ObjectStore) -> str | None:
    """None when the store answered, else why not, in one line."""
    try:
        async for _found in store.list(PROBE_PREFIX):
            break
    except Exception as exc:  # noqa: BLE001 - any failure is the answer
        return f"{type(exc).__name__}: {exc}"
    return None
