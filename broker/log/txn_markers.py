"""Transaction markers: Kafka's COMMIT/ABORT control batches (`EndTransactionMarker`).

A marker is a real Kafka control batch, exactly what a Kafka partition leader writes when the
transaction coordinator sends WriteTxnMarkers: attributes transactional + control (0x30), the
producer's id and epoch, base sequence -1, one record whose key is the control key
(version int16 0, type int16: 0 ABORT, 1 COMMIT; `ControlRecordType`) and whose value is
(version int16 0, coordinator epoch int32). It is stored inline in the partition log as a
RECORDS entry in both modes (classic and diskless): a few dozen bytes, so a diskless
partition does not put it in a WAL object, and every read path serves it as it serves any
inline batch. Clients skip it as they skip every control batch.

What tells it apart from Shoal's own markers (markers.py, modes.py) is the producer id:
those have none (-1) and a control type outside Kafka's range.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

from broker.log.markers import MarkerFormatError, control_record, encode_control
from broker.protocol.batch import CONTROL_FLAG, TRANSACTIONAL_FLAG, BatchHeader

ABORT = 0  # ControlRecordType.ABORT
COMMIT = 1  # ControlRecordType.COMMIT
_VALUE = struct.Struct(">hi")  # version, coordinator epoch
VALUE_VERSION = 0


@dataclass(frozen=True, slots=True)
class TxnMarker:
    """What a transaction marker says: how the transaction ended, and who decided it."""

    commit: bool
    coordinator_epoch: int


def is_txn_marker(header: BatchHeader) -> bool:
    """A control batch with a producer id: Kafka's transaction markers (Shoal's own markers
    have none)."""
    return header.is_control and header.has_producer_id


def encode_txn_marker(producer_id: int, producer_epoch: int, marker: TxnMarker, timestamp_ms: int) -> bytes:
    """The control batch of a COMMIT or ABORT marker (offset and leader epoch patched by the log)."""
    return encode_control(
        COMMIT if marker.commit else ABORT,
        _VALUE.pack(VALUE_VERSION, marker.coordinator_epoch),
        timestamp_ms,
        producer_id=producer_id,
        producer_epoch=producer_epoch,
        attributes=CONTROL_FLAG | TRANSACTIONAL_FLAG,
    )


def decode_txn_marker(data: bytes | bytearray | memoryview) -> TxnMarker:
    """The marker of a transaction marker batch (MarkerFormatError for anything else).
    Like Kafka, a value of a newer version is read by its first 6 bytes."""
    kind, value = control_record(data)
    if kind not in (ABORT, COMMIT):
        raise MarkerFormatError(f"control type {kind} is not a transaction marker")
    if len(value) < _VALUE.size:
        raise MarkerFormatError(f"transaction marker value of {len(value)} bytes, need {_VALUE.size}")
    version, coordinator_epoch = _VALUE.unpack_from(value)
    if version < 0:
        raise MarkerFormatError(f"transaction marker value version {version}")
    return TxnMarker(kind == COMMIT, coordinator_epoch)
