"""Every advertised version of every API is accepted by a running broker: a request sent
at that version gets a response with the right correlation id that is exactly a response of
that version (decoded and encoded again, the same bytes), never UNSUPPORTED_VERSION."""

from __future__ import annotations

import socket
import struct

import pytest
from kafka.protocol.metadata import ApiVersionsRequest

from broker.protocol.messages import REQUEST_CLASSES, RESPONSE_CLASSES

pytestmark = pytest.mark.integration
UNSUPPORTED_VERSION = 35


def _request_frame(api_key: int, version: int, correlation_id: int, body: bytes) -> bytes:
    flexible = REQUEST_CLASSES[api_key].flexible_version_q(version)
    client_id = b"protocol-test"
    header = struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id
    if flexible:
        header += b"\x00"
    payload = header + body
    return struct.pack(">i", len(payload)) + payload


def _read_frame(sock: socket.socket) -> bytes:
    def exactly(n: int) -> bytes:
        data = b""
        while len(data) < n:
            chunk = sock.recv(n - len(data))
            if not chunk:
                raise ConnectionError("broker closed the connection")
            data += chunk
        return data

    (size,) = struct.unpack(">i", exactly(4))
    return exactly(size)


def _exchange(port: int, api_key: int, version: int, request) -> object:  # type: ignore[no-untyped-def]
    """Send `request` at `version`; the response decoded at that version. The decoder must use
    the whole body: encoding the decoded response again gives the broker's bytes back."""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(_request_frame(api_key, version, 4242, bytes(request.encode(version=version))))
        frame = _read_frame(sock)
    (correlation_id,) = struct.unpack_from(">i", frame)
    assert correlation_id == 4242
    response_cls = RESPONSE_CLASSES[api_key]
    flexible_header = response_cls.flexible_version_q(version) and api_key != 18
    body = frame[5 if flexible_header else 4 :]
    response = response_cls.decode(body, version=version)
    response._header = None  # kafka-python 3.0 encodes a decoded message only once this is set
    assert bytes(response.encode(version=version)) == body, (
        f"API {api_key} v{version}: the response is not exactly a v{version} {response_cls.__name__}"
    )
    return response


def _advertised(port: int) -> list[tuple[int, int, int]]:
    response = _exchange(port, 18, 3, ApiVersionsRequest(client_software_name="t", client_software_version="1"))
    return [(k.api_key, k.min_version, k.max_version) for k in response.api_keys]


def _minimal_request(api_key: int):  # type: ignore[no-untyped-def]
    request = REQUEST_CLASSES[api_key]()
    if api_key == 0:
        request.acks = 1  # acks=0 has no response to check
    if api_key == 22:
        request.transactional_id = None  # the default "" asks for transactions (refused)
    return request


def test_every_advertised_version_is_served(module_broker) -> None:  # type: ignore[no-untyped-def]
    advertised = _advertised(module_broker.port)
    assert advertised, "ApiVersions listed nothing"
    for api_key, low, high in advertised:
        for version in range(low, high + 1):
            response = _exchange(module_broker.port, api_key, version, _minimal_request(api_key))
            assert getattr(response, "error_code", 0) != UNSUPPORTED_VERSION, (api_key, version)
