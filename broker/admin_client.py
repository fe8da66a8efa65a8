"""A client of the Shoal admin API (protocol/admin.py) for the operator CLI: tries the
bootstrap brokers in turn and follows a NOT_CONTROLLER answer to the controller."""

from __future__ import annotations

import itertools
import socket
import struct
from typing import Any

from .protocol.admin import AdminRequest, AdminResponse, decode_response, encode_request
from .protocol.errors import ErrorCode

TIMEOUT_S = 60.0
MAX_RESPONSE_BYTES = 64 << 20
_SIZE = struct.Struct(">i")


class AdminError(Exception):
    """The command failed; the message is for the operator."""


def parse_bootstrap(value: str) -> list[tuple[str, int]]:
    """'host:port[,host:port...]' -> addresses; ValueError with a readable message."""
    addresses = []
    for item in value.split(","):
        host, sep, port = item.strip().rpartition(":")
        if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
            raise ValueError(f"--bootstrap-server expects HOST:PORT[,HOST:PORT...], got {value!r}")
        addresses.append((host.strip("[]"), int(port)))
    return addresses


class AdminClient:
    def __init__(self, bootstrap: list[tuple[str, int]], timeout_s: float = TIMEOUT_S) -> None:
        self._bootstrap = bootstrap
        self._timeout_s = timeout_s
        self._ids = itertools.count(1)

    def call(self, command: str, args: dict[str, Any] | None = None) -> Any:
        """The command's result from the broker that runs it; AdminError otherwise."""
        errors = []
        for address in self._bootstrap:
            try:
                response = self._send(address, command, args or {})
            except OSError as exc:
                errors.append(f"{address[0]}:{address[1]}: {exc}")
                continue
            if response.error_code == ErrorCode.NOT_CONTROLLER and isinstance(response.result, dict):
                where = response.result
                if "host" not in where:
                    raise AdminError(f"no controller is known to {address[0]}:{address[1]} (is the cluster up?)")
                try:
                    response = self._send((where["host"], int(where["port"])), command, args or {})
                except OSError as exc:
                    raise AdminError(f"controller {where['host']}:{where['port']} did not answer: {exc}") from None
            if response.error_code:
                raise AdminError(f"{_error_name(response.error_code)}: {response.error_message}")
            return response.result
        raise AdminError("no bootstrap broker answered: " + "; ".join(errors))

    def call_at(self, address: tuple[str, int], command: str, args: dict[str, Any] | None = None) -> Any:
        """The command's result from one given broker (commands every broker answers for
        itself, like `tiering.*`); AdminError when it fails or does not answer."""
        try:
            response = self._send(address, command, args or {})
        except OSError as exc:
            raise AdminError(f"{address[0]}:{address[1]} did not answer: {exc}") from None
        if response.error_code:
            raise AdminError(f"{address[0]}:{address[1]}: {_error_name(response.error_code)}: {response.error_message}")
        return response.result

    def _send(self, address: tuple[str, int], command: str, args: dict[str, Any]) -> AdminResponse:
        correlation_id = next(self._ids)
        frame = encode_request(AdminRequest(correlation_id, "shoal-cli", command, args))
        with socket.create_connection(address, timeout=self._timeout_s) as sock:
            sock.sendall(_SIZE.pack(len(frame)) + frame)
            (size,) = _SIZE.unpack(_read(sock, 4))
            if not 0 <= size <= MAX_RESPONSE_BYTES:
                raise OSError(f"bad response size {size}")
            response = decode_response(_read(sock, size))
        if response.correlation_id != correlation_id:
            raise OSError("response to another request")
        return response


def _error_name(code: int) -> str:
    try:
        return ErrorCode(code).name
    except ValueError:
        return f"error {code}"


def _read(sock: socket.socket, n: int) -> bytes:
    chunks = []
    while n:
        chunk = sock.recv(n)
        if not chunk:
            raise OSError("connection closed by the broker")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)
