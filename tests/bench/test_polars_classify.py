"""bench/polars_classify.py is issue 19's polars baseline of the classification: its timing only means
something while it does the analyzers' work, so it must find the same GPU-hours per category on the
bench's data, and refuse the input it does not implement instead of classifying it differently."""

from __future__ import annotations

import polars as pl
import pytest

from contracts import config as config_mod
from goodput.sim.cluster import scaled_config
from pipeline import ddl
from pipeline.analyzers import run as analyzers
from pipeline.chdb_store import ChdbStore
from tests.analyzers.scenario import Scenario, reset
from tests.bench import bench_module


@pytest.fixture(scope="module")
def bench_day(tmp_path_factory):
    """A small bench day (64 GPUs x 2 h), analysed, with its Parquet copies."""
    bench = bench_module("bench_analyze")
    path = tmp_path_factory.mktemp("bench") / "store"
    meta = bench.build(path, 64, 2.0)
    store = ChdbStore(path)
    try:
        analyzers.run(store, scaled_config(config_mod.load(), meta["gpus"]), meta["t0_ms"], meta["end_ms"])
        found = {
            r["category"]: r["h"]
            for r in store.query_arrow(
                "SELECT category, sum(gpu_seconds) / 3600 AS h FROM goodput_windows GROUP BY category"
            ).to_pylist()
        }
    finally:
        store.close()
    return bench.parquet_copy(path), found


def test_the_same_gpu_hours_as_the_analyzers(bench_day):
    parquet, found = bench_day
    polars_classify = bench_module("polars_classify")
    stages: dict[str, float] = {}
    theirs = polars_classify.classify(parquet, config_mod.load().analyzer, stages)
    assert {"productive", "data_stall", "comm_stall", "checkpoint", "startup"} <= set(found)
    assert set(theirs) == set(found)
    for category, hours in found.items():
        assert theirs[category] == pytest.approx(hours, abs=1e-6), category
    assert set(stages) >= {"GPU samples in running time", "node evidence"}


def test_a_threshold_it_reads_changes_its_numbers(bench_day):
    """It reads [analyzer] as the analyzers do: a tolerance that forgives every shortfall moves the
    hours (so the agreement above is not a coincidence of defaults)."""
    parquet, found = bench_day
    polars_classify = bench_module("polars_classify")
    lenient = config_mod.load().analyzer.__class__(
        healthy_tolerance=0.999, stalled_second_fraction=0.0, noise_z=0.0
    )
    theirs = polars_classify.classify(parquet, lenient)
    assert theirs["productive"] > found["productive"] + 1


def test_input_it_does_not_implement_is_refused(bench_day, tmp_path):
    parquet, _ = bench_day
    polars_classify = bench_module("polars_classify")
    for name in polars_classify.EXPORTS:
        (tmp_path / f"{name}.parquet").symlink_to(parquet / f"{name}.parquet")
    (tmp_path / "raw_job.parquet").unlink()
    events = pl.read_parquet(parquet / "raw_job.parquet")
    failed = events.head(1).with_columns(pl.lit("failed").alias("event"))
    pl.concat([events, failed]).write_parquet(tmp_path / "raw_job.parquet")
    with pytest.raises(polars_classify.Unsupported, match="failed"):
        polars_classify.classify(tmp_path, config_mod.load().analyzer)
    events.write_parquet(tmp_path / "raw_job.parquet", mkdir=True)
    (tmp_path / "raw_step.parquet").unlink()
    pl.DataFrame({"job_id": ["j"]}).write_parquet(tmp_path / "raw_step.parquet")
    with pytest.raises(polars_classify.Unsupported, match="step events"):
        polars_classify.classify(tmp_path, config_mod.load().analyzer)


