"""Small message types for the kernel's own tests (the broker's real ones are tested too)."""

from __future__ import annotations

import msgspec


class Ping(msgspec.Struct, tag="ping"):
    seq: int
    text: str = ""


class Pong(msgspec.Struct, tag="pong"):
    seq: int
    text: str = ""
