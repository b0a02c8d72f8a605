"""Stragglers from SM activity, for jobs without step events (goodput.sql 10c): the straggler's GPU stays at
the job's healthy level while the rest of its synchronous gang waits for it at every collective, busy only
1/slowdown of each second. A few % is found window after window and costs every other GPU that much (even
under the counters' 5 % tolerance); noise, runs under straggler_min_windows, half a gang stalled and GPUs
that do nothing are not stragglers."""

import re

import numpy as np
import pytest

from pipeline.explain import explain, format_explain
from tests.analyzers.scenario import Scenario

END = 600
HEALTHY = 90.0


def gang(
    sc: Scenario,
    slow: float = 1.0,
    t0: int = 0,
    t1: int = END,
    noise: float = 0.01,
    nodes: tuple[str, ...] = ("gpu-core-001", "gpu-core-002"),
    gpus: int = 4,
    slow_gpus: tuple[tuple[int, int], ...] = ((1, 1),),
    busy=None,
) -> None:
    """A gang of `gpus` GPUs on each of `nodes`; the (node index, GPU) in `slow_gpus` compute `slow` x longer
    in seconds (t0, t1], so every other GPU is busy HEALTHY / slow of those seconds; `noise` is the
    per-second relative noise. `busy(node index, gpu, s)` overrides the level."""
    j = dict(job_id="j", account="research")
    idx = list(range(gpus))
    sc.job(*(dict(t=0, event="allocated", node=n, gpu_indices=idx, **j) for n in nodes))
    sc.job(dict(t=0, event="gang_complete", **j), dict(t=0, event="running", **j))
    sc.job(
        dict(t=END, event="completed", **j),
        *(dict(t=END, event="released", node=n, gpu_indices=idx, **j) for n in nodes),
    )
    rng = np.random.default_rng(5)
    jitter = rng.normal(0.0, noise, size=(len(nodes), gpus, END + 1))
    for i, n in enumerate(nodes):

        def level(s: int, g: int, i: int = i) -> float:
            if busy is not None:
                return busy(i, g, s)
            waiting = t0 < s <= t1 and (i, g) not in slow_gpus
            return HEALTHY / (slow if waiting else 1.0) * (1 + jitter[i, g, s])

        sc.gpu(n, idx, 0, END, level)
    sc.load()
    sc.analyze(0, END + 100)


def episodes(sc: Scenario) -> list[dict]:
    return sc.store.query_arrow(
        "SELECT source, rank, node, gpu, toUnixTimestamp(start) - toUnixTimestamp(min(start) OVER ()) AS s0, "
        "toUnixTimestamp(end) - toUnixTimestamp(start) AS span, kind, steps, slowdown_pct, score, gross, "
        "cost_gpu_seconds FROM straggler_episodes ORDER BY start"
    ).to_pylist()


def test_a_gpu_four_percent_slower_costs_every_other_gpu_four_percent(sc):
    """4 %: over straggler_min_slowdown (3 %), under the counters' 5 % tolerance: only the straggler
    finding charges the wait."""
    gang(sc, slow=1.04)
    (e,) = episodes(sc)
    assert (e["source"], e["rank"], e["node"], e["gpu"], e["kind"], e["steps"]) == (
        "sm_activity",
        -1,
        "gpu-core-002",
        1,
        "persistent",
        0,
    )
    assert e["slowdown_pct"] == pytest.approx(4.0, abs=0.5)
    got = sc.cats("j")
    wait = 7 * END * (1 - 1 / 1.04)
    assert got["comm_stall"] == pytest.approx(wait, rel=0.1)
    assert e["cost_gpu_seconds"] == pytest.approx(got["comm_stall"], rel=1e-6)
    blamed = sc.store.query_arrow(
        "SELECT DISTINCT evidence FROM goodput_windows WHERE category = 'comm_stall'"
    ).column(0)
    assert [b.startswith("straggler gpu-core-002 GPU 1 (") for b in blamed.to_pylist()] == [True]


