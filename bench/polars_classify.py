"""The goodput classification's core in polars, over Parquet copies of the raw rows: issue 19's baseline
for the analyzers (pipeline/analyzers/goodput.sql), timed by bench/bench_analyze.py --polars in the
same run as the analysis it mirrors.

Why a second implementation: "is the engine used well?" is only answered against another engine doing
the same work on the same rows. This one does the work of goodput.sql's steps 4-12 from the raw
per-second rows (no insert-time rollups: polars has no materialized views, so the rollups' work is
counted here and not there, which favours the analyzers), with the same thresholds from
`[analyzer]` and the same rounding (levels in milli-percent, then 0.01 %; sums over integers), and
prints the GPU-hours per category so that the two can be compared; bench_analyze.py does.

What it covers is what the bench day holds, and it refuses other input rather than mis-classify it:
jobs of one attempt with allocated, gang_complete, running, checkpoint_saved, completed/cancelled and
released events (no failures, restarts or preemptions: retry waste), GPU indices on every allocation,
and no step events; a coarse `running` is moved to the real start as 3c does without step events.
Not implemented and not checked, so the input must not hold them: clock offsets to correct (3a),
duplicate rows (3e), stragglers (10, 10c: the analyzers find none on the bench day), GPUs silent while
running (counted idle here, classified as their gang there: 12). tests/bench/test_polars_classify.py
holds it to the analyzers' GPU-hours on the bench day and on scenarios at the rules' edges.
"""

from __future__ import annotations

import itertools
import math
import time
from pathlib import Path

import numpy as np
import polars as pl

from contracts.config import AnalyzerConfig

EXPORTS = {
    "raw_gpu": "node, gpu, toUnixTimestamp64Milli(ts) AS ts_ms, sm_active_pct, util_gpu_pct",
    "raw_nic": "node, device, port, toUnixTimestamp64Milli(ts) AS ts_ms, rate_gbps, tx_bytes_per_s, "
    "xmit_wait_per_s, ecn_marked_per_s, cnp_sent_per_s, cnp_handled_per_s",
    "raw_storage": "node, source, device, toUnixTimestamp64Milli(ts) AS ts_ms, read_bytes_per_s, "
    "psi_some_pct",
    "raw_job": "job_id, toUnixTimestamp64Milli(ts) AS t, event, attempt, node, gpu_indices, duration_ms, "
    "ifNull(source, '') AS source",
    "raw_step": "job_id",
    "dim_nodes": "node, pool",
    "dim_pools": "pool, nodes, storage_ceiling_bytes_per_s",
}
"""The Parquet files `classify` reads (`<table>.parquet`) and what each holds: the columns the
classification reads, times as epoch milliseconds."""

FILED = pl.col("ts_ms") - 1
"""A sample with ts T describes the second (T - 1 s, T]: filed at T - 1 ms, as the analyzers do."""


SUPPORTED_EVENTS = {
    "submitted",
    "allocated",
    "gang_complete",
    "running",
    "checkpoint_saved",
    "completed",
    "cancelled",
    "released",
}


class Unsupported(ValueError):
    """Input outside what this baseline implements (see the module's docstring)."""


def _round(expr: pl.Expr) -> pl.Expr:
    """ClickHouse's round() of a float: half to even, as polars's default."""
    return expr.round(0, mode="half_to_even")


def _div(expr: pl.Expr, k: float) -> pl.Expr:
    """expr / k as ClickHouse divides: the correctly rounded quotient. Polars divides a column by a
    literal by multiplying with its reciprocal, which differs in the last bit for 13-45 % of values (of
    k = 10, 100, 1,000, 0.7, 0.9 tried), and a threshold compared with the quotient then falls the
    other way where the analyzers meet it exactly (first seen on the bench day of 2026-12-05 at the
    tolerance, since decided in integers on both sides; the evidence signals over their thresholds still
    divide). Nulls stay null (the inputs are finite: the loader refuses NaN)."""
    return expr.cast(pl.Float64).map_batches(
        lambda s: pl.Series(s.name, s.to_numpy() / k).fill_nan(None), return_dtype=pl.Float64
    )


