"""Messages filled with random, non-default values from kafka-python's schemas, for round-trip
tests that can fail: every field valid at the version gets a value (extremes of its integer
range, unicode strings, bytes, nulls where the schema allows them, arrays of 0-3 entries)."""

from __future__ import annotations

import random
import uuid
from typing import Any

INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "uint16": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "int64": (-(2**63), 2**63 - 1),
}
UNICODE = "abcXYZ019-_.éß💡"


def fields_of(struct: Any) -> list[Any]:
    fields = struct.fields
    return list(fields.values()) if isinstance(fields, dict) else list(fields or ())


class Populator:
    def __init__(self, rnd: random.Random, nulls: bool = True) -> None:
        self.rnd = rnd
        self.nulls = nulls  # False: no null anywhere, even where the schema allows one

    def message(self, cls: Any, version: int, **fixed: Any) -> Any:
        kwargs = self._struct(cls._struct, version, depth=0)
        kwargs.update(fixed)
        return cls(**kwargs)

    def _struct(self, struct: Any, version: int, depth: int) -> dict[str, Any]:
        out = {}
        for field in fields_of(struct):
            if not field.for_version_q(version) or field.type_str == "bitfield":
                continue
            out[field.name] = self._value(field, version, depth)
        return out

    def _null(self, field: Any, version: int) -> bool:
        return self.nulls and field.nullable_for_version_q(version) and self.rnd.random() < 0.2

    def _value(self, field: Any, version: int, depth: int) -> Any:
        if field.is_struct_array() or field.is_struct() or field.is_array():
            if self._null(field, version):
                return None
            count = self.rnd.randint(0, 3 if depth < 2 else 1)
            if field.is_struct_array():
                return [field.data_class(**self._struct(field, version, depth + 1)) for _ in range(count)]
            if field.is_struct():
                return field.data_class(**self._struct(field, version, depth + 1))
            return [self._simple(field.array_of, version, element=True) for _ in range(count)]
        return self._simple(field, version)

    def _simple(self, field: Any, version: int, element: bool = False) -> Any:
        kind, rnd = field.type_str, self.rnd
        # An array's entries carry the array's nullability in kafka-python's schema, but only
        # the array may be null (DescribeTopicPartitions' nullable ELR lists).
        if not element and self._null(field, version):
            return None
        if kind in INT_RANGES:
            low, high = INT_RANGES[kind]
            return rnd.choice([low, high, rnd.randint(low, high), 1])
        if kind == "bool":
            return rnd.random() < 0.5
        if kind == "float64":
            return rnd.choice([0.5, -1e300, rnd.random()])
        if kind == "uuid":
            return uuid.UUID(int=rnd.getrandbits(128) | 1)  # the zero UUID is null on the wire
        if kind == "string":
            return "".join(rnd.choice(UNICODE) for _ in range(rnd.randint(0, 12)))
        if kind in ("bytes", "records"):
            return rnd.randbytes(rnd.randint(0, 24))
        raise KeyError(f"no generator for field type {kind}")


def same(original: Any, decoded: Any) -> bool:
    """Decoded `to_dict()` equals the original's on every field the version carries (the
    original also lists the defaults of fields outside the version)."""
    if isinstance(decoded, dict):
        return isinstance(original, dict) and all(k in original and same(original[k], v) for k, v in decoded.items())
    if isinstance(decoded, list):
        return (
            isinstance(original, list)
            and len(original) == len(decoded)
            and all(same(a, b) for a, b in zip(original, decoded))
        )
    return original == decoded


def non_nullable_paths(struct: Any, version: int, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """Top-level and nested (through structs only) string/bytes/array fields that may not be
    null at `version` (the ones Shoal's null check must guard)."""
    out = []
    for field in fields_of(struct):
        if not field.for_version_q(version) or field.tagged_field_q(version):
            continue
        here = (*path, field.name)
        if field.is_struct() and not field.is_struct_array():
            out += non_nullable_paths(field, version, here)
        if not field.nullable_for_version_q(version) and (
            field.is_array() or field.type_str in ("string", "bytes", "records")
        ):
            out.append(here)
    return out
