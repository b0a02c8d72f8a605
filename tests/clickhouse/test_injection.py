"""SQL injection attempts are inert on both stores: a job id, an account and a team name that try to end a
string literal and drop a table travel as data through the loader, the analyzers, the summary and the
`goodput summary --team/--job` filters, and come back unchanged with every table still there.

chDB runs the whole pipeline. The test clickhouse-server is 18.16, which cannot hold the goodput
schema (docs/clickhouse-server.md) and predates query parameters (22.8), so there the test proves the
insert path with the same values, and that a parameterised query is refused by name rather than
falling back to formatting the value into the text."""

from __future__ import annotations

import json
import subprocess
import uuid

import pyarrow as pa
import pytest

from contracts import config as config_mod
from pipeline import ddl
from pipeline.chdb_store import ChdbStore
from pipeline.server_store import ServerStore
from pipeline.store import StoreError, quote
from pipeline.summary import job_table, team_table
from tests.analyzers.scenario import Scenario
from tests.loader.helpers import GOODPUT, ROOT

EVIL = "x'); DROP TABLE raw_gpu; --"
"""The attempt: a value that ends a quoted literal and appends a statement."""
NASTY = [
    EVIL,
    "o'brien\\",
    "\\'; DROP TABLE raw_job; --",
    "{cluster:String}",
    "%(x)s",
    "a\nb\tc\0d",
    "' OR 1=1 --",
]
"""Other shapes: a trailing backslash, an escaped quote, placeholders of both parameter syntaxes,
control characters, a tautology."""
NODE = "gpu-core-001"


def config_text(store_path) -> str:
    """The shipped example with a team whose name and account are injection attempts."""
    text = config_mod.EXAMPLE_CONFIG.read_text()
    team = json.dumps(EVIL)
    text = text.replace("[teams]\n", f"[teams]\n{team} = [{team}]\n", 1)
    return text.replace('path = "./goodput-data"', f'path = "{store_path}"')


def tables(store) -> set[str]:
    return set(
        store.query_arrow("SELECT name FROM system.tables WHERE database = currentDatabase()")[
            "name"
        ].to_pylist()
    )


@pytest.fixture
def loaded(tmp_path):
    """A chDB store holding one job whose id and account are EVIL, analysed; the config file beside it."""
    cfg_path = tmp_path / "goodput.toml"
    cfg_path.write_text(config_text(tmp_path / "store"))
    cfg = config_mod.load(cfg_path)
    assert EVIL in cfg.teams.accounts
    store = ChdbStore(tmp_path / "store")
    ddl.migrate(store)
    sc = Scenario(store, cfg)
    j = dict(job_id=EVIL, account=EVIL)
    sc.job(dict(t=0, event="allocated", node=NODE, gpu_indices=range(2), **j))
    sc.job(dict(t=0, event="gang_complete", **j), dict(t=20, event="running", **j))
    sc.job(
        dict(t=200, event="completed", **j),
        dict(t=200, event="released", node=NODE, gpu_indices=range(2), **j),
    )
    sc.gpu(NODE, range(2), 0, 200, 90.0)
    sc.load()
    before = tables(store)
    sc.analyze(0, 300)
    assert before <= tables(store)
    yield cfg, cfg_path, store
    store.close()


def test_an_injection_in_messages_and_config_is_stored_and_reported_as_data(loaded):
    cfg, _, store = loaded
    raw = store.query_arrow("SELECT DISTINCT job_id, account FROM raw_job").to_pylist()
    assert raw == [{"job_id": EVIL, "account": EVIL}]
    assert store.query_arrow("SELECT count() AS n FROM raw_gpu")["n"][0].as_py() == 400
    jobs = job_table(store, cfg.cluster.name)
    assert jobs["job_id"].to_list() == [EVIL] and jobs["team"].to_list() == [EVIL]
    assert team_table(store, cfg.cluster.name)["team"].to_list() == [EVIL]


def test_report_filters_are_parameters(loaded):
    cfg, _, store = loaded
    assert job_table(store, cfg.cluster.name, team=EVIL, job=EVIL)["job_id"].to_list() == [EVIL]
    assert team_table(store, cfg.cluster.name, job=EVIL)["team"].to_list() == [EVIL]
    for attempt in NASTY[1:]:  # none is a team or a job here: each filter matches nothing, and fails nothing
        assert job_table(store, cfg.cluster.name, team=attempt).is_empty(), attempt
        assert team_table(store, cfg.cluster.name, job=attempt).is_empty(), attempt
    assert "raw_gpu" in tables(store)


def test_cli_summary_filters_are_inert(loaded):
    cfg, cfg_path, store = loaded
    store.close()  # chDB: one process per directory; the CLI opens it next

    def summary(*args: str) -> dict:
        done = subprocess.run(
            [GOODPUT, "summary", "--config", str(cfg_path), "--json", *args],
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        return json.loads(done.stdout)

    assert [j["job_id"] for j in summary("--team", EVIL, "--job", EVIL)["jobs"]] == [EVIL]
    assert summary("--team", "' OR 1=1 --")["jobs"] == []
    assert summary("--job", "x'; DROP TABLE raw_gpu; --")["teams"] == []
    with ChdbStore(cfg_path.parent / "store") as again:
        assert again.query_arrow("SELECT count() AS n FROM raw_gpu")["n"][0].as_py() == 400


def test_quoted_literals_read_back_unchanged():
    """`quote`, the one literal still spelled into SQL (alive_jobs ON CLUSTER), round-trips every shape."""
    with ChdbStore(f"/tmp/goodput-quote-{uuid.uuid4().hex[:8]}") as store:
        for value in NASTY:
            got = store.query_arrow(
                f"SELECT {quote(value)} AS v, {{p:String}} AS p", {"p": value}
            ).to_pylist()
            assert got == [{"v": value, "p": value}], value


@pytest.mark.clickhouse_server
def test_the_server_stores_injection_attempts_as_data_and_refuses_unsupported_parameters(clickhouse_server):
    store = ServerStore(clickhouse_server.store_config())
    try:
        name = f"raw_gpu_{uuid.uuid4().hex[:8]}"
        store.execute(f"CREATE TABLE {name} (job_id String, n UInt32) ENGINE = MergeTree ORDER BY n")
        store.insert_arrow(name, pa.table({"job_id": NASTY, "n": pa.array(range(len(NASTY)), pa.uint32())}))
        got = store.query_arrow(f"SELECT job_id FROM {name} ORDER BY n")["job_id"].to_pylist()
        assert [v.decode() if isinstance(v, bytes) else v for v in got] == NASTY
        assert store.version < (22, 8)
        with pytest.raises(StoreError, match=r"query parameters need ClickHouse >= 22\.8"):
            store.query_arrow(f"SELECT count() AS n FROM {name} WHERE job_id = {{j:String}}", {"j": EVIL})
        assert store.query_arrow(f"SELECT count() AS n FROM {name}")["n"][0].as_py() == len(NASTY)
    finally:
        store.close()
