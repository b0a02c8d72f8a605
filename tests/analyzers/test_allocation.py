"""Allocations: from `allocated` to `released` (defect 4), their real GPU count (5), one owner per GPU
and instant when allocations overlap (11), and allocations without placement (Kubernetes pods, Slurm
jobs seen only between two polls: docs/messages.md)."""

import pytest

N1, N2 = "gpu-core-001", "gpu-core-002"


def run_job(sc, job_id, node, gpus, t_alloc, t_run, t_end, t_release=None, end_event="completed"):
    j = dict(job_id=job_id, account="research")
    sc.job(dict(t=t_alloc, event="allocated", node=node, gpu_indices=gpus, **j))
    sc.job(dict(t=t_alloc, event="gang_complete", **j), dict(t=t_run, event="running", **j))
    if t_end is not None:
        sc.job(dict(t=t_end, event=end_event, **j))
    if t_release is not None:
        sc.job(dict(t=t_release, event="released", node=node, gpu_indices=gpus, **j))


def test_gpus_held_after_completion_are_idle_until_released(sc):
    run_job(sc, "j4", N1, range(8), 0, 20, 300, t_release=900)
    sc.gpu(N1, range(8), 0, 1000, lambda s, g: 90.0 if 20 < s <= 300 else 0.0)
    sc.load()
    sc.analyze(0, 1000)
    got = sc.cats("j4")
    assert got["idle"] == pytest.approx(600 * 8)
    assert sum(got.values()) == pytest.approx(900 * 8)
    held = [w for w in sc.windows("j4") if w[1] == "idle"]
    assert {w[3] for w in held} == {"held after completed"}


def test_job_summary_counts_the_gpus_actually_allocated(sc):
    j = dict(job_id="j5", account="research")
    sc.job(dict(t=0, event="submitted", gpus_requested=8, **j))
    sc.job(
        dict(t=0, event="allocated", node=N1, gpu_indices=[0, 1, 2, 3], **j),
        dict(t=0, event="allocated", node=N2, gpu_indices=[4, 5, 6, 7], **j),
    )
    sc.job(dict(t=0, event="gang_complete", **j), dict(t=10, event="running", **j))
    sc.job(dict(t=100, event="completed", **j))
    sc.gpu(N1, range(4), 0, 100)
    sc.gpu(N2, range(4, 8), 0, 100)
    # a scheduler that names nodes only (no GPU indices): the node's GPU count from the config
    k = dict(job_id="j5b", account="research")
    sc.job(dict(t=0, event="allocated", node="gpu-core-003", **k))
    sc.job(dict(t=0, event="gang_complete", **k), dict(t=10, event="running", **k))
    sc.job(dict(t=100, event="completed", **k))
    sc.gpu("gpu-core-003", range(8), 0, 100)
    sc.load()
    sc.analyze(0, 200)
    gpus = dict(
        zip(
            *(
                sc.store.query_arrow("SELECT job_id, gpus FROM job_summary ORDER BY job_id")
                .to_pydict()
                .values()
            ),
            strict=True,
        )
    )
    assert gpus == {"j5": 8, "j5b": 8}
    assert sum(sc.cats("j5b").values()) == pytest.approx(100 * 8)


def test_overlapping_allocations_the_later_one_owns_the_gpu_from_its_start(sc):
    # job A holds GPUs 0-1 (its release was lost); job B is given GPU 0 at 100 (a fast requeue elsewhere)
    run_job(sc, "jA", N1, [0, 1], 0, 10, None)
    run_job(sc, "jB", N1, [0], 100, 110, 300, t_release=300)

    def busy(s, g):
        if g == 1 or s <= 100:
            return 50.0 if s > 10 else 1.0  # A's level
        return 90.0 if 110 < s <= 300 else 1.0  # B's startup, then its level

    sc.gpu(N1, [0, 1], 0, 400, busy)
    sc.load()
    sc.analyze(0, 400)
    a, b = sc.cats("jA"), sc.cats("jB")
    assert sum(a.values()) == pytest.approx(400 + 100)  # GPU 1 for the whole range, GPU 0 until B's start
    assert a.get("idle", 0.0) == pytest.approx(0.0, abs=1e-6)
    assert b == pytest.approx({"productive": 190.0, "startup": 10.0})


