"""Encoding a batch of rows into the documented JSON envelope (docs/messages.md).

Dependency-free on purpose: agents, the simulator and any external generator produce the same bytes.
Decoding and validation live in the pipeline (`pipeline.validate`), which must distrust its input.
"""

from __future__ import annotations

import json
import math
from typing import Any, Mapping, Sequence

from collectors.schema import KINDS, SCHEMA_VERSION


def _plain(values: Any) -> list:
    """A column as a JSON-ready list: numpy arrays via tolist(), NaN (the simulator's 'absent') as null."""
    if hasattr(values, "dtype"):  # numpy: check for NaN in C before touching elements in Python
        has_nan = values.dtype.kind == "f" and bool((values != values).any())
        out = values.tolist()
        if not has_nan:
            return out
    else:
        out = list(values)
    for i, v in enumerate(out):
        if isinstance(v, float) and not math.isfinite(v):
            out[i] = None
    return out


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
    cols = {name: _plain(vals) for name, vals in columns.items()}
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
    return json.dumps(envelope, separators=(",", ":"), allow_nan=False).encode()
