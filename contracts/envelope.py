"""Encoding a batch of rows into the documented JSON envelope (docs/messages.md).

Agents and the simulator produce the same bytes; an external generator only has to follow the docs.
orjson writes numpy columns directly, without a Python object per value.
Decoding and validation live in the pipeline (`pipeline.validate`), which must distrust its input.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import orjson

from contracts.schema import KINDS, SCHEMA_VERSION


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
) -> bytes:
    """One envelope as compact UTF-8 JSON. Raises ValueError when columns differ in length or the
    kind or a field is unknown, so that a bug in a collector never leaves the node as bad data."""
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
    envelope = {
        "schema_version": SCHEMA_VERSION,
        "kind": kind,
        "cluster": cluster,
        "node": node,
        "seq": int(seq),
        "sent_ms": int(sent_ms),
        "agent": agent,
        "columns": cols,
    }
    return orjson.dumps(envelope, option=orjson.OPT_SERIALIZE_NUMPY)
