"""A team's page: its GPU time, goodput and SM activity, losses, trend, queue, top jobs with their why,
faults, stragglers, idle allocations, accounts, and the recommendations with the numbers behind them."""

from __future__ import annotations

import math
import re
from datetime import date, timedelta

import polars as pl

from contracts.config import Config
from pipeline.report.data import STORAGE, WHY_COLUMNS, Page, categories, goodput, nearest_rank

STRAGGLER = re.compile(r"straggler (\S+) GPU (\d+)")
DATA_STALL_SHARE = 0.05
"""A team's data stall worth a recommendation: at least this share of its allocated time."""
CHECKPOINT_CHANGE = 0.25
"""A checkpoint interval is worth changing when Young/Daly's optimum differs from it by this much."""
DRAIN_MIN_GPU_HOURS = 0.5
"""A straggling GPU worth draining its node for: it cost the team at least this much."""
GANG_WAIT_MIN_S = 60.0
"""A gang wait worth a recommendation: GPUs held at least this long waiting for the rest."""


def team_page(
    cfg: Config,
    team: str,
    w: pl.DataFrame,
    w_all: pl.DataFrame,
    ev: pl.DataFrame,
    jobs: pl.DataFrame,
    sched: pl.DataFrame,
    faults: pl.DataFrame,
    idle: pl.DataFrame,
    frag: pl.DataFrame,
    episodes: pl.DataFrame,
    saves: pl.DataFrame,
    day: date,
    tz: str,
    cluster_pct: float | None,
) -> Page:
    tw = w.filter(pl.col("team") == team)
    cats = categories(tw)
    alloc = float(tw["gpu_seconds"].sum()) / 3600
    prod = float(cats.filter(pl.col("category") == "productive")["gpu_hours"][0])
    g = 100 * prod / alloc if alloc else None
    # Trend: the team's goodput per local day, the report's day and the TREND_DAYS before it.
    trend = goodput(w_all.filter(pl.col("team") == team), ["day"]).select(
        "day", "allocated_gpu_hours", "goodput_pct"
    )
    prev = trend.filter(pl.col("day") == day - timedelta(days=1))
    prev_pct = float(prev["goodput_pct"][0]) if prev.height else None
    # Jobs of the day: waste and the SM activity beside goodput (job_summary's, weighted by today's time).
    per_job = (
        tw.group_by("job_id")
        .agg(
            account=pl.col("account").first(),
            pool=pl.col("pool").first(),
            allocated_gpu_hours=pl.col("gpu_seconds").sum() / 3600,
            waste_gpu_hours=pl.col("gpu_seconds").filter(pl.col("category") != "productive").sum() / 3600,
            waste_cost=pl.col("cost").filter(pl.col("category") != "productive").sum(),
        )
        .join(jobs, on="job_id", how="left")
        .with_columns(
            goodput_pct=100
            * (1 - pl.col("waste_gpu_hours") / pl.max_horizontal("allocated_gpu_hours", 1e-12))
        )
    )
    sm = per_job.filter(pl.col("sm_active_pct").is_not_null())
    sm_pct = (
        float(
            sm.select(
                (pl.col("sm_active_pct") * pl.col("allocated_gpu_hours")).sum()
                / pl.col("allocated_gpu_hours").sum()
            ).item()
        )
        if sm.height and sm["allocated_gpu_hours"].sum() > 0
        else None
    )
    top = (
        per_job.filter(pl.col("waste_gpu_hours") > 0)
        .sort(["waste_gpu_hours", "job_id"], descending=[True, False])
        .head(cfg.report.top_jobs)
    )
    why = pl.DataFrame(
        [_why(r, tw, ev) for r in top.iter_rows(named=True)],
        schema={
            "loss_category": pl.Utf8,
            "loss_pct": pl.Float64,
            "evidence": pl.Utf8,
            "evidence_from_ms": pl.Int64,
            "evidence_to_ms": pl.Int64,
        },
    )
    top = pl.concat([top, why], how="horizontal").select(
        "job_id",
        "account",
        "pool",
        "gpus",
        "allocated_gpu_hours",
        "goodput_pct",
        "sm_active_pct",
        "waste_gpu_hours",
        "waste_cost",
        *WHY_COLUMNS,
    )
    accounts = (
        goodput(tw, ["account"])
        .select("account", "allocated_gpu_hours", "goodput_pct", "cost", "waste_cost")
        .sort("allocated_gpu_hours", descending=True)
    )
    ts = sched.filter(pl.col("team") == team)
    qw = ts["queue_wait_s"].drop_nulls()
    team_jobs = set(tw["job_id"].unique().to_list())
    tf = faults.filter(pl.col("team") == team).select(
        "job_id", "ts_ms", "kind", "owner", "reason", "node", "gpu", "gpu_seconds", "cost"
    )
    stragglers = _stragglers(ev.filter(pl.col("job_id").is_in(list(team_jobs))))
    ti = idle.filter(pl.col("team") == team).select(
        "job_id", "pool", "node", "gpu", "idle_from_ms", "idle_to_ms", "idle_s", "reclaimable_s"
    )
    target = cfg.report.target(team)
    numbers: dict[str, float | int | str | None] = {
        "allocated_gpu_hours": alloc,
        "productive_gpu_hours": prod,
        "goodput_pct": g,
        "sm_active_pct": sm_pct,
        "cost": float(tw["cost"].sum()),
        "waste_cost": float(tw.filter(pl.col("category") != "productive")["cost"].sum()),
        "jobs": len(team_jobs),
        "previous_day_goodput_pct": prev_pct,
        "change_pct_points": g - prev_pct if g is not None and prev_pct is not None else None,
        "queue_jobs": qw.len(),
        "queue_wait_p50_s": nearest_rank(qw, 0.5),
        "queue_wait_p95_s": nearest_rank(qw, 0.95),
        "cluster_goodput_pct": cluster_pct,
        "target_goodput_pct": target,
        "faults": tf.height,
        "reclaimable_gpu_hours": float(ti["reclaimable_s"].sum()) / 3600,
    }
    recs = _recommendations(cfg, tw, cats, alloc, ev, per_job, tf, stragglers, ts, frag, saves)
    return Page(
        team,
        numbers,
        {
            "categories": cats,
            "trend": trend,
            "accounts": accounts,
            "top_jobs": top,
            "faults": tf,
            "stragglers": stragglers,
            "straggler_episodes": episodes.filter(pl.col("job_id").is_in(list(team_jobs))),
            "idle_allocations": ti,
        },
        recs,
    )


