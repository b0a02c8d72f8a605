"""A GPU with no samples while running: classified as its gang where the gang's other GPUs report,
idle "no telemetry from node" where none does (goodput.sql step 12)."""

import pytest

N1, N2 = "gpu-core-001", "gpu-core-002"


def gang_job(sc, job_id, nodes, t_end=300):
    j = dict(job_id=job_id, account="research")
    sc.job(*(dict(t=0, event="allocated", node=n, gpu_indices=list(range(8)), **j) for n in nodes))
    sc.job(dict(t=0, event="gang_complete", **j), dict(t=0, event="running", **j))
    sc.job(
        dict(t=t_end, event="completed", **j), *(dict(t=t_end, event="released", node=n, **j) for n in nodes)
    )


def test_a_silent_node_of_a_reporting_gang_is_classified_as_its_gang(sc):
    gang_job(sc, "g", [N1, N2])
    sc.gpu(N1, range(8), 0, 300)
    sc.gpu(N2, range(8), 0, 300, busy=lambda s, g: None if 100 < s <= 200 else 90.0)  # agent down 100 s
    sc.load()
    sc.analyze(0, 400)
    got = sc.cats("g")
    assert got == {"productive": pytest.approx(16 * 300)}  # before: 800 GPU-s idle, "no telemetry"


def test_a_silent_gang_stays_idle_without_telemetry(sc):
    gang_job(sc, "solo", [N1])
    sc.gpu(N1, range(8), 0, 300, busy=lambda s, g: None if 100 < s <= 200 else 90.0)
    sc.load()
    sc.analyze(0, 400)
    got = sc.cats("solo")
    assert got["idle"] == pytest.approx(8 * 100)
    assert got["productive"] == pytest.approx(8 * 200)
    assert {w[3] for w in sc.windows("solo") if w[1] == "idle"} == {"no telemetry from node"}


def test_one_silent_window_between_pieces_that_share_windows_is_found(sc):
    """Step 11b reads from tmp_loss only the windows that lost time, and every window of the slots
    tmp_unsampled names: those whose running pieces hold more windows than samples. Two checkpoint saves
    inside windows 5 and 20 cut the running time into three pieces that share those windows; with one
    window silent, the count is one short only if the shared windows are counted once each."""
    gang_job(sc, "solo", [N1])
    j = dict(job_id="solo", account="research")
    for t in (56, 206):  # saves of 3 s: (53, 56] and (203, 206], each inside one window
        sc.job(dict(t=t, event="checkpoint_saved", step=t, duration_ms=3_000, **j))
    sc.gpu(N1, range(8), 0, 300, busy=lambda s, g: None if 100 < s <= 110 else 90.0)  # window 10 silent
    sc.load()
    sc.analyze(0, 400)
    got = sc.cats("solo")
    assert got["idle"] == pytest.approx(8 * 10)
    assert got["checkpoint"] == pytest.approx(8 * 6)
    assert got["productive"] == pytest.approx(8 * (300 - 10 - 6))
    assert {w[3] for w in sc.windows("solo") if w[1] == "idle"} == {"no telemetry from node"}
