"""Arrow tables written in ClickHouse's Native format, for the server store's inserts
(pipeline/server_store.py).

Why not clickhouse-driver's own insert: the driver builds every Nullable column's null map value by value
in Python, and every LowCardinality dictionary through pandas, so a loader core inserted about 0.65 M of
the simulator's rows per CPU-second (docs/clickhouse-server.md). Native is the server's own columnar
format: a column is its values end to end, after a null map, offsets or a dictionary where its type has
them. Each of those is one or two Arrow/NumPy operations over the whole column here, with no Python per
value.

A column is written in the type the table stores (`system.columns`), so the server converts nothing and
the same Arrow column can go to a DateTime on one server and a DateTime64 on another. Nulls sent to a
column that is not Nullable store its default (0, '', the epoch), as ClickHouse's own formats do. A type
goodput's tables do not use is refused naming the column, never guessed.

The layout (ClickHouse's src/Formats/NativeWriter.cpp, without a block header as in `FORMAT Native`):
the column and row counts as varints, then per column its name, its type name and its data.
"""

from __future__ import annotations

import re

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

NUMBERS: dict[str, np.dtype] = {
    "UInt8": np.dtype("<u1"),
    "UInt16": np.dtype("<u2"),
    "UInt32": np.dtype("<u4"),
    "UInt64": np.dtype("<u8"),
    "Int8": np.dtype("<i1"),
    "Int16": np.dtype("<i2"),
    "Int32": np.dtype("<i4"),
    "Int64": np.dtype("<i8"),
    "Bool": np.dtype("<u1"),
    "Float32": np.dtype("<f4"),
    "Float64": np.dtype("<f8"),
}
LC_KEYS_VERSION = 1
"""LowCardinality's KeysSerializationVersion: SharedDictionariesWithAdditionalKeys, the only one."""
LC_ADDITIONAL_KEYS = (1 << 9) | (1 << 10)
"""HasAdditionalKeysBit | NeedUpdateDictionary: each block carries its own dictionary."""
_WRAPPED = re.compile(r"^(Nullable|LowCardinality|Array)\((.*)\)$")
_DATETIME64 = re.compile(r"^DateTime64\((\d+)(?:,\s*'[^']*')?\)$")
_DATETIME = re.compile(r"^DateTime(?:\('[^']*'\))?$")
_UNITS = {"s": 1, "ms": 1_000, "us": 1_000_000, "ns": 1_000_000_000}


class UnsupportedType(ValueError):
    """A column whose ClickHouse type this module does not write."""


def encode(table: pa.Table, types: dict[str, str]) -> bytes:
    """`table` as one Native block, each column in `types[name]` (its type in the target table)."""
    out = [_varint(table.num_columns), _varint(table.num_rows)]
    for name, col in zip(table.column_names, table.columns, strict=True):
        ch_type = types.get(name)
        if ch_type is None:
            raise UnsupportedType(f"column {name!r} is not in the target table")
        out += [_string(name), _string(ch_type)]
        try:
            _column(col.combine_chunks() if col.num_chunks != 1 else col.chunk(0), ch_type, out)
        except (UnsupportedType, pa.ArrowInvalid, pa.ArrowNotImplementedError) as e:
            raise UnsupportedType(f"column {name!r} ({col.type} -> {ch_type}): {e}") from None
    return b"".join(out)


