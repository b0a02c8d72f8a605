"""Encoding a batch of rows into the documented envelope (docs/messages.md): JSON (version 1), or the
columnar binary one (version 2, contracts.columnar).

Agents and the simulator produce the same bytes; an external generator only has to follow the docs.
orjson writes numpy columns directly, without a Python object per value.
Decoding and validation live in the pipeline (`pipeline.validate`), which must distrust its input.
"""

from __future__ import annotations

import base64
import binascii
from typing import Any, Mapping, Sequence

import orjson

from contracts import columnar
from contracts.schema import KINDS, SCHEMA_VERSION

VERSIONS = (SCHEMA_VERSION, columnar.VERSION)
"""Message schema versions an agent can send: 1 (JSON) and 2 (columnar binary, same fields)."""


def _column(values: Any) -> Any:
    """A column orjson can write: numeric numpy arrays go as they are (non-finite floats become null,
    the simulator's 'absent'), object arrays and other sequences as lists."""
    if hasattr(values, "dtype"):
        if values.dtype.kind in "biuf":  # numpy, from whoever made the array: agents never load it
            return values if values.flags["C_CONTIGUOUS"] else values.copy(order="C")
        return values.tolist()
    return list(values)


def encode_batch(
    *,
    kind: str,
    cluster: str,
    node: str,
    seq: int,
    sent_ms: int,
    columns: Mapping[str, Sequence[Any]],
    agent: str,
    version: int = SCHEMA_VERSION,
) -> bytes:
    """One envelope: compact UTF-8 JSON (version 1) or the columnar binary envelope (version 2). Raises
    ValueError when columns differ in length, the kind or a field is unknown or (version 2) a value
    does not fit its field's type, so that a bug in a collector never leaves the node as bad data."""
    if version not in VERSIONS:
        raise ValueError(f"message schema version {version}; agents send one of {VERSIONS}")
    spec = KINDS.get(kind)
    if spec is None:
        raise ValueError(f"unknown signal kind {kind!r}; known: {', '.join(KINDS)}")
    known = {f.name for f in spec.fields}
    cols = {name: _column(vals) for name, vals in columns.items()}
    unknown = sorted(set(cols) - known)
    if unknown:
        raise ValueError(f"{kind} batch has fields not in schema v{SCHEMA_VERSION}: {', '.join(unknown)}")
    lengths = {len(v) for v in cols.values()}
    if len(lengths) > 1:
        raise ValueError(f"{kind} batch columns differ in length: {sorted(lengths)}")
    keys = {
        "kind": kind,
        "cluster": cluster,
        "node": node,
        "seq": int(seq),
        "sent_ms": int(sent_ms),
        "agent": agent,
    }
    if version == columnar.VERSION:
        return columnar.encode(
            keys,
            fields={f.name: f for f in spec.fields},
            columns={name: v.tolist() if hasattr(v, "tolist") else v for name, v in cols.items()},
            rows=lengths.pop() if lengths else 0,
        )
    envelope = {"schema_version": SCHEMA_VERSION, **keys, "columns": cols}
    return orjson.dumps(envelope, option=orjson.OPT_SERIALIZE_NUMPY)


def envelope_keys(value: bytes) -> dict | None:
    """The envelope's keys without its columns (kind, node, seq, ...), whichever version `value` is in;
    None when it is neither. Cheap for a columnar message: only its header is parsed."""
    try:
        if value.startswith(columnar.MAGIC):
            return columnar.header(value)
        doc = orjson.loads(value)
    except (ValueError, orjson.JSONDecodeError):
        return None
    return doc if isinstance(doc, dict) else None


LINE_PREFIX = columnar.MAGIC + b":"
"""A messages file (`goodput simulate --out`, `goodput ingest --from`, `dead-letters --export`) holds one
message per line: a JSON envelope as it is, a columnar one as this prefix and the message in base64."""


def message_line(value: bytes) -> bytes:
    """One message as one line, without the line break. In JSON a line break can only be whitespace
    between tokens, so it is written as a space and the message means the same."""
    if value.startswith(columnar.MAGIC):
        return LINE_PREFIX + base64.b64encode(value)
    return value.replace(b"\r", b" ").replace(b"\n", b" ")


def line_message(line: bytes) -> bytes:
    """The message a line of a messages file holds. A columnar line whose base64 is broken is returned
    as it is: it still starts with the magic, so the loader dead-letters it as `bad_buffers`."""
    if line.startswith(LINE_PREFIX):
        try:
            return base64.b64decode(line[len(LINE_PREFIX) :], validate=True)
        except binascii.Error:
            return line
    return line
