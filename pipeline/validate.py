"""Decoding and validating envelopes (docs/messages.md) into Arrow tables ready to insert.

The loader must distrust its input: a bad message becomes a `Rejected` with a machine-readable reason
and a sentence naming the field, never an exception that stops the service.

Speed comes from converting columns, not rows: every message of one kind in a poll is checked
structurally on its own (cheap), then each field's values across all those messages are converted to
Arrow in one call and range-checked in C. Only when that bulk conversion fails do we fall back to
converting message by message, to dead-letter the culprit and keep the rest.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from contracts import columnar
from contracts.schema import KINDS, SCHEMA_VERSION, Field, Kind
from pipeline.ddl import arrow_type, column_name

MAX_MESSAGE_BYTES = 16 * 2**20
_ENVELOPE_TYPES = {
    "schema_version": int,
    "kind": str,
    "cluster": str,
    "node": str,
    "seq": int,
    "sent_ms": int,
    "columns": dict,
}


@dataclass(frozen=True, slots=True)
class Rejected:
    reason: str
    detail: str


@dataclass(slots=True)
class Envelope:
    kind: str
    cluster: str
    node: str
    seq: int
    sent_ms: int
    agent: str
    columns: dict[str, Any]
    rows: int
    version: int = SCHEMA_VERSION
    """1: `columns` holds JSON's lists; 2: Arrow arrays of the fields' wire types (contracts.columnar)."""
    position: Any = None
    """Where it came from (a transport Record or a file line); carried through for dead letters."""


@dataclass(frozen=True, slots=True)
class Limits:
    """What the validator accepts beyond the schema itself (from [loader] and [cluster] config)."""

    cluster: str | None = None
    known_nodes: frozenset[str] | None = None
    max_rows: int = 200_000
    max_past_ms: int = 30 * 86_400_000
    max_future_ms: int = 300_000
    max_str_len: int = 1024
    """Longest string value (characters): names and ids, never payloads; a longer one is an agent bug."""
    inventory: Mapping[str, int] | None = None
    """GPUs per node of every node in a pool (`[[pools]] gpus_per_node`): what an allocation may name.
    None when the config has no pools; then only the schema's bound on a GPU index applies."""


class _Repeated(Exception):
    def __init__(self, key: str) -> None:
        self.key = key


def _refuse_repeats(pairs: list[tuple[str, Any]]) -> None:
    seen = set()
    for key, _ in pairs:
        if key in seen:
            raise _Repeated(key)
        seen.add(key)


def _repeated_key(value: bytes, doc: dict) -> str | None:
    """A key written twice in one object, which orjson (like most parsers) resolves silently to the last
    value: a batch could then mean two things. Fast path, without a second parse: every key in the
    message is followed by a colon, and every other colon is inside a string; so if the message holds
    exactly as many colons as the parsed keys (envelope and columns, the only objects of a valid
    message) plus the colons inside the parsed strings, and holds no backslash (no escape that
    parses to a colon the bytes do not hold), no key was written twice. A discarded
    duplicate, a nested object, or strings this count skips (mixed or nested columns, which are
    refused later anyway) all leave colons unaccounted for, and then the stdlib parser (several times
    slower than orjson) looks at every object's keys, for such messages only."""
    columns = doc.get("columns")
    if not isinstance(columns, dict):
        columns = {}
    expected = len(doc) + len(columns) + _colons(doc) + _colons(columns)
    if value.count(b":") == expected and b"\\" not in value:  # an escape could spell a colon (\u003a)
        return None
    try:
        json.loads(value, object_pairs_hook=_refuse_repeats)
    except _Repeated as e:
        return e.key
    except (ValueError, RecursionError):  # orjson read it; a stricter reader's objection is no repeat
        return None
    return None


def _colons(obj: dict) -> int:
    """Colons in the keys of `obj` and in its string values, and in the strings of its arrays of
    strings; numeric arrays (told by their first element) are skipped, so this may count too few,
    never too many."""
    n = sum(k.count(":") for k in obj)
    for v in obj.values():
        if isinstance(v, str):
            n += v.count(":")
        elif isinstance(v, list) and v and not isinstance(v[0], (int, float, list)):
            try:
                n += "".join(v).count(":")  # all strings: one C call
            except TypeError:  # absent values (None) among them
                n += sum(x.count(":") for x in v if isinstance(x, str))
    return n


_NON_FINITE = re.compile(rb"[:,\[]\s*-?(NaN|Infinity)\b")