def _why(job: dict, tw: pl.DataFrame, ev: pl.DataFrame) -> dict:
    """The job's largest loss: its category and share of the job's time, and that category's largest
    evidence string with the span of its windows (the renderers put it in words)."""
    jw = tw.filter((pl.col("job_id") == job["job_id"]) & (pl.col("category") != "productive"))
    cat, s = (
        jw.group_by("category")
        .agg(s=pl.col("gpu_seconds").sum())
        .sort(["s", "category"], descending=[True, False])
        .row(0)
    )
    out = {"loss_category": cat, "loss_pct": 100 * s / 3600 / job["allocated_gpu_hours"]}
    je = ev.filter((pl.col("job_id") == job["job_id"]) & (pl.col("category") == cat)).sort(
        ["gpu_seconds", "evidence"], descending=[True, False]
    )
    if je.height:
        r = je.row(0, named=True)
        out |= {
            "evidence": r["evidence"],
            "evidence_from_ms": r["first_s"] * 1000,
            "evidence_to_ms": r["last_s"] * 1000,
        }
    else:
        out |= {"evidence": None, "evidence_from_ms": None, "evidence_to_ms": None}
    return out


def _stragglers(ev: pl.DataFrame) -> pl.DataFrame:
    """Straggling GPUs named by comm_stall evidence: node, GPU, the jobs they slowed, GPU-hours lost."""
    rows = []
    for r in ev.filter(pl.col("category") == "comm_stall").iter_rows(named=True):
        m = STRAGGLER.search(r["evidence"])
        if m:
            rows.append(
                {"node": m[1], "gpu": int(m[2]), "job_id": r["job_id"], "gpu_seconds": r["gpu_seconds"]}
            )
    df = pl.DataFrame(
        rows, schema={"node": pl.Utf8, "gpu": pl.Int64, "job_id": pl.Utf8, "gpu_seconds": pl.Float64}
    )
    return (
        df.group_by("node", "gpu")
        .agg(jobs=pl.col("job_id").n_unique(), gpu_hours=pl.col("gpu_seconds").sum() / 3600)
        .sort(["gpu_hours", "node", "gpu"], descending=[True, False, False])
    )


