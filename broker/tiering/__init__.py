"""Tiering (KIP-405 on diskless topics): the partition leaders' offload of old ranges into
Kafka segments assembled by Spark jobs, their commit, their retention, and reads from them;
`shoal tiering` and the `shoal_tiering_*` metrics report on it.

This is the broker's half. The top-level `tiering` package (a different package: imports
here name it absolutely, `from tiering.plan import ...`) holds what the broker and the Spark
job share: the segment format, the plan and result manifests, the range assembler."""