def _column(arr: pa.Array, ch_type: str, out: list) -> None:
    """Appends the Native bytes of `arr` as `ch_type` to `out`."""
    if pa.types.is_dictionary(arr.type):
        arr = arr.cast(arr.type.value_type)
    if pa.types.is_null(arr.type):  # a column Arrow saw only nulls in: as nulls of the column's type
        arr = pa.nulls(len(arr), _arrow_type(ch_type))
    wrapped = _WRAPPED.match(ch_type)
    if wrapped:
        kind, inner = wrapped.groups()
        if kind == "Nullable":
            out.append(_null_map(arr))
            _column(arr, inner, out)
        elif kind == "LowCardinality":
            _low_cardinality(arr, inner, out)
        else:
            _array(arr, inner, out)
        return
    if arr.null_count:
        arr = _defaults(arr)
    if ch_type in NUMBERS:
        if pa.types.is_boolean(arr.type) or pa.types.is_timestamp(arr.type):
            arr = arr.cast(pa.int64() if pa.types.is_timestamp(arr.type) else pa.uint8())
        out.append(_numbers(arr, NUMBERS[ch_type]))
    elif ch_type == "String":
        out.append(_strings(arr))
    elif m := _DATETIME64.match(ch_type):
        out.append(_ticks(arr, 10 ** int(m[1])).astype("<i8").tobytes())
    elif _DATETIME.match(ch_type):
        out.append(_ticks(arr, 1).astype("<u4").tobytes())
    elif ch_type == "Date":
        days = arr.cast(pa.int32()) if pa.types.is_date32(arr.type) else pa.array(_ticks(arr, 1) // 86_400)
        out.append(_numbers(days, np.dtype("<u2")))
    else:
        raise UnsupportedType(f"ClickHouse type {ch_type} is not written by goodput's Native encoder")


def _arrow_type(ch_type: str) -> pa.DataType:
    """The Arrow type this module reads for `ch_type`."""
    wrapped = _WRAPPED.match(ch_type)
    if wrapped:
        inner = _arrow_type(wrapped[2])
        return pa.list_(inner) if wrapped[1] == "Array" else inner
    if ch_type in NUMBERS:
        return pa.from_numpy_dtype(NUMBERS[ch_type].newbyteorder("="))
    return pa.large_string() if ch_type == "String" else pa.int64()


def _numbers(arr: pa.Array, dtype: np.dtype) -> bytes:
    """A numeric column's values; a value out of the column type's range is refused (Arrow's safe cast)."""
    target = pa.from_numpy_dtype(dtype.newbyteorder("="))
    return arr.cast(target).to_numpy(zero_copy_only=False).astype(dtype, copy=False).tobytes()


def _ticks(arr: pa.Array, per_second: int) -> np.ndarray:
    """Times as integers of 1/per_second s since the epoch: from an Arrow timestamp (any unit, rounded
    down as ClickHouse does) or from integers already in seconds."""
    if not pa.types.is_timestamp(arr.type):
        return arr.cast(pa.int64()).to_numpy(zero_copy_only=False) * per_second
    values = arr.cast(pa.int64()).to_numpy(zero_copy_only=False)
    unit = _UNITS[arr.type.unit]
    return values * (per_second // unit) if per_second >= unit else values // (unit // per_second)


def _null_map(arr: pa.Array) -> bytes:
    if not arr.null_count:
        return bytes(len(arr))
    return arr.is_null().to_numpy(zero_copy_only=False).astype(np.uint8).tobytes()


def _defaults(arr: pa.Array) -> pa.Array:
    """`arr` with each null replaced by its type's zero (what the column stores for NULL)."""
    t = arr.type
    if pa.types.is_string(t) or pa.types.is_large_string(t) or pa.types.is_binary(t):
        return arr.fill_null("")
    if pa.types.is_boolean(t):
        return arr.fill_null(False)
    if pa.types.is_timestamp(t):
        return arr.cast(pa.int64()).fill_null(0).cast(t)
    return arr.fill_null(pa.scalar(0).cast(t))


def _strings(arr: pa.Array) -> bytes:
    """Each value as its length (a LEB128 varint) followed by its bytes, built for the whole column:
    the lengths' varint bytes are placed by arithmetic on the offsets, the values' bytes into the rest."""
    if not (pa.types.is_large_string(arr.type) or pa.types.is_large_binary(arr.type)):
        arr = arr.cast(pa.large_binary() if pa.types.is_binary(arr.type) else pa.large_string())
    offsets = np.frombuffer(arr.buffers()[1], np.int64)[arr.offset : arr.offset + len(arr) + 1]
    data = np.frombuffer(arr.buffers()[2], np.uint8)[offsets[0] : offsets[-1]]
    lengths = np.diff(offsets).astype(np.uint64)
    width = np.ones(len(lengths), np.int64)  # varint bytes per length (a value < 2^35 bytes)
    for k in range(1, 5):
        width += lengths >> np.uint64(7 * k) > 0
    ends = np.cumsum(width + lengths.astype(np.int64))  # where each value's bytes end in the output
    starts = ends - lengths.astype(np.int64) - width  # where its length starts
    out = np.empty(int(ends[-1]) if len(ends) else 0, np.uint8)
    is_data = np.ones(len(out), bool)
    for k in range(int(width.max(initial=0))):
        rows = np.nonzero(width > k)[0]
        chunk = (lengths[rows] >> np.uint64(7 * k)) & np.uint64(0x7F)
        more = (width[rows] > k + 1).astype(np.uint64) << np.uint64(7)
        out[starts[rows] + k] = (chunk | more).astype(np.uint8)
        is_data[starts[rows] + k] = False
    out[is_data] = data
    return out.tobytes()


def _low_cardinality(arr: pa.Array, inner: str, out: list) -> None:
    """A dictionary of the block's distinct values and a key per row (SerializationLowCardinality, with
    additional keys): for LowCardinality(Nullable(T)) key 0 is NULL and the dictionary's first entry a
    placeholder for it."""
    nullable = inner.startswith("Nullable(")
    value_type = inner[len("Nullable(") : -1] if nullable else inner
    encoded = pc.dictionary_encode(arr if nullable else _defaults(arr) if arr.null_count else arr)
    dictionary, keys = encoded.dictionary, encoded.indices
    if nullable:
        keys = pc.add(keys.cast(pa.int64()), 1).fill_null(0)
        dictionary = pa.concat_arrays([_defaults(pa.nulls(1, dictionary.type)), dictionary])
    size = len(dictionary)
    code = 0 if size <= 1 << 8 else 1 if size <= 1 << 16 else 2 if size <= 1 << 32 else 3
    key_type = ("UInt8", "UInt16", "UInt32", "UInt64")[code]
    out.append(np.array([LC_KEYS_VERSION, LC_ADDITIONAL_KEYS | code, size], "<u8").tobytes())
    _column(dictionary, value_type, out)
    out.append(np.array([len(arr)], "<u8").tobytes())
    out.append(_numbers(keys, NUMBERS[key_type]))


def _array(arr: pa.Array, inner: str, out: list) -> None:
    """Each row's end in the flattened values (UInt64), then the values; a null list is an empty one."""
    lengths = pc.list_value_length(arr).fill_null(0)
    out.append(np.cumsum(lengths.to_numpy(zero_copy_only=False), dtype="<u8").tobytes())
    _column(pc.list_flatten(arr), inner, out)


def _varint(n: int) -> bytes:
    b = bytearray()
    while True:
        byte, n = n & 0x7F, n >> 7
        b.append(byte | (0x80 if n else 0))
        if not n:
            return bytes(b)


def _string(s: str) -> bytes:
    raw = s.encode()
    return _varint(len(raw)) + raw
