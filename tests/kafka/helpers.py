"""Shared by the Kafka tests: envelopes like an agent's, and bounded waits for a consumer."""

from __future__ import annotations

import json
import time

from contracts.envelope import encode_batch


def envelope(node: str, seq: int, rows: int = 4, kind: str = "gpu") -> bytes:
    """A real gpu envelope from `node`, its rows tagged with `seq` so that loss is visible."""
    return encode_batch(
        kind=kind,
        cluster="test",
        node=node,
        seq=seq,
        sent_ms=1_700_000_000_000 + seq,
        columns={
            "ts_ms": [1_700_000_000_000 + seq] * rows,
            "gpu": list(range(rows)),
            "uuid": [f"GPU-{node}-{g}" for g in range(rows)],
            "util_gpu_pct": [50.0] * rows,
        },
        agent="goodput-test/0",
    )


def decoded(value: bytes) -> tuple[str, int]:
    env = json.loads(value)
    return env["node"], env["seq"]


def poll_until(consumer, count: int, timeout_s: float = 30.0) -> list:
    """Polls until `count` records arrived or the deadline passed; returns what arrived."""
    out: list = []
    deadline = time.monotonic() + timeout_s
    while len(out) < count and time.monotonic() < deadline:
        out.extend(consumer.poll(max_records=500, timeout_s=0.5))
    return out


def poll_quiet(consumer, quiet_s: float = 2.0, timeout_s: float = 30.0) -> list:
    """Polls until nothing new came for `quiet_s` (after at least one record), or the deadline."""
    out: list = []
    deadline = time.monotonic() + timeout_s
    last = time.monotonic()
    while time.monotonic() < deadline:
        got = consumer.poll(max_records=500, timeout_s=0.5)
        if got:
            out.extend(got)
            last = time.monotonic()
        elif out and time.monotonic() - last >= quiet_s:
            break
    return out
