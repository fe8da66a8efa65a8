"""The error codes a Kafka response carries, for shoal_request_errors_total.

A response's error codes sit at fixed places of its schema: a top-level `error_code`, and
`error_code` fields of nested structs and struct arrays (per topic, per resource, per
partition, per group). Where they are is read once per response class from kafka-python's
schema; a response then costs one walk over the arrays that can hold codes (its topics and
partitions, never its records or other arrays).
"""

from __future__ import annotations

from typing import Any

from .encoded import EncodedBody

# (whether the struct has an error_code field, [(field, is an array, plan of its structs)])
_Plan = tuple[bool, tuple[tuple[str, bool, "_Plan"], ...]]
_PLANS: dict[type, _Plan] = {}
_EMPTY: _Plan = (False, ())


def _plan(fields: dict[str, Any]) -> _Plan:
    children = []
    for name, field in fields.items():
        if field.is_struct() or field.is_struct_array():
            sub = _plan(field.fields)
            if sub != _EMPTY:
                children.append((name, field.is_struct_array(), sub))
    return ("error_code" in fields, tuple(children))


def _plan_of(cls: type) -> _Plan:
    plan = _PLANS.get(cls)
    if plan is None:
        struct = getattr(cls, "_struct", None)
        plan = _PLANS[cls] = _plan(struct.fields) if struct is not None else _EMPTY
    return plan


def error_codes(response: object) -> list[int]:
    """Every non-zero error code in `response`, one per occurrence."""
    if isinstance(response, EncodedBody):
        return list(response.error_codes)
    found: list[int] = []
    _collect(response, _plan_of(type(response)), found)
    return found


def _collect(obj: Any, plan: _Plan, found: list[int]) -> None:
    has_code, children = plan
    if has_code:
        code = obj.error_code
        if code:
            found.append(code)
    for name, is_array, sub in children:
        value = getattr(obj, name)
        if value is None:
            continue
        if not is_array:
            _collect(value, sub, found)
        elif sub[1]:  # arrays below: recurse
            for item in value:
                _collect(item, sub, found)
        else:  # a leaf array (partitions, results): its codes only
            found.extend([code for item in value if (code := item.error_code)])
