"""The bad-input corpus's columnar (version 2, contracts.columnar) cases: binary messages cannot hold the
corpus files' `@NOW@` tokens, so each is made here from a good columnar batch of node gpu-006 (seqs from
2001), changed in one way. Each case names exactly what it breaks; corpus.py lists them with the rest."""

from __future__ import annotations

import struct
from typing import Callable

import orjson

from contracts import columnar
from contracts.envelope import encode_batch

NODE = "gpu-006"
_DAY_MS = 86_400_000


def _good(now_ms: int, seq: int, kind: str = "gpu", **over: list) -> bytes:
    cols: dict[str, list] = {
        "ts_ms": [now_ms, now_ms],
        "gpu": [0, 1],
        "uuid": ["GPU-a", "GPU-b"],
        "power_w": [300.0, 301.0],
        "util_gpu_pct": [50.0, None],
    }
    cols.update(over)
    return encode_batch(
        kind=kind,
        cluster="loadtest",
        node=NODE,
        seq=2000 + seq,
        sent_ms=now_ms,
        columns=cols,
        agent="t",
        version=columnar.VERSION,
    )


def _split(msg: bytes) -> tuple[dict, bytes]:
    """(header, the buffers after the header's padding)."""
    _, n = columnar.HEADER.unpack_from(msg)
    end = columnar.HEADER.size + n
    return orjson.loads(msg[columnar.HEADER.size : end]), msg[columnar.padded(end) :]


def _with_header(msg: bytes, **changes: object) -> bytes:
    header, body = _split(msg)
    header.update(changes)
    raw = orjson.dumps(header)
    head = columnar.HEADER.pack(columnar.MAGIC, len(raw)) + raw
    return head + b"\0" * (columnar.padded(len(head)) - len(head)) + body


def _replace_once(msg: bytes, old: bytes, new: bytes) -> bytes:
    assert msg.count(old) == 1, f"{old!r} must occur once to be replaced"
    return msg.replace(old, new)


def _header_text(now: int) -> bytes:
    good = _good(now, 3)
    _, n = columnar.HEADER.unpack_from(good)
    return good[:8] + b"{not json" + b" " * (n - 9) + good[8 + n :]


_F32 = struct.Struct("<f")
_BUILDERS: dict[str, tuple[str, str, str, Callable[[int], bytes]]] = {
    "columnar-preamble-short": (
        "gpu",
        "bad_buffers",
        "a columnar message of 5 bytes",
        lambda now: b"GPC2\x05",
    ),
    "columnar-header-past-end": (
        "gpu",
        "bad_buffers",
        "a columnar header longer than the message",
        lambda now: columnar.HEADER.pack(columnar.MAGIC, 10_000) + b"{}",
    ),
    "columnar-header-not-json": ("gpu", "bad_envelope", "a columnar header that is not JSON", _header_text),
    "columnar-header-version-1": (
        "gpu",
        "unknown_version",
        "a columnar header saying schema_version 1",
        lambda now: _with_header(_good(now, 4), schema_version=1),
    ),
    "columnar-wrong-topic": (
        "nic",
        "kind_mismatch",
        "a columnar gpu batch on the nic topic",
        lambda now: _good(now, 5),
    ),
    "columnar-unknown-column": (
        "gpu",
        "unknown_field",
        "a columnar header listing a field the schema lacks",
        lambda now: _with_header(
            _good(now, 6), columns=[*_split(_good(now, 6))[0]["columns"], ["fan_rpm", 0]]
        ),
    ),
    "columnar-column-twice": (
        "gpu",
        "repeated_key",
        "a columnar header listing one column twice",
        lambda now: _with_header(_good(now, 7), columns=[*_split(_good(now, 7))[0]["columns"], ["gpu", 0]]),
    ),
    "columnar-columns-not-pairs": (
        "gpu",
        "bad_envelope",
        "a columnar header whose columns are names, not [name, bitmap] pairs",
        lambda now: _with_header(_good(now, 8), columns=["ts_ms", "gpu"]),
    ),
    "columnar-zero-rows": (
        "gpu",
        "empty_batch",
        "a columnar header saying 0 rows",
        lambda now: _with_header(_good(now, 9), rows=0),
    ),
    "columnar-rows-beyond-buffers": (
        "gpu",
        "bad_buffers",
        "a columnar header saying more rows than its buffers hold",
        lambda now: _with_header(_good(now, 10), rows=100),
    ),
    "columnar-cut-short": (
        "gpu",
        "bad_buffers",
        "a columnar message cut off in its buffers",
        lambda now: _good(now, 11)[:-24],
    ),
    "columnar-trailing-bytes": (
        "gpu",
        "bad_buffers",
        "a columnar message with bytes after its last buffer",
        lambda now: _good(now, 12) + b"\0" * 8,
    ),
    "columnar-bad-utf8": (
        "gpu",
        "bad_buffers",
        "a columnar string column holding bytes that are not UTF-8",
        lambda now: _replace_once(_good(now, 13), b"GPU-aGPU-b", b"GPU-\xffGPU-b"),
    ),
    "columnar-offsets-decreasing": (
        "gpu",
        "bad_buffers",
        "a columnar string column whose offsets go backwards",
        lambda now: _replace_once(
            _good(now, 14), struct.pack("<3i", 0, 5, 10), struct.pack("<3i", 0, 11, 10)
        ),
    ),
    "columnar-offsets-not-from-0": (
        "gpu",
        "bad_buffers",
        "a columnar string column whose offsets start at 1",
        lambda now: _replace_once(_good(now, 19), struct.pack("<3i", 0, 5, 10), struct.pack("<3i", 1, 5, 10)),
    ),
    "columnar-index-beyond-dictionary": (
        "gpu",
        "bad_buffers",
        "a columnar string column indexing a string its dictionary does not hold",
        lambda now: _replace_once(
            _good(now, 20), struct.pack("<5i", 0, 1, 0, 5, 10), struct.pack("<5i", 0, 7, 0, 5, 10)
        ),
    ),
    "columnar-strings-without-count": (
        "gpu",
        "bad_envelope",
        "a columnar header whose string column does not say how many distinct strings it holds",
        lambda now: _with_header(
            _good(now, 21), columns=[c[:2] for c in _split(_good(now, 21))[0]["columns"]]
        ),
    ),
    "columnar-nan": (
        "gpu",
        "non_finite",
        "a columnar float column holding NaN where the value should be left out",
        lambda now: _replace_once(_good(now, 15), _F32.pack(300.0), _F32.pack(float("nan"))),
    ),
    "columnar-required-null": (
        "gpu",
        "missing_field",
        "a columnar batch whose uuid (required) is null in a row",
        lambda now: _good(now, 16, uuid=["GPU-a", None]),
    ),
    "columnar-old-timestamp": (
        "gpu",
        "out_of_range",
        "a columnar batch sampled 40 days ago",
        lambda now: _good(now, 17, ts_ms=[now - 40 * _DAY_MS, now]),
    ),
    "columnar-value-out-of-range": (
        "gpu",
        "out_of_range",
        "a columnar batch with a negative power draw",
        lambda now: _good(now, 18, power_w=[-5.0, 300.0]),
    ),
}

CASES: list[dict] = [
    {"name": name, "topic": topic, "reason": reason, "what": what}
    for name, (topic, reason, what, _build) in _BUILDERS.items()
]


def message(name: str, now_ms: int) -> bytes | None:
    """The columnar case's message for `now_ms`, or None when `name` is not a columnar case."""
    entry = _BUILDERS.get(name)
    return entry[3](now_ms) if entry else None
