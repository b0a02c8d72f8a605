"""The columnar binary envelope, message schema version 2 (docs/messages.md, "Version 2").

Why a second encoding: the loader's decode/validate of JSON costs a Python object per value (about
0.6 M rows per CPU-second, docs/loader.md), which bounds a loader core well below the engine's insert.
Version 2 carries the same fields in the same envelope, but each column as the little-endian buffers
Arrow itself holds (a validity bitmap, then values or offsets and bytes), so the loader wraps them as
Arrow arrays without touching a value. The agent writes them with the standard library's `array`
module: the node's install stays free of numpy and pyarrow.

The layout is `LAYOUT` below (docs/messages.md prints it).
"""

from __future__ import annotations

import math
import struct
from array import array
from typing import Any, Literal, Mapping, Sequence

import orjson

from contracts.schema import Field

VERSION = 2
MAGIC = b"GPC2"
LAYOUT = """\
All integers are little-endian; each part below starts at a multiple of 8 bytes from the message's
start (zero bytes pad the part before it):

    "GPC2"                 4 bytes, the magic (no JSON envelope starts with "G")
    header length H        uint32
    header                 H bytes of UTF-8 JSON: the version 1 envelope's keys except `columns`, with
                           `schema_version` 2, plus `rows` (N, the batch's rows) and `columns`: a list
                           of [field name, 1 if a validity bitmap comes first else 0], in buffer order;
                           a utf8_dictionary column's entry adds D, its count of distinct strings
    per listed column:     [validity bitmap: ceil(N/8) bytes, bit i (LSB first) set when row i has a
                           value] then its values, by the field's wire type:
                             int64, float32, float64   N values
                             bool                      a bitmap of N bits
                             utf8_dictionary           N int32 indices into the column's D strings,
                                                       then D+1 int32 offsets from 0, then their bytes
                             int32_list                N+1 int32 offsets from 0, then offsets[N] int32

The buffers are Arrow's own, so a reader wraps them without a copy. A string column is an Arrow
dictionary: a GPU's uuid, its model, a port's state repeat row after row, and per-row offsets that grow
by a constant stride compress badly. The message ends with the last buffer (its padding may be left
out). A field a node cannot measure is left out of `columns` or has its validity bit 0 (the value
there is ignored); NaN and infinities are refused (`non_finite`). The wire type comes from the schema,
not the message: one per field, nothing to negotiate or mistake.
"""
HEADER = struct.Struct("<4sI")
ALIGN = 8

WireType = Literal["int64", "float32", "float64", "bool", "utf8_dictionary", "int32_list"]
_FIXED_CODES = {"int64": "q", "float32": "f", "float64": "d"}
WIDTH = {"int64": 8, "float32": 4, "float64": 8}
"""Bytes per value of the fixed-width wire types."""


def header_end(value: bytes) -> int:
    """Where a columnar message's header ends (it starts at HEADER.size); raises ValueError when the
    preamble is cut short or the header's length runs past the message."""
    if len(value) < HEADER.size:
        raise ValueError(f"{len(value)} bytes: shorter than the {HEADER.size}-byte preamble")
    _, n = HEADER.unpack_from(value)
    if HEADER.size + n > len(value):
        raise ValueError(f"the header's length {n} runs past the message's end")
    return HEADER.size + n


def header(value: bytes) -> dict:
    """A columnar message's header; raises ValueError when the preamble or the JSON is broken."""
    doc = orjson.loads(value[HEADER.size : header_end(value)])
    if not isinstance(doc, dict):
        raise ValueError(f"the header is a JSON {type(doc).__name__}, not an object")
    return doc


def wire_type(f: Field) -> WireType:
    """The one way a field travels in version 2: its stored column's width (a float stored as Float32
    travels as float32, losing nothing the store keeps)."""
    if f.type == "int":
        return "int64"
    if f.type == "float":
        return "float64" if f.ch_type == "Float64" else "float32"
    if f.type == "bool":
        return "bool"
    if f.type == "str":
        return "utf8_dictionary"
    return "int32_list"


