"""broker/wire_errors.py: every internal error type gets the wire code the broker answered
for it before the mapping was gathered in one function (issue 27 item 3)."""

from __future__ import annotations

import pytest

from broker.wal.reader import WalReadError
from broker.wal.wal_writer import WalKeyCollision
from broker.log import LogClosedError, OffsetOutOfRangeError
from broker.log.coordinates import InvalidCoordinates
from broker.log.txn_index import TxnIndexCorruptError
from broker.objectstore.store import NotFound, ObjectStoreError, ObjectStoreUnavailable
from broker.tiering.reader import TieredReadError
from broker.protocol.errors import ApiError, ErrorCode
from broker.rpc.errors import RpcError, RpcRemoteError, RpcTimeout, RpcUnavailable
from broker.wire_errors import LOG_STORAGE_FAILURES, wire_error
from walfiles.format import ChecksumMismatchError, WalFormatError

STORAGE = ErrorCode.KAFKA_STORAGE_ERROR


@pytest.mark.parametrize(
    ("exc", "code"),
    [
        # the disk
        (OSError(5, "Input/output error"), STORAGE),
        (FileNotFoundError("segment gone"), STORAGE),
        (PermissionError("read-only"), STORAGE),
        # a partition log closed under the caller (the partition is being unloaded)
        (LogClosedError("partition log /x is closed"), STORAGE),
        # the object store, after its retries
        (ObjectStoreError("403 access denied"), STORAGE),
        (ObjectStoreUnavailable("503 after 5 attempts"), STORAGE),
        (NotFound("wal/0001 is gone"), STORAGE),
        # stored bytes that are not what their coordinates or markers say
        (WalReadError("batchLength 12 at 0, expected 90"), STORAGE),
        (TieredReadError("segment .log shorter than its marker"), STORAGE),
        (TxnIndexCorruptError("bad entry"), STORAGE),
        (WalFormatError("bad magic"), STORAGE),
        (ChecksumMismatchError("index crc"), STORAGE),
        (WalKeyCollision("3 keys in a row already held"), STORAGE),
        # a damaged file whose parser raised what it raised
        (ValueError("unpack requires a buffer of 61 bytes"), STORAGE),
        # inter-broker calls: no answer may have been acted on; a refusal was not
        (RpcUnavailable("connection lost"), ErrorCode.REQUEST_TIMED_OUT),
        (RpcTimeout("no answer in 5 s"), ErrorCode.REQUEST_TIMED_OUT),
        (RpcRemoteError("KeyError: 'x'"), ErrorCode.NOT_LEADER_OR_FOLLOWER),
        (RpcError("request above max_frame_bytes"), ErrorCode.NOT_LEADER_OR_FOLLOWER),
    ],
    ids=lambda value: type(value).__name__ if isinstance(value, BaseException) else "",
)
def test_internal_errors_map_to_their_wire_code(exc: BaseException, code: ErrorCode) -> None:
    error = wire_error(exc, "reading partition t-0")
    assert error.code == code
    assert error.message == f"reading partition t-0: {exc}"
    assert wire_error(exc).message == str(exc)


@pytest.mark.parametrize(
    "exc",
    [
        ApiError(ErrorCode.NOT_ENOUGH_REPLICAS, "isr 1 < 2"),
        ApiError(STORAGE, "already mapped"),
        OffsetOutOfRangeError(7, 10, 20),  # the log's protocol answers are ApiErrors already
        InvalidCoordinates("bad range"),
    ],
    ids=lambda exc: f"{type(exc).__name__}-{exc.code.name}",
)
def test_an_api_error_passes_through_untouched(exc: ApiError) -> None:
    assert wire_error(exc, "context is not added") is exc


def test_log_storage_failures_are_the_disk_and_a_closed_log() -> None:
    """Partition._append answers these KAFKA_STORAGE_ERROR and re-raises anything else (its
    own refusals, bugs): the set decides which failures a producer may simply retry."""
    assert isinstance(FileNotFoundError(), LOG_STORAGE_FAILURES)
    assert isinstance(LogClosedError(), LOG_STORAGE_FAILURES)
    assert not isinstance(ApiError(STORAGE), LOG_STORAGE_FAILURES)
    assert not isinstance(ValueError(), LOG_STORAGE_FAILURES)
