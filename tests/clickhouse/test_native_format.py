"""pipeline/native_format.py read back by a real ClickHouse engine: chDB's (a current release, so also
the types Debian's 18.16 server lacks: DateTime64, Bool) reads each encoded block with `FORMAT Native`
and must find the values that went in. The 18.16 server reads the same encoder's bytes in
test_server_store.py (every insert of the server store goes through it)."""

from __future__ import annotations

import datetime as dt

import pyarrow as pa
import pytest

from pipeline import native_format
from pipeline.chdb_store import ChdbStore

UTC = dt.timezone.utc
LONG = {n: "x" * n for n in (127, 128, 16_383, 16_384, 70_000)}
"""Lengths at each edge of the varint prefix's width (1, 2, 3 bytes)."""


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    """chDB's engine, as the rest of the suite opens it (one embedded server per process at a time)."""
    with ChdbStore(tmp_path_factory.mktemp("native-format")) as store:
        yield store


def _read_back(engine, tmp_path, table: pa.Table, types: dict[str, str]) -> dict[str, list]:
    path = tmp_path / "block.native"
    path.write_bytes(native_format.encode(table, types))
    got = engine.query_arrow(f"SELECT * FROM file('{path}', Native)")
    described = engine.query_arrow(f"DESCRIBE file('{path}', Native)").to_pydict()
    assert dict(zip(described["name"], described["type"], strict=True)) == {
        c: types[c] for c in table.column_names
    }
    return got.to_pydict()


CASES = [
    ("UInt8", pa.array([0, 255], pa.int64()), [0, 255]),
    ("UInt16", pa.array([0, 65_535], pa.int32()), [0, 65_535]),
    ("UInt32", pa.array([0, 2**32 - 1], pa.int64()), [0, 2**32 - 1]),
    ("UInt64", pa.array([0, 2**64 - 1], pa.uint64()), [0, 2**64 - 1]),
    ("Int32", pa.array([-(2**31), 2**31 - 1], pa.int64()), [-(2**31), 2**31 - 1]),
    ("Int64", pa.array([-(2**63), 2**63 - 1], pa.int64()), [-(2**63), 2**63 - 1]),
    ("Float32", pa.array([1.5, -0.25], pa.float64()), [1.5, -0.25]),
    ("Float64", pa.array([1e300, -2.5], pa.float64()), [1e300, -2.5]),
    ("Bool", pa.array([True, False]), [True, False]),
    ("Nullable(Int64)", pa.array([None, 2**62, None], pa.int64()), [None, 2**62, None]),
    ("Nullable(Float64)", pa.array([None, float("inf"), 0.5]), [None, float("inf"), 0.5]),
    ("Float64", pa.array([None, 3.0]), [0.0, 3.0]),  # a null where no NULL can be stored: the default
    (
        "String",
        pa.array(["", "gpu-001", "naïve ✓", *LONG.values()]),
        ["", "gpu-001", "naïve ✓", *LONG.values()],
    ),
    ("String", pa.array([None, "a"], pa.large_string()), ["", "a"]),
    ("String", pa.array([b"a\x00b", b""], pa.binary()), ["a\x00b", ""]),
    ("Nullable(String)", pa.array([None, "", "b"]), [None, "", "b"]),
    ("LowCardinality(String)", pa.array(["a", None, "a", "b"]), ["a", "", "a", "b"]),
    ("LowCardinality(Nullable(String))", pa.array([None, "a", "", None, "a"]), [None, "a", "", None, "a"]),
    ("LowCardinality(Nullable(String))", pa.array(["x", None, "y"]).dictionary_encode(), ["x", None, "y"]),
    (
        "LowCardinality(String)",
        pa.array([f"n{i % 300}" for i in range(900)]),
        [f"n{i % 300}" for i in range(900)],
    ),
    ("Array(String)", pa.array([["a", "b"], None, [], ["c"]]), [["a", "b"], [], [], ["c"]]),
    ("Array(Int32)", pa.array([[1, -2], [], [3]], pa.list_(pa.int64())), [[1, -2], [], [3]]),
    ("Nullable(Float64)", pa.nulls(3), [None, None, None]),
    ("LowCardinality(Nullable(String))", pa.nulls(2), [None, None]),
    ("String", pa.nulls(2), ["", ""]),
    # DateTime comes back from chDB's Arrow output as its seconds
    ("DateTime", pa.array([1_999, 2_000], pa.timestamp("ms", "UTC")), [1, 2]),  # rounded down
    ("DateTime('UTC')", pa.array([1_764_950_400], pa.int64()), [1_764_950_400]),
    (
        "DateTime64(3, 'UTC')",
        pa.array([1_764_950_400_123], pa.timestamp("ms", "UTC")),
        [dt.datetime(2025, 12, 5, 16, 0, 0, 123_000, tzinfo=UTC)],
    ),
    (
        "DateTime64(3, 'UTC')",
        pa.array([1_764_950_400_123_456], pa.timestamp("us", "UTC")),
        [dt.datetime(2025, 12, 5, 16, 0, 0, 123_000, tzinfo=UTC)],
    ),
    (
        "DateTime64(6, 'UTC')",
        pa.array([1_764_950_400], pa.timestamp("s", "UTC")),
        [dt.datetime(2025, 12, 5, 16, 0, tzinfo=UTC)],
    ),
    (
        "Nullable(DateTime64(3, 'UTC'))",
        pa.array([None, 5], pa.timestamp("ms", "UTC")),
        [None, dt.datetime(1970, 1, 1, 0, 0, 0, 5_000, tzinfo=UTC)],
    ),
    ("Date", pa.array([dt.date(2026, 12, 5)], pa.date32()), [dt.date(2026, 12, 5)]),
]


