"""Evidence under its threshold (goodput.sql 11a): it counts where it is at least `evidence_floor` of the
threshold and rose `evidence_rise` x over the node's level while the job was healthy; and stalls with
both kinds of evidence are split by strength (11b). Each case sits at one edge of those rules."""

import msgspec
import pytest

from tests.analyzers.scenario import Scenario

N1 = "gpu-core-001"
XMIT = 1.0e6  # the example config's xmit_wait_per_s
LOST = 200 * 2 / 3  # 200 s x 2 GPUs, a third of each second lost


def job_stalled_after(sc: Scenario, healthy_until: int, end: int = 400) -> None:
    """Healthy at 90 % SM until `healthy_until`, then every other second at 30 %: a third lost."""
    j = dict(job_id="j", account="research")
    sc.job(dict(t=0, event="allocated", node=N1, gpu_indices=[0, 1], **j))
    sc.job(dict(t=0, event="gang_complete", **j), dict(t=0, event="running", **j))
    sc.job(
        dict(t=end, event="completed", **j),
        dict(t=end, event="released", node=N1, gpu_indices=[0, 1], **j),
    )
    sc.gpu(N1, [0, 1], 0, end, lambda s, g: 90.0 if s <= healthy_until or s % 2 else 30.0)


def xmit_wait(sc: Scenario, t0: int, t1: int, fraction_of_threshold: float) -> None:
    sc.rows(
        "nic",
        N1,
        t0,
        t1,
        device="mlx5_0",
        port=1,
        link_layer="InfiniBand",
        xmit_wait_per_s=fraction_of_threshold * XMIT,
    )


def run(sc: Scenario, healthy: float, stalled: float, healthy_until: int = 200) -> dict[str, float]:
    job_stalled_after(sc, healthy_until)
    if healthy_until:
        xmit_wait(sc, 0, healthy_until, healthy)
    xmit_wait(sc, healthy_until, 400, stalled)
    sc.load()
    sc.analyze(0, 500)
    return sc.cats("j")


def test_evidence_just_above_the_floor_that_rose_with_the_stall_counts(sc):
    got = run(sc, healthy=0.0, stalled=0.51)
    assert got["comm_stall"] == pytest.approx(LOST, rel=0.02)
    assert got.get("idle", 0.0) == pytest.approx(0.0, abs=1e-6)
    evidence = {e for _, c, _, e in sc.windows("j") if c == "comm_stall"}
    assert evidence == {"fabric congestion at gpu-core-001 (51% of its threshold, risen with the stall)"}


def test_evidence_just_below_the_floor_is_not_evidence(sc):
    got = run(sc, healthy=0.0, stalled=0.49)
    assert got.get("comm_stall", 0.0) == pytest.approx(0.0, abs=1e-6)
    assert got["idle"] == pytest.approx(LOST, rel=0.02)


def test_a_signal_that_rose_less_than_the_factor_is_not_evidence(sc):
    # 0.8 of the threshold during the stall, 0.3 while healthy: risen 2.7x, under evidence_rise (3)
    got = run(sc, healthy=0.3, stalled=0.8)
    assert got.get("comm_stall", 0.0) == pytest.approx(0.0, abs=1e-6)
    assert got["idle"] == pytest.approx(LOST, rel=0.02)


def test_a_signal_that_rose_exactly_the_factor_is_evidence(sc):
    # 0.6 against 3 x 0.2: in floats 0.6 < 0.6000000000000001, and this was not evidence
    got = run(sc, healthy=0.2, stalled=0.6)
    assert got["comm_stall"] == pytest.approx(LOST, rel=0.02)
    assert got.get("idle", 0.0) == pytest.approx(0.0, abs=1e-6)


def test_a_signal_that_rose_just_over_the_factor_is_evidence(sc):
    got = run(sc, healthy=0.26, stalled=0.8)  # risen 3.08x
    assert got["comm_stall"] == pytest.approx(LOST, rel=0.02)


def test_without_healthy_windows_only_the_threshold_counts(sc):
    # stalled from the first second: no level while healthy to rise from
    job_stalled_after(sc, healthy_until=0)
    xmit_wait(sc, 0, 400, 0.9)
    sc.load()
    sc.analyze(0, 500)
    got = sc.cats("j")
    assert got.get("comm_stall", 0.0) == pytest.approx(0.0, abs=1e-6)
    assert got["idle"] == pytest.approx(400 * 2 / 3, rel=0.02)


@pytest.mark.parametrize(("split", "data_share"), [("strength", 2 / 3), ("even", 0.5)])
def test_storage_and_fabric_evidence_split_by_strength_or_evenly(sc, split, data_share):
    sc.cfg = msgspec.structs.replace(
        sc.cfg, analyzer=msgspec.structs.replace(sc.cfg.analyzer, evidence_split=split)
    )
    job_stalled_after(sc, healthy_until=200)
    xmit_wait(sc, 200, 400, 1.0)  # at the threshold: strength 1
    psi = 2 * sc.cfg.analyzer.psi_some_pct  # twice its threshold: strength 2
    sc.rows("storage", N1, 200, 400, source="psi", device="io", psi_some_pct=psi)
    sc.load()
    sc.analyze(0, 500)
    got = sc.cats("j")
    assert got["data_stall"] == pytest.approx(LOST * data_share, rel=0.02)
    assert got["comm_stall"] == pytest.approx(LOST * (1 - data_share), rel=0.02)
