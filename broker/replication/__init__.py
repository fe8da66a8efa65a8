"""Kafka-style replication: followers fetching from leaders, the leader serving them, ISR changes.

`divergence`, re-exported here, is pure (no sockets, no asyncio): the leader- and
follower-side halves of KIP-320 log truncation. The partition state it works on lives below
this package, because a partition is built from it: the persisted leader-epoch cache in
`broker/log/epochs.py`, the leader's view of its followers (ISR, high watermark) in
`broker/leader_state.py`. The modules here own the I/O and the clock.
"""

from broker.replication.divergence import check_fetch_position, truncation_offset

__all__ = ["check_fetch_position", "truncation_offset"]