def _in_millionths(strength: pl.Expr) -> pl.Expr:
    """An evidence strength as goodput.sql 9 keeps it: millionths of its threshold, capped at 1e12."""
    return _round(pl.min_horizontal(strength, 1e12) * 1_000_000).cast(pl.Int64)


BUSY_MILLI = _round(pl.coalesce("sm_active_pct", "util_gpu_pct").cast(pl.Float64) * 1000)
"""A GPU sample's busy level in milli-percent, as the rollups and the raw path compute it."""


def _refuse_unsupported(events: pl.DataFrame, root: Path) -> None:
    unknown = set(events["event"].unique().to_list()) - SUPPORTED_EVENTS
    if unknown:
        raise Unsupported(f"job events {sorted(unknown)}: the polars baseline covers no failures or restarts")
    if events["attempt"].max() != 1:
        raise Unsupported("jobs with more than one attempt: the polars baseline covers no retry waste")
    if (events.filter(pl.col("event") == "allocated")["gpu_indices"].list.len() == 0).any():
        raise Unsupported("allocations without GPU indices: the polars baseline does not place them")
    if pl.scan_parquet(root / "raw_step.parquet").select(pl.len()).collect().item():
        raise Unsupported("step events: the polars baseline reads the GPU counters only")


def _segments(events: pl.DataFrame) -> pl.DataFrame:
    """Per job its phases (goodput.sql 4): gang_wait, startup, run, checkpoint (the saves' spans inside
    running time), idle after completion. Returns (job_id, s0, s1, phase)."""
    out = []
    per_job = events.sort("t").group_by("job_id", maintain_order=True)
    for (job_id,), e in per_job:
        at = {ev: e.filter(pl.col("event") == ev)["t"] for ev in ("allocated", "gang_complete", "running")}
        end = e.filter(pl.col("event").is_in(["completed", "cancelled"]))["t"]
        base = [
            (at["allocated"].min(), "gang_wait"),
            (at["gang_complete"].min(), "startup"),
            (at["running"].min(), "run"),
        ]
        if len(end):
            base.append((end.max(), "idle"))
        base = [(t, p) for t, p in base if t is not None]
        last = max(e["t"].max(), base[-1][0])
        ck = e.filter(pl.col("event") == "checkpoint_saved").select(
            (pl.col("t") - pl.col("duration_ms").fill_null(0)).alias("c0"), pl.col("t").alias("c1")
        )
        points = sorted({t for t, _ in base} | set(ck["c0"].to_list()) | set(ck["c1"].to_list()) | {last})
        spans = list(zip(ck["c0"].to_list(), ck["c1"].to_list(), strict=True))
        for s0, s1 in itertools.pairwise(points):
            phase = next((p for t, p in reversed(base) if t <= s0), None)
            if phase is None:
                continue
            if phase == "run" and any(c0 <= s0 < c1 for c0, c1 in spans):
                phase = "checkpoint"
            out.append((job_id, s0, s1, phase))
    return pl.DataFrame(out, schema=["job_id", "s0", "s1", "phase"], orient="row")