def decode(value: bytes, limits: Limits, expected_kind: str | None = None) -> Envelope | Rejected:
    """Parses and checks one message's structure (not yet its values' types and ranges): a JSON
    envelope (version 1) or, told by its magic, a columnar one (version 2)."""
    if len(value) > MAX_MESSAGE_BYTES:
        return Rejected("oversize_message", f"{len(value)} bytes > limit {MAX_MESSAGE_BYTES}")
    if value[: len(columnar.MAGIC)] == columnar.MAGIC:
        return _decode_columnar(value, limits, expected_kind)
    try:
        doc = orjson.loads(value)
    except orjson.JSONDecodeError as e:
        if _NON_FINITE.search(value) or "infinity" in str(e):
            return Rejected(
                "non_finite",
                "NaN, Infinity or a number beyond the double range is not valid JSON: "
                "send null for a value not measured",
            )
        return Rejected("not_json", f"not a JSON envelope: {e}")
    checked = _check_envelope(value, doc, _ENVELOPE_TYPES, SCHEMA_VERSION, limits, expected_kind)
    if isinstance(checked, Rejected):
        return checked
    kind = checked
    columns = doc["columns"]
    unknown = sorted(set(columns) - {f.name for f in kind.fields})
    if unknown:
        return Rejected(
            "unknown_field", f"{kind.name} has no field(s) {', '.join(unknown)} in schema v{SCHEMA_VERSION}"
        )
    lengths = set()
    for name, vals in columns.items():
        if not isinstance(vals, list):
            return Rejected("bad_envelope", f"column {name!r} is {type(vals).__name__}, expected an array")
        lengths.add(len(vals))
    if len(lengths) > 1:
        return Rejected("ragged_columns", f"columns have different lengths {sorted(lengths)}")
    rows = lengths.pop() if lengths else 0
    if (problem := _check_rows(rows, limits)) is not None:
        return problem
    for name in kind.required:
        vals = columns.get(name)
        if vals is None:
            return Rejected("missing_field", f"required field {name!r} is absent")
        if None in vals:
            return Rejected("missing_field", f"required field {name!r} is null in row {vals.index(None)}")
    return _envelope(doc, kind, columns, rows, SCHEMA_VERSION)


def _envelope(doc: dict, kind: Kind, columns: dict, rows: int, version: int) -> Envelope:
    return Envelope(
        kind.name,
        doc["cluster"],
        doc["node"],
        doc["seq"],
        doc["sent_ms"],
        doc.get("agent", ""),
        columns,
        rows,
        version,
    )


def _check_rows(rows: int, limits: Limits) -> Rejected | None:
    if rows <= 0:
        return Rejected("empty_batch", "the batch has no rows")
    if rows > limits.max_rows:
        return Rejected("oversize_batch", f"{rows} rows > limit {limits.max_rows}")
    return None


def _check_envelope(
    value: bytes,
    doc: Any,
    types: Mapping[str, type],
    version: int,
    limits: Limits,
    expected_kind: str | None,
) -> Kind | Rejected:
    """The checks both versions' envelopes share: keys and their types, the version, the kind, the
    sender and the sequence; `value` is the JSON text `doc` was parsed from (for repeated keys)."""
    if not isinstance(doc, dict):
        return Rejected("bad_envelope", f"top level is {type(doc).__name__}, expected an object")
    if (repeated := _repeated_key(value, doc)) is not None:
        return Rejected(
            "repeated_key", f"key {repeated!r} appears twice in one object: which value is meant is unclear"
        )
    extra = sorted(set(doc) - set(types) - {"agent"})
    if extra:
        return Rejected(
            "unknown_field", f"the envelope has no key(s) {', '.join(extra)} in schema v{version}"
        )
    if not isinstance(doc.get("agent", ""), str):
        return Rejected(
            "bad_envelope", f"envelope field 'agent' is {type(doc['agent']).__name__}, expected str"
        )
    for name, typ in types.items():
        if name not in doc:
            return Rejected("bad_envelope", f"envelope field {name!r} is missing")
        v = doc[name]
        if not isinstance(v, typ) or (typ is int and isinstance(v, bool)):
            return Rejected(
                "bad_envelope", f"envelope field {name!r} is {type(v).__name__}, expected {typ.__name__}"
            )
    if doc["schema_version"] != version:
        encoding = "a columnar (binary)" if version == columnar.VERSION else "a JSON"
        return Rejected(
            "unknown_version",
            f"schema_version {doc['schema_version']} in {encoding} envelope; this loader reads JSON "
            f"envelopes of version {SCHEMA_VERSION} and columnar ones of version {columnar.VERSION}",
        )
    kind = KINDS.get(doc["kind"])
    if kind is None:
        return Rejected("unknown_kind", f"kind {doc['kind']!r} is not one of {', '.join(KINDS)}")
    if expected_kind and kind.name != expected_kind:
        return Rejected("kind_mismatch", f"a {kind.name} batch arrived on the {expected_kind} topic")
    for name in ("cluster", "node"):
        if not doc[name] or len(doc[name]) > limits.max_str_len:
            return Rejected(
                "bad_envelope",
                f"envelope field {name!r} is empty or longer than {limits.max_str_len} characters",
            )
    if limits.cluster and doc["cluster"] != limits.cluster:
        return Rejected(
            "unknown_cluster", f"cluster {doc['cluster']!r}; this loader serves {limits.cluster!r}"
        )
    if limits.known_nodes is not None and doc["node"] not in limits.known_nodes:
        return Rejected(
            "unknown_node", f"node {doc['node']!r} is in no pool and not a control node of the config"
        )
    if not 0 <= doc["seq"] < 2**63:
        return Rejected("bad_envelope", f"seq {doc['seq']} is not in [0, 2^63)")
    if not 0 <= doc["sent_ms"] < 2**63:
        return Rejected("bad_envelope", f"sent_ms {doc['sent_ms']} is not an epoch millisecond time")
    return kind


