"""`goodput replay alibaba-pai-minibatch`: per-worker mini-batch times of real PAI training jobs (Xiao et
al., OSDI '20) as step events, through straggler detection (goodput.sql 10b, straggler_episodes).

Each `job_N_norm.csv` is one synchronous data-parallel job of (usually) ten workers: for each sampled
iteration (`time`), each worker's mini-batch time, normalised to 0-1000. A worker is a rank on a node of
its own (one GPU, `gpu` % of it). The replay takes one normalised unit as one millisecond and lays the
sampled iterations end to end: an iteration lasts as long as its slowest worker (the gang waits for it at
the all-reduce), so each rank's step event has that duration, its own mini-batch time as `compute_ms` and
the rest as `comm_ms` (waiting for the gang). Job events frame it (submitted, allocated, gang_complete and
running at the start, completed and released after the last iteration). Episodes are reported in the
trace's own units: iterations (`time`) and normalised time."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from contracts import config as config_mod
from goodput.replay.feed import Feeder, fresh_store
from goodput.replay.openb import REPLAY_VERSION
from goodput.replay.traces import ImportStats, TraceError, dedup_counted, read, sort_counted
from pipeline.analyzers import run as analyzers
from pipeline.progress import Progress
from pipeline.store import Store

CLUSTER = "alibaba-pai"
SCHEDULER = "pai-scheduler"
UNIT_MS = 1
"""Milliseconds per normalised time unit of the trace (its times are 0-1000 per job, not seconds)."""
STEPS_PER_BATCH = 500


@dataclass
class Job:
    job_id: str
    steps: pl.DataFrame
    """time, worker, share, own, step_ms, t1 (ms from the job's start), one row per (iteration, worker)."""
    stats: ImportStats
    incomplete: int
    """Iterations some worker did not report (a gang of one cannot straggle: left out of detection)."""

    @property
    def ranks(self) -> list[int]:
        return sorted(self.steps["worker"].unique().to_list())

    @property
    def duration_ms(self) -> int:
        return int(self.steps.select(pl.col("t1").max()).item() or 0)

    @property
    def mean_share(self) -> float:
        return float(self.steps.select(pl.col("share").mean()).item() or 1.0)

    def node(self, rank: int) -> str:
        return f"{self.job_id}-w{rank:02d}"


def files(path: Path) -> list[Path]:
    found = sorted(path.glob("job_*_norm.csv")) if path.is_dir() else [path]
    if not found or not all(f.is_file() for f in found):
        raise TraceError(f"{path}: no such file, or a directory without job_*_norm.csv files")
    return found


def read_job(path: Path) -> Job:
    """One job file, checked: rows without worker, time or batch_time_norm, or with a negative time,
    dropped; a repeated (time, worker), the first kept; rows sorted by (time, worker); an empty `gpu`
    share taken as 100 %."""
    df, stats = read(
        path,
        "a PAI mini-batch file",
        {"worker": pl.Int64, "time": pl.Int64, "batch_time_norm": pl.Float64},
        {"gpu": pl.Float64},
        ignored=("",),
    )
    stats.drop("negative batch_time_norm", df.filter(pl.col("batch_time_norm") < 0).height)
    df = df.filter(pl.col("batch_time_norm") >= 0)
    if n := df["gpu"].null_count():
        stats.filled["gpu"] = n
    df = dedup_counted(sort_counted(df, ["time", "worker"], stats), ["time", "worker"], stats)
    stats.rows_used = df.height
    if df.is_empty():
        raise TraceError(f"{path}: no usable rows ({stats.dropped})")
    workers = df["worker"].n_unique()
    per_iter = df.group_by("time", maintain_order=True).agg(
        step_ms=pl.col("batch_time_norm").max() * UNIT_MS, n=pl.len()
    )
    per_iter = per_iter.with_columns(t1=pl.col("step_ms").cum_sum())
    steps = df.join(per_iter, on="time").select(
        "time",
        "worker",
        share=pl.col("gpu").fill_null(100.0) / 100,
        own=pl.col("batch_time_norm") * UNIT_MS,
        step_ms="step_ms",
        t1="t1",
    )
    job_id = "pai-" + path.stem.removesuffix("_norm").replace("_", "-")
    return Job(job_id, steps, stats, int((per_iter["n"] < workers).sum()))


def config_data(jobs: list[Job], user: dict | None) -> dict:
    """One pool of one-GPU nodes, a node per worker; the analyzer's defaults, a `--config` file's
    `[analyzer]` (straggler_* keys) and other tables laid over them (`[[pools]]` refused)."""
    data: dict = {
        "schema_version": config_mod.CONFIG_VERSION,
        "cluster": {"name": CLUSTER, "currency": "USD", "control_nodes": [SCHEDULER]},
        "gpu_types": {"PAI": {"price_per_gpu_hour": 1.0, "has_gpm": False}},
        "network_tiers": {"unknown": {"link_gbps": 100.0, "links_per_node": 1, "link_layer": "Ethernet"}},
        "pools": [
            {
                "name": "pai",
                "class": "shared",
                "gpu_type": "PAI",
                "gpus_per_node": 1,
                "nodes": [j.node(r) for j in jobs for r in j.ranks],
                "network_tier": "unknown",
                "storage_ceiling_bytes_per_s": 1e12,
            }
        ],
        "store": {"kind": "chdb", "path": "store"},
    }
    if user:
        if "pools" in user:
            raise config_mod.ConfigError("[[pools]]: a replay makes its own pool of the trace's workers")
        for key, value in user.items():
            if isinstance(value, dict) and isinstance(data.get(key), dict):
                data[key] = {**data[key], **value}
            else:
                data[key] = value
        if SCHEDULER not in data["cluster"].get("control_nodes", []):
            data["cluster"]["control_nodes"] = [*data["cluster"].get("control_nodes", []), SCHEDULER]
    return data


def send_job(feeder: Feeder, job: Job, base_ms: int, progress: Progress, done: int) -> int:
    """The job's events and its ranks' steps, in time order, a batch per node per STEPS_PER_BATCH
    iterations; returns the step rows sent so far."""
    ranks = job.ranks
    common = {"job_id": job.job_id, "attempt": 1, "gpus_requested": len(ranks), "source": "file"}
    start = [
        {**common, "event": "submitted", "ts_ms": base_ms},
        *(
            {**common, "event": "allocated", "ts_ms": base_ms, "node": job.node(r), "gpu_indices": [0]}
            for r in ranks
        ),
        {**common, "event": "gang_complete", "ts_ms": base_ms},
        {**common, "event": "running", "ts_ms": base_ms},
    ]
    end_ms = base_ms + job.duration_ms
    end = [
        {**common, "event": "completed", "ts_ms": end_ms},
        *(
            {**common, "event": "released", "ts_ms": end_ms, "node": job.node(r), "gpu_indices": [0]}
            for r in ranks
        ),
    ]
    feeder.send("job", SCHEDULER, _columns(start), base_ms + 1000)
    iters = job.steps["time"].unique(maintain_order=True)
    for lo in range(0, iters.len(), STEPS_PER_BATCH):
        chunk = job.steps.filter(pl.col("time").is_in(iters.slice(lo, STEPS_PER_BATCH).implode()))
        for r in ranks:
            mine = chunk.filter(pl.col("worker") == r)
            if mine.is_empty():
                continue
            ts = (base_ms + mine["t1"]).cast(pl.Int64)
            cols = {
                "ts_ms": ts.to_list(),
                "job_id": [job.job_id] * mine.height,
                "rank": mine["worker"].to_list(),
                "step": mine["time"].to_list(),
                "attempt": [1] * mine.height,
                "gpu": [0] * mine.height,
                "duration_ms": mine["step_ms"].to_list(),
                "compute_ms": mine["own"].to_list(),
                "comm_ms": (mine["step_ms"] - mine["own"]).to_list(),
            }
            feeder.send("step", job.node(r), cols, max(ts.to_list()) + 1000)
            done += mine.height
            progress.update(done)
    feeder.send("job", SCHEDULER, _columns(end), end_ms + 1000)
    return done


def _columns(batch: list[dict]) -> dict[str, list]:
    fields = sorted({k for e in batch for k in e})
    return {f: [e.get(f, [] if f == "gpu_indices" else None) for e in batch] for f in fields}


def replay(path: Path, out: Path, config_path: str | None = None, quiet: bool = False) -> dict:
    started = time.perf_counter()
    jobs = [read_job(f) for f in files(path)]
    user = config_mod.read_toml(config_path)[0] if config_path else None
    data = config_data(jobs, user)
    cfg = config_mod.parse(data, config_path or "<replay>")
    w_ms = cfg.analyzer.window_s * 1000
    longest = max(j.duration_ms for j in jobs)
    # every job starts at one window-aligned instant, an hour (at least) before now
    base_ms = (int(time.time() * 1000) - longest - 3_600_000) // w_ms * w_ms
    out.mkdir(parents=True, exist_ok=True)
    with fresh_store(out / "store") as store:
        feeder = Feeder(store, cfg)
        progress = Progress("replay pai", sum(j.steps.height for j in jobs), unit="step", quiet=quiet)
        done = 0
        for job in jobs:
            done = send_job(feeder, job, base_ms, progress, done)
        totals = feeder.totals
        progress.done(f"{sum(totals.rows.values()):,} rows, {sum(totals.dead_letters.values())} dead letters")
        if totals.dead_letters:
            raise TraceError(
                f"{path}: the loader refused {dict(totals.dead_letters)}; see goodput dead-letters"
            )
        progress = Progress("analyze", 0, unit="statement", quiet=quiet)
        analyzers.run(store, cfg, base_ms, base_ms + longest + w_ms, progress)
        progress.done()
        result = findings(store, cfg.cluster.name, jobs, base_ms)
    (out / "config.toml").write_bytes(__import__("tomli_w").dumps(data).encode())
    result["import"] = [j.stats.as_dict() for j in jobs]
    result["loaded"] = {k: int(v) for k, v in sorted(totals.rows.items())} | {"dead_letters": 0}
    result["elapsed_s"] = round(time.perf_counter() - started, 1)
    return result


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


def findings(store: Store, cluster: str, jobs: list[Job], base_ms: int) -> dict:
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
                "start_norm_time": (r["start_ms"] - base_ms) / UNIT_MS,
                "end_norm_time": (r["end_ms"] - base_ms) / UNIT_MS,
                "gang_wait": round(float(r["wait_ms"] or 0.0) / UNIT_MS, 1),
                "gang_wait_gpu_share": round(
                    float(r["wait_ms"] or 0.0) / UNIT_MS * by_job[r["job_id"]].mean_share,
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
            "norm_time": j.duration_ms / UNIT_MS,
            # the ranks' step time spent in their own mini-batch; the rest waited for the gang's slowest
            "step_time_goodput_pct": round(100 * float(s["own"].sum()) / float(s["step_ms"].sum()), 2),
            "gang_wait": round(float((s["step_ms"] - s["own"]).sum()) / UNIT_MS, 1),
        }
    return {
        "replay_version": REPLAY_VERSION,
        "trace": "alibaba-pai-minibatch",
        "time_unit": "normalised mini-batch time (0-1000 per job); start/end: iterations (`time`)",
        "jobs": per_job,
        "stragglers": stragglers,
    }


def format_findings(f: dict) -> str:
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


def main(args) -> int:
    try:
        result = replay(Path(args.path), Path(args.out), args.config, quiet=args.json)
    except TraceError as e:
        print(f"goodput replay alibaba-pai-minibatch: {e}", file=sys.stderr)
        return 2
    if args.json:
        import json

        json.dump(result, sys.stdout, indent=2)
        print()
    else:
        print(format_findings(result))
    return 0
