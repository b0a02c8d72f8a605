"""`goodput replay alibaba-pai-minibatch` on the real PAI mini-batch times: the stragglers and the gang's
wait recomputed here with polars straight from the CSV, not through the pipeline."""

from __future__ import annotations

import math

import polars as pl
import pytest

from tests.replay.conftest import replay_json, trace_dir


@pytest.fixture(scope="module")
def data():
    return trace_dir("alibaba-pai-minibatch")


@pytest.fixture(scope="module")
def found(data, tmp_path_factory) -> dict:
    return replay_json("alibaba-pai-minibatch", str(data), "--out", str(tmp_path_factory.mktemp("pai")))


def ratios(df: pl.DataFrame) -> pl.DataFrame:
    """Per (iteration, worker): its mini-batch time over the iteration's lower median, and the number
    of workers that reported the iteration."""
    med = df.group_by("time").agg(m=pl.col("batch_time_norm").sort().get((pl.len() + 1) // 2 - 1), n=pl.len())
    return (
        df.join(med, on="time")
        .filter(pl.col("n") >= 2)
        .with_columns(r=pl.col("batch_time_norm") / pl.col("m"))
    )


def job(data, n: int) -> pl.DataFrame:
    return pl.read_csv(data / f"job_{n}_norm.csv")


def test_step_time_goodput_and_gang_wait_per_job(found, data):
    for n in (2, 4):
        df = job(data, n)
        step = df.group_by("time").agg(pl.col("batch_time_norm").max().alias("s"))
        d = df.join(step, on="time")
        got = found["jobs"][f"pai-job-{n}"]
        assert got["workers"] == df["worker"].n_unique()
        assert got["iterations"] == df["time"].n_unique()
        assert got["norm_time"] == step["s"].sum()
        assert got["step_time_goodput_pct"] == pytest.approx(
            100 * d["batch_time_norm"].sum() / d["s"].sum(), abs=0.01
        )
        assert got["gang_wait"] == pytest.approx((d["s"] - d["batch_time_norm"]).sum(), abs=0.1)


def test_job_2_has_one_persistent_straggler_the_slowest_worker(found, data):
    r = ratios(job(data, 2))
    per_worker = r.group_by("worker").agg(pl.col("r").median()).sort("r", descending=True)
    slowest, ratio = per_worker.row(0)
    mine = [s for s in found["stragglers"] if s["job"] == "pai-job-2"]
    persistent = [s for s in mine if s["kind"] == "persistent"]
    assert [s["rank"] for s in persistent] == [slowest]
    # the score is the gang median over the rank's: the pipeline takes medians per 10 s window
    assert persistent[0]["score"] == pytest.approx(1 / ratio, abs=0.03)
    assert persistent[0]["score"] < 1


def test_job_4_stragglers_are_only_its_slow_workers_and_do_not_overlap(found, data):
    r = ratios(job(data, 4))
    slow = set(r.group_by("worker").agg(pl.col("r").median()).filter(pl.col("r") >= 1.03)["worker"])
    mine = sorted((s for s in found["stragglers"] if s["job"] == "pai-job-4"), key=lambda s: s["start"])
    assert mine, "job 4's slow half of the gang straggles"
    assert {s["rank"] for s in mine} <= slow
    assert {1, 2, 3, 4, 9}.isdisjoint(s["rank"] for s in mine)
    for a, b in zip(mine, mine[1:], strict=False):
        assert a["end"] < b["start"], (a, b)
    times = job(data, 4)["time"]
    assert all(times.min() <= s["start"] <= s["end"] <= times.max() for s in mine)
    assert all(s["kind"] in ("persistent", "transient") and 0 < s["score"] < 1 for s in mine)


def test_gang_wait_per_episode_from_the_csv(found, data):
    """Per episode: over its iterations, the straggler's time beyond the gang's lower median, times the
    other workers that waited for it (goodput.sql 10b's rule)."""
    for s in found["stragglers"]:
        n = int(s["job"].rsplit("-", 1)[1])
        r = ratios(job(data, n)).filter(
            (pl.col("worker") == s["rank"]) & pl.col("time").is_between(s["start"], s["end"])
        )
        expect = r.select(
            ((pl.col("batch_time_norm") - pl.col("m")).clip(0) * (pl.col("n") - 1)).sum()
        ).item()
        assert s["gang_wait"] == pytest.approx(expect, abs=0.1), s
        assert s["steps"] == r.height, s


def test_json_lists_stragglers_in_the_documented_shape(found):
    assert found["replay_version"] == 1 and found["trace"] == "alibaba-pai-minibatch"
    for s in found["stragglers"]:
        assert {"job", "rank", "kind", "start", "end", "score"} <= s.keys()
        assert isinstance(s["start"], int) and isinstance(s["end"], int) and not math.isnan(s["score"])
    imports = {i["file"].rsplit("/", 1)[1]: i for i in found["import"]}
    assert imports["job_2_norm.csv"]["rows_read"] == 2402
    assert imports["job_4_norm.csv"]["unknown_columns"] == []
    assert found["loaded"]["dead_letters"] == 0


def test_config_sets_the_straggler_thresholds(found, data, tmp_path):
    """`[analyzer] straggler_persistent_fraction` reaches the detector: job 4's longest episode (rank 7,
    about 35 % of the job's windows) is transient at the default 0.5 and persistent at 0.3, where the
    next longest (rank 5, about 22 %) stays transient."""
    longest = max((s for s in found["stragglers"] if s["job"] == "pai-job-4"), key=lambda s: s["steps"])
    assert longest["kind"] == "transient"
    cfg = tmp_path / "c.toml"
    cfg.write_text("[analyzer]\nstraggler_persistent_fraction = 0.3\n")
    again = replay_json(
        "alibaba-pai-minibatch",
        str(data / "job_4_norm.csv"),
        "--config",
        str(cfg),
        "--out",
        str(tmp_path / "o"),
    )
    same = [s for s in again["stragglers"] if (s["rank"], s["start"]) == (longest["rank"], longest["start"])]
    assert [s["kind"] for s in same] == ["persistent"]
    assert {s["kind"] for s in again["stragglers"] if s["rank"] == 5} == {"transient"}
