"""Reading a message back in a test, whichever version it was sent in."""

from __future__ import annotations

import orjson

from contracts import columnar


def envelope_dict(value: bytes) -> dict:
    """A record's envelope as the JSON envelope's dict, whichever version the agent sent (a columnar one
    through the loader's own decoder); `_raw` keeps the record's bytes."""
    if not value.startswith(columnar.MAGIC):
        return {**orjson.loads(value), "_raw": value}
    from pipeline.validate import Envelope, Limits, decode

    env = decode(value, Limits(max_past_ms=2**62, max_future_ms=2**62), None)
    assert isinstance(env, Envelope), env
    return {
        "schema_version": env.version,
        "kind": env.kind,
        "cluster": env.cluster,
        "node": env.node,
        "seq": env.seq,
        "sent_ms": env.sent_ms,
        "agent": env.agent,
        "columns": {name: arr.to_pylist() for name, arr in env.columns.items()},
        "_raw": value,
    }
