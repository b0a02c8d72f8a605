"""The bad-input corpus (tests/loader/bad_input/): every kind of malformed message the loader has met or
could meet, one file each with exactly the bytes the loader receives, and in cases.toml each one's
topic kind, expected dead-letter reason and a description. Used by the in-process test
(test_bad_input.py) and by the loader service against the real broker (test_service_input.py).

A message file may hold `@NOW@`, `@NOW+1d@` or `@NOW-40d@` (epoch milliseconds: now, give or take an
age) where a timestamp must be recent; the rest is literal. Bad batches come from node gpu-006 (job
events from sched-01) with seqs from 1001, so they never collide with the tests' good batches.

The columnar (version 2) cases are binary and are made in corpus_columnar.py instead of read from a file;
FILE_CASES are the others."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from tests.loader import corpus_columnar

CORPUS = Path(__file__).parent / "bad_input"
FILE_CASES: list[dict] = tomllib.loads((CORPUS / "cases.toml").read_text())["case"]
CASES: list[dict] = FILE_CASES + corpus_columnar.CASES
_NOW = re.compile(rb"@NOW(?:([+-]\d+)([smhd]))?@")
_UNIT_MS = {b"s": 1000, b"m": 60_000, b"h": 3_600_000, b"d": 86_400_000}


def message(name: str, now_ms: int) -> bytes:
    """The case's message with its time tokens replaced, relative to `now_ms`."""
    if (made := corpus_columnar.message(name, now_ms)) is not None:
        return made
    raw = (CORPUS / f"{name}.msg").read_bytes()
    return _NOW.sub(lambda m: b"%d" % (now_ms + (int(m[1]) * _UNIT_MS[m[2]] if m[1] else 0)), raw)
