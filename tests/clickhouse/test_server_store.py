"""ServerStore against a real clickhouse-server (Debian's 18.16): connect, columnar insert and read back,
Arrow types, TLS, and the failures a user meets first (wrong password, missing database, old server).

Tables here use SQL that 18.16 accepts (no CODEC, TTL, DateTime64 or Bool): the full goodput schema is
refused on it, which one test proves."""

from __future__ import annotations

import datetime as dt
import logging
import time
import uuid

import pyarrow as pa
import pytest

from contracts import catalog
from pipeline import ddl
from pipeline.server_store import ServerStore
from pipeline.store import StoreError
from pipeline.stores import open_store
from tests.fixtures.clickhouse import PASSWORD, PASSWORD_ENV
from tests.fixtures.ports import free_port

pytestmark = pytest.mark.clickhouse_server


@pytest.fixture
def store(clickhouse_server):
    s = ServerStore(clickhouse_server.store_config())
    yield s
    s.close()


def _table(store: ServerStore, columns: str, order_by: str) -> str:
    name = f"t_{uuid.uuid4().hex[:10]}"
    store.execute(f"CREATE TABLE {name} ({columns}) ENGINE = MergeTree ORDER BY {order_by}")
    return name


def test_connects_and_reads_the_server_version(store, clickhouse_server):
    assert store.version_text.startswith("18.16")
    assert store.version[:2] == (18, 16)
    assert store.address == f"127.0.0.1:{clickhouse_server.tcp_port}"
    assert store.query_arrow("SELECT version() AS v").column("v")[0].as_py() == store.version_text
    assert store.supports_dedup_token is False  # the setting arrived in ClickHouse 22.2
    assert store.supports_no_collapse is False  # optimize_on_insert came later than 18.16


def test_open_store_builds_a_server_store_from_the_config_table(clickhouse_server):
    s = open_store("server", "ignored-for-servers", clickhouse_server.store_config())
    try:
        assert isinstance(s, ServerStore)
        assert s.query_arrow("SELECT 1 + 1 AS n").column("n")[0].as_py() == 2
    finally:
        s.close()


def test_columnar_insert_reads_back_exactly(store):
    name = _table(
        store,
        "ts DateTime, id Int64, seq UInt64, node String, note Nullable(String), "
        "f32 Float32, f64 Float64, maybe Nullable(Int64), flag UInt8, big Int64, "
        "gpus Array(Int32), raw String",
        "(node, id)",
    )
    n = 5_000
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.timezone.utc)
    data = pa.table(
        {
            "ts": pa.array([t0 + dt.timedelta(seconds=i) for i in range(n)], pa.timestamp("ms", tz="UTC")),
            "id": pa.array(range(n), pa.int64()),
            "seq": pa.array([2**64 - 1 - i for i in range(n)], pa.uint64()),
            "node": [f"gpu-{i % 7:03d}" for i in range(n)],
            "note": [None if i % 3 else f"ü-{i}" for i in range(n)],
            "f32": pa.array([i / 4 for i in range(n)], pa.float32()),
            "f64": pa.array([i / 3 for i in range(n)], pa.float64()),
            "maybe": pa.array([None if i % 2 else 2**62 + i for i in range(n)], pa.int64()),
            "flag": pa.array([i % 2 == 0 for i in range(n)], pa.bool_()),
            "big": pa.array([-(2**63) + i for i in range(n)], pa.int64()),
            "gpus": pa.array([list(range(i % 9)) for i in range(n)], pa.list_(pa.int32())),
            "raw": pa.array([f"line {i}".encode() for i in range(n)], pa.binary()),
        }
    )
    store.insert_arrow(name, data, dedup_token="ignored-by-18.16")
    got = store.query_arrow(f"SELECT * FROM {name} ORDER BY id")
    assert got.num_rows == n
    expected = data.to_pydict()
    rows = got.to_pydict()
    assert rows["id"] == expected["id"]
    assert rows["seq"] == expected["seq"]
    assert rows["node"] == expected["node"]
    assert rows["note"] == expected["note"]
    assert rows["f32"] == expected["f32"]
    assert rows["f64"] == expected["f64"]
    assert rows["maybe"] == expected["maybe"]
    assert rows["flag"] == [int(b) for b in expected["flag"]]
    assert rows["big"] == expected["big"]
    assert rows["gpus"] == expected["gpus"]
    assert rows["raw"] == [b.decode() for b in expected["raw"]]
    assert [t.replace(tzinfo=dt.timezone.utc) for t in rows["ts"]] == expected["ts"]


