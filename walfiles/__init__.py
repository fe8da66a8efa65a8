"""WAL objects: the object format and object keys shared by broker/ and tiering/.

- `walfiles.keys`: every object-key format (WAL objects, tiered segments), `format_*`/`parse_*`.
- `walfiles.format`: the WAL object layout (header, batches, msgpack index, footer), its
  builder, validating readers and coalesced-range planning.

Reference: docs/formats.md ("WAL objects"). Nothing in this package does I/O.
The WAL file manager that deletes WAL objects is the broker's half: broker/walfiles/.
"""
