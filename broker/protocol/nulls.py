"""Reject nulls the schema does not allow, in one place, before any handler runs.

kafka-python's decoders accept a null (length -1) for any string, bytes or array field;
Kafka's own parser rejects a null where the field's `nullableVersions` do not include the
request's version. Without this check a hostile or buggy client could make handlers
iterate over None. The checks are compiled once per (API, version).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Callable

Check = Callable[[Any], None]
_NULLABLE_KINDS = ("string", "bytes", "records")


class NullFieldError(ValueError):
    """A field that may not be null at this version was null."""


def _fields(struct: Any) -> list[Any]:
    fields = struct.fields
    return list(fields.values()) if isinstance(fields, dict) else list(fields or ())


def _compile(struct: Any, version: int, path: str) -> list[Check]:
    checks: list[Check] = []
    for field in _fields(struct):
        if not field.for_version_q(version) or field.tagged_field_q(version):
            continue
        nullable = field.nullable_for_version_q(version)
        name = field.name
        where = f"{path}.{name}"
        if field.is_struct_array():
            inner = _compile(field, version, where)
            checks.append(_array_of_structs(name, nullable, inner, where))
        elif field.is_struct():
            inner = _compile(field, version, where)
            checks.append(_struct(name, nullable, inner, where))
        elif not nullable and (field.is_array() or field.type_str in _NULLABLE_KINDS):
            checks.append(_not_null(name, where))
    return checks


def _not_null(name: str, where: str) -> Check:
    def check(obj: Any) -> None:
        if getattr(obj, name) is None:
            raise NullFieldError(f"{where} may not be null")

    return check


def _struct(name: str, nullable: bool, inner: list[Check], where: str) -> Check:
    def check(obj: Any) -> None:
        value = getattr(obj, name)
        if value is None:
            if not nullable:
                raise NullFieldError(f"{where} may not be null")
            return
        for sub in inner:
            sub(value)

    return check


def _array_of_structs(name: str, nullable: bool, inner: list[Check], where: str) -> Check:
    def check(obj: Any) -> None:
        items = getattr(obj, name)
        if items is None:
            if not nullable:
                raise NullFieldError(f"{where} may not be null")
            return
        if inner:
            for item in items:
                for sub in inner:
                    sub(item)

    return check


@lru_cache(maxsize=None)
def checker(message_class: Any, version: int) -> Callable[[Any], None]:
    checks = _compile(message_class._struct, version, message_class.__name__)

    def check(message: Any) -> None:
        for sub in checks:
            sub(message)

    return check