_COLUMNAR_TYPES = {**_ENVELOPE_TYPES, "rows": int, "columns": list}
"""The columnar header: the JSON envelope's keys, `columns` listing the buffers' fields, and `rows`."""
_WIRE_ARROW = {
    "int64": pa.int64(),
    "float32": pa.float32(),
    "float64": pa.float64(),
    "bool": pa.bool_(),
    "utf8_dictionary": pa.dictionary(pa.int32(), pa.string()),
    "int32_list": pa.list_(pa.int32()),
}


_WIRE_TYPES = {k.name: {f.name: columnar.wire_type(f) for f in k.fields} for k in KINDS.values()}
"""Each kind's fields' wire types, looked up per column of every columnar message."""


class _BadBuffers(Exception):
    pass


def _decode_columnar(value: bytes, limits: Limits, expected_kind: str | None) -> Envelope | Rejected:
    """A version 2 envelope (contracts.columnar): its header checked as a JSON envelope's, then each
    column's buffers wrapped as an Arrow array, without a copy or a Python object per value."""
    try:
        end = columnar.header_end(value)
    except ValueError as e:
        return Rejected("bad_buffers", str(e))
    header = value[columnar.HEADER.size : end]
    try:
        doc = orjson.loads(header)
    except orjson.JSONDecodeError as e:
        return Rejected("bad_envelope", f"the columnar envelope's header is not JSON: {e}")
    checked = _check_envelope(header, doc, _COLUMNAR_TYPES, columnar.VERSION, limits, expected_kind)
    if isinstance(checked, Rejected):
        return checked
    kind = checked
    rows = doc["rows"]
    if (problem := _check_rows(rows, limits)) is not None:
        return problem
    spec = doc["columns"]
    if not all(
        isinstance(c, list) and len(c) in (2, 3) and isinstance(c[0], str) and c[1] in (0, 1) for c in spec
    ):
        return Rejected(
            "bad_envelope", "header 'columns' must list [field name, 0 or 1(, distinct strings)] entries"
        )
    names = [c[0] for c in spec]
    if len(set(names)) < len(names):
        repeated = next(n for n in names if names.count(n) > 1)
        return Rejected("repeated_key", f"column {repeated!r} appears twice in the header")
    unknown = sorted(set(names) - {f.name for f in kind.fields})
    if unknown:
        return Rejected(
            "unknown_field", f"{kind.name} has no field(s) {', '.join(unknown)} in schema v{columnar.VERSION}"
        )
    for c in spec:
        strings = _WIRE_TYPES[kind.name][c[0]] == "utf8_dictionary"
        if strings != (len(c) == 3) or (strings and (type(c[2]) is not int or c[2] < 0)):
            want = "[name, 0 or 1, distinct strings >= 0]" if strings else "[name, 0 or 1]"
            return Rejected("bad_envelope", f"header entry {c!r}: a {c[0]} column's entry is {want}")
    try:
        columns = _columns(value, columnar.padded(end), spec, kind, rows)
    except _BadBuffers as e:
        return Rejected("bad_buffers", str(e))
    for name in kind.required:
        arr = columns.get(name)
        if arr is None:
            return Rejected("missing_field", f"required field {name!r} is absent")
        if arr.null_count:
            first = pc.index(pc.is_null(arr), True).as_py()
            return Rejected("missing_field", f"required field {name!r} is null in row {first}")
    return _envelope(doc, kind, columns, rows, columnar.VERSION)