def test_nulls_arrive_as_null_in_every_column_type(store):
    """A null float, integer, string, LowCardinality string or dictionary-encoded string is stored as
    NULL: not NaN (the driver's NumPy float column knows a null only as None), not 0, not the value of
    another row (a dictionary's indices under its nulls point somewhere). Columns null in every row too."""
    name = _table(
        store,
        "id Int64, f32 Nullable(Float32), f64 Nullable(Float64), i Nullable(Int64), s Nullable(String), "
        "lc LowCardinality(Nullable(String)), lc_dict LowCardinality(Nullable(String)), "
        "s_dict Nullable(String), lc_plain LowCardinality(String), no_f Nullable(Float32), "
        "no_i Nullable(Int64), no_lc LowCardinality(Nullable(String))",
        "id",
    )
    n = 1_000
    strings = [None if i % 5 == 0 else f"s-{i % 7}" for i in range(n)]
    data = pa.table(
        {
            "id": pa.array(range(n), pa.int64()),
            "f32": pa.array([None if i % 3 == 0 else i / 2 for i in range(n)], pa.float32()),
            "f64": pa.array([None if i % 4 == 1 else i / 3 for i in range(n)], pa.float64()),
            "i": pa.array([None if i % 6 == 2 else 2**62 + i for i in range(n)], pa.int64()),
            "s": pa.array(strings, pa.string()),
            "lc": pa.array(strings, pa.string()),
            "lc_dict": pa.array(strings, pa.string()).dictionary_encode(),
            "s_dict": pa.array(strings, pa.string()).dictionary_encode(),
            "lc_plain": pa.array([f"node-{i % 3}" for i in range(n)], pa.string()),
            "no_f": pa.nulls(n, pa.float32()),
            "no_i": pa.nulls(n, pa.int64()),
            "no_lc": pa.nulls(n, pa.string()),
        }
    )
    store.insert_arrow(name, data)
    nulls = store.query_arrow(
        "SELECT " + ", ".join(f"countIf(isNull({c})) AS {c}" for c in data.column_names[1:]) + f" FROM {name}"
    ).to_pylist()[0]
    assert nulls == {c: data.column(c).null_count for c in data.column_names[1:]}
    got = store.query_arrow(f"SELECT * FROM {name} ORDER BY id").to_pydict()
    for c in data.column_names:
        col = data.column(c)
        expected = (col.cast(pa.string()) if pa.types.is_dictionary(col.type) else col).to_pylist()
        assert got[c] == expected, c


def test_a_null_column_with_a_default_gets_the_nulls_not_the_default(store):
    """An all-null column may be left out of the insert only where leaving it out stores NULL too."""
    name = _table(store, "id Int64, k Nullable(Int64) DEFAULT 5, f Nullable(Float32) DEFAULT 1.5", "id")
    store.insert_arrow(
        name,
        pa.table(
            {"id": pa.array([1, 2], pa.int64()), "k": pa.nulls(2, pa.int64()), "f": pa.nulls(2, pa.float32())}
        ),
    )
    got = store.query_arrow(f"SELECT id, k, f FROM {name} ORDER BY id").to_pylist()
    assert got == [{"id": 1, "k": None, "f": None}, {"id": 2, "k": None, "f": None}]


def test_a_block_null_in_every_column_keeps_its_rows(store):
    name = _table(store, "a Nullable(Int64), b Nullable(Float32), n UInt8 DEFAULT 1", "n")
    store.insert_arrow(name, pa.table({"a": pa.nulls(3, pa.int64()), "b": pa.nulls(3, pa.float32())}))
    got = store.query_arrow(f"SELECT count() AS rows, countIf(isNull(a) AND isNull(b)) AS nulls FROM {name}")
    assert got.to_pylist() == [{"rows": 3, "nulls": 3}]


def test_query_arrow_maps_clickhouse_types(store):
    got = store.query_arrow(
        "SELECT toInt8(-1) AS i8, toUInt32(7) AS u32, toInt64(-5) AS i64, "
        "toUInt64(18446744073709551615) AS u64, "
        "toFloat32(0.5) AS f32, toFloat64(0.25) AS f64, 'text' AS s, toDate('2026-01-02') AS d, "
        "toDateTime('2026-01-02 03:04:05', 'UTC') AS ts, [1, 2, 3] AS arr, "
        "CAST(NULL AS Nullable(Int64)) AS ni, ['a', 'b'] AS sarr"
    )
    types = {f.name: f.type for f in got.schema}
    assert types["i8"] == pa.int8() and types["u32"] == pa.uint32() and types["i64"] == pa.int64()
    assert types["u64"] == pa.uint64() and types["f32"] == pa.float32() and types["f64"] == pa.float64()
    assert types["s"] == pa.string() and types["d"] == pa.date32()
    assert types["ts"] == pa.timestamp("s", tz="UTC")
    assert types["arr"] == pa.list_(pa.uint8()) and types["sarr"] == pa.list_(pa.string())
    row = got.to_pylist()[0]
    assert row["u64"] == 2**64 - 1
    assert row["ts"] == dt.datetime(2026, 1, 2, 3, 4, 5, tzinfo=dt.timezone.utc)
    assert row["arr"] == [1, 2, 3] and row["ni"] is None and row["sarr"] == ["a", "b"]


