"""Re-analysis is idempotent and range-independent (defects 2, 9), and results are deterministic (3)."""

import random

import pytest

from tests.analyzers.scenario import ms

N1, N2, N3 = "gpu-core-001", "gpu-core-002", "gpu-shr-001"


def busy_of(run, level=90.0):
    rng = random.Random(7)
    noise = [rng.uniform(-3, 3) for _ in range(4000)]
    return lambda s, g: (level + noise[(s * 3 + g) % 4000] if s % 5 else level / 3) if run(s) else 1.0


def cluster_day(sc):
    """Three jobs: one that fails and resumes (checkpoints, storage pressure), one that holds its GPUs after
    completing, one still running when the data ends."""
    a = dict(job_id="a", account="llm")
    sc.job(dict(t=0, event="submitted", gpus_requested=4, **a))
    sc.job(
        dict(t=3, event="allocated", node=N1, gpu_indices=[0, 1], **a),
        dict(t=7, event="allocated", node=N2, gpu_indices=[0, 1], **a),
    )
    sc.job(dict(t=7, event="gang_complete", **a), dict(t=25, event="running", **a))
    sc.job(dict(t=203, event="checkpoint_saved", step=10, duration_ms=4000, **a))
    sc.job(dict(t=331, event="failed", reason="xid:79", **a))
    sc.job(dict(t=362, event="restarted", attempt=2, **a), dict(t=362, event="running", attempt=2, **a))
    sc.job(dict(t=745, event="completed", attempt=2, **a))
    sc.job(
        dict(t=746, event="released", node=N1, gpu_indices=[0, 1], attempt=2, **a),
        dict(t=746, event="released", node=N2, gpu_indices=[0, 1], attempt=2, **a),
    )
    run_a = busy_of(lambda s: 25 < s <= 331 or 362 < s <= 745)
    sc.gpu(N1, [0, 1], 0, 746, run_a)
    sc.gpu(N2, [0, 1], 0, 746, run_a)
    ceiling = sc.cfg.pools[0].storage_ceiling_bytes_per_s
    sc.rows("storage", N1, 100, 300, source="nfs", device="/data", read_bytes_per_s=0.95 * ceiling)
    b = dict(job_id="b", account="cv")
    sc.job(dict(t=50, event="submitted", gpus_requested=2, **b))
    sc.job(dict(t=61, event="allocated", node=N3, gpu_indices=[0, 1], **b))
    sc.job(dict(t=61, event="gang_complete", **b), dict(t=80, event="running", **b))
    sc.job(dict(t=520, event="completed", **b))
    sc.job(dict(t=640, event="released", node=N3, gpu_indices=[0, 1], **b))
    sc.gpu(N3, [0, 1], 40, 700, busy_of(lambda s: 80 < s <= 520, 70.0))
    sc.rows("nic", N3, 200, 260, device="mlx5_0", port=1, link_layer="Ethernet", xmit_wait_per_s=5e6)
    c = dict(job_id="c", account="research")
    sc.job(dict(t=800, event="submitted", gpus_requested=2, **c))
    sc.job(dict(t=805, event="allocated", node=N1, gpu_indices=[0, 1], **c))
    sc.job(dict(t=805, event="gang_complete", **c), dict(t=809, event="running", **c))
    sc.gpu(N1, [0, 1], 746, 1000, busy_of(lambda s: s > 809))


def test_reanalysing_overlapping_ranges_changes_nothing(sc):
    cluster_day(sc)
    sc.load()
    sc.analyze(0, 1000)
    first = sc.dump()
    assert {r[1] for r in first["job_summary"]} == {"a", "b", "c"}
    for t0, t1 in [(333.3, 777.7), (111.1, 555.5), (500.5, 1000), (0, 1000), (0, 1000)]:
        sc.analyze(t0, t1)
        assert sc.dump() == first, (t0, t1)


@pytest.mark.parametrize("parts", [2, 3, 5])
def test_any_number_of_parts_gives_the_tables_of_one(sc, parts):
    """The widest statements run in parts over the nodes or jobs (analyzers.run.ROWS_PER_PART): three
    nodes in 2, 3 or 5 parts (two of them empty) give the tables of one part, byte for byte."""
    cluster_day(sc)
    sc.load()
    sc.parts = 1
    sc.analyze(0, 1000)
    one = sc.dump()
    assert {r[1] for r in one["job_summary"]} == {"a", "b", "c"}
    sc.parts = parts
    sc.analyze(0, 1000)
    assert sc.dump() == one


def test_half_a_job_gives_the_same_numbers_as_the_whole(sc):
    cluster_day(sc)
    sc.load()
    sc.analyze(0, 1000)
    whole = sc.dump()
    for name in whole:
        sc.store.execute(f"TRUNCATE TABLE {name}")
    sc.analyze(0, 400)  # half of job a, b's first part
    sc.analyze(700, 1000)  # c, and the end of a and b
    assert sc.dump() == whole


