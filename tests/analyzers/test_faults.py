"""Faults (pipeline/analyzers/faults.sql): kind by reason, owner, where it happened, the GPU time each
cost, and repeat offenders within [analyzer].repeat_window_s (docs/summary.md)."""

from __future__ import annotations

import msgspec
import pytest

from contracts import catalog
from tests.analyzers.scenario import fails_once

N1, N2 = "gpu-core-001", "gpu-core-002"
GPUS = [0, 1, 2, 3]


def faults(sc, job_id: str | None = None) -> list[dict]:
    where = f"WHERE job_id = '{job_id}'" if job_id else ""
    t = sc.store.query_arrow(
        "SELECT job_id, attempt, toUnixTimestamp64Milli(ts) AS t, event, kind, owner, reason, xid, "
        "exit_code, node, gpu, nic, located_by, lost_gpu_seconds, restart_gpu_seconds, held_gpu_seconds, "
        f"gpu_seconds, cost FROM faults {where} ORDER BY job_id, t, event"
    )
    return t.to_pylist()


def repeats(sc) -> list[dict]:
    t = sc.store.query_arrow(
        "SELECT scope, node, gpu, failures, repeats, max_in_window, window_s, gpu_seconds, kinds, jobs "
        "FROM fault_repeats ORDER BY scope, node, gpu"
    )
    return t.to_pylist()


def fails_and_resumes(sc, job_id, t_fail, reason, node=N1):
    """One node, 4 GPUs: running at 0, checkpoint saved at 100 (10 s), failed at t_fail, restarted at
    t_fail + 20, running again at t_fail + 50, completed and released at 400."""
    j = dict(job_id=job_id, account="research")
    sc.job(dict(t=0, event="allocated", node=node, gpu_indices=GPUS, **j))
    sc.job(dict(t=0, event="gang_complete", **j), dict(t=0, event="running", **j))
    sc.job(dict(t=100, event="checkpoint_saved", step=10, duration_ms=10_000, **j))
    sc.job(dict(t=t_fail, event="failed", reason=reason, **j))
    sc.job(dict(t=t_fail + 20, event="restarted", attempt=2, **j))
    sc.job(dict(t=t_fail + 50, event="running", attempt=2, **j))
    sc.job(dict(t=400, event="completed", attempt=2, **j))
    sc.job(dict(t=400, event="released", node=node, gpu_indices=GPUS, attempt=2, **j))


CLASSES = [
    ("failed", "xid:79", None, "xid_hw"),
    ("failed", "xid:48", None, "xid_hw"),
    ("failed", "xid:94", None, "xid_hw"),
    ("failed", "xid:74", None, "xid_hw"),
    ("failed", "xid:13", None, "xid_app"),
    ("failed", "xid:31", None, "xid_app"),
    ("failed", "xid:43", None, "xid_app"),
    ("failed", "xid:999", None, "xid_other"),
    ("failed", "xid:abc", None, "xid_other"),
    ("failed", "nccl_timeout", 1, "nccl_timeout"),
    ("failed", "oom", 137, "oom"),
    ("failed", "node_lost", None, "node_lost"),
    ("preempted", "preempted", None, "preemption"),
    ("preempted", None, None, "preemption"),
    ("failed", "preempted", None, "preemption"),
    ("failed", "exit_code:3", 3, "exit_code"),
    ("failed", "signal:9", 137, "exit_code"),
    ("failed", None, 2, "exit_code"),
    ("failed", "timeout", None, "timeout"),
    ("failed", "user", None, "user"),
    ("failed", "launch_failed", None, "other"),
    ("failed", None, None, "other"),
]