def test_empty_result_keeps_its_schema(store):
    got = store.query_arrow("SELECT number AS n, toString(number) AS s FROM system.numbers LIMIT 0")
    assert got.num_rows == 0
    assert got.schema.names == ["n", "s"]


def test_wrong_password_names_user_and_host_not_the_password(clickhouse_server, monkeypatch):
    monkeypatch.setenv(PASSWORD_ENV, "not-the-" + PASSWORD)
    with pytest.raises(StoreError) as e:
        ServerStore(clickhouse_server.store_config())
    msg = str(e.value)
    assert f"127.0.0.1:{clickhouse_server.tcp_port}" in msg
    assert "'default'" in msg and "wrong password" in msg and PASSWORD_ENV in msg
    assert PASSWORD not in msg


def test_no_password_in_any_log_line_even_at_debug(clickhouse_server, monkeypatch, caplog):
    """Connect, query, insert, a failing statement and a wrong password, with every logger (the driver's
    included) at DEBUG: neither the password nor the wrong one is in a record or an error."""
    wrong = "not-the-" + PASSWORD
    caplog.set_level(logging.DEBUG)
    errors = []
    with ServerStore(clickhouse_server.store_config(retries=0)) as s:
        name = _table(s, "n UInt32", "n")
        s.insert_arrow(name, pa.table({"n": pa.array([1, 2], pa.uint32())}))
        assert s.query_arrow(f"SELECT sum(n) AS n FROM {name}")["n"][0].as_py() == 3
        with pytest.raises(StoreError) as e:
            s.query_arrow("SELECT no_such_column FROM system.one")
        errors.append(str(e.value))
    monkeypatch.setenv(PASSWORD_ENV, wrong)
    with pytest.raises(StoreError) as e:
        ServerStore(clickhouse_server.store_config())
    errors.append(str(e.value))
    assert any(r.name.startswith("clickhouse_driver") for r in caplog.records)  # the driver did log
    for text in [caplog.text, *errors]:
        assert PASSWORD not in text and wrong not in text


def test_unset_password_variable_is_named(clickhouse_server, monkeypatch):
    monkeypatch.delenv(PASSWORD_ENV)
    with pytest.raises(StoreError, match=f"environment variable {PASSWORD_ENV} .* is not set"):
        ServerStore(clickhouse_server.store_config())


def test_missing_database_says_how_to_create_it(clickhouse_server):
    with pytest.raises(StoreError, match="CREATE DATABASE goodput_missing"):
        ServerStore(clickhouse_server.store_config(database="goodput_missing"))


def test_server_error_names_the_statement_and_is_not_retried(store):
    with pytest.raises(StoreError) as e:
        store.execute("SELECT no_such_column FROM system.one")
    assert "SELECT no_such_column FROM system.one" in str(e.value)
    assert "code 47" in str(e.value)  # UNKNOWN_IDENTIFIER
    assert "Stack trace" not in str(e.value)


def test_tls_with_the_servers_ca(clickhouse_server):
    """Queries over native TLS, inserts over HTTPS, both trusting the server's CA."""
    cfg = clickhouse_server.store_config(secure=True, ca_certs=str(clickhouse_server.ca_file))
    with ServerStore(cfg) as s:
        assert s.query_arrow("SELECT 42 AS n").column("n")[0].as_py() == 42
        name = _table(s, "n UInt32", "n")
        s.insert_arrow(name, pa.table({"n": pa.array([4, 2], pa.uint32())}))
        assert s.query_arrow(f"SELECT sum(n) AS n FROM {name}")["n"][0].as_py() == 6


@pytest.mark.parametrize("compression", ["lz4", "lz4hc", "none"])
def test_inserts_arrive_whole_with_each_compression(clickhouse_server, compression):
    """More than one compressed chunk (1 MiB each) of strings and numbers, each way the config allows."""
    n = 60_000
    data = pa.table(
        {"id": pa.array(range(n), pa.int64()), "s": [f"node-{i:06d}-{'x' * (i % 40)}" for i in range(n)]}
    )
    with ServerStore(clickhouse_server.store_config(compression=compression)) as s:
        name = _table(s, "id Int64, s String", "id")
        s.insert_arrow(name, data)
        assert s.query_arrow(f"SELECT id, s FROM {name} ORDER BY id").to_pydict() == data.to_pydict()


