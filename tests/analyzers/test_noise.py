"""Sample noise (goodput.sql 8 and 11): the healthy level is not pushed up by the cut through the noise, and
noise alone never makes a loss, while a clean job's small slowdowns are still found at the tolerance."""

import numpy as np
import pytest

from tests.analyzers.scenario import Scenario

N1 = "gpu-core-001"
GPUS = [0, 1, 2, 3]
END = 600


def job(sc: Scenario, busy) -> None:
    j = dict(job_id="j", account="research")
    sc.job(dict(t=0, event="allocated", node=N1, gpu_indices=GPUS, **j))
    sc.job(dict(t=0, event="gang_complete", **j), dict(t=0, event="running", **j))
    sc.job(
        dict(t=END, event="completed", **j),
        dict(t=END, event="released", node=N1, gpu_indices=GPUS, **j),
    )
    sc.gpu(N1, GPUS, 0, END, busy)
    sc.load()
    sc.analyze(0, END + 100)


def noisy(level, sd: float = 10.0):
    """SM activity `level(s)` plus normal noise of `sd` points, clipped to [0, 100], the same every run."""
    noise = np.random.default_rng(7).normal(0.0, sd, size=(END + 1, len(GPUS)))
    return lambda s, g: float(np.clip(level(s) + noise[s, g], 0.0, 100.0))


def healthy_level(sc: Scenario) -> float:
    t = sc.store.query_arrow("SELECT healthy_busy_pct FROM job_summary WHERE job_id = 'j'")
    return t.column(0)[0].as_py()


def test_a_noisy_healthy_job_has_its_true_level_and_no_loss(sc):
    job(sc, noisy(lambda s: 80.0))
    assert healthy_level(sc) == pytest.approx(80.0, abs=1.0)  # the median of the cut was ~83.6
    assert sc.cats("j") == {"productive": pytest.approx(END * len(GPUS), abs=1e-3)}


def test_a_noisy_jobs_stalled_seconds_are_lost_whole(sc):
    # 300..600: 6 of every 10 seconds stalled at 3 % (+ noise); no evidence, so the loss is idle
    job(sc, noisy(lambda s: 3.0 if s > 300 and s % 10 < 6 else 80.0))
    lost = 300 * 0.6 * len(GPUS)
    assert sc.cats("j")["idle"] == pytest.approx(lost, rel=0.03)


@pytest.mark.parametrize(("slowdown", "found"), [(0.04, False), (0.06, True)])
def test_a_clean_jobs_slowdown_is_found_just_above_the_tolerance(sc, slowdown, found):
    # the last third runs slower; noise of 0.5 points: the tolerance stays at healthy_tolerance (5 %)
    job(sc, noisy(lambda s: 80.0 * (1 - slowdown) if s > 400 else 80.0, sd=0.5))
    idle = sc.cats("j").get("idle", 0.0)
    assert idle == (pytest.approx(200 * len(GPUS) * slowdown, rel=0.1) if found else 0.0)