def test_kinds_and_owners_by_reason(sc):
    for i, (event, reason, exit_code, _) in enumerate(CLASSES):
        fails_once(sc, f"k{i:02d}", 100 * i, 100 * i + 60, event=event, reason=reason, exit_code=exit_code)
    sc.load()
    sc.analyze(0, 100 * len(CLASSES))
    got = {r["job_id"]: r for r in faults(sc)}
    assert [got[f"k{i:02d}"]["kind"] for i in range(len(CLASSES))] == [c[3] for c in CLASSES]
    for i, (event, reason, exit_code, kind) in enumerate(CLASSES):
        r = got[f"k{i:02d}"]
        assert (r["event"], r["reason"], r["exit_code"]) == (event, reason or "", exit_code)
        assert r["owner"] == ("scheduler" if kind == "preemption" else "job")
        assert r["xid"] == (int(reason[4:]) if kind.startswith("xid") and reason[4:].isdigit() else None)
    assert {c[3] for c in CLASSES} == set(catalog.FAULT_KINDS)


def test_a_preemption_next_to_a_failure_has_its_own_kind_owner_and_cost(sc):
    j = dict(job_id="pf", account="research")
    sc.job(dict(t=0, event="allocated", node=N1, gpu_indices=GPUS, **j))
    sc.job(dict(t=0, event="gang_complete", **j), dict(t=0, event="running", **j))
    sc.job(dict(t=100, event="checkpoint_saved", step=10, duration_ms=10_000, **j))
    sc.job(dict(t=150, event="failed", reason="xid:79", **j))
    sc.job(dict(t=170, event="restarted", attempt=2, **j), dict(t=200, event="running", attempt=2, **j))
    sc.job(dict(t=300, event="preempted", reason="preempted", attempt=2, **j))
    sc.job(dict(t=320, event="restarted", attempt=3, **j), dict(t=350, event="running", attempt=3, **j))
    sc.job(dict(t=450, event="completed", attempt=3, **j))
    sc.job(dict(t=450, event="released", node=N1, gpu_indices=GPUS, attempt=3, **j))
    sc.gpu(N1, GPUS, 0, 450, lambda s, g: None if (s, g) == (149, 2) else 90.0)
    sc.rows("gpu", N1, 148, 149, gpu=2, uuid="GPU-2", xid=79)
    sc.load()
    sc.analyze(0, 500)
    fail, preempt = faults(sc, "pf")
    # the failure: lost 100 -> 150 and restart 150 -> 200; the preemption: lost 200 -> 300 (no
    # checkpoint in attempt 2) and restart 300 -> 350; 4 GPUs each
    assert (fail["kind"], fail["owner"], fail["attempt"]) == ("xid_hw", "job", 1)
    assert (fail["lost_gpu_seconds"], fail["restart_gpu_seconds"], fail["gpu_seconds"]) == (200, 200, 400)
    assert (fail["node"], fail["gpu"], fail["located_by"]) == (N1, 2, "xid")
    assert (preempt["kind"], preempt["owner"], preempt["attempt"]) == ("preemption", "scheduler", 2)
    assert (preempt["lost_gpu_seconds"], preempt["restart_gpu_seconds"]) == (400, 200)
    assert (preempt["node"], preempt["gpu"], preempt["located_by"]) == ("", None, "")
    price = sc.cfg.price(sc.cfg.pools[0])
    assert preempt["cost"] == pytest.approx(600 * price / 3600, rel=1e-6)
    # every second of retry waste is one fault's
    assert sc.cats("pf")["retry_waste"] == pytest.approx(1000, abs=1e-3)
    assert repeats(sc) == []  # a preemption is no failure of the node


def test_held_after_a_final_failure_is_its_cost_too(sc):
    j = dict(job_id="held", account="research")
    sc.job(dict(t=0, event="allocated", node=N1, gpu_indices=GPUS, **j))
    sc.job(dict(t=0, event="gang_complete", **j), dict(t=0, event="running", **j))
    sc.job(dict(t=100, event="failed", reason="oom", **j))
    sc.job(dict(t=130, event="released", node=N1, gpu_indices=GPUS, **j))
    sc.gpu(N1, GPUS, 0, 130)
    sc.load()
    sc.analyze(0, 200)
    (r,) = faults(sc, "held")
    assert (r["kind"], r["lost_gpu_seconds"], r["restart_gpu_seconds"], r["held_gpu_seconds"]) == (
        "oom",
        400,
        0,
        120,
    )