def _recommendations(
    cfg: Config,
    tw: pl.DataFrame,
    cats: pl.DataFrame,
    alloc: float,
    ev: pl.DataFrame,
    per_job: pl.DataFrame,
    tf: pl.DataFrame,
    stragglers: pl.DataFrame,
    ts: pl.DataFrame,
    frag: pl.DataFrame,
    saves: pl.DataFrame,
) -> list[dict]:
    """Each recommendation: a kind, its subject and the numbers behind it (the renderers word it)."""
    recs: list[dict] = []
    # Checkpoint interval (Young/Daly): sqrt(2 C MTBF), C the time one save takes, MTBF the job's running
    # time that day per failure; C and the current interval come from its runs of checkpoint windows.
    failing = tf.filter(pl.col("owner") == "job").group_by("job_id").agg(failures=pl.len()).sort("job_id")
    for job_id, failures in failing.iter_rows():
        j = per_job.filter(pl.col("job_id") == job_id)
        ck = saves.filter(pl.col("job_id") == job_id)
        if not j.height or not ck.height or not j["gpus"][0]:
            continue
        gpus, n = int(j["gpus"][0]), int(ck["saves"][0])
        wall_s = float(j["allocated_gpu_hours"][0]) * 3600 / gpus
        save_s = float(ck["gpu_seconds"][0]) / gpus / n
        mtbf_s = wall_s / failures
        optimal_s = math.sqrt(2 * save_s * mtbf_s)
        current_s = wall_s / n
        if abs(optimal_s - current_s) / current_s >= CHECKPOINT_CHANGE:
            recs.append(
                {
                    "kind": "checkpoint_interval",
                    "job_id": job_id,
                    "failures": failures,
                    "saves": n,
                    "mtbf_s": mtbf_s,
                    "checkpoint_cost_s": save_s,
                    "current_interval_s": current_s,
                    "recommended_interval_s": optimal_s,
                }
            )
    # Data stall dominating the team's loss: the pool whose storage most often stood at its ceiling.
    waste = cats.filter(pl.col("category") != "productive").sort("gpu_hours", descending=True)
    ds = float(cats.filter(pl.col("category") == "data_stall")["gpu_hours"][0])
    if alloc and waste.height and waste["category"][0] == "data_stall" and ds / alloc >= DATA_STALL_SHARE:
        by_pool = (
            tw.filter(pl.col("category") == "data_stall")
            .group_by("pool")
            .agg(s=pl.col("gpu_seconds").sum(), c=pl.col("cost").sum())
            .sort(["s", "pool"], descending=[True, False])
        )
        pool, s, c = by_pool.row(0)
        at_ceiling = ev.filter(
            pl.col("job_id").is_in(tw["job_id"].unique().to_list())
            & pl.col("evidence").str.starts_with(f"{STORAGE} {pool} ")
        )["gpu_seconds"].sum()
        ceiling = next((p.storage_ceiling_bytes_per_s for p in cfg.pools if p.name == pool), None)
        recs.append(
            {
                "kind": "storage",
                "pool": pool,
                "data_stall_gpu_hours": s / 3600,
                "data_stall_cost": c,
                "data_stall_pct": 100 * ds / alloc,
                "at_ceiling_gpu_hours": float(at_ceiling) / 3600,
                "storage_ceiling_bytes_per_s": ceiling,
            }
        )
    # The straggling GPU that cost the team most: drain its node.
    if stragglers.height and stragglers["gpu_hours"][0] >= DRAIN_MIN_GPU_HOURS:
        r = stragglers.row(0, named=True)
        recs.append(
            {
                "kind": "drain_node",
                "node": r["node"],
                "gpu": r["gpu"],
                "jobs": r["jobs"],
                "gpu_hours": r["gpu_hours"],
            }
        )
    # Gangs that asked for more GPUs at once than their pool had free at any sampled instant of the day.
    pool_gpus = {p.name: p.gpus_per_node * len(p.nodes) for p in cfg.pools}
    max_free = dict(frag.select("pool", "max_free_gpus").iter_rows())
    for r in ts.filter(pl.col("gang_wait_s") >= GANG_WAIT_MIN_S).sort("job_id").iter_rows(named=True):
        free = max_free.get(r["pool"], pool_gpus.get(r["pool"]))
        if free is not None and r["gpus_requested"] > free:
            recs.append(
                {
                    "kind": "gang_too_large",
                    "job_id": r["job_id"],
                    "pool": r["pool"],
                    "gpus_requested": r["gpus_requested"],
                    "max_free_gpus": free,
                    "pool_gpus": pool_gpus.get(r["pool"]),
                    "queue_wait_s": r["queue_wait_s"],
                    "gang_wait_s": r["gang_wait_s"],
                }
            )
    return recs
