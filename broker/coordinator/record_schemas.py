"""Kafka's coordinator records (what `__consumer_offsets` and `__transaction_state` hold), read
and written with kafka-python's schema-driven codec, the one behind every request and
response this broker answers: a schema in the shape of Kafka's message definitions
(`*/src/main/resources/common/message/*.json`) becomes an encoder and a decoder compiled per
version. The schemas themselves live next to the coordinator that writes them
(`groups.offsets_records`, `transactions.records`), transcribed from Kafka's definitions.

Framing, as Kafka's `CoordinatorRecordSerde` and `TransactionLog` write it: a key is an int16
record type (called the key's version before Kafka 4.0; the bytes are the same) then the key's
fields; a value is an int16 version then the value's fields at that version, with compact
strings and arrays and a tagged-field section from its first flexible version on; a tombstone
is a record without a value.
"""

from __future__ import annotations

import struct
from types import SimpleNamespace
from typing import Any

from kafka.protocol.data_container import DataContainer
from kafka.protocol.schemas import StructField
from kafka.protocol.schemas.fields.codecs import EncodeBufferPool

Definition = dict[str, Any]  # a message or field definition in Kafka's JSON shape
_VERSION = struct.Struct(">h")


class CorruptRecord(ValueError):
    """Bytes in an internal topic that no schema reads: a bug or damage, never a client error."""


class UnknownRecordVersion(CorruptRecord):
    """A record version this broker does not know (a newer broker wrote it): refusing it
    beats misreading it."""


def field(
    name: str,
    type_: str,
    versions: str,
    *,
    default: object = None,
    nullable: str | None = None,
    tag: int | None = None,
    fields: list[Definition] | None = None,
) -> Definition:
    """One field as Kafka's JSON writes it (`tag`: a tagged field in the flexible versions)."""
    out: Definition = {"name": name, "type": type_, "versions": versions}
    if default is not None:
        out["default"] = default
    if nullable is not None:
        out["nullableVersions"] = nullable
    if tag is not None:
        out["tag"], out["taggedVersions"] = tag, versions
    if fields is not None:
        out["fields"] = fields
    return out


def message(name: str, valid: str, flexible: str, fields: list[Definition]) -> Definition:
    return {"name": name, "type": "data", "validVersions": valid, "flexibleVersions": flexible, "fields": fields}


class RecordSchema:
    """One record message (a key or a value) and its codec, for the versions it declares."""

    def __init__(self, definition: Definition) -> None:
        self.name: str = definition["name"]
        self._struct = StructField(definition)
        self._data_class: Any = type(self.name, (DataContainer,), {"_struct": self._struct})
        self._struct.set_data_class(self._data_class)
        low, high = StructField.parse_versions(definition["validVersions"])
        self.versions = range(low, high + 1)
        flexible_from = StructField.parse_versions(definition["flexibleVersions"])[0]
        self._flexible = {v: 0 <= flexible_from <= v for v in self.versions}
        self._encoders: dict[int, Any] = {}  # version -> kafka-python's compiled encoder
        self._decoders: dict[int, Any] = {}

    def struct(self, name: str) -> Any:
        """The data class of the nested struct `name` (e.g. an array's element)."""
        return getattr(self._data_class, name)

    def encode(self, version: int, **fields: Any) -> bytes:
        """int16 `version`, then `fields` (by their snake_case names: every field of that
        version, tagged ones when not their default) at that version, as Kafka's
        toVersionPrefixedBytes writes them."""
        encoder = self._encoders.get(version)
        if encoder is None:
            if version not in self.versions:
                raise ValueError(f"{self.name} has no version {version}")
            flexible = self._flexible[version]
            encoder = self._encoders[version] = self._struct.compiled_encode_into(
                version, compact=flexible, tagged=flexible
            )
        with EncodeBufferPool.acquire() as out:
            out.ensure(_VERSION.size)
            _VERSION.pack_into(out.buf, 0, version)
            out.pos = _VERSION.size
            encoder(SimpleNamespace(**fields), out)  # the encoder reads attributes only
            return bytes(out.result())

    def decode(self, data: bytes | memoryview) -> tuple[int, Any]:
        """The version prefix and the message; an unknown version or unreadable bytes raise."""
        version = read_version(data, self.name)
        decoder = self._decoders.get(version)
        if decoder is None:
            if version not in self.versions:
                raise UnknownRecordVersion(f"{self.name} version {version} is not supported (known: {self.versions})")
            flexible = self._flexible[version]
            decoder = self._decoders[version] = self._struct.compiled_decode_from(
                version, compact=flexible, tagged=flexible, data_class=self._data_class
            )
        try:
            message, _end = decoder(memoryview(data), _VERSION.size)
        except (struct.error, IndexError, ValueError, TypeError, UnicodeDecodeError) as exc:
            raise CorruptRecord(f"{self.name} version {version}: {exc}") from exc
        return version, message


def read_version(data: bytes | memoryview, what: str = "record") -> int:
    """The int16 a key (record type) or value (version) starts with."""
    if len(data) < _VERSION.size:
        raise CorruptRecord(f"{what}: {len(data)} bytes, no version")
    version: int = _VERSION.unpack_from(data)[0]
    return version
