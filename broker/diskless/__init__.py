"""Diskless topics: record bytes in shared WAL objects, coordinates in the partition log.

- `coordinates`: the COORDINATES entry payload (where a batch lives in a WAL object).
- `commit`: the commit messages a produce representative sends a partition leader, and the
  leader-side code that applies them.
- `wal_writer`: the per-broker WAL buffer: seal, upload, ordered commit, backpressure.
- `cache`, `reader`: the fetch side: coordinates to coalesced ranged GETs through an LRU cache.

See docs/architecture.md ("Diskless topics") and docs/formats.md.
"""