def test_late_data_in_any_order_gives_the_same_tables(sc):
    cluster_day(sc)
    batches = list(sc.batches)
    sc.load()
    sc.analyze(0, 1000)
    want = sc.dump()
    from tests.analyzers.scenario import reset

    reset(sc.store)
    random.Random(3).shuffle(batches)
    half = len(batches) // 2
    sc.load(batches[:half])
    sc.analyze(0, 1000)
    sc.analyze(250, 600)
    sc.load(batches[half:])
    sc.analyze(300, 301)
    sc.analyze(0, 1000)
    assert sc.dump() == want


def test_results_are_deterministic_and_the_healthy_level_exact(sc):
    j = dict(job_id="d", account="research")
    nodes = [N1, N2]
    sc.job(*[dict(t=0, event="allocated", node=n, gpu_indices=range(8), **j) for n in nodes])
    sc.job(dict(t=0, event="gang_complete", **j), dict(t=0, event="running", **j))
    sc.job(dict(t=1200, event="completed", **j))
    rng = random.Random(11)
    values = {}
    for n in nodes:
        for s in range(1, 1201):
            for g in range(8):
                values[n, s, g] = round(rng.uniform(20, 95), 2)
        sc.gpu(n, range(8), 0, 1200, lambda s, g, n=n: values[n, s, g])
    sc.load()
    dumps = []
    for _ in range(3):
        sc.analyze(0, 1300)
        dumps.append(sc.dump())
    assert dumps[0] == dumps[1] == dumps[2]
    # b*: the exact p90 p of the job's running seconds, then the middle of the shortest range holding half
    # of the seconds >= 0.8 p (ties to the lowest)
    xs = sorted(round(x * 100) for x in values.values())  # in 0.01 %, compared as integers as the SQL does
    p = xs[-(-9 * len(xs) // 10) - 1]
    keys = [x for x in xs if x >= 0.8 * p]
    half = (len(keys) + 1) // 2
    _, lo, hi = min(
        (keys[i + half - 1] - keys[i], keys[i], keys[i + half - 1]) for i in range(len(keys) - half + 1)
    )
    want = (lo + hi) / 2 / 100
    got = sc.store.query_arrow("SELECT healthy_busy_pct FROM job_summary WHERE job_id = 'd'").column(0)[0]
    assert got.as_py() == pytest.approx(want, abs=1e-9)
    assert ms(0) % 10_000 == 0


def test_ties_between_pools_and_evidence_go_to_the_smallest_name(sc):
    j = dict(job_id="e", account="research")
    sc.job(
        dict(t=0, event="allocated", node=N1, gpu_indices=[0], **j),
        dict(t=0, event="allocated", node=N3, gpu_indices=[0], **j),
    )
    sc.job(dict(t=0, event="gang_complete", **j), dict(t=0, event="running", **j))
    sc.job(dict(t=100, event="completed", **j))
    for n in (N1, N3):
        sc.gpu(n, [0], 0, 100, lambda s, g: 90.0 if s % 2 else 30.0)
        sc.rows("storage", n, 0, 100, source="psi", device="io", psi_some_pct=30.0)
    sc.load()
    sc.analyze(0, 200)
    rows = sc.windows("e")
    assert {w[3] for w in rows if w[1] == "data_stall"} == {f"I/O pressure 30% on {N1}"}
    pools = sc.store.query_arrow("SELECT DISTINCT pool FROM goodput_windows").column(0).to_pylist()
    assert pools == ["core"]
    assert sc.store.query_arrow("SELECT pool FROM job_summary").column(0).to_pylist() == ["core"]


def test_goodput_analyze_without_a_range_is_idempotent(sc):
    from pipeline.cli import _analyze

    cluster_day(sc)
    # the first job event off a window boundary: the CLI's default range starts there
    z = dict(job_id="z", account="cv")
    sc.job(dict(t=-4.766, event="submitted", **z))
    sc.job(dict(t=-4, event="allocated", node="gpu-core-003", gpu_indices=[0], **z))
    sc.job(dict(t=-4, event="gang_complete", **z), dict(t=-2, event="running", **z))
    sc.job(dict(t=30, event="completed", **z), dict(t=30, event="released", node="gpu-core-003", **z))
    sc.gpu("gpu-core-003", [0], -5, 30)
    sc.load()
    _analyze(sc.store, sc.cfg, None, None, shown=False)
    first = sc.dump()
    for _ in range(3):
        _analyze(sc.store, sc.cfg, None, None, shown=False)
        assert sc.dump() == first
