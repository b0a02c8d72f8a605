"""Times every dashboard query on a 30-day store: what docs/dashboards.md quotes.

The simulator makes one hour (16 GPUs, a failure, stragglers); every table is then copied 719 times,
each copy an hour earlier (job ids suffixed, so per-job tables hold 720x the jobs), which gives the row
counts of 30 days of that cluster without simulating them. Each query is expanded as Grafana and the
ClickHouse plugin would (tests/dashboards/grafana.py) for the last 30 days and "All" pools and teams,
run 3 times; the best time is printed.

    .venv/bin/python bench/bench_dashboards.py [--hours-back 720]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from goodput.sim.cluster import PlannedFailure  # noqa: E402
from tests.dashboards import grafana  # noqa: E402
from tests.dashboards.test_queries import ALL  # noqa: E402
from tests.skeleton.conftest import run_pipeline  # noqa: E402


def _shifted(name: str, ch_type: str) -> str:
    """The column of the copy `n` hours earlier: times moved back, job ids made distinct."""
    bare = ch_type.replace("Nullable(", "")
    if bare.startswith("DateTime"):
        return f"`{name}` - toIntervalHour(n)"
    if bare.startswith("Date"):
        return f"`{name}` - toIntervalDay(intDiv(n, 24))"
    if name in ("job_id", "longest_hold_job"):
        suffixed = f"concat(`{name}`, '~', toString(n))"
        return f"if(`{name}` IS NULL, NULL, {suffixed})" if "Nullable" in ch_type else suffixed
    return f"`{name}`"


def replicate(store, copies: int) -> None:
    """Appends `copies` earlier copies of every fact table's rows (one INSERT ... ARRAY JOIN each)."""
    tables = store.query_arrow(
        "SELECT name FROM system.tables WHERE database = currentDatabase() AND engine LIKE '%MergeTree'"
        " AND name NOT LIKE 'dim_%' AND name != 'schema_migrations'"
    ).column("name")
    for table in tables.to_pylist():
        cols = store.query_arrow(
            "SELECT name, type FROM system.columns WHERE database = currentDatabase()"
            f" AND table = '{table}' ORDER BY position"
        ).to_pylist()
        names = ", ".join(f"`{c['name']}`" for c in cols)
        shifted = ", ".join(_shifted(c["name"], c["type"]) for c in cols)
        t = time.perf_counter()
        store.execute(
            f"INSERT INTO {table} ({names}) SELECT {shifted} FROM {table}"
            f" ARRAY JOIN range(1, {copies + 1}) AS n"
        )
        rows = store.query_arrow(f"SELECT count() AS n FROM {table}").to_pylist()[0]["n"]
        print(f"  {table}: {rows:,} rows ({time.perf_counter() - t:.1f} s)", file=sys.stderr)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--hours-back", type=int, default=720)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        run(Path(tmp), args.hours_back)


def run(tmp: Path, hours_back: int) -> None:
    out = run_pipeline(
        tmp,
        gpus=16,
        hours=1.0,
        seed=5,
        stragglers_per_hour=6.0,
        storage_demand_scale=2.0,
        planned_failures=(PlannedFailure(job_index=0, after_running_s=900, kind="xid"),),
    )
    store = out["store"]
    replicate(store, hours_back - 1)
    store.execute("OPTIMIZE TABLE raw_gpu FINAL")  # merged parts, as a server's background merges leave them
    fault = store.query_arrow("SELECT job_id, node FROM faults ORDER BY ts DESC LIMIT 1").to_pylist()[0]
    values = {
        "cluster": out["config"].cluster.name,
        "pool": grafana.ALL,
        "team": grafana.ALL,
        "job": fault["job_id"],
        "node": fault["node"],
    }
    end = datetime.now(UTC)
    start = end - timedelta(days=30)
    print("| dashboard | query | rows | best of 3 (ms) |\n|---|---|---|---|")
    for dashboard, what, title, target, holder in ALL:
        interval = grafana.interval_s(
            start, end, holder.get("maxDataPoints", 1000), grafana.parse_duration_s(holder.get("interval"))
        )
        sql = grafana.expand(target["rawSql"], values, grafana.Query(start, end, interval))
        best, rows = float("inf"), 0
        for _ in range(3):
            t = time.perf_counter()
            rows = store.query_arrow(sql).num_rows
            best = min(best, time.perf_counter() - t)
        print(f"| {dashboard} | {what}: {title} | {rows} | {best * 1000:.0f} |", flush=True)
    store.close()


if __name__ == "__main__":
    main()
