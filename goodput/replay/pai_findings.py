"""What the PAI replay found: the straggler episodes of `straggler_episodes` (goodput.sql 10b) in the
trace's own units, the gang's wait for each by 10b's rule from the stored step events, and per job the
step-time split (docs/real-traces.md)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import polars as pl

from goodput.replay import REPLAY_VERSION
from pipeline.store import Store

if TYPE_CHECKING:
    from goodput.replay.pai import Job

EPISODES = """
SELECT job_id, rank, kind, toInt64(toUnixTimestamp(start)) * 1000 AS start_ms,
       toInt64(toUnixTimestamp(end)) * 1000 AS end_ms, steps, slowdown_pct, score, cost_gpu_seconds
FROM straggler_episodes WHERE cluster = {cluster:String} ORDER BY job_id, start_ms, rank
"""
WAIT = """
-- per episode, the gang's wait for its straggler as goodput.sql 10b measures it: per step, the
-- straggler's compute over the gang's (lower) median, times the other ranks that waited for it
WITH s AS (
    SELECT job_id, step, rank, toUnixTimestamp64Milli(ts) AS t1, toFloat64(compute_ms) AS c
    FROM raw_step FINAL WHERE cluster = {cluster:String} AND compute_ms > 0 AND duration_ms > 0
),
g AS (SELECT job_id, step, quantileExactLow(0.5)(c) AS m, count() AS n FROM s
      GROUP BY job_id, step HAVING n >= 2)
SELECT e.job_id AS job_id, e.rank AS rank, e.start_ms AS start_ms,
       sum(greatest(0.0, s.c - g.m) * (g.n - 1)) AS wait_ms,
       min(s.step) AS first_step, max(s.step) AS last_step
FROM ({episodes}) AS e
INNER JOIN s ON s.job_id = e.job_id AND s.rank = e.rank AND s.t1 > e.start_ms AND s.t1 <= e.end_ms
INNER JOIN g ON g.job_id = s.job_id AND g.step = s.step
GROUP BY job_id, rank, start_ms
"""


def findings(store: Store, cluster: str, jobs: list[Job], base_ms: int, unit_ms: float) -> dict:
    """Straggler episodes from straggler_episodes, in the trace's units; per job, the step-time split."""
    p = {"cluster": cluster}
    episodes = pl.from_arrow(store.query_arrow(EPISODES, p))
    wait = pl.from_arrow(
        store.query_arrow(
            WAIT.replace("{episodes}", EPISODES.replace("ORDER BY job_id, start_ms, rank", "")), p
        )
    )
    assert isinstance(episodes, pl.DataFrame) and isinstance(wait, pl.DataFrame)
    rows = episodes.join(wait, on=["job_id", "rank", "start_ms"], how="left")
    by_job = {j.job_id: j for j in jobs}
    stragglers = []
    for r in rows.iter_rows(named=True):
        stragglers.append(
            {
                "job": r["job_id"],
                "rank": int(r["rank"]),
                "kind": r["kind"],
                "start": int(r["first_step"]),
                "end": int(r["last_step"]),
                "score": round(float(r["score"]), 4),
                "slowdown_pct": round(float(r["slowdown_pct"]), 2),
                "steps": int(r["steps"]),
                "start_norm_time": (r["start_ms"] - base_ms) / unit_ms,
                "end_norm_time": (r["end_ms"] - base_ms) / unit_ms,
                "gang_wait": round(float(r["wait_ms"] or 0.0) / unit_ms, 1),
                "gang_wait_gpu_share": round(
                    float(r["wait_ms"] or 0.0) / unit_ms * by_job[r["job_id"]].mean_share,
                    1,
                ),
            }
        )
    per_job = {}
    for j in jobs:
        s = j.steps
        per_job[j.job_id] = {
            "workers": len(j.ranks),
            "gpu_share": round(j.mean_share, 4),
            "iterations": int(s["time"].n_unique()),
            "incomplete_iterations": j.incomplete,
            "norm_time": j.duration_ms / unit_ms,
            # the ranks' step time spent in their own mini-batch; the rest waited for the gang's slowest
            "step_time_goodput_pct": round(100 * float(s["own"].sum()) / float(s["step_ms"].sum()), 2),
            "gang_wait": round(float((s["step_ms"] - s["own"]).sum()) / unit_ms, 1),
        }
    return {
        "replay_version": REPLAY_VERSION,
        "trace": "alibaba-pai-minibatch",
        "time_unit": "normalised mini-batch time (0-1000 per job); start/end: iterations (`time`)",
        "jobs": per_job,
        "stragglers": stragglers,
    }


def describe(f: dict) -> str:
    lines = []
    for job, j in f["jobs"].items():
        lines.append(
            f"{job}: {j['workers']} workers, {j['iterations']} iterations, step-time goodput "
            f"{j['step_time_goodput_pct']:.1f}% (the rest waited for the gang's slowest worker)"
        )
    lines += [
        "",
        f"{'job':<14}{'rank':>5} {'kind':<11}{'iterations':>16}{'score':>8}{'slower':>9}{'gang wait':>12}",
    ]
    for s in f["stragglers"]:
        lines.append(
            f"{s['job']:<14}{s['rank']:>5} {s['kind']:<11}{s['start']:>8}-{s['end']:<7}{s['score']:>8.3f}"
            f"{s['slowdown_pct']:>8.1f}%{s['gang_wait']:>12,.0f}"
        )
    if not f["stragglers"]:
        lines.append("(no straggler episodes)")
    return "\n".join(lines)
