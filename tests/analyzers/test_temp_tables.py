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