def test_an_episode_and_its_cost_are_the_same_in_any_number_of_parts(sc):
    """10c and 11b run in parts over the jobs and nodes (analyzers.run.ROWS_PER_PART): the straggler's
    node and its peer's in parts of their own, or in one, give the same tables."""
    gang(sc, slow=1.04)
    first = sc.dump()
    assert len(episodes(sc)) == 1
    for parts in (1, 3):
        sc.parts = parts
        sc.analyze(0, END + 100)
        assert sc.dump() == first, parts


def test_two_percent_is_under_the_threshold(sc):
    gang(sc, slow=1.02, noise=0.003)
    assert episodes(sc) == []
    assert sc.cats("j").get("comm_stall", 0.0) == pytest.approx(0.0, abs=1e-6)


def test_noise_alone_flags_no_gpu(sc):
    gang(sc, slow=1.0, noise=0.03)  # every GPU's second varies 3 %
    assert episodes(sc) == []


def test_a_transient_gross_straggler_has_its_start_and_end(sc):
    gang(sc, slow=1.45, t0=200, t1=300)
    (e,) = episodes(sc)
    assert (e["kind"], e["gross"], e["span"]) == ("transient", True, 100)
    assert e["score"] == pytest.approx(1 / 1.45, abs=0.02)
    assert sc.cats("j")["comm_stall"] == pytest.approx(7 * 100 * (1 - 1 / 1.45), rel=0.1)


def test_a_run_shorter_than_straggler_min_windows_is_not_a_straggler(sc):
    gang(sc, slow=1.45, t0=200, t1=250)  # 5 windows < 6
    assert episodes(sc) == []


def test_a_whole_node_straggling_is_reported_as_the_node(sc):
    nodes = ("gpu-core-001", "gpu-core-002", "gpu-core-003")
    gang(sc, slow=1.2, nodes=nodes, gpus=2, slow_gpus=((2, 0), (2, 1)))
    (e,) = episodes(sc)
    assert (e["node"], e["gpu"], e["kind"]) == ("gpu-core-003", -1, "persistent")
    assert e["cost_gpu_seconds"] == pytest.approx(4 * END * (1 - 1 / 1.2), rel=0.1)
    text = format_explain(explain(sc.store, sc.cfg.cluster.name, "j", "USD"))
    assert re.search(r"gpu-core-003 \(all its GPUs\)  20\.\d% slower .*, persistent, from SM activity;", text)


def test_half_a_gang_waiting_is_a_stall_not_a_straggler(sc):
    """One node computing, the other waiting (for data, say): nothing says who waits for whom."""
    gang(sc, slow=1.2, slow_gpus=tuple((0, g) for g in range(4)))
    assert episodes(sc) == []
    assert sc.cats("j").get("comm_stall", 0.0) == 0.0


def test_gpus_doing_nothing_wait_for_no_one(sc):
    """Three GPUs of eight busy, the rest allocated but unused: idle, not stalled on a straggler."""
    gang(sc, busy=lambda i, g, s: HEALTHY if (i, g) in ((0, 0), (0, 1), (0, 2)) else 0.0)
    assert episodes(sc) == []
    assert sc.cats("j").get("comm_stall", 0.0) == 0.0


@pytest.mark.parametrize(("mad", "found"), [(0.476, True), (0.478, False)])
def test_a_busiest_gpu_just_outside_the_noise_band_straggles(sc, mad, found):
    """The busiest GPU 3.0 points over the gang's median straggles where the noise band (noise_z x sqrt 2 x
    1.4826 x the median absolute deviation of the GPUs' window means) is 2.994 points, and is noise where
    it is 3.007. Seven GPUs whose deviation is set by one a little under the median and three at it: the
    band's edge is reachable only so, as every GPU within the band of the busiest is on its side (10c)."""
    levels = (80.0, 81.0, 87.0 - mad, 87.0, 87.0, 87.0, 90.0)
    gang(sc, nodes=("gpu-core-001",), gpus=7, busy=lambda i, g, s: levels[g])
    assert [(e["node"], e["gpu"], e["kind"]) for e in episodes(sc)] == (
        [("gpu-core-001", 6, "persistent")] if found else []
    )
