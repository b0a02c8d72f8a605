"""The message contract: documented examples validate, encoding round-trips, bad input is rejected
with a reason, the docs match the declarations, and the DDL applies twice."""

import json
import os
import re
from pathlib import Path

import pytest

from contracts.envelope import VERSIONS, encode_batch
from contracts.schema import KINDS
from pipeline import docgen
from pipeline.chdb_store import ChdbStore
from pipeline.ddl import migrate
from pipeline.validate import Envelope, Limits, Rejected, decode, to_tables

DOCS = Path(__file__).resolve().parents[2] / "docs"
NOW = 1796200000950
OPEN = Limits(max_past_ms=10**13, max_future_ms=10**13)


def doc_examples():
    text = (DOCS / "messages.md").read_text()
    return [json.loads(block) for block in re.findall(r"```json\n(.*?)```", text, re.S)]


def test_docs_are_generated_from_the_declarations():
    if os.environ.get("GOODPUT_UPDATE_GOLDEN"):
        docgen.write()
    assert (DOCS / "config.md").read_text() == docgen.config_md(), "run: python -m pipeline.docgen"
    assert (DOCS / "messages.md").read_text() == docgen.messages_md(), "run: python -m pipeline.docgen"
    assert (DOCS / "clickhouse.md").read_text() == docgen.clickhouse_md(), "run: python -m pipeline.docgen"
    assert (DOCS / "metrics.md").read_text() == docgen.metrics_md(), "run: python -m pipeline.docgen"


def test_every_kind_has_a_documented_example_that_validates():
    examples = doc_examples()
    assert {e["kind"] for e in examples} == set(KINDS)
    for doc in examples:
        env = decode(json.dumps(doc).encode(), OPEN, expected_kind=doc["kind"])
        assert isinstance(env, Envelope), env
        tables, rejected = to_tables([env], NOW, OPEN)
        assert not rejected and tables[doc["kind"]].num_rows == len(next(iter(doc["columns"].values())))


@pytest.mark.parametrize("version", VERSIONS)
def test_encode_decode_round_trip_keeps_values_and_absence(version):
    cols = {
        "ts_ms": [NOW, NOW],
        "gpu": [0, 1],
        "uuid": ["GPU-a", "GPU-b"],
        "power_w": [500.5, None],
        "job_id": [None, "j-1"],
        "model": [None, None],
    }
    raw = encode_batch(
        kind="gpu", cluster="c", node="n1", seq=7, sent_ms=NOW, columns=cols, agent="t", version=version
    )
    env = decode(raw, OPEN, "gpu")
    assert env.version == version
    assert (env.cluster, env.node, env.seq, env.rows) == ("c", "n1", 7, 2)
    table = to_tables([env], NOW, OPEN)[0]["gpu"]
    assert table.column("power_w").to_pylist() == [500.5, None]
    assert table.column("job_id").to_pylist() == [None, "j-1"] and table.column("model").null_count == 2
    assert table.column("sm_active_pct").null_count == 2  # absent field: null, never zero
    assert table.column("seq").to_pylist() == [7, 7]


def test_encoder_refuses_what_the_loader_would_reject():
    with pytest.raises(ValueError, match="not in schema"):
        encode_batch(kind="gpu", cluster="c", node="n", seq=0, sent_ms=NOW, columns={"bogus": [1]}, agent="t")
    with pytest.raises(ValueError, match="differ in length"):
        encode_batch(
            kind="gpu",
            cluster="c",
            node="n",
            seq=0,
            sent_ms=NOW,
            columns={"ts_ms": [1, 2], "gpu": [0]},
            agent="t",
        )


@pytest.mark.parametrize(
    ("field", "values", "problem"),
    [
        ("gpu", [0.5], "cannot be encoded"),
        ("power_w", [True], "holds a bool"),
        ("gpu", ["0"], "cannot be encoded"),
        ("uuid", [7], "cannot be encoded"),
        ("power_w", [1e39], "beyond the range"),
        ("lost", [1], "non-bool"),
    ],
)
def test_the_columnar_encoder_refuses_a_value_its_field_cannot_hold(field, values, problem):
    cols = {"ts_ms": [NOW], "gpu": [0], "uuid": ["GPU-a"], field: values}
    with pytest.raises(ValueError, match=problem) as e:
        encode_batch(
            kind="gpu", cluster="c", node="n", seq=0, sent_ms=NOW, columns=cols, agent="t", version=2
        )
    assert field in str(e.value)


def test_the_columnar_encoder_takes_what_json_takes_for_an_int():
    """3.0 is 3 in an int field in both versions; NaN is absent, as orjson writes numpy's NaN as null."""
    cols = {"ts_ms": [NOW, NOW], "gpu": [0.0, 1.0], "uuid": ["GPU-a", "GPU-b"], "xid": [float("nan"), 79.0]}
    envs = [
        decode(
            encode_batch(
                kind="gpu", cluster="c", node="n", seq=v, sent_ms=NOW, columns=cols, agent="t", version=v
            ),
            OPEN,
            "gpu",
        )
        for v in VERSIONS
    ]
    tables, rejected = to_tables(envs, NOW, OPEN)
    assert not rejected
    assert tables["gpu"].column("gpu").to_pylist() == [0, 1, 0, 1]
    assert tables["gpu"].column("xid").to_pylist() == [None, 79, None, 79]


def _env(**over):
    doc = {
        "schema_version": 1,
        "kind": "gpu",
        "cluster": "c",
        "node": "n1",
        "seq": 0,
        "sent_ms": NOW,
        "agent": "t",
        "columns": {"ts_ms": [NOW], "gpu": [0], "uuid": ["GPU-a"], "power_w": [300.0]},
    }
    doc.update(over)
    return json.dumps(doc).encode()


