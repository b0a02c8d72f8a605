"""The report's model and the queries and helpers its pages share.

Nothing in pipeline/report formats or translates numbers but render.py: a Page holds numbers and tables
(polars frames), so the HTML, the Markdown, the CSV/Parquet files and the JSON all show the same values,
and the tests recompute them from the same tables. The day is the reader's (`[report] timezone`):
windows are cut at their local midnight, not at UTC's as `team_day` is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from datetime import time as dtime
from zoneinfo import ZoneInfo

import polars as pl

from contracts import catalog
from pipeline.store import Params, Store

TREND_DAYS = 7
WHY_COLUMNS = ("loss_category", "loss_pct", "evidence", "evidence_from_ms", "evidence_to_ms")
"""top_jobs' why, structured: its largest loss and that loss's largest evidence with its time span."""
STORAGE = "storage of pool"
NETWORK = ("fabric congestion", "NIC line rate")
SILENT = "no telemetry from node"


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


def frame(store: Store, sql: str, params: Params) -> pl.DataFrame:
    df = pl.from_arrow(store.query_arrow(sql, params))
    assert isinstance(df, pl.DataFrame)  # an Arrow table always converts to a DataFrame
    return df


def local(col: str, tz: str) -> pl.Expr:
    """Epoch seconds in `col` as the reader's local datetime."""
    return pl.from_epoch(pl.col(col), time_unit="s").dt.replace_time_zone("UTC").dt.convert_time_zone(tz)


def windows(store: Store, cluster: str, since_ms: int, until_ms: int, tz: str) -> pl.DataFrame:
    """goodput_windows in 15-minute buckets (every time zone's midnight falls on one) per job and category,
    with the reader's day and hour; `silent_gpu_seconds`: classified without telemetry from the node."""
    df = frame(
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
    t = local("t", tz)
    return df.with_columns(day=t.dt.date(), hour=t.dt.hour())


def goodput(df: pl.DataFrame, by: list[str]) -> pl.DataFrame:
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


def categories(df: pl.DataFrame) -> pl.DataFrame:
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
    return frame(
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


def checkpoint_saves(store: Store, cluster: str, a_ms: int, b_ms: int) -> pl.DataFrame:
    """Per job, its checkpoint saves of the day (runs of consecutive checkpoint windows: a save longer
    than a window spans several) and their GPU-seconds."""
    return frame(
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
