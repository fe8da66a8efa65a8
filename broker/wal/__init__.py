"""The WAL: how diskless topics' record bytes reach shared WAL objects and come back.

The package is named after the machinery; "diskless" stays the name of the topic mode that
uses it (`diskless.enable`, the `diskless` metrics and docs).

- `wal_writer`: the per-broker WAL buffer: seal, upload, ordered commit, backpressure.
- `commit`: the commit messages a produce representative sends a partition leader, and the
  leader-side code that applies them (`LocalCommitter`).
- `commit_router`, `commit_streams`: committing an object's batches to their leaders, locally
  or over the RPC, in seal order (not to be confused with routing/request_forwarding.py, which
  sends whole Kafka requests on to a leader).
- `cache`, `reader`: the fetch side: coordinates to coalesced ranged GETs through an LRU cache.

See docs/architecture.md ("Diskless topics") and docs/formats.md.
"""
