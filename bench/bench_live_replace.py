"""How long a live run's replacement of its rows in goodput_live takes, run after run (issue 19).

    .venv/bin/python bench/bench_live_replace.py [--jobs 330] [--runs 100] [--gap 1.0] [--repeat 2]
        [--json out.json]

The loader service makes a live run every `[loader].live_every_s` (a minute, say), and each ends as
goodput.sql does: a lightweight DELETE of the alive jobs' windows from the run's start on, then an INSERT
of its new rows. The DELETE is a mutation the engine's background pool applies to the table's parts,
and the run waits for it. Here `--runs` such pairs follow each other `--gap` seconds apart (in real time;
the windows advance a minute per run, as the live runs' do), with `--jobs` jobs of three categories per
10 s window over the last 10 minutes (330 jobs: ~9,400 rows a run, the 10,240-GPU bench store's live run),
into goodput_live as `pipeline.ddl.migrate` makes it and, as the baseline, with its tuning
(`ddl.TABLE_TUNING`) reset to the engine's defaults. Each variant in a fresh store, alternating,
`--repeat` times, in this process; printed: the DELETE's median, 90th percentile and maximum, how many
runs waited more than 0.1 s, and the table's active parts at the end.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from contracts import catalog  # noqa: E402
from pipeline import ddl  # noqa: E402
from pipeline.chdb_store import ChdbStore  # noqa: E402

LIVE = catalog.GOODPUT_LIVE
WINDOWS = 60  # the last 10 minutes in 10 s windows
CATEGORIES = ("productive", "data_stall", "comm_stall")
SLOW_S = 0.1


def _run_rows(jobs: int, start: str) -> str:
    """One live run's rows: every job x window x category from `start` (a DateTime expression) on."""
    per_job = WINDOWS * len(CATEGORIES)
    return (
        f"INSERT INTO {LIVE} (cluster, job_id, window_start, window_s, team, pool, account, category, "
        "gpu_seconds, cost, evidence) "
        f"SELECT 'bench', concat('job-', toString(intDiv(number, {per_job}))), "
        f"{start} + INTERVAL 10 * intDiv(number % {per_job}, {len(CATEGORIES)}) SECOND, 10, 'team', 'pool', "
        f"'account', {list(CATEGORIES)}[number % {len(CATEGORIES)} + 1], 80, 0.1, '' "
        f"FROM numbers({jobs * per_job})"
    )


def replace_runs(path: Path, jobs: int, runs: int, gap_s: float, tuned: bool) -> dict:
    """`runs` live runs' DELETE + INSERT into a fresh store's goodput_live; the DELETEs' seconds."""
    deletes = []
    with ChdbStore(path) as store:
        ddl.migrate(store)
        if not tuned:
            names = ", ".join(ddl.TABLE_TUNING[LIVE])
            store.execute(f"ALTER TABLE {LIVE} RESET SETTING {names}")
        day = "toStartOfDay(now()) - INTERVAL 1 DAY"  # the simulated day, whole: its windows stay in it
        for i in range(runs):
            start = f"{day} + INTERVAL {i} MINUTE"
            took = time.perf_counter()
            store.execute(
                f"DELETE FROM {LIVE} WHERE cluster = 'bench' AND window_start >= {start} "
                f"AND job_id IN (SELECT concat('job-', toString(number)) FROM numbers({jobs}))"
            )
            deletes.append(time.perf_counter() - took)
            store.execute(_run_rows(jobs, start))
            time.sleep(gap_s)
        parts = store.query_arrow(
            "SELECT count() AS n FROM system.parts WHERE active AND database = currentDatabase() "
            f"AND table = '{LIVE}'"
        )
        rows = store.query_arrow(f"SELECT count() AS n FROM {LIVE}")
    ordered = sorted(deletes)
    return {
        "median_s": statistics.median(deletes),
        "p90_s": ordered[int(0.9 * (len(ordered) - 1))],
        "max_s": ordered[-1],
        "slow_runs": sum(d > SLOW_S for d in deletes),
        "parts": int(parts.column("n")[0].as_py()),
        "rows": int(rows.column("n")[0].as_py()),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--jobs", type=int, default=330)
    ap.add_argument("--runs", type=int, default=100)
    ap.add_argument("--gap", type=float, default=1.0, help="seconds between runs")
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    variants = {"tuned (ddl.TABLE_TUNING)": True, "engine defaults": False}
    results: dict[str, list[dict]] = {name: [] for name in variants}
    with tempfile.TemporaryDirectory(prefix="bench-live-replace-") as tmp:
        for r in range(args.repeat):
            for name, tuned in variants.items():
                got = replace_runs(Path(tmp) / f"{r}-{tuned}", args.jobs, args.runs, args.gap, tuned)
                results[name].append(got)
                print(
                    f"  {name}, round {r + 1}/{args.repeat}: DELETE median {got['median_s']:.3f} s, "
                    f"p90 {got['p90_s']:.3f} s, max {got['max_s']:.2f} s, {got['slow_runs']} of "
                    f"{args.runs} over {SLOW_S} s; {got['parts']} parts",
                    file=sys.stderr,
                    flush=True,
                )
    for name, runs in results.items():
        print(
            f"{name:26s} DELETE median {statistics.median(x['median_s'] for x in runs):.3f} s, "
            f"p90 {max(x['p90_s'] for x in runs):.3f} s, max {max(x['max_s'] for x in runs):.2f} s, "
            f"runs over {SLOW_S} s: {sum(x['slow_runs'] for x in runs)} of {args.runs * args.repeat}"
        )
    if args.json:
        shown = {k: str(v) for k, v in vars(args).items()}
        args.json.write_text(json.dumps({"args": shown, **results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
