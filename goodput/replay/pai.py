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

import time
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from goodput.replay import replay_config
from goodput.replay.feed import Feeder, event_columns, fresh_store
from goodput.replay.pai_findings import findings
from goodput.replay.traces import ImportStats, TraceError, dedup_counted, read, sort_counted
from pipeline.analyzers import run as analyzers
from pipeline.progress import Progress

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


def config_data(jobs: list[Job], path: str | None) -> dict:
    """One pool of one-GPU nodes, a node per worker, the analyzer's defaults; a `--config` file laid over
    it (replay_config.overlay), e.g. `[analyzer]` straggler_* keys."""
    nodes = [j.node(r) for j in jobs for r in j.ranks]
    pool = {"name": "pai", "gpu_type": "PAI", "gpus_per_node": 1, "nodes": nodes}
    return replay_config.overlay(replay_config.base(CLUSTER, SCHEDULER, {"PAI": {}}, [pool]), path, SCHEDULER)


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
    feeder.send("job", SCHEDULER, event_columns(start), base_ms + 1000)
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
    feeder.send("job", SCHEDULER, event_columns(end), end_ms + 1000)
    return done


def replay(path: Path, out: Path, config_path: str | None = None) -> dict:
    started = time.perf_counter()
    jobs = [read_job(f) for f in files(path)]
    data = config_data(jobs, config_path)
    cfg = replay_config.parse(data, config_path)
    w_ms = cfg.analyzer.window_s * 1000
    longest = max(j.duration_ms for j in jobs)
    # every job starts at one window-aligned instant, an hour (at least) before now
    base_ms = (int(time.time() * 1000) - longest - 3_600_000) // w_ms * w_ms
    with fresh_store(out, cfg.cluster.name) as store:
        replay_config.write(data, out / "config.toml")  # first: it marks the store as this replay's
        feeder = Feeder(store, cfg)
        progress = Progress("replay pai", sum(j.steps.height for j in jobs), unit="step")
        done = 0
        for job in jobs:
            done = send_job(feeder, job, base_ms, progress, done)
        totals = feeder.finish(progress, path)
        progress = Progress("analyze", 0, unit="statement")
        analyzers.run(store, cfg, base_ms, base_ms + longest + w_ms, progress)
        progress.done()
        result = findings(store, cfg.cluster.name, jobs, base_ms, UNIT_MS)
    result["import"] = [j.stats.as_dict() for j in jobs]
    result["loaded"] = {k: int(v) for k, v in sorted(totals.rows.items())} | {"dead_letters": 0}
    result["elapsed_s"] = round(time.perf_counter() - started, 1)
    return result
