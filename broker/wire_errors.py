"""Internal failures into Kafka wire errors, in one place.

The layers below the broker raise their own typed errors: the disk an `OSError`, a closed
partition log `LogClosedError`, the object store `ObjectStoreError` (`NotFound`,
`ObjectStoreUnavailable`), WAL and tiered-segment readers `WalReadError` / `TieredReadError`
for bytes that are not what their coordinates say, inter-broker calls `RpcError`. Whatever
answers a client (a handler, the commit path, the partition's append) turns them into an
`ApiError` here, so each kind gets the same code everywhere:

- an `ApiError` is already a wire answer and passes through;
- `RpcUnavailable` (no answer, or none in time): REQUEST_TIMED_OUT, since the peer may have
  acted on the request ("possibly persisted": the client retries, never assumes it was not);
- any other `RpcError` (the peer's handler raised or refused, a frame too large): the peer
  did not act, NOT_LEADER_OR_FOLLOWER, so the client refreshes its metadata and retries;
- everything else is a failure of stored data (the disk, a closed log, the object store, a
  damaged object or segment whose parser raised whatever it raised): KAFKA_STORAGE_ERROR,
  retriable, as Kafka answers a log directory failure. Callers catch broadly only around
  reads and writes of stored data, so an unclassified exception there is the storage's.

A context that answers differently says so at its call site, on top of this function: the
transaction and group coordinators answer their clients' codes for a failed append
(transactions/coordinator.py `_APPEND_ERRORS`, groups/coordinator.py), a replica read that
could not reach its replica answers NOT_LEADER_OR_FOLLOWER (reads/remote.py), an
acks=all wait that lost its leader REQUEST_TIMED_OUT (wal/commit_router.py).
"""

from __future__ import annotations

from broker.log import LogClosedError
from broker.protocol.errors import ApiError, ErrorCode
from broker.rpc.errors import RpcError, RpcUnavailable

# Failures of a partition log's disk, which an append answers KAFKA_STORAGE_ERROR (having cut
# back what it wrote); what else it meets (a refusal, a bug) it raises as it came.
LOG_STORAGE_FAILURES: tuple[type[BaseException], ...] = (OSError, LogClosedError)


def wire_error(exc: BaseException, context: str = "") -> ApiError:
    """The wire answer for `exc` (see the module docstring); `context` prefixes the message of
    a mapped failure ("commit failed, nothing was appended: <exc>"), never an ApiError's."""
    if isinstance(exc, ApiError):
        return exc
    message = f"{context}: {exc}" if context else str(exc)
    if isinstance(exc, RpcUnavailable):
        return ApiError(ErrorCode.REQUEST_TIMED_OUT, message)
    if isinstance(exc, RpcError):
        return ApiError(ErrorCode.NOT_LEADER_OR_FOLLOWER, message)
    return ApiError(ErrorCode.KAFKA_STORAGE_ERROR, message)