def test_node_lost_is_located_by_the_node_released_alone_and_nccl_timeout_by_a_port_down(sc):
    j = dict(job_id="nl", account="research")
    sc.job(
        dict(t=0, event="allocated", node=N1, gpu_indices=GPUS, **j),
        dict(t=0, event="allocated", node=N2, gpu_indices=GPUS, **j),
    )
    sc.job(dict(t=0, event="gang_complete", **j), dict(t=0, event="running", **j))
    sc.job(dict(t=100, event="failed", reason="node_lost", **j))
    sc.job(dict(t=100, event="released", node=N2, gpu_indices=GPUS, **j))
    sc.job(dict(t=150, event="released", node=N1, gpu_indices=GPUS, **j))
    sc.gpu(N1, GPUS, 0, 150)
    sc.gpu(N2, GPUS, 0, 100)
    fails_once(sc, "nt", 0, 100, node="gpu-core-003", reason="nccl_timeout")
    sc.rows("nic", "gpu-core-003", 95, 100, device="mlx5_1", port=1, link_layer="InfiniBand", state="DOWN")
    sc.rows("nic", "gpu-core-003", 95, 100, device="mlx5_0", port=1, link_layer="InfiniBand", state="ACTIVE")
    sc.load()
    sc.analyze(0, 200)
    (nl,) = faults(sc, "nl")
    assert (nl["node"], nl["gpu"], nl["nic"], nl["located_by"]) == (N2, None, "", "released")
    (nt,) = faults(sc, "nt")
    assert (nt["node"], nt["nic"], nt["located_by"]) == ("gpu-core-003", "mlx5_1:1", "nic_down")


@pytest.mark.parametrize("gap, repeat", [(299, True), (301, False)], ids=["just_inside", "just_outside"])
def test_repeat_offender_within_the_window(sc, gap, repeat):
    sc.cfg = msgspec.structs.replace(
        sc.cfg, analyzer=msgspec.structs.replace(sc.cfg.analyzer, repeat_window_s=300)
    )
    fails_once(sc, "first", 0, 100, xid_gpu=2)
    fails_once(sc, "second", 110, 100 + gap, xid_gpu=2)
    fails_once(sc, "elsewhere", 0, 200, node=N2, xid_gpu=1)
    sc.load()
    sc.analyze(0, 500)
    assert [(r["node"], r["gpu"], r["located_by"]) for r in faults(sc)] == [
        (N2, 1, "xid"),
        (N1, 2, "xid"),
        (N1, 2, "xid"),
    ]
    got = repeats(sc)
    if not repeat:
        assert got == []
        return
    cost = 4 * 100 + 4 * (gap - 10)  # lost progress: each job from its running to its failure
    common = dict(failures=2, repeats=1, max_in_window=2, window_s=300.0, kinds=["xid_hw"])
    assert got == [
        dict(scope="gpu", node=N1, gpu=2, gpu_seconds=cost, jobs=["first", "second"], **common),
        dict(scope="node", node=N1, gpu=None, gpu_seconds=cost, jobs=["first", "second"], **common),
    ]


def test_reanalysis_replaces_the_faults_of_its_jobs(sc):
    fails_and_resumes(sc, "again", 150, "xid:79")
    sc.gpu(N1, GPUS, 0, 400)
    fails_once(sc, "other", 0, 100, node=N2, xid_gpu=0)
    fails_once(sc, "other2", 120, 200, node=N2, xid_gpu=0)
    sc.load()
    sc.analyze(0, 500)
    first = sc.dump()
    assert len(first[catalog.FAULTS]) == 3 and len(first[catalog.FAULT_REPEATS]) == 2
    sc.analyze(140, 160)  # one job's range only
    sc.analyze(0, 500)
    assert sc.dump() == first
