"""Step events win where present (goodput.sql 10a, 11b): the training loop's data and communication waits
decide a window's lost share and its split, for the ranks that report and for the gang's other ranks,
over the counters' evidence; under `step_wait_min` the counters decide."""

import pytest

from tests.analyzers.scenario import Scenario

N1, N2 = "gpu-core-001", "gpu-core-002"
GPUS = [0, 1]
END = 400


def two_node_job(sc: Scenario, busy) -> None:
    j = dict(job_id="j", account="research")
    sc.job(*(dict(t=0, event="allocated", node=n, gpu_indices=GPUS, **j) for n in (N1, N2)))
    sc.job(dict(t=0, event="gang_complete", **j), dict(t=0, event="running", **j))
    sc.job(
        dict(t=END, event="completed", **j),
        *(dict(t=END, event="released", node=n, gpu_indices=GPUS, **j) for n in (N1, N2)),
    )
    for n in (N1, N2):
        sc.gpu(n, GPUS, 0, END, busy)


def waits_after(t: int, data: float, comm: float):
    """Usual waits (5 ms data, 50 ms comm per 1 s step) until t, then (data, comm) ms per step."""
    return lambda s: (data, comm) if s > t else (5.0, 50.0)


def analyze(sc: Scenario) -> dict[str, float]:
    sc.load()
    sc.analyze(0, END + 100)
    return sc.cats("j")


def test_half_the_ranks_reporting_give_the_whole_jobs_data_stall(sc):
    # from 200 s, 60 % of every step waits for data (SM 30 % of 90: lost), reported by node 1's ranks only
    two_node_job(sc, lambda s, g: 36.0 if s > 200 else 90.0)
    sc.steps(N1, "j", GPUS, 0, END, waits=waits_after(200, 605.0, 50.0))
    got = analyze(sc)
    assert got["data_stall"] == pytest.approx(
        200 * 4 * 0.6, rel=0.02
    )  # all 4 GPUs, 2 of them silent in steps
    assert got.get("idle", 0.0) == pytest.approx(0.0, abs=1e-6)
    evidence = {e for _, c, _, e in sc.windows("j") if c == "data_stall"}
    assert evidence == {"step events of 2 ranks: data wait"}


def test_steps_win_over_the_counters_evidence(sc):
    # the fabric is congested, but the loop says it waited for data: the steps decide
    two_node_job(sc, lambda s, g: 36.0 if s > 200 else 90.0)
    sc.steps(N1, "j", GPUS, 0, END, waits=waits_after(200, 605.0, 50.0))
    for n in (N1, N2):
        sc.rows("nic", n, 200, END, device="mlx5_0", port=1, link_layer="InfiniBand", xmit_wait_per_s=5e6)
    got = analyze(sc)
    assert got["data_stall"] == pytest.approx(200 * 4 * 0.6, rel=0.02)
    assert got.get("comm_stall", 0.0) == pytest.approx(0.0, abs=1e-6)


def test_a_comm_wait_the_counters_cannot_see_is_found(sc):
    # ranks spinning in NCCL keep SM busy: the counters see no loss, the steps see 30 % comm wait
    two_node_job(sc, lambda s, g: 90.0)
    sc.steps(N1, "j", GPUS, 0, END, waits=waits_after(200, 5.0, 350.0))
    got = analyze(sc)
    assert got["comm_stall"] == pytest.approx(200 * 4 * 0.3, rel=0.02)


@pytest.mark.parametrize(("extra_ms", "by_steps"), [(9.0, False), (11.0, True)])
def test_waits_just_either_side_of_step_wait_min(sc, extra_ms, by_steps):
    # 0.9 % / 1.1 % of the step waiting beyond the usual, under fabric congestion and a 20 % SM drop
    two_node_job(sc, lambda s, g: 72.0 if s > 300 else 90.0)
    sc.steps(N1, "j", GPUS, 0, END, waits=waits_after(300, 5.0 + extra_ms, 50.0))
    for n in (N1, N2):
        sc.rows("nic", n, 300, END, device="mlx5_0", port=1, link_layer="InfiniBand", xmit_wait_per_s=5e6)
    got = analyze(sc)
    lost = 100 * 4 * 0.2
    if by_steps:  # the loss is the counters' (larger), split as the steps waited: all data
        assert got["data_stall"] == pytest.approx(lost, rel=0.02)
        assert got.get("comm_stall", 0.0) == pytest.approx(0.0, abs=1e-6)
    else:
        assert got["comm_stall"] == pytest.approx(lost, rel=0.02)
        assert got.get("data_stall", 0.0) == pytest.approx(0.0, abs=1e-6)


def test_long_steps_are_prorated_over_the_windows_they_span(sc):
    # 30 s steps, each a third data wait, from 210 s: the stall spreads over every window of each step
    two_node_job(sc, lambda s, g: 60.0 if 210 < s <= 390 else 90.0)
    sc.steps(N1, "j", GPUS, 0, 390, step_s=30, waits=lambda s: (10_005.0, 50.0) if s > 210 else (5.0, 50.0))
    got = analyze(sc)
    assert got["data_stall"] == pytest.approx(180 * 4 / 3, rel=0.03)
    assert got.get("idle", 0.0) == pytest.approx(0.0, abs=1.0)


def test_step_events_alone_are_telemetry(sc):
    """Ranks that report steps but no GPU samples (a trace of step times, an agent without NVML): running
    time is classified by the steps, not idle "no telemetry from node"; with neither it still is."""
    j = dict(job_id="j", account="research")
    sc.job(*(dict(t=0, event="allocated", node=n, gpu_indices=GPUS, **j) for n in (N1, N2)))
    sc.job(dict(t=0, event="gang_complete", **j), dict(t=0, event="running", **j))
    sc.job(
        dict(t=END, event="completed", **j),
        *(dict(t=END, event="released", node=n, gpu_indices=GPUS, **j) for n in (N1, N2)),
    )
    sc.steps(N1, "j", GPUS, 0, 300, waits=waits_after(200, 405.0, 50.0))  # nothing at all after 300 s
    got = analyze(sc)
    assert got["data_stall"] == pytest.approx(100 * 4 * 0.4, rel=0.02)
    assert got["productive"] == pytest.approx(200 * 4 + 100 * 4 * 0.6, rel=0.02)
    assert got["idle"] == pytest.approx(100 * 4, rel=0.02)
    assert {e for _, c, _, e in sc.windows("j") if c == "idle"} == {"no telemetry from node"}
