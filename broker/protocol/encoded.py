"""A response body a handler encoded itself.

Most handlers return kafka-python response objects and dispatch encodes them. A handler
whose answer can be large (Metadata over 100,000 partitions) encodes it in slices instead,
handing the event loop back between them, and returns the bytes with the error codes they
carry (for shoal_request_errors_total, which otherwise reads them from the object)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class EncodedBody:
    parts: list[bytes]
    error_codes: list[int]
