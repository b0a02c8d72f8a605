"""The report's numbers: every figure of every page, computed with polars from the analyzer output tables.

Nothing here formats or translates: a Page holds numbers and tables (polars frames), so the HTML, the
Markdown, the CSV/Parquet files and the JSON all show the same values, and the tests recompute them from
the same tables. The day is the reader's (`[report] timezone`): windows are cut at their local midnight,
not at UTC's as `team_day` is.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from datetime import time as dtime
from zoneinfo import ZoneInfo

import polars as pl

from contracts import catalog
from contracts.config import Config
from pipeline.store import Params, Store
from pipeline.summary import iso

TREND_DAYS = 7
WHY_COLUMNS = ("loss_category", "loss_pct", "evidence", "evidence_from_ms", "evidence_to_ms")
"""top_jobs' why, structured: its largest loss and that loss's largest evidence with its time span."""
STRAGGLER = re.compile(r"straggler (\S+) GPU (\d+)")
STORAGE = "storage of pool"
NETWORK = ("fabric congestion", "NIC line rate")
SILENT = "no telemetry from node"
DATA_STALL_SHARE = 0.05
"""A team's data stall worth a recommendation: at least this share of its allocated time."""
CHECKPOINT_CHANGE = 0.25
"""A checkpoint interval is worth changing when Young/Daly's optimum differs from it by this much."""
DRAIN_MIN_GPU_HOURS = 0.5
"""A straggling GPU worth draining its node for: it cost the team at least this much."""
GANG_WAIT_MIN_S = 60.0
"""A gang wait worth a recommendation: GPUs held at least this long waiting for the rest."""


@dataclass
class Page:
    """One page: the cluster's (team None) or a team's."""

    team: str | None
    numbers: dict[str, float | int | str | None]
    tables: dict[str, pl.DataFrame]
    recommendations: list[dict] = field(default_factory=list)


@dataclass
class Report:
    cluster: str
    currency: str
    day: date
    timezone: str
    start_ms: int
    end_ms: int
    pages: list[Page]
    coverage: dict
    empty: bool


def day_range(day: date, tz: str) -> tuple[int, int]:
    """[local midnight, next local midnight) of `day` in `tz` as epoch ms (23 or 25 h across DST)."""
    z = ZoneInfo(tz)
    a = datetime.combine(day, dtime(0), z)
    b = datetime.combine(day + timedelta(days=1), dtime(0), z)
    return int(a.timestamp() * 1000), int(b.timestamp() * 1000)


def nearest_rank(values: pl.Series, q: float) -> float | None:
    """The ceil(q n)-th smallest value, as queue_delay_day defines its percentiles; None without values."""
    v = values.drop_nulls().sort()
    return float(v[max(math.ceil(q * v.len()), 1) - 1]) if v.len() else None


def last_day(end_ms: int, tz: str) -> date:
    """The reader's day holding the last millisecond before `end_ms` (the demo reports the day it ends)."""
    return datetime.fromtimestamp((end_ms - 1) / 1000, ZoneInfo(tz)).date()


def _frame(store: Store, sql: str, params: Params) -> pl.DataFrame:
    df = pl.from_arrow(store.query_arrow(sql, params))
    assert isinstance(df, pl.DataFrame)  # an Arrow table always converts to a DataFrame
    return df


def _local(col: str, tz: str) -> pl.Expr:
    """Epoch seconds in `col` as the reader's local datetime."""
    return pl.from_epoch(pl.col(col), time_unit="s").dt.replace_time_zone("UTC").dt.convert_time_zone(tz)


