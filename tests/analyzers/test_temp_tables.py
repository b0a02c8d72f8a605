"""Two analyzer runs on one store do not share temp tables; a run drops its own, also when it fails."""

import pytest

from pipeline.analyzers import run as analyzers
from tests.analyzers.scenario import ms


def small_job(sc):
    j = dict(job_id="j6", account="research")
    n = "gpu-core-001"
    sc.job(dict(t=0, event="allocated", node=n, gpu_indices=range(2), **j))
    sc.job(dict(t=0, event="gang_complete", **j), dict(t=20, event="running", **j))
    sc.job(
        dict(t=200, event="completed", **j), dict(t=200, event="released", node=n, gpu_indices=range(2), **j)
    )
    sc.gpu(n, range(2), 0, 200, lambda s, g: 90.0 if s > 20 and s % 7 else 40.0)
    sc.load()


class Interleaving:
    """A store that runs a whole second analysis in the middle of the first one."""

    def __init__(self, store, cfg):
        self.store, self.cfg, self.done = store, cfg, False

    def execute(self, sql):
        self.store.execute(sql)
        if not self.done and "tmp_alloc" in sql and sql.lstrip().startswith("CREATE"):
            self.done = True
            analyzers.run(self.store, self.cfg, ms(0), ms(300))

    def __getattr__(self, name):
        return getattr(self.store, name)


def temp_tables(store):
    return (
        store.query_arrow("SELECT name FROM system.tables WHERE name LIKE 'tmp\\_%'")
        .column("name")
        .to_pylist()
    )


def test_concurrent_runs_keep_their_own_temp_tables(sc):
    small_job(sc)
    sc.analyze(0, 300)
    alone = sc.dump()
    wrapped = Interleaving(sc.store, sc.cfg)
    analyzers.run(wrapped, sc.cfg, ms(0), ms(300))
    assert wrapped.done
    assert sc.dump() == alone
    assert temp_tables(sc.store) == []


class Failing:
    def __init__(self, store):
        self.store = store

    def execute(self, sql):
        if "INSERT INTO goodput_windows" in sql:
            raise RuntimeError("boom")
        self.store.execute(sql)

    def __getattr__(self, name):
        return getattr(self.store, name)


def test_a_failed_run_drops_its_temp_tables(sc):
    small_job(sc)
    with pytest.raises(RuntimeError, match="boom"):
        analyzers.run(Failing(sc.store), sc.cfg, ms(0), ms(300))
    assert temp_tables(sc.store) == []


class Watching:
    """A store that notes which temp tables exist as each statement starts."""

    def __init__(self, store):
        self.store, self.seen = store, []

    def execute(self, sql):
        alive = {t.rsplit("_", 1)[0] for t in temp_tables(self.store)}  # without the run id
        self.seen.append((analyzers.step_name(sql), alive))
        self.store.execute(sql)

    def __getattr__(self, name):
        return getattr(self.store, name)


def test_a_run_drops_each_temp_table_after_the_last_statement_naming_it(sc):
    """The peak memory of a run is the sum of the temp tables alive at once: the per-(job, GPU, window)
    ones go as soon as no statement left reads them, those the run reads itself stay to its end."""
    small_job(sc)
    sc.analyze(0, 300)
    alone = sc.dump()
    watching = Watching(sc.store)
    analyzers.run(watching, sc.cfg, ms(0), ms(300))
    assert sc.dump() == alone
    alive = dict(watching.seen)
    assert {"tmp_run_hits", "tmp_loss", "tmp_node_evidence"}.isdisjoint(alive["INSERT goodput_windows"])
    assert {"tmp_classified", "tmp_run_split", "tmp_events", "tmp_span"} <= alive["INSERT goodput_windows"]
    # a row per (job, node), not per window: state.sql keeps it for the live runs (job_state)
    assert "tmp_evidence_base" in alive["INSERT goodput_windows"]
    assert "tmp_evidence_base" not in alive["DELETE pool_holds"]  # dropped after that insert
    assert "tmp_run_split" not in alive["DELETE pool_holds"]  # its last reader is stragglers.sql
    last = next(names for step, names in reversed(watching.seen) if not step.startswith("DROP"))
    assert last == {"tmp_events", "tmp_alloc", *analyzers.READ_BY_RUN}  # the last statement reads tmp_alloc
    assert temp_tables(sc.store) == []


class Engines:
    """A store that notes the engine of every temp table alive after each statement. One statement at a
    time: a table another thread is still making shows in system.tables without its engine."""

    concurrent_statements = 1

    def __init__(self, store):
        self.store, self.seen = store, {}

    def execute(self, sql):
        self.store.execute(sql)
        tables = self.store.query_arrow(
            "SELECT name, engine_full FROM system.tables WHERE name LIKE 'tmp\\_%'"
        ).to_pydict()
        names = [n.rsplit("_", 1)[0] for n in tables["name"]]  # without the run id
        self.seen.update(zip(names, tables["engine_full"], strict=True))

    def __getattr__(self, name):
        return getattr(self.store, name)


def test_every_temp_table_is_kept_in_memory_compressed(sc):
    """The per-(job, GPU, window) tables alive at once are most of a run's peak memory: compressed, they
    take half the bytes (docs/performance.md)."""
    small_job(sc)
    engines = Engines(sc.store)
    analyzers.run(engines, sc.cfg, ms(0), ms(300))
    widest = {"tmp_run_hits", "tmp_loss", "tmp_run_split", "tmp_piece_windows", "tmp_idle_gaps"}
    assert widest <= set(engines.seen)
    assert {t: e for t, e in engines.seen.items() if e != "Memory SETTINGS compress = 1"} == {}


def test_a_live_runs_temp_tables_are_kept_uncompressed(sc):
    """A live run's tables hold minutes of rows: compressing every block would cost it 8-9 % of its time."""
    small_job(sc)
    analyzers.run(sc.store, sc.cfg, ms(0), ms(300))
    engines = Engines(sc.store)
    analyzers.run_live(engines, sc.cfg, ms(120))  # its last 80 s
    assert {"tmp_run_hits", "tmp_loss", "tmp_run_split", "tmp_piece_windows"} <= set(engines.seen)
    assert {t: e for t, e in engines.seen.items() if e != "Memory"} == {}
    assert sc.store.query_arrow("SELECT count() AS n FROM goodput_live").column("n")[0].as_py() > 0


def test_a_statement_in_parts_inserts_every_part_after_the_first_into_its_table():
    table = f"CREATE OR REPLACE TABLE tmp_x ENGINE = {analyzers.TEMP_ENGINE} AS"
    create = f"{table} SELECT 1 FROM t WHERE nn % {{parts}} = {{part}}"
    assert analyzers.in_parts(create, 3) == [
        f"{table} SELECT 1 FROM t WHERE nn % 3 = 0",
        "INSERT INTO tmp_x SELECT 1 FROM t WHERE nn % 3 = 1",
        "INSERT INTO tmp_x SELECT 1 FROM t WHERE nn % 3 = 2",
    ]
    with pytest.raises(ValueError, match="CREATE TABLE tmp_x AS SELECT"):  # each part would replace the last
        analyzers.in_parts("CREATE TABLE tmp_x AS SELECT 1 FROM t WHERE nn % {parts} = {part}", 2)