@pytest.mark.parametrize(
    ("ch_type", "values", "expected"), CASES, ids=[f"{c[0]}-{i}" for i, c in enumerate(CASES)]
)
def test_each_type_reads_back_in_clickhouse(engine, tmp_path, ch_type, values, expected):
    got = _read_back(engine, tmp_path, pa.table({"c": values}), {"c": ch_type})
    assert got["c"] == expected


def test_a_block_of_many_columns_and_chunks(engine, tmp_path):
    """Columns in several chunks, sliced arrays (offsets not at 0): each row keeps its own values."""
    n = 5_000
    names = pa.chunked_array(
        [[f"node-{i}" for i in range(n)][:2_000], [f"node-{i}" for i in range(2_000, n)]]
    )
    sliced = pa.array([None if i % 7 == 0 else f"j{i}" for i in range(n + 10)]).slice(10)
    table = pa.table({"id": pa.array(range(n), pa.int64()), "node": names, "job": sliced})
    types = {"id": "UInt32", "node": "LowCardinality(String)", "job": "Nullable(String)"}
    got = _read_back(engine, tmp_path, table, types)
    assert got["id"] == list(range(n))
    assert got["node"] == names.to_pylist()
    assert got["job"] == sliced.to_pylist()


@pytest.mark.parametrize(
    ("table", "types", "message"),
    [
        (pa.table({"c": pa.array([300])}), {"c": "UInt8"}, r"column 'c' \(int64 -> UInt8\).*300"),
        (pa.table({"c": pa.array([1.5])}), {"c": "Int64"}, r"column 'c' \(double -> Int64\).*truncated"),
        (pa.table({"c": pa.array(["a"])}), {"c": "UUID"}, r"column 'c'.*UUID is not written"),
        (pa.table({"c": pa.array([1])}), {"other": "Int64"}, r"column 'c' is not in the target table"),
    ],
)
def test_a_value_or_type_it_cannot_write_is_refused_naming_the_column(table, types, message):
    with pytest.raises(native_format.UnsupportedType, match=message):
        native_format.encode(table, types)