def _columns(value: bytes, pos: int, spec: list, kind: Kind, rows: int) -> dict[str, pa.Array]:
    """Each column's buffers as Arrow arrays over `value`'s memory; raises _BadBuffers naming the
    column whose buffers run past the message's end, leave bytes after it, or hold invalid offsets
    or UTF-8."""
    whole = pa.py_buffer(value)
    bits = (rows + 7) // 8

    def take(name: str, size: int) -> pa.Buffer:
        nonlocal pos
        if size < 0 or pos + size > len(value):
            raise _BadBuffers(f"column {name!r}: its buffers run past the message's end ({len(value)} bytes)")
        buf = whole.slice(pos, size)
        pos += columnar.padded(size)
        return buf

    def variable(name: str, typ: pa.DataType, n: int, validity: pa.Buffer | None) -> pa.Array:
        """n items of Arrow's variable-size layout (offsets, then data), checked in full."""
        first_at, last_at = pos, pos + 4 * n
        offsets = take(name, 4 * (n + 1))
        if value[first_at : first_at + 4] != b"\0\0\0\0":
            raise _BadBuffers(f"column {name!r}: its offsets do not start at 0")
        last = int.from_bytes(value[last_at : last_at + 4], "little", signed=True)
        if pa.types.is_string(typ):
            arr = pa.Array.from_buffers(typ, n, [validity, offsets, take(name, last)])
        else:
            values = pa.Array.from_buffers(pa.int32(), last, [None, take(name, 4 * last)])
            arr = pa.Array.from_buffers(typ, n, [validity, offsets], children=[values])
        try:
            arr.validate(full=True)
        except pa.ArrowInvalid as e:
            raise _BadBuffers(f"column {name!r}: {e}") from None
        return arr

    out: dict[str, pa.Array] = {}
    for name, nullable, *distinct in spec:
        wire = _WIRE_TYPES[kind.name][name]
        typ = _WIRE_ARROW[wire]
        validity = take(name, bits) if nullable else None
        if wire in columnar.WIDTH:
            arr = pa.Array.from_buffers(typ, rows, [validity, take(name, rows * columnar.WIDTH[wire])])
        elif wire == "bool":
            arr = pa.Array.from_buffers(typ, rows, [validity, take(name, bits)])
        elif wire == "int32_list":
            arr = variable(name, typ, rows, validity)
        else:
            indices = pa.Array.from_buffers(pa.int32(), rows, [validity, take(name, 4 * rows)])
            strings = variable(name, pa.string(), distinct[0], None)
            try:  # kept a dictionary until a poll's batches are joined: one cast to strings, not one each
                arr = pa.DictionaryArray.from_arrays(indices, strings)
            except (IndexError, pa.ArrowInvalid) as e:
                raise _BadBuffers(
                    f"column {name!r}: an index beyond its {distinct[0]} strings ({e})"
                ) from None
        out[name] = arr
    if pos < len(value):  # the last buffer's padding may be left out
        raise _BadBuffers(f"{len(value) - pos} bytes after the last column's buffers")
    return out


def _inferred_ok(field_type: str, t: pa.DataType) -> bool:
    """Whether JSON values of a field may infer to Arrow type `t`. JSON has one number type, so an int
    field takes 3 and 3.0 (the safe cast then refuses 3.5) and a float field takes 3; but true/false is
    never a number and a number never a string. Checking the inferred type, rather than converting to
    the target type directly, is what catches those: Arrow would turn true into 1.0 and 3.5 into 3."""
    if pa.types.is_null(t):
        return True
    if field_type in ("int", "float"):
        return pa.types.is_integer(t) or pa.types.is_floating(t)
    if field_type == "bool":
        return pa.types.is_boolean(t)
    if field_type == "str":  # a dictionary of strings only from a columnar envelope: JSON never infers one
        return pa.types.is_string(t) or (pa.types.is_dictionary(t) and pa.types.is_string(t.value_type))
    return pa.types.is_list(t) and _inferred_ok("int", t.value_type)  # int_list


