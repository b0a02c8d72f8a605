"""Levels exactly at a threshold (goodput.sql 10c and 11, run.py's dead_level and at_healthy_level). On the
samples' 0.01 % grid a second or a window mean often meets a threshold exactly, and in floats such a tie
fell either way by rounding (0.1 x 50.10 % is 501.00000000000006 keys; 1 - 47.88/50.40 is just under 0.05).
Each case below is one the float comparisons got wrong, with a neighbour one key away; the rule decides
the tie: a second at the dead level is live, a window short of b* by exactly the tolerance loses, a
straggler exactly straggler_min_slowdown over its gang is one, and a GPU halfway between the busiest and
the median is not nearer the busiest. Thresholds the config sets (healthy_cutoff,
straggler_min_slowdown, straggler_persistent_fraction) are met exactly where floats rounded their
product or sum past the tie (1 + 0.14 is 1.1400000000000001; 0.55 x 100 is 55.00000000000001)."""

import msgspec
import pytest

from tests.analyzers import test_noise as one_node
from tests.analyzers import test_sm_stragglers as two_nodes
from tests.analyzers.scenario import Scenario

WINDOW = range(301, 311)  # the seconds of the window (300, 310]
GPUS = len(one_node.GPUS)


def idle(sc: Scenario, healthy: float, in_window) -> float:
    """One node's job at `healthy` % but in WINDOW, where second s is at in_window(s) %: its idle seconds
    (no counters show evidence, so every loss is idle)."""
    one_node.job(sc, lambda s, g: in_window(s) if s in WINDOW else healthy)
    return sc.cats("j").get("idle", 0.0)


@pytest.mark.parametrize(("level", "lost"), [(5.01, 1 - 5.01 / 50.10), (5.00, 1.0)])
def test_a_second_exactly_at_the_dead_level_is_live(sc, level, lost):
    # b* 50.10 %, sigma 0: the dead level is 0.1 b* = 5.01 %; a second there did some work
    assert idle(sc, 50.10, lambda s: level) == pytest.approx(GPUS * 10 * lost, abs=1e-6)


@pytest.mark.parametrize(("level", "lost"), [(47.88, 0.05), (47.89, 0.0)])
def test_a_window_short_by_exactly_the_tolerance_loses(sc, level, lost):
    # b* 50.40 %, sigma 0: 47.88 % is exactly 0.95 b*, so 5 % short: not under the tolerance
    assert idle(sc, 50.40, lambda s: level) == pytest.approx(GPUS * 10 * lost, abs=1e-6)


@pytest.mark.parametrize(("level", "lost"), [(74.00, 0.075), (74.01, 0.0)])
def test_one_live_second_short_by_exactly_the_noise_tolerance_loses(sc, level, lost):
    # b* 80.00 % (6 of 10 seconds), sigma 2.00 % (the other 4 at 82.00 %); the window's first 9 seconds are
    # dead (1 %), its last at 74.00 % = b* - 3 sigma: short by 3 sigma / sqrt(1 live second), the tolerance
    def busy(s, g):
        if s in WINDOW:
            return 1.0 if s < WINDOW[-1] else level
        return 82.0 if s % 5 < 2 else 80.0

    one_node.job(sc, busy)
    assert sc.cats("j").get("idle", 0.0) == pytest.approx(GPUS * (9 + lost), abs=1e-6)


def straggler_episodes(sc: Scenario, healthy: float, straggler: float, others, t0: int = 320) -> list:
    """Two nodes x 4 GPUs all at `healthy` % until t0, then node 1's GPU 1 at `straggler` % and every
    other GPU at others(node index, GPU) %: the episodes 10c finds."""

    def busy(i, g, s):
        if s <= t0:
            return healthy
        return straggler if (i, g) == (1, 1) else others(i, g)

    two_nodes.gang(sc, busy=busy)
    return [(e["node"], e["gpu"]) for e in two_nodes.episodes(sc)]


@pytest.mark.parametrize(("level", "found"), [(85.50, False), (85.51, True)])
def test_a_busiest_gpu_short_of_b_star_by_exactly_the_tolerance_is_not_at_b_star(sc, level, found):
    # b* 90.00 %: at 85.50 % the busiest GPU is 5 % short, a loss in 11, so not the job's healthy level
    got = straggler_episodes(sc, 90.0, level, lambda i, g: 80.0)
    assert got == ([("gpu-core-002", 1)] if found else [])