def padded(n: int) -> int:
    return (n + ALIGN - 1) // ALIGN * ALIGN


def _pad(buf: bytes) -> bytes:
    return buf + b"\0" * (padded(len(buf)) - len(buf))


def _bitmap(bits: Sequence[bool]) -> bytes:
    """Arrow's bit order: row i is bit i % 8 of byte i // 8."""
    n = len(bits)
    if not n:
        return b""
    as_int = int("".join("1" if b else "0" for b in reversed(bits)), 2)
    return as_int.to_bytes((n + 7) // 8, "little")


def _absent(v: Any) -> bool:
    """None is absent; so is NaN (the simulator's numpy 'absent', which version 1 writes as null)."""
    return v is None or (isinstance(v, float) and math.isnan(v))


def _values(f: Field, wire: WireType, vals: list) -> tuple[bytes, list[int]]:
    """The value buffers of one column, absent slots written as zeros, and what its header entry adds
    (a string column's count of distinct strings); raises ValueError on a value the field's type cannot
    hold, so a collector's bug never leaves the node as bad data."""
    try:
        if wire in _FIXED_CODES:
            if any(isinstance(v, bool) for v in vals):
                raise TypeError(f"an {f.type} field holds a bool")
            if f.type == "int":  # 3.0 is 3, as in version 1; 3.5 is refused below (array("q") takes no float)
                vals = [int(v) if isinstance(v, float) and v.is_integer() else v for v in vals]
            buf = array(_FIXED_CODES[wire], vals)
            if f.type == "float" and not all(math.isfinite(v) for v in buf):
                raise OverflowError("beyond the range of its wire type")
            return _pad(buf.tobytes()), []
        if wire == "bool":
            if not all(isinstance(v, bool) for v in vals):
                raise TypeError("a bool field holds a non-bool")
            return _pad(_bitmap(vals)), []
        if wire == "utf8_dictionary":
            index: dict[str, int] = {}
            indices = array("i", [index.setdefault(v, len(index)) for v in vals])
            strings = [v.encode() for v in index]  # AttributeError for a value that is not a str
            return _pad(indices.tobytes()) + _offsets_and_data(strings, 1), [len(strings)]
        return _offsets_and_data([array("i", v).tobytes() for v in vals], 4), []
    except (TypeError, OverflowError, AttributeError) as e:
        raise ValueError(f"field {f.name!r} ({f.type}) cannot be encoded: {e}") from None


def _offsets_and_data(items: list[bytes], width: int) -> bytes:
    """Arrow's variable-size layout: N+1 int32 offsets from 0 (in items of `width` bytes), the data."""
    offsets = array("i", [0])
    total = 0
    for item in items:
        total += len(item) // width
        offsets.append(total)
    return _pad(offsets.tobytes()) + _pad(b"".join(items))


def _zero(f: Field) -> Any:
    return {"int": 0, "float": 0.0, "bool": False, "str": "", "int_list": ()}[f.type]


def encode(
    envelope: Mapping[str, Any], fields: Mapping[str, Field], columns: Mapping[str, list], rows: int
) -> bytes:
    """One version 2 envelope. `envelope` holds the keys both versions share (kind, cluster, node, seq,
    sent_ms, agent); `columns` are lists of one length `rows` (contracts.envelope checks the names and
    lengths), `fields` the schema's field of each."""
    spec: list[list] = []
    body: list[bytes] = []
    for name, vals in columns.items():
        f = fields[name]
        present = [not _absent(v) for v in vals]
        nullable = not all(present)
        if nullable:
            zero = _zero(f)
            vals = [v if p else zero for v, p in zip(vals, present, strict=True)]
            body.append(_pad(_bitmap(present)))
        values, extra = _values(f, wire_type(f), vals)
        body.append(values)
        spec.append([name, int(nullable), *extra])
    header = orjson.dumps({"schema_version": VERSION, **envelope, "rows": rows, "columns": spec})
    head = HEADER.pack(MAGIC, len(header)) + header
    return _pad(head) + b"".join(body)
