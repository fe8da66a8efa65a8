"""The transaction coordinator's word to a partition leader that a producer epoch may open a
transaction there (KIP-890 verification, producers/state.py rule 17), over the inter-broker
RPC (msgspec, versioned). Kafka's leader asks the coordinator (AddPartitionsToTxn v4) while a
produce waits; here the coordinator tells the leaders before it answers AddPartitionsToTxn,
so a produce never waits on a second broker and requests of a connection keep their order."""

from __future__ import annotations

import msgspec

TXN_PERMIT_VERSION = 1


class TxnPermitRequest(msgspec.Struct, tag="txn_permit", array_like=True, frozen=True):
    version: int
    producer_id: int
    producer_epoch: int
    partitions: list[tuple[str, int]]  # (topic name, partition) in the ongoing transaction


class TxnPermitResponse(msgspec.Struct, tag="txn_permit_response", array_like=True, frozen=True):
    version: int
    node_id: int
    error_codes: list[int]  # per partition, in the request's order (NONE: granted)