@pytest.mark.parametrize(("median", "found"), [(70.00, True), (70.01, False)])
def test_a_straggler_exactly_the_minimum_slowdown_over_its_gang_is_one(sc, median, found):
    # 72.10 % over 70.00 % is exactly straggler_min_slowdown (3 %)
    got = straggler_episodes(sc, 72.10, 72.10, lambda i, g: median)
    assert got == ([("gpu-core-002", 1)] if found else [])


@pytest.mark.parametrize(("level", "found"), [(80.00, True), (80.01, False)])
def test_a_gpu_halfway_to_the_busiest_is_not_on_its_side(sc, level, found):
    # the busiest at 90 %, the median 70 %; node 0's GPU 2 at 80 % is halfway, not nearer the busiest: the
    # straggler stays one GPU on one node. Nearer (80.01 %), it makes the busy side two nodes: no straggler
    got = straggler_episodes(sc, 90.0, 90.0, lambda i, g: level if (i, g) == (0, 2) else 70.0)
    assert got == ([("gpu-core-002", 1)] if found else [])


def configured(sc: Scenario, **analyzer) -> None:
    sc.cfg = msgspec.structs.replace(sc.cfg, analyzer=msgspec.structs.replace(sc.cfg.analyzer, **analyzer))


@pytest.mark.parametrize(("low", "b_star"), [(7.15, 7.15), (7.14, 13.0)])
def test_a_level_exactly_at_the_healthy_cutoff_is_healthy(sc, low, b_star):
    # healthy_cutoff 0.55; the 0.9 quantile is 13.00 %, and 7.15 % (6 of 10 seconds) is exactly 0.55 x it:
    # among the healthy seconds, so b* is the level of most of them. Just under the cutoff, it is not
    configured(sc, healthy_cutoff=0.55)
    one_node.job(sc, lambda s, g: 13.0 if s % 5 < 2 else low)
    assert one_node.healthy_level(sc) == pytest.approx(b_star, abs=1e-9)


def step_episodes(sc: Scenario, compute_ms: float, end: int, slow_until: int) -> list[tuple]:
    """Two nodes x 2 GPUs, a 2 s step ending every 2 s in (0, end], every rank computing 1,000 ms but rank 3
    (node 2, GPU 1), which computes `compute_ms` in the steps ending up to slow_until: the episodes 10b
    finds, as (rank, steps, kind)."""
    j = dict(job_id="j", account="research")
    nodes = ("gpu-core-001", "gpu-core-002")
    sc.job(*(dict(t=0, event="allocated", node=n, gpu_indices=[0, 1], **j) for n in nodes))
    sc.job(dict(t=0, event="gang_complete", **j), dict(t=0, event="running", **j))
    sc.job(
        dict(t=end, event="completed", **j),
        *(dict(t=end, event="released", node=n, gpu_indices=[0, 1], **j) for n in nodes),
    )
    for i, n in enumerate(nodes):
        sc.gpu(n, [0, 1], 0, end, 90.0)
        for g in (0, 1):
            slow = compute_ms if (i, g) == (1, 1) else 1000.0
            sc.steps(
                n,
                "j",
                [g],
                0,
                end,
                2,
                lambda s, slow=slow: (5.0, 2000.0 - 5.0 - (slow if s <= slow_until else 1000.0)),
                2 * i,
            )
    sc.load()
    sc.analyze(0, end + 100)
    return [(e["rank"], e["steps"], e["kind"]) for e in two_nodes.episodes(sc)]


@pytest.mark.parametrize(("compute_ms", "found"), [(1140.0, True), (1139.0, False)])
def test_a_rank_exactly_the_minimum_slowdown_slower_straggles(sc, compute_ms, found):
    configured(sc, straggler_min_slowdown=0.14)
    assert step_episodes(sc, compute_ms, 400, 400) == ([(3, 200, "persistent")] if found else [])


@pytest.mark.parametrize(("slow_until", "kind"), [(550, "persistent"), (540, "transient")])
def test_an_episode_over_exactly_the_persistent_fraction_is_persistent(sc, slow_until, kind):
    # 55 of the job's 100 windows with step events: exactly straggler_persistent_fraction 0.55
    configured(sc, straggler_persistent_fraction=0.55)
    assert step_episodes(sc, 1100.0, 1000, slow_until) == [(3, slow_until // 2, kind)]
