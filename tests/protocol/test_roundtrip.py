"""Every advertised version of every API round-trips through the codec, and ApiVersions
advertises exactly the handler registry."""

import pytest

from broker.handlers import load_all, registry
from broker.protocol.messages import REQUEST_CLASSES, RESPONSE_CLASSES

load_all()
CASES = [(key, version) for key, low, high in registry.supported_versions() for version in range(low, high + 1)]


@pytest.mark.parametrize("api_key,version", CASES)
def test_default_request_and_response_round_trip(api_key: int, version: int) -> None:
    for cls in (REQUEST_CLASSES[api_key], RESPONSE_CLASSES[api_key]):
        message = cls()
        encoded = bytes(message.encode(version=version))
        decoded = cls.decode(encoded, version=version)
        assert decoded.to_dict() == cls.decode(encoded, version=version).to_dict() == message.to_dict()


def test_every_registered_api_has_message_classes() -> None:
    assert set(registry.HANDLERS) <= set(REQUEST_CLASSES)
    for key, low, high in registry.supported_versions():
        schema_low, schema_high = REQUEST_CLASSES[key].valid_versions
        assert schema_low <= low <= high <= schema_high


def test_apis_clients_need_are_advertised() -> None:
    needed = {0, 1, 2, 3, 10, 18, 19, 20, 22, 32, 33, 37, 44, 60}
    assert needed <= set(registry.HANDLERS)