def _cols(**over):
    cols = {"ts_ms": [NOW], "gpu": [0], "uuid": ["GPU-a"], "power_w": [300.0]}
    cols.update(over)
    return _env(columns=cols)


MALFORMED = {
    "not_json": b"{not json",
    "non_finite": _env().replace(b"300.0", b"NaN"),
    "bad_envelope": b"[1, 2]",
    "unknown_version": _env(schema_version=2),
    "unknown_kind": _env(kind="fan"),
    "kind_mismatch": _env(kind="nic"),
    "unknown_cluster": _env(cluster="other"),
    "unknown_node": _env(node="stranger"),
    "unknown_field": _cols(fan_rpm=[3]),
    "ragged_columns": _cols(gpu=[0, 1]),
    "empty_batch": _env(columns={"ts_ms": [], "gpu": [], "uuid": []}),
    "missing_field": _cols(uuid=[None]),
    "bad_type": _cols(power_w=["hot"]),
    "out_of_range": _cols(power_w=[-5.0]),
}


@pytest.mark.parametrize("reason", list(MALFORMED))
def test_malformed_messages_are_rejected_with_their_reason(reason):
    limits = Limits(cluster="c", known_nodes=frozenset({"n1"}), max_past_ms=10**9, max_future_ms=10**6)
    result = decode(MALFORMED[reason], limits, expected_kind="gpu")
    if isinstance(result, Envelope):
        _, rejected = to_tables([result], NOW, limits)
        assert rejected, f"{reason}: accepted"
        result = rejected[0][1]
    assert isinstance(result, Rejected)
    assert result.reason == reason and result.detail


def test_timestamps_far_from_now_are_out_of_range():
    limits = Limits(max_past_ms=60_000, max_future_ms=60_000)
    env = decode(_cols(ts_ms=[NOW - 3_600_000]), limits, "gpu")
    _, rejected = to_tables([env], NOW, limits)
    assert rejected[0][1].reason == "out_of_range" and "ts_ms" in rejected[0][1].detail


def test_one_bad_message_does_not_sink_its_neighbours():
    envs = [
        decode(_cols(), OPEN, "gpu"),
        decode(_cols(power_w=["x"]), OPEN, "gpu"),
        decode(_cols(), OPEN, "gpu"),
    ]
    tables, rejected = to_tables(envs, NOW, OPEN)
    assert tables["gpu"].num_rows == 2 and len(rejected) == 1 and rejected[0][0] is envs[1]


def test_ddl_applies_twice_and_records_its_version(tmp_path):
    with ChdbStore(tmp_path / "s") as store:
        assert migrate(store) == migrate(store) == 4
        names = set(
            store.query_arrow("SELECT name FROM system.tables WHERE database = currentDatabase()")
            .column("name")
            .to_pylist()
        )
        assert {
            "raw_gpu",
            "raw_nic",
            "raw_storage",
            "raw_job",
            "raw_step",
            "dead_letters",
            "goodput_windows",
            "goodput_live",
            "job_state",
            "job_summary",
            "team_day",
            "scheduling_delay",
            "gpu_rollup_10s",
            "gpu_rollup_10s_mv",
            "nic_rollup_10s",
            "storage_rollup_10s",
            "gpu_rollup_recent_10s",
            "gpu_rollup_recent_10s_mv",
            "nic_rollup_recent_10s",
            "storage_rollup_recent_10s_mv",
        } <= names
        assert store.query_arrow("SELECT count() AS n FROM schema_migrations").column("n")[0].as_py() == 4


def test_migrate_adds_the_clock_columns_to_a_store_created_before_them(tmp_path):
    with ChdbStore(tmp_path / "s") as store:
        migrate(store)
        store.execute("ALTER TABLE job_summary DROP COLUMN clock_offset_s")
        store.execute("ALTER TABLE ingested_batches DROP COLUMN appended")
        migrate(store)
        for table, column in (("job_summary", "clock_offset_s"), ("ingested_batches", "appended")):
            cols = store.query_arrow(f"SELECT * FROM {table} LIMIT 0").column_names
            assert column in cols, (table, cols)


class RecordedStatements:
    """A store that keeps the statements it ran."""

    def __init__(self, store):
        self.store, self.statements = store, []

    def execute(self, sql, params=None):
        self.statements.append(sql)
        self.store.execute(sql, params)

    def __getattr__(self, name):
        return getattr(self.store, name)


def test_migrate_tunes_goodput_live_also_on_a_store_created_before_it_and_only_once(tmp_path):
    """goodput_live merges at 2 parts (ddl.TABLE_TUNING: its live runs' DELETE waited on merges of 5)."""

    def engine(store):
        sql = "SELECT engine_full FROM system.tables WHERE database = currentDatabase() AND name = '{}'"
        return store.query_arrow(sql.format("goodput_live")).column("engine_full")[0].as_py()

    with ChdbStore(tmp_path / "s") as store:
        migrate(store)
        assert "merge_selector_base = 2" in engine(store)
        store.execute("ALTER TABLE goodput_live RESET SETTING merge_selector_base")  # as created before
        assert "merge_selector_base" not in engine(store)
        recorded = RecordedStatements(store)
        migrate(recorded)
        assert "merge_selector_base = 2" in engine(store)
        assert [s for s in recorded.statements if "MODIFY SETTING" in s] == [
            "ALTER TABLE goodput_live MODIFY SETTING merge_selector_base = 2"
        ]
        recorded.statements.clear()
        migrate(recorded)
        assert not [s for s in recorded.statements if "MODIFY SETTING" in s]
