"""The few ways an inter-broker call can fail, so callers decide once: retry or give up.

`retriable` follows broker.metadata.store: True when the same call may succeed later
(the peer is down, restarting or slow); False when repeating it would fail the same way.
"""

from __future__ import annotations


class RpcError(Exception):
    """A call failed for a reason of our own making (e.g. a request above max_frame_bytes)."""

    retriable = False


class RpcUnavailable(RpcError):
    """No answer: the connection failed, was lost or closed before the response came.
    The request may or may not have been handled by the peer."""

    retriable = True


class RpcTimeout(RpcUnavailable):
    """No answer within the call's timeout; a late response is discarded."""


class RpcRemoteError(RpcError):
    """The peer's handler raised; `message` is its description of the exception."""

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


class RpcRefused(Exception):
    """Raised by a handler that declines a request for a known, passing reason (the broker is
    still opening its logs, say): the caller gets an RpcRemoteError as for any failure, and
    the server logs one line, not a traceback, since nothing is broken."""