def _real_starts(events: pl.DataFrame, alloc: pl.DataFrame, root: Path, cfg: AnalyzerConfig) -> pl.DataFrame:
    """The events with each coarse `running` (from a source in coarse_running_sources, or in the same
    millisecond as gang_complete) moved to the job's real start (goodput.sql 3c, without step events):
    the first second whose mean SM activity over the job's GPUs reaches healthy_cutoff x the attempt's
    healthy_quantile of those means."""
    gang = events.filter(pl.col("event") == "gang_complete").select("job_id", pl.col("t").alias("gang_t"))
    running = events.filter(pl.col("event") == "running").join(gang, on="job_id", how="left")
    coarse = running.filter(
        pl.col("source").is_in(cfg.coarse_running_sources) | (pl.col("t") == pl.col("gang_t"))
    )
    if coarse.is_empty():
        return events
    ends = events.filter(pl.col("event").is_in(["failed", "preempted", "completed", "cancelled"]))
    samples = pl.scan_parquet(root / "raw_gpu.parquet").with_columns(
        FILED.alias("t"),
        BUSY_MILLI.alias("bm"),
    )
    as_of = max(events["t"].max(), samples.select(pl.col("ts_ms").max()).collect().item())
    moved = {}
    for job_id, run_t in coarse.select("job_id", "t").rows():
        stops = ends.filter((pl.col("job_id") == job_id) & (pl.col("t") >= run_t))["t"]
        stop_t = stops.min() if len(stops) else max(as_of, run_t)
        held = alloc.filter(pl.col("job_id") == job_id).lazy()
        means = (
            samples.join(held, on=["node", "gpu"])
            .filter(
                (pl.col("t") >= pl.col("a0"))
                & (pl.col("t") < pl.col("a1"))
                & (pl.col("t") >= run_t)
                & (pl.col("t") < stop_t)
                & pl.col("bm").is_not_null()
            )
            .group_by("t")
            .agg(pl.col("bm").mean().alias("mb"))
            .sort("t")
            .collect()
        )
        if means.is_empty():
            continue
        ordered = means["mb"].sort()
        p = ordered[min(int(cfg.healthy_quantile * len(ordered)), len(ordered) - 1)]
        jump = means.filter((pl.col("mb") * 1_000_000 >= cfg.ppm("healthy_cutoff") * p) & (p > 0))["t"]
        if len(jump):
            moved[job_id] = max(run_t, jump[0] + 1 - 1000)
    if not moved:
        return events
    return events.with_columns(
        pl.when(pl.col("event") == "running")
        .then(pl.col("job_id").replace_strict(moved, default=pl.col("t"), return_dtype=pl.Int64))
        .otherwise(pl.col("t"))
        .alias("t")
    )


def _allocations(events: pl.DataFrame) -> pl.DataFrame:
    """(job_id, node, gpu, a0, a1): each GPU from its allocation to its release (or the job's last event)."""
    alloc = events.filter(pl.col("event") == "allocated")
    last = events.group_by("job_id").agg(pl.col("t").max().alias("last"))
    rel = (
        events.filter(pl.col("event") == "released")
        .explode("gpu_indices")
        .group_by("job_id", "node", "gpu_indices")
        .agg(pl.col("t").min().alias("a1"))
    )
    return (
        alloc.explode("gpu_indices")
        .group_by("job_id", "node", "gpu_indices")
        .agg(pl.col("t").min().alias("a0"))
        .join(rel, on=["job_id", "node", "gpu_indices"], how="left")
        .join(last, on="job_id")
        .select(
            "job_id",
            "node",
            pl.col("gpu_indices").cast(pl.Int64).alias("gpu"),
            "a0",
            pl.coalesce("a1", "last").alias("a1"),
        )
    )