def _field_array(f: Field, values: list | pa.Array, typ: pa.DataType) -> pa.Array:
    """One field's values across envelopes as a strictly typed Arrow array; raises ValueError(bad_type).
    `values` are JSON's (version 1), or already Arrow of the field's wire type (version 2)."""
    if isinstance(values, pa.Array) and f.type == "float" and values.null_count < len(values):
        if not pc.all(pc.is_finite(values)).as_py():  # JSON cannot say NaN: version 1 never gets here
            raise ValueError(f"non_finite: {f.name} has NaN or an infinity: leave the value out (a 0 bit)")
    try:
        arr = values if isinstance(values, pa.Array) else pa.array(values)
        if not _inferred_ok(f.type, arr.type):
            raise ValueError(f"bad_type: field {f.name!r} ({f.type}) holds {arr.type} values")
        arr = arr.cast(typ)
    except (pa.ArrowInvalid, pa.ArrowTypeError, pa.ArrowNotImplementedError, TypeError, OverflowError) as ex:
        raise ValueError(f"bad_type: field {f.name!r} ({f.type}): {ex}") from None
    if (
        f.type == "int_list"
    ):  # stored as Array(Int32): a null list is an absent one, a null element is an error
        if pc.list_flatten(arr).null_count:
            raise ValueError(f"bad_type: field {f.name!r} (int_list) has a null element")
        if arr.null_count:
            arr = pc.if_else(pc.is_null(arr), pa.scalar([], typ), arr)
    return arr


def _check_array(f: Field, arr: pa.Array, now_ms: int, limits: Limits) -> str | None:
    """Range/enum/size problems of one converted column, as a sentence, or None."""
    if f.name == "ts_ms":
        lo, hi = now_ms - limits.max_past_ms, now_ms + limits.max_future_ms
        mm = pc.min_max(arr).as_py()
        if mm["min"] is not None and (mm["min"] < lo or mm["max"] > hi):
            return (
                f"ts_ms range [{mm['min']}, {mm['max']}] is outside "
                f"[now-{limits.max_past_ms // 1000}s, now+{limits.max_future_ms // 1000}s]"
            )
        return None
    if f.type == "str":
        longest = pc.max(pc.utf8_length(arr)).as_py()
        if longest is not None and longest > limits.max_str_len:
            return f"{f.name} has a value of {longest} characters, longer than the limit {limits.max_str_len}"
    if f.type == "float" and arr.null_count < len(arr) and not pc.all(pc.is_finite(arr)).as_py():
        return f"{f.name} has a value beyond the range of its column type {arr.type}"
    if f.enum is not None:
        bad = pc.filter(arr, pc.invert(pc.fill_null(pc.is_in(arr, pa.array(f.enum)), True)))
        if len(bad):
            return f"{f.name} value {bad[0].as_py()!r} is not one of {', '.join(f.enum)}"
    if f.min is None and f.max is None or f.type in ("str", "int_list", "bool"):
        return None
    mm = pc.min_max(arr).as_py()
    if mm["min"] is None:
        return None
    if f.min is not None and mm["min"] < f.min:
        return f"{f.name} has {mm['min']} below its minimum {f.min}"
    if f.max is not None and mm["max"] > f.max:
        return f"{f.name} has {mm['max']} above its maximum {f.max}"
    return None


_PLACEMENT_EVENTS = ("allocated", "released")
_SCHEMA_GPUS = 1 + int(KINDS["gpu"].field("gpu").max or 0)
"""The most GPUs a node can have by the schema (a GPU sample's index range): the inventory without pools."""


def _check_placements(arrays: dict[str, pa.Array], limits: Limits) -> str | None:
    """An allocation is charged per GPU it names, so its GPUs must be the node's own: no index twice,
    none negative, none beyond the node's inventory, and the node in a pool (else its GPUs would be
    counted with no pool and no price). Returns "reason: detail" for the first row that is not."""
    placed = pc.is_in(arrays["event"], pa.array(_PLACEMENT_EVENTS))
    if not pc.any(placed).as_py():
        return None
    rows = zip(
        pc.filter(arrays["job_id"], placed).to_pylist(),
        pc.filter(arrays["event"], placed).to_pylist(),
        pc.filter(arrays["node"], placed).to_pylist(),
        pc.filter(arrays["gpu_indices"], placed).to_pylist(),
        strict=True,
    )
    for job, event, node, gpus in rows:
        what = f"{event} of job {job!r} on node {node!r}"
        if limits.inventory is not None and node not in limits.inventory:
            return (
                f"unknown_node: {what}: the node is in no pool, so its GPUs would have no pool and no "
                f"price; add it to a [[pools]] nodes list, then replay the dead letter"
            )
        if len(set(gpus)) < len(gpus):
            return f"bad_gpu_indices: {what} names a GPU more than once: {gpus}"
        if gpus and min(gpus) < 0:
            return f"bad_gpu_indices: {what} names a negative GPU index: {gpus}"
        count = limits.inventory[node] if limits.inventory is not None else _SCHEMA_GPUS
        if gpus and max(gpus) >= count:
            where = "the node has" if limits.inventory is not None else "a node has at most"
            return f"bad_gpu_indices: {what} names GPU {max(gpus)}; {where} {count} GPUs (0-{count - 1})"
    return None


