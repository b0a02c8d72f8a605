"""A bounded fuzz run of the decoder and validator (pipeline.validate), deterministic for CI: whatever
bytes arrive, `decode` and `to_tables` never raise, and every message is either accepted whole (all its
rows in the table of its kind) or refused with a reason and a detail, which the loader dead-letters.

Three sources of input: arbitrary bytes; envelopes whose every field may be any JSON value (NaN and
Infinity included); and valid envelopes with their bytes cut, spliced or repeated."""

from __future__ import annotations

import json

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from contracts.schema import KINDS
from pipeline.validate import Envelope, Limits, Rejected, decode, to_tables

NOW = 1796200000000
LIMITS = Limits(
    cluster="c",
    known_nodes=frozenset({"n1", "s"}),
    inventory={"n1": 8},
    max_rows=50,
    max_past_ms=86_400_000,
    max_future_ms=300_000,
)
FUZZ = settings(
    max_examples=200,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from([0, 1, 7, 63, 64, -1, NOW, NOW - 10**9, 2**63, 2**64 - 1])
    | st.text(max_size=20)
    | st.sampled_from(["GPU-0", "n1", "allocated", "released", "job-1", "gpu", "job", "c"])
)
json_values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=12,
)
ints = st.integers(min_value=-2, max_value=70)
FIELDS = {  # plausible values per field, so that many envelopes get as far as the value checks
    "gpu": {
        "ts_ms": st.integers(min_value=NOW - 1000, max_value=NOW + 1000),
        "gpu": ints,
        "uuid": st.text(max_size=6),
        "power_w": st.floats(min_value=-1, max_value=2000) | st.none(),
        "util_gpu_pct": st.floats(min_value=0, max_value=120),
        "lost": st.booleans(),
        "mem_used_bytes": st.integers(min_value=-1, max_value=2**64),
        "job_id": st.none() | st.text(max_size=4),
    },
    "job": {
        "ts_ms": st.integers(min_value=NOW - 1000, max_value=NOW + 1000),
        "job_id": st.sampled_from(["j1", "j2"]),
        "event": st.sampled_from(["allocated", "released", "running", "exploded"]),
        "attempt": st.integers(min_value=0, max_value=3),
        "node": st.sampled_from(["n1", "x", "s"]) | st.none(),
        "gpu_indices": st.lists(st.integers(min_value=-2, max_value=9), max_size=4) | st.none(),
        "gpus_requested": ints,
    },
}


@st.composite
def envelopes(draw) -> dict:
    """Mostly valid envelopes of gpu or job batches; a few fields, of the envelope or its columns, hold
    any JSON value instead."""
    kind = draw(st.sampled_from(["gpu", "job"]))
    fields = FIELDS[kind]
    rows = draw(st.integers(min_value=0, max_value=4))
    required = [f.name for f in KINDS[kind].fields if f.required]
    names = required + draw(st.lists(st.sampled_from([n for n in fields if n not in required]), unique=True))
    doc = {
        "schema_version": 1,
        "kind": kind,
        "cluster": "c",
        "node": "s" if kind == "job" else "n1",
        "seq": draw(st.integers(min_value=0, max_value=3)),
        "sent_ms": NOW,
        "agent": "t",
        "columns": {n: draw(st.lists(fields[n], min_size=rows, max_size=rows)) for n in names},
    }
    for name in draw(st.lists(st.sampled_from(list(fields)), max_size=2)):
        doc["columns"][name] = draw(st.lists(json_values, min_size=rows, max_size=rows) | json_values)
    for key in draw(st.lists(st.sampled_from([*doc, "extra"]), max_size=1)):
        doc[key] = draw(json_values)
    return doc


def check(value: bytes) -> None:
    result = decode(value, LIMITS, expected_kind=None)
    if isinstance(result, Rejected):
        assert result.reason and result.detail
        event(result.reason)  # --hypothesis-show-statistics: which checks the run reached
        return
    assert isinstance(result, Envelope)
    tables, rejected = to_tables([result], NOW, LIMITS)
    if rejected:
        [(env, why)] = rejected
        assert env is result and why.reason and why.detail and not tables
        event(why.reason)
    else:
        assert tables[result.kind].num_rows == result.rows
        event("accepted")


@FUZZ
@given(st.binary(max_size=300))
def test_arbitrary_bytes(value):
    check(value)


@FUZZ
@given(envelopes())
def test_envelopes_with_any_values(doc):
    check(json.dumps(doc).encode())


@FUZZ
@given(envelopes(), st.data())
def test_envelopes_cut_spliced_and_repeated(doc, data):
    raw = json.dumps(doc, separators=(",", ":")).encode()
    i = data.draw(st.integers(min_value=0, max_value=len(raw)))
    j = data.draw(st.integers(min_value=i, max_value=len(raw)))
    how = data.draw(st.sampled_from(["cut", "drop", "repeat", "insert"]))
    if how == "cut":
        raw = raw[:i]
    elif how == "drop":
        raw = raw[:i] + raw[j:]
    elif how == "repeat":
        raw = raw[:j] + raw[i:j] + raw[j:]
    else:
        raw = raw[:i] + data.draw(st.binary(min_size=1, max_size=8)) + raw[i:]
    check(raw)
