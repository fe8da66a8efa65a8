"""What every TCP connection of the broker (Kafka listener, inter-broker RPC both ways) does
when it opens: no Nagle delay (requests and responses are whole frames already written in
one go), and a printable peer address."""

from __future__ import annotations

import asyncio
import socket


def set_up_connection(transport: asyncio.BaseTransport) -> str:
    """Turn on TCP_NODELAY and return the peer as "host:port" ("?" if unknown)."""
    sock = transport.get_extra_info("socket")
    if sock is not None:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    peer = transport.get_extra_info("peername")
    return f"{peer[0]}:{peer[1]}" if peer else "?"
