"""Stragglers from step events (goodput.sql 10b, stragglers.sql): a rank persistently a few % slower than
its gang's median compute costs every other GPU that much (comm stall attributed to it; its own GPU stays
productive); ranks under the threshold, noise, and runs shorter than straggler_min_steps are not flagged."""

import re
from pathlib import Path

import numpy as np
import pytest

from pipeline.explain import explain, format_explain
from tests.analyzers.scenario import Scenario

N1, N2 = "gpu-core-001", "gpu-core-002"
GPUS = [0, 1]
END = 400
COMPUTE = 600.0  # ms of each 1 s step; the rest waits for data (5 ms) and the collectives


def gang(sc: Scenario, slow: float = 1.0, t0: int = 0, t1: int = END, noise: float = 0.0) -> None:
    """A 2-node, 4-rank job; rank 3 (node 2, GPU 1) computes `slow` x longer in steps ending in (t0, t1];
    the others wait for it. SM activity stays at 90 % (ranks spin in NCCL): only the steps tell."""
    j = dict(job_id="j", account="research")
    sc.job(*(dict(t=0, event="allocated", node=n, gpu_indices=GPUS, **j) for n in (N1, N2)))
    sc.job(dict(t=0, event="gang_complete", **j), dict(t=0, event="running", **j))
    sc.job(
        dict(t=END, event="completed", **j),
        *(dict(t=END, event="released", node=n, gpu_indices=GPUS, **j) for n in (N1, N2)),
    )
    rng = np.random.default_rng(3)
    jitter = rng.normal(0.0, noise, size=(4, END + 1))
    for n in (N1, N2):
        sc.gpu(n, GPUS, 0, END, 90.0)
    for rank in range(4):
        node, gpu = (N1, N2)[rank // 2], rank % 2

        def waits(s: int, rank: int = rank) -> tuple[float, float]:
            mine = COMPUTE * (1 + jitter[rank, s]) * (slow if rank == 3 and t0 < s <= t1 else 1.0)
            return 5.0, 995.0 - mine  # every rank's step is 1 s: what it does not compute, it waits

        sc.steps(node, "j", [gpu], 0, END, waits=waits, first_rank=rank - gpu)
    sc.load()
    sc.analyze(0, END + 100)


def episodes(sc: Scenario) -> list[dict]:
    return sc.store.query_arrow(
        "SELECT rank, node, gpu, toUnixTimestamp(start) AS start, toUnixTimestamp(end) AS end, kind, steps, "
        "slowdown_pct, score, gross, cost_gpu_seconds FROM straggler_episodes ORDER BY start"
    ).to_pylist()


def test_a_rank_six_percent_slower_costs_the_rest_of_the_gang_six_percent(sc):
    gang(sc, slow=1.06, noise=0.01)
    (e,) = episodes(sc)
    assert (e["rank"], e["node"], e["gpu"], e["kind"], e["gross"]) == (3, N2, 1, "persistent", False)
    assert e["slowdown_pct"] == pytest.approx(6.0, abs=1.0)
    assert e["score"] == pytest.approx(1 / 1.06, abs=0.01)
    wait = 3 * END * COMPUTE * 0.06 / 1000  # three GPUs wait 36 ms of every 1 s step
    got = sc.cats("j")
    assert got["comm_stall"] == pytest.approx(wait, rel=0.1)
    assert e["cost_gpu_seconds"] == pytest.approx(got["comm_stall"], rel=1e-6)
    blamed = (
        sc.store.query_arrow("SELECT DISTINCT evidence FROM goodput_windows WHERE category = 'comm_stall'")
        .column(0)
        .to_pylist()
    )
    assert len(blamed) == 1 and blamed[0].startswith("straggler gpu-core-002 GPU 1 (rank 3, ")


def test_a_rank_two_percent_slower_is_under_the_threshold(sc):
    gang(sc, slow=1.02, noise=0.005)
    assert episodes(sc) == []
    assert sc.cats("j").get("comm_stall", 0.0) == pytest.approx(0.0, abs=1e-6)


def test_noise_alone_flags_no_rank(sc):
    gang(sc, slow=1.0, noise=0.03)  # every rank's compute varies 3 % step to step
    assert episodes(sc) == []


def test_a_transient_gross_straggler_has_its_episode(sc):
    gang(sc, slow=1.45, t0=200, t1=300)
    (e,) = episodes(sc)
    assert (e["kind"], e["gross"], e["steps"]) == ("transient", True, 100)
    assert e["score"] == pytest.approx(1 / 1.45, abs=0.01)
    assert e["start"] - e["end"] == -100


def test_a_run_shorter_than_straggler_min_steps_is_not_a_straggler(sc):
    gang(sc, slow=1.45, t0=200, t1=220)  # 20 steps < 30
    assert episodes(sc) == []


def test_explain_names_the_straggler_and_what_it_cost(sc):
    gang(sc, slow=1.45, t0=200, t1=300)
    e = explain(sc.store, sc.cfg.cluster.name, "j", "USD")
    (g,) = e["stragglers"]
    doc = (Path(__file__).parents[2] / "docs" / "summary.md").read_text()
    assert {f"stragglers[].{k}" for k in g} == set(re.findall(r"^\| `(stragglers\[\]\.[^`]+)` \|", doc, re.M))
    assert (g["rank"], g["node"], g["gpu"], g["kind"], g["gross"]) == (3, N2, 1, "transient", True)
    assert g["cost_gpu_seconds"] == pytest.approx(3 * 100 * COMPUTE * 0.45 / 1000, rel=0.05)
    text = format_explain(e)
    assert "stragglers:\n" in text and "rank 3 on gpu-core-002 GPU 1  45.0% slower" in text