def test_an_insert_after_the_server_closed_the_idle_connection_goes_through_quietly(store, caplog):
    """The test server closes a kept-alive HTTP connection after 1 s idle (keep_alive_timeout; 3-10 s
    by default): the next insert is sent again on a new connection, not retried after a wait and a
    warning."""
    caplog.set_level(logging.WARNING, logger="goodput.store.server")
    name = _table(store, "n UInt32", "n")
    for n in (1, 2):
        store.insert_arrow(name, pa.table({"n": pa.array([n], pa.uint32())}))
        time.sleep(1.5)
    assert store.query_arrow(f"SELECT sum(n) AS n FROM {name}")["n"][0].as_py() == 3
    assert caplog.records == []


def test_an_insert_the_server_refuses_is_a_store_error_with_its_code(store):
    name = _table(store, "n UInt32", "n")
    store.insert_arrow(name, pa.table({"n": pa.array([1], pa.uint32())}))  # its columns are now known
    store.execute(f"DROP TABLE {name}")
    with pytest.raises(StoreError) as e:
        store.insert_arrow(name, pa.table({"n": pa.array([2], pa.uint32())}))
    msg = str(e.value)
    assert f"INSERT INTO {name}" in msg and "code 60" in msg and "refused" in msg  # UNKNOWN_TABLE


def test_a_column_the_table_lacks_is_refused_naming_it(store):
    name = _table(store, "n UInt32", "n")
    extra = pa.table({"n": pa.array([1], pa.uint32()), "m": pa.array([1], pa.uint32())})
    with pytest.raises(
        StoreError, match=f"cannot insert into {name} .*column 'm' is not in the target table"
    ):
        store.insert_arrow(name, extra)


def test_a_wrong_http_port_fails_after_the_retries_naming_it(clickhouse_server):
    port = free_port()  # nobody listens there
    with ServerStore(clickhouse_server.store_config(http_port=port, retries=1)) as s:
        name = _table(s, "n UInt32", "n")  # queries still work: they use the native port
        with pytest.raises(StoreError) as e:
            s.insert_arrow(name, pa.table({"n": pa.array([1], pa.uint32())}))
    msg = str(e.value)
    assert f"HTTP 127.0.0.1:{port}" in msg and "after 2 attempts" in msg and "http_port" in msg


def test_tls_without_trusting_the_ca_fails_at_once_with_what_to_check(clickhouse_server):
    cfg = clickhouse_server.store_config(secure=True, retries=5)
    with pytest.raises(StoreError, match="TLS with ClickHouse .* ca_certs") as e:
        ServerStore(cfg)
    assert "CERTIFICATE_VERIFY_FAILED" in str(e.value)


def test_refuses_the_full_schema_on_18_16_naming_both_versions(store):
    before = (
        store.query_arrow(
            "SELECT count() AS n FROM system.tables WHERE database = currentDatabase() "
            f"AND name = '{catalog.SCHEMA_MIGRATIONS}'"
        )
        .column("n")[0]
        .as_py()
    )
    with pytest.raises(StoreError) as e:
        ddl.migrate(store)
    msg = str(e.value)
    assert "version 18.16.1" in msg and ">= 23.8" in msg and store.address in msg
    after = (
        store.query_arrow(
            "SELECT count() AS n FROM system.tables WHERE database = currentDatabase() "
            f"AND name = '{catalog.SCHEMA_MIGRATIONS}'"
        )
        .column("n")[0]
        .as_py()
    )
    assert before == after == 0  # refused before any statement ran


def test_unreachable_server_fails_after_the_configured_retries(clickhouse_server):
    port = free_port()  # nobody listens there
    cfg = clickhouse_server.store_config(port=port, retries=2, connect_timeout_s=1)
    with pytest.raises(StoreError) as e:
        ServerStore(cfg)
    msg = str(e.value)
    assert f"127.0.0.1:{port}" in msg and "after 3 attempts" in msg and "clickhouse-server runs" in msg


def test_a_cluster_store_is_refused_before_any_on_cluster_statement(clickhouse_server):
    with ServerStore(clickhouse_server.store_config(cluster="goodput")) as s:
        assert s.cluster == "goodput" and s.database == "default"
        with pytest.raises(StoreError, match="version 18.16.1"):
            ddl.migrate(s)
        assert (
            s.query_arrow(
                "SELECT count() AS n FROM system.tables WHERE database = 'default' "
                "AND name LIKE '%\\\\_local'"
            )
            .column("n")[0]
            .as_py()
            == 0
        )
