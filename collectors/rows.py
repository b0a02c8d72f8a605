"""Checking one row against its schema kind, for sources that take rows from outside the process.

The step receiver (UDP datagrams from training processes) and the job file (lines written by site
scripts) accept data nobody in this repository produced, so each row is checked against
`contracts.schema` before it joins a batch; a bad row is rejected with a reason instead of reaching
the loader's dead-letter table. Collectors that build rows themselves are checked by the tests with
the same function.
"""

from __future__ import annotations

import json
import math
from typing import Any, Mapping

from contracts.schema import KINDS, Field


def _type_ok(f: Field, v: Any) -> bool:
    if f.type == "int":
        return isinstance(v, int) and not isinstance(v, bool)
    if f.type == "float":
        return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)
    if f.type == "str":
        return isinstance(v, str)
    if f.type == "bool":
        return isinstance(v, bool)
    return isinstance(v, list) and all(isinstance(x, int) and not isinstance(x, bool) for x in v)


def check_row(kind: str, row: Mapping[str, Any]) -> str | None:
    """None when `row` is valid for `kind`; otherwise the first problem, naming the field."""
    spec = KINDS[kind]
    known = {f.name: f for f in spec.fields}
    unknown = sorted(set(row) - set(known))
    if unknown:
        return f"unknown field(s) for kind {kind!r}: {', '.join(unknown)}"
    for f in spec.fields:
        v = row.get(f.name)
        if v is None:
            if f.required:
                return f"missing required field {f.name!r}"
            continue
        if not _type_ok(f, v):
            return f"field {f.name!r} must be {f.type}, got {type(v).__name__} {v!r:.40}"
        if f.enum is not None and v not in f.enum:
            return f"field {f.name!r} is {v!r}, not one of {', '.join(f.enum)}"
        if f.type in ("int", "float"):
            if f.min is not None and v < f.min:
                return f"field {f.name!r} is {v}, below its minimum {f.min}"
            if f.max is not None and v > f.max:
                return f"field {f.name!r} is {v}, above its maximum {f.max}"
    return None


def decode_row(kind: str, data: bytes, defaults: Mapping[str, Any] | None = None) -> tuple[dict, str | None]:
    """A JSON object from outside (a datagram, a file line) -> (row, None), or ({}, why it is rejected).
    `defaults` fill fields the sender left out."""
    try:
        row = json.loads(data)
    except (UnicodeDecodeError, ValueError) as e:
        return {}, f"not JSON: {e}"
    if not isinstance(row, dict):
        return {}, f"expected a JSON object, got {type(row).__name__}"
    for k, v in (defaults or {}).items():
        row.setdefault(k, v)
    reason = check_row(kind, row)
    return (row, None) if reason is None else ({}, reason)
