"""Stragglers from clock events (goodput.sql 10, 11b): a GPU of the job whose throttle reasons hold a bit of
straggler_clock_event_mask (hardware slowdown, thermal, power brake) in a window is comm evidence of
strength 1 for that window: the time its gang loses there is a comm stall blamed on it. A reason outside the
mask (the GPU idle, an applications clock setting) is no evidence, and the same loss stays idle."""

import pytest

from tests.analyzers.scenario import Scenario

NODES = ("gpu-core-001", "gpu-core-002")
GPUS = [0, 1]
END = 400
SLOW = (200, 300)  # whole windows: seconds (200, 300] are windows 20-29
HEALTHY, WAITING = 90.0, 60.0
HW_SLOWDOWN, GPU_IDLE = 0x8, 0x1


def gang(sc: Scenario, reason: int) -> None:
    """A 2-node job; in SLOW every GPU runs at WAITING (the gang waits for node 2's GPU 1), which reports
    `reason` in its throttle reasons there."""
    j = dict(job_id="j", account="research")
    sc.job(*(dict(t=0, event="allocated", node=n, gpu_indices=GPUS, **j) for n in NODES))
    sc.job(dict(t=0, event="gang_complete", **j), dict(t=0, event="running", **j))
    sc.job(
        dict(t=END, event="completed", **j),
        *(dict(t=END, event="released", node=n, gpu_indices=GPUS, **j) for n in NODES),
    )

    def busy(s: int, g: int) -> float:
        return WAITING if SLOW[0] < s <= SLOW[1] else HEALTHY

    for n in NODES:

        def throttle(s: int, g: int, n: str = n) -> int:
            return reason if n == NODES[1] and g == 1 and SLOW[0] < s <= SLOW[1] else 0

        sc.gpu(n, GPUS, 0, END, busy, throttle=throttle)
    sc.load()
    sc.analyze(0, END + 100)


def evidence(sc: Scenario, category: str) -> set[str]:
    t = sc.store.query_arrow(f"SELECT DISTINCT evidence FROM goodput_windows WHERE category = '{category}'")
    return set(t.column(0).to_pylist())


LOST = len(NODES) * len(GPUS) * (SLOW[1] - SLOW[0]) * (1 - WAITING / HEALTHY)


def test_a_gpu_under_a_hardware_slowdown_is_blamed_for_its_gangs_wait(sc):
    gang(sc, HW_SLOWDOWN)
    got = sc.cats("j")
    assert got["comm_stall"] == pytest.approx(LOST, rel=1e-6)
    assert got.get("idle", 0.0) == pytest.approx(0.0, abs=1e-6)
    assert evidence(sc, "comm_stall") == {"straggler gpu-core-002 GPU 1"}


def test_a_throttle_reason_outside_the_mask_is_no_evidence(sc):
    gang(sc, GPU_IDLE)
    got = sc.cats("j")
    assert got.get("comm_stall", 0.0) == pytest.approx(0.0, abs=1e-6)
    assert got["idle"] == pytest.approx(LOST, rel=1e-6)
    assert evidence(sc, "idle") == {"below healthy level, no evidence"}
