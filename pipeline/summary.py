"""Per-team and per-job GPU time by category, read back from the analyzer outputs.

The one reader behind `goodput summary`, the demo's table and its CSV files, so they always agree. The
JSON form (`summary --json`, and `explain --json` in pipeline/explain.py) is a versioned contract:
docs/summary.md.
"""

from __future__ import annotations

from datetime import UTC, datetime

import polars as pl

from contracts import catalog
from pipeline.store import Store

SUMMARY_VERSION = 1
"""Version of the JSON of `goodput summary --json` and `goodput explain --json` (docs/summary.md): raised
when a key is removed or changes meaning; adding keys keeps it."""
WHY_PER_CATEGORY = 3
"""Evidence strings listed per job and category in the summary: the largest."""


def _where(cluster: str, team: str | None, job: str | None) -> tuple[str, dict[str, str]]:
    """The WHERE clause of a report for `cluster`, optionally one team's or one job's rows; the values
    are query parameters (pipeline.store.Params), so a filter typed by a user is only ever data."""
    params = {"cluster": cluster}
    where = "WHERE cluster = {cluster:String}"
    if team is not None:
        params["team"] = team
        where += " AND team = {team:String}"
    if job is not None:
        params["job"] = job
        where += " AND job_id = {job:String}"
    return where, params


def job_table(store: Store, cluster: str, team: str | None = None, job: str | None = None) -> pl.DataFrame:
    where, params = _where(cluster, team, job)
    t = store.query_arrow(f"SELECT * FROM {catalog.JOB_SUMMARY} {where} ORDER BY job_id", params)
    df = pl.from_arrow(t)
    assert isinstance(df, pl.DataFrame)  # an Arrow table always converts to a DataFrame
    return df.drop("computed_at")


def team_table(store: Store, cluster: str, team: str | None = None, job: str | None = None) -> pl.DataFrame:
    """One row per team: allocated GPU-hours, goodput %, GPU-hours per category, cost and waste."""
    cats = catalog.CATEGORIES
    sums = ", ".join(f"sumIf(gpu_seconds, category = '{c}') / 3600 AS {c}_gpu_hours" for c in cats)
    where, params = _where(cluster, team, job)
    t = store.query_arrow(
        f"""
        SELECT team, sum(gpu_seconds) / 3600 AS allocated_gpu_hours,
               100 * sumIf(gpu_seconds, category = 'productive')
                   / greatest(sum(gpu_seconds), 1e-9) AS goodput_pct,
               {sums}, sum(cost) AS cost, sumIf(cost, category != 'productive') AS waste_cost,
               uniqExact(job_id) AS jobs
        FROM {catalog.GOODPUT_WINDOWS} {where}
        GROUP BY team ORDER BY allocated_gpu_hours DESC
        SETTINGS prefer_column_name_to_alias = 1""",
        params,
    )
    df = pl.from_arrow(t)
    assert isinstance(df, pl.DataFrame)  # an Arrow table always converts to a DataFrame
    return df


def iso(ms: int | None) -> str | None:
    """Epoch ms as ISO 8601 UTC with a Z (the JSON's one time format), None stays None."""
    if ms is None:
        return None
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def why_table(store: Store, cluster: str) -> dict[str, dict[str, list[dict]]]:
    """job -> category -> its largest evidence strings with their GPU-seconds (productive has none)."""
    t = store.query_arrow(
        f"""
        SELECT job_id, category, evidence, sum(gpu_seconds) AS gpu_seconds
        FROM {catalog.GOODPUT_WINDOWS}
        WHERE cluster = {{cluster:String}} AND category != 'productive' AND evidence != ''
        GROUP BY job_id, category, evidence
        ORDER BY job_id, category, gpu_seconds DESC, evidence
        LIMIT {WHY_PER_CATEGORY} BY job_id, category""",
        {"cluster": cluster},
    )
    out: dict[str, dict[str, list[dict]]] = {}
    for r in t.to_pylist():
        out.setdefault(r["job_id"], {}).setdefault(r["category"], []).append(
            {"evidence": r["evidence"], "gpu_seconds": r["gpu_seconds"]}
        )
    return out