def _piece_windows(alloc: pl.DataFrame, segments: pl.DataFrame, w: int) -> pl.DataFrame:
    """(job_id, node, gpu, phase, wi, lo, hi, secs): each GPU's allocation cut by phases and windows."""
    pieces = (
        alloc.join(segments, on="job_id")
        .with_columns(pl.max_horizontal("a0", "s0").alias("o0"), pl.min_horizontal("a1", "s1").alias("o1"))
        .filter(pl.col("o0") < pl.col("o1"))
    )
    return (
        pieces.with_columns(pl.int_ranges(pl.col("o0") // w, (pl.col("o1") - 1) // w + 1).alias("wi"))
        .explode("wi")
        .with_columns(
            pl.max_horizontal("o0", pl.col("wi") * w).alias("lo"),
            pl.min_horizontal("o1", (pl.col("wi") + 1) * w).alias("hi"),
        )
        .with_columns(((pl.col("hi") - pl.col("lo")) / 1000).alias("secs"))
        .select("job_id", "node", "gpu", "phase", "wi", "lo", "hi", "secs")
    )


def _healthy(hist: pl.DataFrame, cfg: AnalyzerConfig) -> pl.DataFrame:
    """Per job b* and sigma (goodput.sql 8) in half keys (0.005 %; b* at least 1) from its histogram of
    running levels (key at 0.01 %, count)."""
    rows = []
    for (job_id,), h in hist.sort("key").group_by("job_id", maintain_order=True):
        ks, c0 = h["key"].to_numpy().astype(np.int64), h["c"].to_numpy().astype(np.int64)
        cs = np.cumsum(c0)
        n = int(cs[-1])
        p = ks[np.argmax(cs >= math.ceil(round(cfg.healthy_quantile * n, 6)))]
        i0 = int(np.argmax(ks * 1_000_000 >= cfg.ppm("healthy_cutoff") * p))
        before = int(cs[i0] - c0[i0])
        m = n - before
        lo_keys, upto = ks[i0:], cs[i0:] - before
        below = upto - c0[i0:]
        half_end = below + (m + 1) // 2
        hi_idx = np.searchsorted(upto, half_end, side="left")  # the first level holding the half
        ok = hi_idx < len(upto)
        spans = np.where(ok, lo_keys[np.minimum(hi_idx, len(upto) - 1)] - lo_keys, np.iinfo(np.int64).max)
        best = int(np.lexsort((lo_keys, spans))[0])  # the shortest half, ties to the lowest
        mid2 = int(lo_keys[best] + lo_keys[hi_idx[best]])  # b* and sigma in half keys, as integers
        i_star = int(np.argmax(2 * ks >= mid2))
        n_up = n - int(cs[i_star] - c0[i_star])
        sh = 2 * int(ks[np.argmax(cs >= n - math.ceil(0.3173 * n_up) + 1)]) - mid2
        rows.append((job_id, max(mid2, 1), sh))
    return pl.DataFrame(rows, schema=["job_id", "bh", "sh"], orient="row")


def _node_evidence(root: Path, cfg: AnalyzerConfig, w: int) -> pl.LazyFrame:
    """(node, wi, s_d, s_c): each window's storage and fabric evidence strength (goodput.sql 9)."""
    t = FILED
    storage = pl.scan_parquet(root / "raw_storage.parquet").with_columns(
        pl.col("node").cast(pl.Categorical), (t // w).cast(pl.Int32).alias("wi")
    )
    # each row's terms first, null where they do not count: filters inside the groups took twice as long
    reading = pl.col("source").is_in(["nfs", "lustre"])
    per_node = (
        storage.with_columns(
            pl.when(reading).then(_round(pl.col("read_bytes_per_s")).cast(pl.Int64)).alias("read"),
            pl.when(reading).then(t).alias("read_t"),
            pl.when(pl.col("source") == "psi").then(pl.col("psi_some_pct")).alias("psi"),
        )
        .group_by("node", "wi")
        .agg(
            (pl.col("read").sum() / pl.max_horizontal(1, pl.col("read_t").drop_nulls().n_unique())).alias(
                "read_rate"
            ),
            pl.col("psi").max().fill_null(0),
        )
    )
    dims = (
        pl.scan_parquet(root / "dim_nodes.parquet")
        .with_columns(pl.col("node").cast(pl.Categorical))
        .join(pl.scan_parquet(root / "dim_pools.parquet"), on="pool")
    )
    pools = (
        per_node.join(dims, on="node")
        .group_by("pool", "wi")
        .agg(
            (pl.col("read_rate").sum() / pl.col("storage_ceiling_bytes_per_s").first()).alias("ratio"),
            (pl.col("read_rate").sum() / pl.max_horizontal(1, pl.col("nodes").first())).alias("mean_read"),
        )
    )
    storage_ev = (
        per_node.join(dims.select("node", "pool"), on="node", how="left")
        .join(pools, on=["pool", "wi"], how="left")
        .select(
            "node",
            "wi",
            pl.max_horizontal(
                pl.when(
                    (pl.col("read_rate") > 0)
                    & (pl.col("read_rate") >= cfg.storage_reader_fraction * pl.col("mean_read"))
                )
                .then(_div(pl.col("ratio").fill_null(0), cfg.storage_saturation))
                .otherwise(0.0),
                _div(pl.col("psi"), max(cfg.psi_some_pct, 1e-9)),
            )
            .pipe(_in_millionths)
            .alias("s_d"),
        )
    )

    def milli(col: pl.Expr, scale: float = 1000) -> pl.Expr:  # as the rollups sum: integers, nulls apart
        return _round(col * scale).cast(pl.Int64)

    def mean(name: str, scale: float = 1000) -> pl.Expr:  # null where the window has no value
        return pl.when(pl.col(name).count() > 0).then(pl.col(name).sum() / pl.col(name).count() / scale)

    rate = pl.col("rate_gbps") * 1e9 / 8
    cnp = pl.max_horizontal(pl.col("cnp_handled_per_s").fill_null(0), pl.col("cnp_sent_per_s").fill_null(0))
    nic = (
        pl.scan_parquet(root / "raw_nic.parquet")
        .select(
            pl.col("node", "device").cast(pl.Categorical),
            "port",
            (t // w).cast(pl.Int32).alias("wi"),
            milli(pl.col("xmit_wait_per_s")).alias("xmit_wait"),
            milli(pl.col("ecn_marked_per_s")).alias("ecn"),
            milli(cnp).alias("cnp"),
            milli(
                pl.col("tx_bytes_per_s") / pl.when(rate.is_not_null()).then(pl.max_horizontal(1.0, rate)), 1e6
            ).alias("line_frac"),
        )
        .group_by("node", "device", "port", "wi")
        .agg(
            mean("xmit_wait"),
            mean("ecn"),
            (pl.col("cnp").sum() / pl.len() / 1000).alias("cnp"),
            mean("line_frac", 1e6),
        )
        .group_by("node", "wi")
        .agg(pl.col("xmit_wait", "ecn", "cnp", "line_frac").max())
        .select(
            "node",
            "wi",
            pl.max_horizontal(
                pl.max_horizontal(
                    _div(pl.col("xmit_wait").fill_null(0), max(cfg.xmit_wait_per_s, 1e-9)),
                    _div(pl.col("ecn").fill_null(0), max(cfg.ecn_marked_per_s, 1e-9)),
                    _div(pl.col("cnp").fill_null(0), max(cfg.cnp_per_s, 1e-9)),
                ),
                _div(pl.col("line_frac").fill_null(0), cfg.nic_line_rate_fraction),
            )
            .pipe(_in_millionths)
            .alias("s_c"),
        )
    )
    return storage_ev.join(nic, on=["node", "wi"], how="full", coalesce=True)


def classify(root: Path, cfg: AnalyzerConfig, stages: dict[str, float] | None = None) -> dict[str, float]:
    """GPU-hours per category of every job in the Parquet copies under `root`; the seconds each stage
    took go into `stages`. Names are read as Categorical (a number per name, as the analyzers' jn/nn),
    and the big intermediate results are materialized once, in their narrowest types."""
    clock = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal clock
        if stages is not None:
            stages[name] = stages.get(name, 0.0) + time.perf_counter() - clock
        clock = time.perf_counter()

    w = cfg.window_s * 1000
    events = pl.read_parquet(root / "raw_job.parquet").unique()
    _refuse_unsupported(events, root)
    alloc = _allocations(events)
    events = _real_starts(events, alloc, root, cfg)
    windows = _piece_windows(alloc, _segments(events), w).with_columns(
        pl.col("node").cast(pl.Categorical), pl.col("wi").cast(pl.Int32)
    )
    hours = windows.filter(pl.col("phase") != "run").group_by("phase").agg(pl.col("secs").sum() / 3600).rows()
    out: dict[str, float] = dict(hours)
    run = windows.filter(pl.col("phase") == "run").drop("phase")
    lap("phases and windows")

    # 7. each running second's level, in the (job, GPU, window) it falls in: t = ts - 1 ms, inside [lo, hi)
    t = FILED
    samples = (
        pl.scan_parquet(root / "raw_gpu.parquet")
        .with_columns(
            pl.col("node").cast(pl.Categorical),
            t.alias("t"),
            (t // w).cast(pl.Int32).alias("wi"),
            BUSY_MILLI.cast(pl.Int32).alias("bm"),
        )
        .filter(pl.col("bm").is_not_null())
        .join(run.lazy().select("job_id", "node", "gpu", "wi", "lo", "hi"), on=["node", "gpu", "wi"])
        .filter((pl.col("t") >= pl.col("lo")) & (pl.col("t") < pl.col("hi")))
        .select(
            pl.col("job_id").cast(pl.Categorical),
            "node",
            pl.col("gpu").cast(pl.Int16),
            "wi",
            "bm",
            _round(pl.col("bm") / 10).cast(pl.UInt16).alias("key"),
        )
        .collect()
    )
    lap("GPU samples in running time")
    # 8. b* and sigma per job
    # (a job's number and the level in one integer: grouping on it is 4x faster than on the two columns)
    jk = pl.col("job_id").to_physical().cast(pl.UInt64) * 65_536 + pl.col("key").cast(pl.UInt64)
    hist = samples.group_by(jk.alias("jk")).agg(pl.len().alias("c"), pl.col("job_id").first())
    healthy = _healthy(hist.select("job_id", (pl.col("jk") % 65_536).alias("key"), "c"), cfg)
    lap("healthy level per job")
    # 11. the lost share per (job, GPU, window), decided in integers as run.py's dead_level and
    # at_healthy_level (Int64 but the squares, Int128)
    t, z, f = cfg.ppm("healthy_tolerance"), cfg.ppm("noise_z"), cfg.ppm("stalled_second_fraction")
    bh, sh, live_n, short_n = pl.col("bh"), pl.col("sh"), pl.col("live_n"), pl.col("short_n")
    dead_key = (pl.max_horizontal(f * bh, z * sh) + 1_999_999) // 2_000_000
    at_healthy_level = (short_n * 200_000 < t * bh * live_n) | (
        short_n.cast(pl.Int128) ** 2 * 40_000_000_000 < (z * sh).cast(pl.Int128) ** 2 * live_n
    )
    loss = (
        samples.lazy()
        .join(
            healthy.lazy().with_columns(pl.col("job_id").cast(pl.Categorical), dead_key.alias("dead_key")),
            on="job_id",
        )
        .with_columns((pl.col("key") < pl.col("dead_key")).alias("dead"))
        .group_by("job_id", "node", "gpu", "wi")
        .agg(
            pl.len().cast(pl.Int64).alias("n"),
            pl.col("bm").cast(pl.Int64).sum().alias("bsum"),
            pl.col("dead").sum().cast(pl.Int64).alias("n_dead"),
            pl.col("key").cast(pl.Int64).filter(pl.col("dead")).sum().alias("dead_sum"),
            pl.col("bh").first(),
            pl.col("sh").first(),
        )
        .with_columns((pl.col("n") - pl.col("n_dead")).alias("live_n"))
        .with_columns((5 * live_n * bh - (pl.col("bsum") - 10 * pl.col("dead_sum"))).alias("short_n"))
        .with_columns(
            pl.when((live_n == 0) | at_healthy_level)
            .then(0.0)
            .otherwise(pl.min_horizontal(1.0, short_n / (5 * live_n * bh)))
            .alias("l_live")
        )
        .select(
            pl.col("job_id").cast(pl.String),
            "node",
            pl.col("gpu").cast(pl.Int64),
            "wi",
            ((pl.col("n_dead") + (pl.col("n") - pl.col("n_dead")) * pl.col("l_live")) / pl.col("n")).alias(
                "l"
            ),
        )
        .collect()
    )
    del samples
    lap("lost share per GPU window")
    evidence = _node_evidence(root, cfg, w).collect()
    lap("node evidence")
    # 11a. each (job, node)'s evidence level while healthy: windows none of its GPUs there lost anything
    base = (
        loss.lazy()
        .group_by("job_id", "node", "wi")
        .agg(pl.col("l").max())
        .filter(pl.col("l") == 0)
        .join(evidence.lazy(), on=["node", "wi"], how="left")
        .group_by("job_id", "node")
        .agg(
            pl.col("s_d").fill_null(0).sort().get((pl.len() - 1) // 2).alias("base_d"),
            pl.col("s_c").fill_null(0).sort().get((pl.len() - 1) // 2).alias("base_c"),
            pl.len().alias("k"),
        )
        .filter(pl.col("k") >= cfg.evidence_baseline_windows)
    )

    def shown(s: str, b: str) -> pl.Expr:  # in millionths of the thresholds, as goodput.sql 11b
        risen = pl.col(s).cast(pl.Int128) * 1_000_000 >= cfg.ppm("evidence_rise") * pl.col(b).cast(pl.Int128)
        floor = pl.col(s) >= cfg.ppm("evidence_floor")
        return (pl.col(s) >= 1_000_000) | (floor & pl.col(b).is_not_null() & risen).fill_null(False)

    # 11b-12. each window of running time: productive, and its loss split by the evidence
    split = (
        run.lazy()
        .join(loss.lazy(), on=["job_id", "node", "gpu", "wi"], how="left")
        .join(evidence.lazy(), on=["node", "wi"], how="left")
        .join(base, on=["job_id", "node"], how="left")
        .with_columns(pl.col("s_d").fill_null(0), pl.col("s_c").fill_null(0))
        .with_columns(shown("s_d", "base_d").alias("d_ev"), shown("s_c", "base_c").alias("c_ev"))
        .with_columns(
            pl.when(pl.col("d_ev") & pl.col("c_ev"))
            .then(
                pl.col("s_d") / (pl.col("s_d") + pl.col("s_c"))
                if cfg.evidence_split == "strength"
                else pl.lit(0.5)
            )
            .when(pl.col("d_ev"))
            .then(1.0)
            .otherwise(0.0)
            .alias("p_data")
        )
        .with_columns(
            pl.when(pl.col("c_ev")).then(1 - pl.col("p_data")).otherwise(0.0).alias("p_comm"),
            pl.when(pl.col("d_ev") | pl.col("c_ev")).then(0.0).otherwise(1.0).alias("p_idle"),
        )
        .select(
            (pl.col("secs") * (1 - pl.col("l"))).filter(pl.col("l").is_not_null()).sum().alias("productive"),
            (pl.col("secs") * pl.col("l") * pl.col("p_data")).sum().alias("data_stall"),
            (pl.col("secs") * pl.col("l") * pl.col("p_comm")).sum().alias("comm_stall"),
            (
                (pl.col("secs") * pl.col("l") * pl.col("p_idle")).sum()
                + pl.col("secs").filter(pl.col("l").is_null()).sum()
            ).alias("idle"),
        )
        .collect()
    )
    lap("evidence baselines and the split")
    for category, secs in split.row(0, named=True).items():
        out[category] = out.get(category, 0.0) + secs / 3600
    return out
