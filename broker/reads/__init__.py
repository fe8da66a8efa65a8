"""The read path shared by Fetch, ListOffsets, OffsetForLeaderEpoch and replication.

- `resolver`: partition-log entries back into Kafka batch bytes, one resolver per entry kind
  (RECORDS: the entry itself; COORDINATES: WAL object ranges); `SERVED_KINDS` are the kinds
  that stand for batches.
- `remote`, `read_service`: reads from a replica elsewhere (a broker without a replica, or
  with one that lacks the offset), asking and answering.
- `replica_policy`: which replica may answer a read, or who should.
- `fencing`: the leader-epoch check every read of a partition makes.

Like Kafka's UnifiedLog over its tiers and Inkless's consume path (find batches, then read
objects): handlers find entries in the partition log and hand them here, whatever tier
holds the bytes, so a new tier is a new entry kind with its resolver, not a handler change.
"""