def fault_tables(store: Store, cluster: str) -> dict[str, list[dict]]:
    """Faults by kind and owner (count, GPU-seconds each cost), and the repeat offenders."""
    where, params = "WHERE cluster = {cluster:String}", {"cluster": cluster}
    by_kind = store.query_arrow(
        f"""
        SELECT kind, owner, count() AS faults, uniqExact(job_id) AS jobs, sum(gpu_seconds) AS gpu_seconds,
               sum(held_gpu_seconds) AS held_gpu_seconds, sum(cost) AS cost
        FROM {catalog.FAULTS} {where} GROUP BY kind, owner ORDER BY gpu_seconds DESC, kind""",
        params,
    )
    repeats = store.query_arrow(
        f"""
        SELECT scope, node, gpu, failures, repeats, max_in_window, window_s,
               toUnixTimestamp64Milli(first_failure) AS first_failure,
               toUnixTimestamp64Milli(last_failure) AS last_failure, gpu_seconds, kinds, jobs
        FROM {catalog.FAULT_REPEATS} {where} ORDER BY repeats DESC, scope, node, gpu""",
        params,
    )
    return {
        "by_kind": by_kind.to_pylist(),
        "repeat_offenders": [
            {**r, "first_failure": iso(r["first_failure"]), "last_failure": iso(r["last_failure"])}
            for r in repeats.to_pylist()
        ],
    }


def as_json(
    store: Store, cluster: str, currency: str, team: str | None = None, job: str | None = None
) -> dict:
    jobs = job_table(store, cluster, team, job)
    teams = team_table(store, cluster, team, job)
    why = why_table(store, cluster)
    cats = catalog.CATEGORIES
    return {
        "version": SUMMARY_VERSION,
        "cluster": cluster,
        "currency": currency,
        "categories": list(cats),
        "teams": [
            {
                "team": r["team"],
                "jobs": r["jobs"],
                "allocated_gpu_seconds": r["allocated_gpu_hours"] * 3600,
                "goodput_pct": r["goodput_pct"],
                "cost": r["cost"],
                "waste_cost": r["waste_cost"],
                "gpu_seconds": {c: r[f"{c}_gpu_hours"] * 3600 for c in cats},
            }
            for r in teams.iter_rows(named=True)
        ],
        "jobs": [
            {
                "job_id": r["job_id"],
                "team": r["team"],
                "account": r["account"],
                "pool": r["pool"],
                "gpus": r["gpus"],
                "attempts": r["attempts"],
                "allocated_gpu_seconds": r["allocated_gpu_seconds"],
                "goodput_pct": r["goodput_pct"],
                "sm_active_pct": r["sm_active_pct"],
                "cost": r["cost"],
                "waste_cost": r["waste_cost"],
                "gpu_seconds": {c: r[f"s_{c}"] for c in cats},
                "why": {c: why.get(r["job_id"], {}).get(c, []) for c in catalog.WASTE_CATEGORIES},
            }
            for r in jobs.iter_rows(named=True)
        ],
        "faults": fault_tables(store, cluster),
    }


def format_team_table(teams: pl.DataFrame, currency: str) -> str:
    """The demo's terminal table: what a team lead reads first."""
    cats = [c for c in catalog.WASTE_CATEGORIES]
    head = (
        ["team", "GPU-h", "goodput"]
        + [c.replace("_", " ") for c in cats]
        + [f"cost {currency}", f"waste {currency}"]
    )
    rows = []
    for r in teams.iter_rows(named=True):
        rows.append(
            [r["team"], f"{r['allocated_gpu_hours']:.1f}", f"{r['goodput_pct']:.1f}%"]
            + [f"{r[f'{c}_gpu_hours']:.1f}" for c in cats]
            + [f"{r['cost']:,.0f}", f"{r['waste_cost']:,.0f}"]
        )
    if rows:
        tot_h = float(teams["allocated_gpu_hours"].sum())
        prod = float(teams["productive_gpu_hours"].sum())
        rows.append(
            ["TOTAL", f"{tot_h:.1f}", f"{100 * prod / max(tot_h, 1e-9):.1f}%"]
            + [f"{teams[f'{c}_gpu_hours'].sum():.1f}" for c in cats]
            + [f"{teams['cost'].sum():,.0f}", f"{teams['waste_cost'].sum():,.0f}"]
        )
    widths = [max(len(str(x)) for x in col) for col in zip(head, *rows, strict=True)]

    def line(cells: list) -> str:
        return "  ".join(
            str(c).rjust(w) if i else str(c).ljust(w)
            for i, (c, w) in enumerate(zip(cells, widths, strict=True))
        )

    out = [line(head), line(["-" * w for w in widths])] + [line(r) for r in rows]
    out.insert(len(out) - 1, line(["-" * w for w in widths]))
    return "\n".join(out)