def windows(store: Store, cluster: str, since_ms: int, until_ms: int, tz: str) -> pl.DataFrame:
    """goodput_windows in 15-minute buckets (every time zone's midnight falls on one) per job and category,
    with the reader's day and hour; `silent_gpu_seconds`: classified without telemetry from the node."""
    df = _frame(
        store,
        f"""
        SELECT toUnixTimestamp(toStartOfFifteenMinutes(window_start)) AS t, job_id, team, account, pool,
               category, sum(gpu_seconds) AS gpu_seconds, sum(cost) AS cost,
               sumIf(gpu_seconds, startsWith(evidence, '{SILENT}')) AS silent_gpu_seconds,
               toUnixTimestamp(max(computed_at)) AS computed_at
        FROM {catalog.GOODPUT_WINDOWS}
        WHERE cluster = {{cluster:String}} AND window_start >= toDateTime({{a:Int64}}, 'UTC')
              AND window_start < toDateTime({{b:Int64}}, 'UTC')
        GROUP BY t, job_id, team, account, pool, category
        SETTINGS prefer_column_name_to_alias = 1""",
        {"cluster": cluster, "a": since_ms // 1000, "b": until_ms // 1000},
    )
    local = _local("t", tz)
    return df.with_columns(day=local.dt.date(), hour=local.dt.hour())


def _goodput(df: pl.DataFrame, by: list[str]) -> pl.DataFrame:
    """Allocated GPU-hours, goodput %, cost and waste per `by`."""
    return (
        df.group_by(by)
        .agg(
            allocated_gpu_hours=pl.col("gpu_seconds").sum() / 3600,
            productive_gpu_hours=pl.col("gpu_seconds").filter(pl.col("category") == "productive").sum()
            / 3600,
            cost=pl.col("cost").sum(),
            waste_cost=pl.col("cost").filter(pl.col("category") != "productive").sum(),
        )
        .with_columns(
            goodput_pct=100 * pl.col("productive_gpu_hours") / pl.max_horizontal("allocated_gpu_hours", 1e-12)
        )
        .sort(by)
    )


def _categories(df: pl.DataFrame) -> pl.DataFrame:
    """GPU-hours, share and cost of every category, in the stable order (zeros included)."""
    total = float(df["gpu_seconds"].sum()) if df.height else 0.0
    got = df.group_by("category").agg(gpu_seconds=pl.col("gpu_seconds").sum(), cost=pl.col("cost").sum())
    rows = []
    for c in catalog.CATEGORIES:
        r = got.filter(pl.col("category") == c)
        s = float(r["gpu_seconds"][0]) if r.height else 0.0
        rows.append(
            {
                "category": c,
                "gpu_hours": s / 3600,
                "pct": 100 * s / total if total else 0.0,
                "cost": float(r["cost"][0]) if r.height else 0.0,
            }
        )
    return pl.DataFrame(
        rows, schema={"category": pl.Utf8, "gpu_hours": pl.Float64, "pct": pl.Float64, "cost": pl.Float64}
    )


def evidence(store: Store, cluster: str, a_ms: int, b_ms: int) -> pl.DataFrame:
    """Per job, category and evidence string of the day: GPU-seconds and the first and last window."""
    return _frame(
        store,
        f"""
        SELECT job_id, category, evidence, sum(gpu_seconds) AS gpu_seconds,
               toUnixTimestamp(min(window_start)) AS first_s,
               toUnixTimestamp(max(window_start)) + any(window_s) AS last_s, count() AS windows
        FROM {catalog.GOODPUT_WINDOWS}
        WHERE cluster = {{cluster:String}} AND window_start >= toDateTime({{a:Int64}}, 'UTC')
              AND window_start < toDateTime({{b:Int64}}, 'UTC')
              AND category != 'productive' AND evidence != ''
        GROUP BY job_id, category, evidence
        SETTINGS prefer_column_name_to_alias = 1""",
        {"cluster": cluster, "a": a_ms // 1000, "b": b_ms // 1000},
    )


def build(store: Store, cfg: Config, day: date, team: str | None = None) -> Report:
    """Every page of the report of `day` (the reader's): the cluster page and one per team (or `team`)."""
    tz = cfg.report.timezone
    cluster = cfg.cluster.name
    a, b = day_range(day, tz)
    trend_a, _ = day_range(day - timedelta(days=TREND_DAYS), tz)
    w_all = windows(store, cluster, trend_a, b, tz)
    w = w_all.filter(pl.col("day") == day)
    ev = evidence(store, cluster, a, b)
    jobs = _frame(
        store,
        f"SELECT job_id, gpus, sm_active_pct FROM {catalog.JOB_SUMMARY} WHERE cluster = {{cluster:String}}",
        {"cluster": cluster},
    )
    sched = _frame(
        store,
        f"""
        SELECT job_id, team, pool, gpus_requested, queue_wait_s, gang_wait_s,
               toUnixTimestamp64Milli(submitted) AS submitted_ms
        FROM {catalog.SCHEDULING_DELAY}
        WHERE cluster = {{cluster:String}} AND submitted >= fromUnixTimestamp64Milli({{a:Int64}}, 'UTC')
              AND submitted < fromUnixTimestamp64Milli({{b:Int64}}, 'UTC')""",
        {"cluster": cluster, "a": a, "b": b},
    )
    faults = _frame(
        store,
        f"""
        SELECT job_id, toUnixTimestamp64Milli(ts) AS ts_ms, kind, owner, reason, node, gpu, nic,
               gpu_seconds, held_gpu_seconds, cost
        FROM {catalog.FAULTS}
        WHERE cluster = {{cluster:String}} AND ts >= fromUnixTimestamp64Milli({{a:Int64}}, 'UTC')
              AND ts < fromUnixTimestamp64Milli({{b:Int64}}, 'UTC') ORDER BY ts, job_id""",
        {"cluster": cluster, "a": a, "b": b},
    )
    frag = _frame(
        store,
        f"""
        SELECT pool, count() AS samples, countIf(fragmented) AS fragmented_samples,
               avg(stranded_gpus) AS mean_stranded_gpus, max(free_gpus) AS max_free_gpus,
               max(pending_jobs) AS max_pending_jobs
        FROM {catalog.POOL_FRAGMENTATION}
        WHERE cluster = {{cluster:String}} AND window_start >= toDateTime({{a:Int64}}, 'UTC')
              AND window_start < toDateTime({{b:Int64}}, 'UTC') GROUP BY pool ORDER BY pool""",
        {"cluster": cluster, "a": a // 1000, "b": b // 1000},
    )
    job_team = w.select("job_id", "team").unique("job_id")
    team_of_job = dict(job_team.iter_rows())
    faults = faults.with_columns(team=pl.col("job_id").replace_strict(team_of_job, default=""))
    idle = _frame(
        store,
        f"""
        SELECT job_id, team, pool, node, gpu, toUnixTimestamp64Milli(idle_from) AS idle_from_ms,
               toUnixTimestamp64Milli(idle_to) AS idle_to_ms, idle_s, reclaimable_s, gpu_hours
        FROM {catalog.IDLE_ALLOCATIONS}
        WHERE cluster = {{cluster:String}} AND idle_from < fromUnixTimestamp64Milli({{b:Int64}}, 'UTC')
              AND idle_to >= fromUnixTimestamp64Milli({{a:Int64}}, 'UTC')
        ORDER BY reclaimable_s DESC, job_id, node, gpu""",
        {"cluster": cluster, "a": a, "b": b},
    )
    episodes = _frame(
        store,
        f"""
        SELECT job_id, rank, node, gpu, toUnixTimestamp64Milli(toDateTime64(start, 3)) AS start_ms,
               toUnixTimestamp64Milli(toDateTime64(end, 3)) AS end_ms, kind, slowdown_pct,
               cost_gpu_seconds
        FROM {catalog.STRAGGLER_EPISODES}
        WHERE cluster = {{cluster:String}} AND start < toDateTime({{b:Int64}}, 'UTC')
              AND end > toDateTime({{a:Int64}}, 'UTC')
        ORDER BY cost_gpu_seconds DESC, job_id, rank, start""",
        {"cluster": cluster, "a": a // 1000, "b": b // 1000},
    )
    saves = checkpoint_saves(store, cluster, a, b)
    teams = sorted(w["team"].unique().to_list()) if team is None else [team]
    cluster_goodput = _goodput(w.with_columns(all=pl.lit("")), ["all"])
    cluster_pct = float(cluster_goodput["goodput_pct"][0]) if cluster_goodput.height else None
    pages = [_cluster_page(store, cfg, w, ev, sched, faults, frag, a, b, tz)]
    for t in teams:
        pages.append(
            _team_page(
                cfg, t, w, w_all, ev, jobs, sched, faults, idle, frag, episodes, saves, day, tz, cluster_pct
            )
        )
    coverage = _coverage(store, cluster, w, a, b)
    return Report(cluster, cfg.cluster.currency, day, tz, a, b, pages, coverage, empty=w.height == 0)


def _team_page(
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
    cats = _categories(tw)
    alloc = float(tw["gpu_seconds"].sum()) / 3600
    prod = float(cats.filter(pl.col("category") == "productive")["gpu_hours"][0])
    g = 100 * prod / alloc if alloc else None
    # Trend: the team's goodput per local day, the report's day and the TREND_DAYS before it.
    trend = _goodput(w_all.filter(pl.col("team") == team), ["day"]).select(
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
        _goodput(tw, ["account"])
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


def checkpoint_saves(store: Store, cluster: str, a_ms: int, b_ms: int) -> pl.DataFrame:
    """Per job, its checkpoint saves of the day (runs of consecutive checkpoint windows: a save longer
    than a window spans several) and their GPU-seconds."""
    return _frame(
        store,
        f"""
        SELECT job_id, countIf(gap != w) AS saves, sum(s) AS gpu_seconds
        FROM (
            SELECT job_id, any(window_s) AS w, sum(gpu_seconds) AS s,
                   toUnixTimestamp(window_start) - lagInFrame(toUnixTimestamp(window_start), 1, 0)
                       OVER (PARTITION BY job_id ORDER BY window_start
                             ROWS BETWEEN 1 PRECEDING AND CURRENT ROW) AS gap
            FROM {catalog.GOODPUT_WINDOWS}
            WHERE cluster = {{cluster:String}} AND category = 'checkpoint'
                  AND window_start >= toDateTime({{a:Int64}}, 'UTC')
                  AND window_start < toDateTime({{b:Int64}}, 'UTC')
            GROUP BY job_id, window_start
        )
        GROUP BY job_id""",
        {"cluster": cluster, "a": a_ms // 1000, "b": b_ms // 1000},
    )


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


def _cluster_page(
    store: Store,
    cfg: Config,
    w: pl.DataFrame,
    ev: pl.DataFrame,
    sched: pl.DataFrame,
    faults: pl.DataFrame,
    frag: pl.DataFrame,
    a: int,
    b: int,
    tz: str,
) -> Page:
    cluster = cfg.cluster.name
    p: Params = {"cluster": cluster, "a": a // 1000, "b": b // 1000}
    cap = _frame(
        store,
        f"""
        SELECT toUnixTimestamp(bucket_start) AS t, pool, pool_class, capacity_gpu_s, allocated_gpu_s,
               unallocated_gpu_s
        FROM {catalog.POOL_CAPACITY}
        WHERE cluster = {{cluster:String}} AND bucket_start >= toDateTime({{a:Int64}}, 'UTC')
              AND bucket_start < toDateTime({{b:Int64}}, 'UTC')""",
        p,
    ).with_columns(hour=_local("t", tz).dt.hour())
    pools = (
        _goodput(w, ["pool"])
        .select("pool", "allocated_gpu_hours", "goodput_pct", "waste_cost")
        .join(
            cap.group_by("pool").agg(
                pool_class=pl.col("pool_class").first(),
                capacity_gpu_hours=pl.col("capacity_gpu_s").sum() / 3600,
                unallocated_gpu_hours=pl.col("unallocated_gpu_s").sum() / 3600,
            ),
            on="pool",
            how="full",
            coalesce=True,
        )
        .join(frag, on="pool", how="left")
        .sort("pool")
    )
    heat = (
        cap.group_by("pool", "hour")
        .agg(capacity_gpu_s=pl.col("capacity_gpu_s").sum(), allocated_gpu_s=pl.col("allocated_gpu_s").sum())
        .with_columns(
            allocated_pct=100 * pl.col("allocated_gpu_s") / pl.max_horizontal("capacity_gpu_s", 1e-12)
        )
        .select("pool", "hour", "allocated_pct")
        .sort("pool", "hour")
    )
    teams = _goodput(w, ["team"]).select("team", "allocated_gpu_hours", "goodput_pct", "cost", "waste_cost")
    team_cats = (
        w.group_by("team", "category")
        .agg(gpu_hours=pl.col("gpu_seconds").sum() / 3600)
        .sort("team", "category")
    )
    holds = _frame(
        store,
        f"""
        SELECT job_id, team, pool, toUnixTimestamp64Milli(held_from) AS held_from_ms,
               toUnixTimestamp64Milli(held_to) AS held_to_ms, hold_s, gpus, gpu_hours
        FROM {catalog.POOL_HOLDS}
        WHERE cluster = {{cluster:String}} AND pool_class = 'core'
              AND held_from < toDateTime64({{b:Int64}}, 3, 'UTC')
              AND held_to >= toDateTime64({{a:Int64}}, 3, 'UTC')
        ORDER BY hold_s DESC, job_id LIMIT 20""",
        p,
    )
    repeats = _frame(
        store,
        f"""
        SELECT scope, node, gpu, failures, repeats, max_in_window, gpu_seconds,
               arrayStringConcat(kinds, ',') AS kinds
        FROM {catalog.FAULT_REPEATS} WHERE cluster = {{cluster:String}}
        ORDER BY repeats DESC, scope, node, gpu""",
        {"cluster": cluster},
    )
    storage_s = float(ev.filter(pl.col("evidence").str.starts_with(STORAGE))["gpu_seconds"].sum())
    network_s = float(
        ev.filter(pl.any_horizontal(*(pl.col("evidence").str.starts_with(n) for n in NETWORK)))[
            "gpu_seconds"
        ].sum()
    )
    waiting = sched.filter(pl.col("queue_wait_s").is_null() | (pl.col("queue_wait_s") > 0))
    signals = pl.DataFrame(
        [
            {
                "signal": "storage_ceiling",
                "gpu_hours": storage_s / 3600,
                "jobs": ev.filter(pl.col("evidence").str.starts_with(STORAGE))["job_id"].n_unique(),
            },
            {
                "signal": "network_congestion",
                "gpu_hours": network_s / 3600,
                "jobs": ev.filter(
                    pl.any_horizontal(*(pl.col("evidence").str.starts_with(n) for n in NETWORK))
                )["job_id"].n_unique(),
            },
            {
                "signal": "gpu_shortage",
                "gpu_hours": float(w.filter(pl.col("category") == "gang_wait")["gpu_seconds"].sum()) / 3600,
                "jobs": waiting.height,
            },
        ],
        schema={"signal": pl.Utf8, "gpu_hours": pl.Float64, "jobs": pl.Int64},
    )
    qw = sched["queue_wait_s"].drop_nulls()
    alloc = float(w["gpu_seconds"].sum()) / 3600
    numbers: dict[str, float | int | str | None] = {
        "allocated_gpu_hours": alloc,
        "goodput_pct": 100
        * float(w.filter(pl.col("category") == "productive")["gpu_seconds"].sum())
        / 3600
        / alloc
        if alloc
        else None,
        "cost": float(w["cost"].sum()),
        "waste_cost": float(w.filter(pl.col("category") != "productive")["cost"].sum()),
        "capacity_gpu_hours": float(cap["capacity_gpu_s"].sum()) / 3600,
        "unallocated_gpu_hours": float(cap["unallocated_gpu_s"].sum()) / 3600,
        "jobs": w["job_id"].n_unique(),
        "faults": faults.height,
        "queue_wait_p50_s": nearest_rank(qw, 0.5),
        "queue_wait_p95_s": nearest_rank(qw, 0.95),
    }
    return Page(
        None,
        numbers,
        {
            "teams": teams,
            "team_categories": team_cats,
            "pools": pools,
            "pool_hours": heat,
            "core_pool_holders": holds,
            "repeat_offenders": repeats,
            "capacity_signals": signals,
        },
    )


def _coverage(store: Store, cluster: str, w: pl.DataFrame, a: int, b: int) -> dict:
    """What tells a bad number from bad data: GPU-time without telemetry, dead letters, analyzer runs."""
    dead = _frame(
        store,
        f"""
        SELECT reason, count() AS n FROM {catalog.DEAD_LETTERS}
        WHERE received_at >= fromUnixTimestamp64Milli({{a:Int64}}, 'UTC')
              AND received_at < fromUnixTimestamp64Milli({{b:Int64}}, 'UTC')
              AND (cluster = {{cluster:String}} OR cluster = '')
        GROUP BY reason ORDER BY n DESC, reason""",
        {"cluster": cluster, "a": a, "b": b},
    )
    computed = int(w["computed_at"].max()) if w.height else None  # type: ignore[arg-type]
    return {
        "silent_gpu_hours": float(w["silent_gpu_seconds"].sum()) / 3600,
        "allocated_gpu_hours": float(w["gpu_seconds"].sum()) / 3600,
        "dead_letters": dict(dead.iter_rows()),
        "analyzed_at": iso(computed * 1000) if computed else None,
        "reanalyzed_after_day": bool(computed and computed * 1000 > b + 3_600_000),
    }