def _per_row(values: list, typ: pa.DataType, rows: np.ndarray) -> pa.Array:
    """One value per envelope repeated over that envelope's rows, without a Python object per row."""
    return pa.array(values, typ).take(np.repeat(np.arange(len(values)), rows))


def _gathered(f: Field, envs: list[Envelope]) -> list | pa.Array:
    """One field's values across envelopes of one version, absent where an envelope lacks the field."""
    if envs[0].version == columnar.VERSION:
        wire = _WIRE_ARROW[columnar.wire_type(f)]
        arrays = [e.columns.get(f.name) for e in envs]
        return pa.concat_arrays(
            [a if a is not None else pa.nulls(e.rows, wire) for a, e in zip(arrays, envs, strict=True)]
        )
    values: list = []
    for e in envs:
        col = e.columns.get(f.name)
        values.extend(col if col is not None else [[] if f.type == "int_list" else None] * e.rows)
    return values


def _convert(kind: Kind, envs: list[Envelope], now_ms: int, limits: Limits) -> pa.Table:
    """All envelopes of one kind and version → one Arrow table in raw-table column order; raises
    ValueError."""
    rows = np.fromiter((e.rows for e in envs), np.int64, len(envs))
    sent = np.fromiter((e.sent_ms for e in envs), np.int64, len(envs))
    lo, hi = now_ms - limits.max_past_ms, now_ms + limits.max_future_ms
    if sent.min() < lo or sent.max() > hi:
        raise ValueError(
            f"out_of_range: sent_ms range [{sent.min()}, {sent.max()}] is outside "
            f"[now-{limits.max_past_ms // 1000}s, now+{limits.max_future_ms // 1000}s]"
        )
    arrays: dict[str, pa.Array] = {
        "cluster": _per_row([e.cluster for e in envs], pa.string(), rows),
        kind.sender_column: _per_row([e.node for e in envs], pa.string(), rows),
    }
    for f in kind.fields:
        typ = arrow_type(f)
        arr = _field_array(f, _gathered(f, envs), pa.int64() if f.name == "ts_ms" else typ)
        problem = _check_array(f, arr, now_ms, limits)
        if problem:
            raise ValueError(f"out_of_range: {problem}")
        arrays[column_name(f)] = arr.cast(typ) if f.name == "ts_ms" else arr
    if kind.name == "job" and (problem := _check_placements(arrays, limits)):
        raise ValueError(problem)
    arrays["seq"] = _per_row([e.seq for e in envs], pa.uint64(), rows)
    arrays["batch_row"] = pa.array(np.concatenate([np.arange(n, dtype=np.uint32) for n in rows]))
    return pa.table(arrays)


def to_tables(
    envs: Iterable[Envelope], now_ms: int, limits: Limits
) -> tuple[dict[str, pa.Table], list[tuple[Envelope, Rejected]]]:
    """Converts decoded envelopes to one table per kind; returns (tables, rejected envelopes)."""
    groups: dict[tuple[str, int], list[Envelope]] = {}
    for e in envs:
        groups.setdefault((e.kind, e.version), []).append(e)
    converted: dict[str, list[pa.Table]] = {}
    rejected: list[tuple[Envelope, Rejected]] = []
    for (name, _version), group in groups.items():
        kind = KINDS[name]
        try:
            converted.setdefault(name, []).append(_convert(kind, group, now_ms, limits))
            continue
        except ValueError:
            pass  # somewhere in the group: find it message by message
        for e in group:
            try:
                converted[name].append(_convert(kind, [e], now_ms, limits))
            except ValueError as ex:
                reason, _, detail = str(ex).partition(": ")
                rejected.append((e, Rejected(reason, detail)))
    tables = {name: pa.concat_tables(ts) for name, ts in converted.items() if ts}
    return tables, rejected