def _at_the_edges():
    """Scenarios of the analyzers' own edge tests (tests/analyzers), each at one edge of a rule the
    baseline re-implements: the bench day's evidence sits far from every threshold."""
    from tests.analyzers import test_exact_thresholds as exact
    from tests.analyzers import test_noise as noise
    from tests.analyzers import test_relative_evidence as relative

    def slowdown(fraction):
        return lambda sc: noise.job(
            sc, noise.noisy(lambda s: 80.0 * (1 - fraction) if s > 400 else 80.0, sd=0.5)
        )

    def evidence(healthy, stalled):
        return lambda sc: relative.run(sc, healthy=healthy, stalled=stalled)

    def both_kinds(sc):
        relative.job_stalled_after(sc, healthy_until=200)
        relative.xmit_wait(sc, 200, 400, 1.0)
        sc.rows("storage", relative.N1, 200, 400, source="psi", device="io", psi_some_pct=40.0)
        sc.rows("storage", relative.N1, 0, 400, source="nfs", device="/data", read_bytes_per_s=2e9)
        sc.load()
        sc.analyze(0, 500)

    def dead_level(sc):  # 90 % healthy, stalled seconds at exactly and just under 10 % of it
        noise.job(sc, lambda s, g: (9.0 if g % 2 else 8.99) if s % 5 == 0 else 90.0)

    def checkpoints(sc):  # saves cutting windows, 3.7 s past one as on the bench day
        j = dict(job_id="j", account="research")
        sc.job(dict(t=0, event="allocated", node=relative.N1, gpu_indices=[0, 1], **j))
        sc.job(dict(t=0, event="gang_complete", **j), dict(t=60, event="running", **j))
        for k, t in enumerate((203.7, 417.2)):
            sc.job(dict(t=t, event="checkpoint_saved", step=k, duration_ms=40_500.0, **j))
        sc.job(
            dict(t=600, event="completed", **j),
            dict(t=600, event="released", node=relative.N1, gpu_indices=[0, 1], **j),
        )
        sc.gpu(relative.N1, [0, 1], 0, 600, lambda s, g: 20.0 if 300 < s < 330 else 90.0)
        sc.load()
        sc.analyze(0, 700)

    def quantile_rank(sc):  # 101 running seconds: the 0.9 quantile is the 91st, the first at 80 %
        j = dict(job_id="j", account="research")
        sc.job(dict(t=0, event="allocated", node=relative.N1, gpu_indices=[0], **j))
        sc.job(dict(t=0, event="gang_complete", **j), dict(t=1, event="running", **j))
        sc.job(
            dict(t=102, event="completed", **j),
            dict(t=102, event="released", node=relative.N1, gpu_indices=[0], **j),
        )
        sc.gpu(relative.N1, [0], 1, 102, lambda s, g: 60.0 if s <= 91 else 80.0)
        sc.load()
        sc.analyze(0, 200)

    def lower_median(sc):  # 20 healthy windows, half at 0.1 and half at 0.2 of the threshold
        relative.job_stalled_after(sc, healthy_until=200)
        relative.xmit_wait(sc, 0, 100, 0.1)
        relative.xmit_wait(sc, 100, 200, 0.2)
        relative.xmit_wait(sc, 200, 400, 0.55)  # risen 5.5x over the lower median, 2.75x the upper
        sc.load()
        sc.analyze(0, 500)

    def pool_reads(sc):  # NFS reads at 0.9 of the pool's ceiling, beside PSI rows of the same seconds
        ceiling = next(p for p in sc.cfg.pools if relative.N1 in p.nodes).storage_ceiling_bytes_per_s
        relative.job_stalled_after(sc, healthy_until=200)
        sc.rows("storage", relative.N1, 0, 400, source="nfs", device="/data", read_bytes_per_s=0.9 * ceiling)
        sc.rows("storage", relative.N1, 0, 400, source="psi", device="io", psi_some_pct=1.0)
        sc.load()
        sc.analyze(0, 500)

    def at_the_tolerance(sc):  # as on a bench day: b* 92.11 %, sigma 94.08 - 92.11 %, and a window of
        # 9 dead seconds (keys 8 x 112 + 119) and one at b* - 3 sigma = 86.20 %: exactly at the tolerance
        def busy(s, g):
            if 301 <= s <= 309:
                return 1.12 if s < 309 else 1.19
            return 86.2 if s == 310 else 94.08 if s % 5 < 2 else 92.11

        noise.job(sc, busy)

    def at_the_cutoff(sc):  # healthy_cutoff 0.55 of 13.00 %: 7.15 % is healthy, and b*; 7.14 % would not be
        exact.configured(sc, healthy_cutoff=0.55)
        noise.job(sc, lambda s, g: 13.0 if s % 5 < 2 else 7.15)

    def coarse_running(sc):  # `running` with gang_complete; the GPUs busy 45 s later: startup till then
        noise.job(sc, lambda s, g: 5.0 if s <= 45 else 90.0)

    return {
        "a coarse running's real start": coarse_running,
        "slowdown under the tolerance": slowdown(0.04),
        "evidence exactly at the threshold": evidence(0.0, 1.0),
        "the healthy quantile's rank": quantile_rank,
        "the lower median of the evidence while healthy": lower_median,
        "a pool read at 0.9 of its ceiling": pool_reads,
        "slowdown over the tolerance": slowdown(0.06),
        "noisy stalled seconds": lambda sc: noise.job(
            sc, noise.noisy(lambda s: 3.0 if s > 300 and s % 10 < 6 else 80.0)
        ),
        "evidence just over the floor": evidence(0.0, 0.51),
        "evidence just under the floor": evidence(0.0, 0.49),
        "evidence risen under the factor": evidence(0.3, 0.8),
        "evidence risen over the factor": evidence(0.26, 0.8),
        "evidence risen exactly the factor": evidence(0.2, 0.6),
        "both kinds, split by strength": both_kinds,
        "seconds at and under the dead level": dead_level,
        "a second exactly at the tolerance": at_the_tolerance,
        "a window exactly the tolerance short": lambda sc: exact.idle(sc, 50.40, lambda s: 47.88),
        "seconds exactly at 0.1 b*": lambda sc: exact.idle(sc, 50.10, lambda s: 5.01),
        "a level exactly at the healthy cutoff": at_the_cutoff,
        "checkpoints and startup": checkpoints,
    }


EDGES = _at_the_edges()


@pytest.fixture(scope="module")
def _store(bench_day, tmp_path_factory):  # after bench_day's store is closed: one store open at a time
    store = ChdbStore(tmp_path_factory.mktemp("edges") / "store")
    ddl.migrate(store)
    yield store
    store.close()


@pytest.mark.parametrize("name", list(EDGES))
def test_the_same_gpu_hours_at_the_rules_edges(_store, tmp_path, name):
    reset(_store)
    sc = Scenario(_store)
    EDGES[name](sc)
    found = {
        r["category"]: r["s"] / 3600
        for r in _store.query_arrow(
            "SELECT category, sum(gpu_seconds) AS s FROM goodput_windows GROUP BY category"
        ).to_pylist()
    }
    bench = bench_module("bench_analyze")
    bench.write_parquet(_store, tmp_path)
    theirs = bench_module("polars_classify").classify(tmp_path, sc.cfg.analyzer)
    assert {k: round(v * 3600, 3) for k, v in theirs.items() if v} == {
        k: round(v * 3600, 3) for k, v in found.items()
    }
