"""The read path shared by Fetch, ListOffsets, OffsetForLeaderEpoch and replication.

- `partition_reader`: one partition's read (`PartitionReader.read` -> `PartitionRead`), the
  one path of Fetch, the replica read service and ListOffsets' tiered lookups: it chooses a
  replica elsewhere, the local log or a tiered segment, fences, applies the isolation bound
  and sizes by KIP-74; `resolve` then reads the bytes of many reads together.
- `resolver`: located batches back into Kafka batch bytes, one resolver per kind (RECORDS:
  the entry itself; COORDINATES: WAL object ranges; tiered spans: segment ranges);
  `SERVED_KINDS` are the entry kinds that stand for batches.
- `remote`, `read_service`: reads from a replica elsewhere (a broker without a replica, or
  with one that lacks the offset), asking and answering.
- `replica_policy`: which replica may answer a read, or who should.
- `fencing`: the leader-epoch check every read of a partition makes.

Like Kafka's ReplicaManager.readFromLog over UnifiedLog and Inkless's Reader under its
FetchHandler (find batches, then read objects): handlers hand partitions to the reader,
whatever tier holds the bytes, so a new tier is a new kind with its resolver, not a handler
change.
"""
