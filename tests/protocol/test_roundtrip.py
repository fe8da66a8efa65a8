"""Every advertised version of every API goes through Shoal's codec path with real content:
requests filled with random non-default values are decoded by `decode_request` (framing, the
null check) to the same message; responses encoded by `encode_response` (header flavour, body)
decode to the same message with the right correlation id. A null where the schema forbids one
is refused before any handler sees it. ApiVersions advertises exactly the handler registry."""

from __future__ import annotations

import random
import struct

import pytest
from hypothesis import given, settings, strategies as st

from broker.handlers import load_all, registry
from broker.protocol.header import RequestHeader
from broker.protocol.messages import REQUEST_CLASSES, RESPONSE_CLASSES, decode_request, encode_response, is_flexible
from broker.protocol.nulls import NullFieldError

from .populated import Populator, non_nullable_paths, same

load_all()
CASES = [(key, version) for key, low, high in registry.supported_versions() for version in range(low, high + 1)]
EXAMPLES = settings(max_examples=6, deadline=None)  # x 336 API versions


def request_frame(api_key: int, version: int, body: bytes) -> tuple[bytes, int]:
    """A request header (v1, or v2 with empty tagged fields) + body; and where the body starts."""
    client_id = b"roundtrip"
    header = struct.pack(">hhih", api_key, version, 99, len(client_id)) + client_id
    if is_flexible(api_key, version):
        header += b"\x00"
    return header + body, len(header)


def response_fixed(api_key: int) -> dict:
    # kafka-python decodes an ApiVersions response with an error as v0 (as clients must).
    return {"error_code": 0} if api_key == 18 else {}


@pytest.mark.parametrize("api_key,version", CASES)
@EXAMPLES
@given(rnd=st.randoms(use_true_random=False))
def test_populated_request_decodes_to_the_same_message(api_key: int, version: int, rnd: random.Random) -> None:
    cls = REQUEST_CLASSES[api_key]
    message = Populator(rnd).message(cls, version)
    body = bytes(message.encode(version=version))
    frame, offset = request_frame(api_key, version, body)
    decoded = decode_request(api_key, version, frame, offset)
    assert same(message.to_dict(), decoded.to_dict()), (message, decoded)
    decoded._header = None  # kafka-python 3.0 encodes a decoded message only once this is set
    assert bytes(decoded.encode(version=version)) == body


@pytest.mark.parametrize("api_key,version", CASES)
@EXAMPLES
@given(rnd=st.randoms(use_true_random=False), correlation_id=st.integers(-(2**31), 2**31 - 1))
def test_populated_response_encodes_with_the_right_header(
    api_key: int, version: int, rnd: random.Random, correlation_id: int
) -> None:
    cls = RESPONSE_CLASSES[api_key]
    message = Populator(rnd).message(cls, version, **response_fixed(api_key))
    header = RequestHeader(api_key, version, correlation_id, "roundtrip")
    frame = b"".join(bytes(part) for part in encode_response(header, message))
    assert struct.unpack_from(">i", frame)[0] == correlation_id
    # Response header v1 (a tagged-field byte) for flexible versions, except ApiVersions
    # (always v0, so a client that sent an unknown version can read the answer).
    flexible_header = is_flexible(api_key, version) and api_key != 18
    if flexible_header:
        assert frame[4] == 0, "empty tagged fields in the response header"
    body = frame[5 if flexible_header else 4 :]
    decoded = cls.decode(body, version=version)
    assert same(message.to_dict(), decoded.to_dict()), (message, decoded)


NULL_CASES = [
    (key, version, path) for key, version in CASES for path in non_nullable_paths(REQUEST_CLASSES[key]._struct, version)
]


@pytest.mark.parametrize("api_key,version,path", NULL_CASES)
def test_null_where_the_schema_forbids_it_is_refused(api_key: int, version: int, path: tuple[str, ...]) -> None:
    """kafka-python decodes a null for any string/bytes/array; decode_request must refuse it
    where Kafka's schema does not allow null at this version."""
    cls = REQUEST_CLASSES[api_key]
    message = Populator(random.Random(version), nulls=False).message(cls, version)
    target = message
    for name in path[:-1]:
        target = getattr(target, name)
    setattr(target, path[-1], None)
    try:
        body = bytes(message.encode(version=version))
    except (TypeError, ValueError, AttributeError, struct.error):
        return  # the encoder itself cannot write this null: no client can send it either
    raw = cls.decode(body, version=version)
    for name in path:
        raw = getattr(raw, name)
    if raw is not None:
        return  # the encoder wrote something else (Metadata v0 sends null topics as [])
    frame, offset = request_frame(api_key, version, body)
    with pytest.raises(NullFieldError, match=path[-1]):
        decode_request(api_key, version, frame, offset)


def test_every_registered_api_has_message_classes() -> None:
    assert set(registry.HANDLERS) <= set(REQUEST_CLASSES)
    for key, low, high in registry.supported_versions():
        schema_low, schema_high = REQUEST_CLASSES[key].valid_versions
        assert schema_low <= low <= high <= schema_high


def test_apis_clients_need_are_advertised() -> None:
    needed = {0, 1, 2, 3, 10, 18, 19, 20, 22, 32, 33, 37, 44, 60}
    assert needed <= set(registry.HANDLERS)