def _unplaced_job(sc, job_id, nodes, requested, t_start=0, t_end=300):
    """A gang placed on nodes only, as the Kubernetes collector reports it: no GPU indices."""
    j = dict(job_id=job_id, account="research")
    sc.job(dict(t=t_start, event="submitted", gpus_requested=requested, **j))
    sc.job(*(dict(t=t_start, event="allocated", node=n, **j) for n in nodes))
    sc.job(dict(t=t_start, event="gang_complete", **j), dict(t=t_start, event="running", **j))
    sc.job(
        dict(t=t_end, event="completed", **j), *(dict(t=t_end, event="released", node=n, **j) for n in nodes)
    )


def test_an_allocation_without_placement_holds_the_requested_gpus_spread_over_its_nodes(sc):
    _unplaced_job(sc, "k8", [N1, N2], requested=6)  # 3 GPUs on each node, not the nodes' 8
    sc.gpu(N1, [5, 6, 7], 0, 300, job_id="k8")  # the agent saw the job's processes on GPUs 5-7
    sc.gpu(N2, [0, 1, 2], 0, 300, job_id="k8")
    sc.load()
    sc.analyze(0, 400)
    got = sc.cats("k8")
    assert sum(got.values()) == pytest.approx(6 * 300)
    # the samples tagged with the job place its GPUs: their telemetry classifies the running time
    assert got.get("productive", 0) == pytest.approx(6 * 300, rel=0.01), got
    assert sc.store.query_arrow("SELECT gpus FROM job_summary").column(0).to_pylist() == [6]


def test_allocations_without_placement_on_one_node_do_not_cut_each_other(sc):
    _unplaced_job(sc, "pod-a", [N1], requested=4)
    _unplaced_job(sc, "pod-b", [N1], requested=4, t_start=100)
    sc.gpu(N1, range(4), 0, 300, job_id="pod-a")
    sc.gpu(N1, range(4, 8), 100, 300, job_id="pod-b")
    sc.load()
    sc.analyze(0, 400)
    assert sum(sc.cats("pod-a").values()) == pytest.approx(4 * 300)
    assert sum(sc.cats("pod-b").values()) == pytest.approx(4 * 200)
    assert sc.cats("pod-b").get("productive", 0) == pytest.approx(4 * 200, rel=0.01)


def test_a_placed_job_keeps_its_samples_where_an_allocation_without_placement_overlaps_it(sc):
    # jA holds GPUs 0-3 by index; pod-b, placed on the node only and with no samples tagged with it, stands
    # in for its 4 GPUs with the lowest indices (step 3: it cuts no other allocation), so both hold 0-3 from
    # 100 on. jA is running on them all along: its windows after 100 are its own samples' (productive), not
    # "no data" because another job's piece starts later on the same GPUs.
    run_job(sc, "jA", N1, [0, 1, 2, 3], 0, 0, 300, t_release=300)
    _unplaced_job(sc, "pod-b", [N1], requested=4, t_start=100)
    sc.gpu(N1, range(4), 0, 300, job_id="jA")
    sc.load()
    sc.analyze(0, 300)
    a = sc.cats("jA")
    assert sum(a.values()) == pytest.approx(4 * 300)
    assert a.get("productive", 0) == pytest.approx(4 * 300, rel=0.01), a
    # pod-b's stand-in GPUs are 0-3: their samples are the only evidence of its running time
    assert sc.cats("pod-b").get("productive", 0) == pytest.approx(4 * 200, rel=0.01)
