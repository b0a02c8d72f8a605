"""`goodput replay alibaba-openb`: the Alibaba openb GPU cluster trace (Weng et al., ATC '23) as job events.

Each GPU pod of `openb_pod_list_default.csv` becomes the job-event messages a Kubernetes job-state collector
would send (docs/messages.md): `submitted` at creation_time; `allocated`, `gang_complete` and `running` at
scheduled_time; at deletion_time the end its last phase says (Succeeded -> `completed`, Failed ->
`failed`, Running -> `cancelled`: deleted while running, Pending -> `cancelled`: withdrawn while
queued) and `released`. The trace has no placement: pods are packed first-fit onto the GPUs of
`openb_node_list_gpu_node.csv` (`pack`). Time is rebased so that the trace ends now, every interval
kept, and loaded on the replay clock (goodput.replay.feed). The figures are read back from the
analyzers' tables (scheduling_delay, job_summary, pool_capacity, pool_fragmentation); docs/real-traces.md
explains each choice and what the data cannot tell."""

from __future__ import annotations

import heapq
import time
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from goodput.replay import replay_config
from goodput.replay.feed import Feeder, event_columns, fresh_store
from goodput.replay.openb_findings import findings
from goodput.replay.traces import ImportStats, TraceError, dedup_counted, read, sort_counted
from pipeline.analyzers import run as analyzers
from pipeline.progress import Progress

POD_FILE = "openb_pod_list_default.csv"
NODE_FILE = "openb_node_list_gpu_node.csv"
CLUSTER = "alibaba-openb"
SCHEDULER = "openb-scheduler"
"""The control node that sends the job events (the trace's job-state collector)."""
PHASE_END = {"Succeeded": "completed", "Failed": "failed", "Running": "cancelled", "Pending": "cancelled"}
"""The job event at deletion_time for each last-seen pod phase (docs/real-traces.md, "Job states")."""
DEFAULT_CLASSES = ("LS", "BE", "Burstable", "Guaranteed")
"""The trace's qos values; without a `[teams]` table each is a team of its own name."""
WINDOW_S = 3600
"""Analysis window of the replay: scheduler-only data has nothing finer to show, and 149 days of 10 s
windows would be 36 times the rows for the same figures."""
BATCH_ROWS = 5000
BATCH_SPAN_MS = 7 * 86_400_000
"""A batch closes after this many events or this much trace time, whichever first: one insert touches
few day partitions of raw_job (the store allows 100 per insert)."""


@dataclass
class Trace:
    pods: pl.DataFrame
    """GPU pods: name, num_gpu, share, qos, phase, t_create, t_sched, t_delete (s), node, gpus."""
    nodes: pl.DataFrame
    """sn, gpu, model."""
    stats: list[ImportStats]
    end_s: int
    """The trace's last time (s from its start)."""


def locate(path: Path) -> tuple[Path, Path]:
    """The pod and node lists: `path` is their directory, or the pod list with the node list beside it."""
    pods = path / POD_FILE if path.is_dir() else path
    nodes = pods.parent / NODE_FILE
    for p in (pods, nodes):
        if not p.is_file():
            raise TraceError(f"{p}: no such file; give the directory holding {POD_FILE} and {NODE_FILE}")
    return pods, nodes


def read_nodes(path: Path) -> tuple[pl.DataFrame, ImportStats]:
    df, stats = read(
        path,
        "an openb node list",
        {"sn": pl.String, "gpu": pl.Int64, "model": pl.String},
        {"cpu_milli": pl.Int64, "memory_mib": pl.Int64},
    )
    stats.drop("no GPU", df.filter(pl.col("gpu") <= 0).height)
    df = dedup_counted(df.filter(pl.col("gpu") > 0), ["sn"], stats)
    stats.rows_used = df.height
    return df.select("sn", "gpu", "model"), stats


def read_pods(path: Path) -> tuple[pl.DataFrame, ImportStats, int]:
    """The GPU pods, checked and sorted by creation time, and the trace's end (s). Missing values:
    scheduled_time empty means never scheduled; deletion_time empty, still there at the trace's end
    (no end event); gpu_milli empty, a whole GPU; pod_phase empty, Running if scheduled else Pending;
    qos empty, no class (the default team). Counted under `filled`."""
    df, stats = read(
        path,
        "an openb pod list",
        {"name": pl.String, "num_gpu": pl.Int64, "creation_time": pl.Int64},
        {
            "gpu_milli": pl.Int64,
            "qos": pl.String,
            "pod_phase": pl.String,
            "scheduled_time": pl.Int64,
            "deletion_time": pl.Int64,
            "gpu_spec": pl.String,
            "cpu_milli": pl.Int64,
            "memory_mib": pl.Int64,
        },
    )
    times = [pl.col(c) for c in ("creation_time", "scheduled_time", "deletion_time")]
    end_s = int(df.select(pl.max_horizontal(times).max()).item() or 0)
    df = dedup_counted(df, ["name"], stats)
    stats.drop("no GPU (num_gpu = 0)", df.filter(pl.col("num_gpu") <= 0).height)
    df = df.filter(pl.col("num_gpu") > 0)
    for col, n in (
        ("gpu_milli", df["gpu_milli"].null_count()),
        ("pod_phase", df["pod_phase"].null_count()),
        ("qos", df["qos"].null_count()),
        ("deletion_time", df["deletion_time"].null_count()),
    ):
        if n:
            stats.filled[col] = n
    df = df.with_columns(
        pl.col("pod_phase").fill_null(
            pl.when(pl.col("scheduled_time").is_null()).then(pl.lit("Pending")).otherwise(pl.lit("Running"))
        ),
        # a sharing pod (num_gpu = 1) uses gpu_milli/1000 of its GPU; a multi-GPU pod uses whole GPUs
        share=pl.when(pl.col("num_gpu") == 1)
        .then(pl.col("gpu_milli").fill_null(1000).clip(1, 1000) / 1000)
        .otherwise(1.0),
    )
    unknown = ~pl.col("pod_phase").is_in(list(PHASE_END))
    stats.drop("unknown pod_phase", df.filter(unknown).height)
    df = df.filter(~unknown)
    bad = (pl.col("scheduled_time") < pl.col("creation_time")) | (
        pl.col("deletion_time") < pl.coalesce("scheduled_time", "creation_time")
    )
    stats.drop("times out of order (scheduled < created or deleted < scheduled)", df.filter(bad).height)
    df = sort_counted(df.filter(~bad.fill_null(False)), ["creation_time", "name"], stats)
    return df, stats, end_s


def pack(pods: pl.DataFrame, nodes: pl.DataFrame, stats: ImportStats) -> pl.DataFrame:
    """Placement the trace does not hold, synthesised: in order of scheduled_time, each scheduled pod
    takes `num_gpu` free GPUs (the lowest indices) of the first node, in the node list's order, of a model
    its gpu_spec allows ("V100M16|V100M32"; empty: any) with that many free, all on one node. A GPU
    holds one pod at a time, a sharing pod included: the trace never has more than a few dozen GPUs in
    use, so the packing never has to co-locate pods, and the store's one-owner-per-GPU rule holds. GPUs
    are freed at deletion_time, before the pods scheduled at that instant are placed. A pod that fits
    nowhere is dropped, counted ("no node fits")."""
    free = [set(range(g)) for g in nodes["gpu"]]
    names, models = nodes["sn"].to_list(), nodes["model"].to_list()
    releases: list[tuple[int, int, list[int]]] = []
    placed_node: list[str | None] = []
    placed_gpus: list[list[int] | None] = []
    order = pods.with_row_index("_i").sort(["scheduled_time", "_i"], nulls_last=True)
    slots: dict[int, tuple[str, list[int]]] = {}
    for i, t, k, spec, t_del in order.select(
        "_i", "scheduled_time", "num_gpu", "gpu_spec", "deletion_time"
    ).rows():
        if t is None:
            continue
        while releases and releases[0][0] <= t:
            _, n, gpus = heapq.heappop(releases)
            free[n].update(gpus)
        allowed = set(spec.split("|")) if spec else None
        for n, f in enumerate(free):
            if len(f) >= k and (allowed is None or models[n] in allowed):
                gpus = sorted(f)[:k]
                f.difference_update(gpus)
                slots[i] = (names[n], gpus)
                if t_del is not None:
                    heapq.heappush(releases, (t_del, n, gpus))
                break
    for i in range(pods.height):
        node_gpus = slots.get(i)
        placed_node.append(node_gpus[0] if node_gpus else None)
        placed_gpus.append(node_gpus[1] if node_gpus else None)
    out = pods.with_columns(
        node=pl.Series(placed_node, dtype=pl.String), gpus=pl.Series(placed_gpus, dtype=pl.List(pl.Int64))
    )
    unfit = out.filter(pl.col("scheduled_time").is_not_null() & pl.col("node").is_null()).height
    stats.drop("no node fits", unfit)
    return out.filter(pl.col("scheduled_time").is_null() | pl.col("node").is_not_null())


def load(path: Path) -> Trace:
    pod_path, node_path = locate(path)
    nodes, node_stats = read_nodes(node_path)
    pods, pod_stats, end_s = read_pods(pod_path)
    pods = pack(pods, nodes, pod_stats)
    pod_stats.rows_used = pods.height
    return Trace(pods=pods, nodes=nodes, stats=[pod_stats, node_stats], end_s=end_s)


def pool_name(model: str, gpus: int) -> str:
    return f"{model}-x{gpus}"


def config_data(nodes: pl.DataFrame, path: str | None) -> dict:
    """The replay's config as TOML data: one pool per (GPU model, GPUs per node) of the node list, each
    qos a team of its own name (default team `unclassified`), hour windows; a `--config` file laid over it
    (replay_config.overlay)."""
    groups = nodes.group_by("model", "gpu", maintain_order=True).agg(pl.col("sn"))
    data = replay_config.base(
        CLUSTER,
        SCHEDULER,
        {m: {} for m in groups["model"].unique(maintain_order=True)},
        [
            {"name": pool_name(m, g), "gpu_type": m, "gpus_per_node": g, "nodes": sns}
            for m, g, sns in groups.rows()
        ],
        teams={**{c: [c] for c in DEFAULT_CLASSES}, "default_team": "unclassified"},
        # no GPU samples, so no idle allocations; the config wants idle_reclaim_after_s > window_s + 1 s
        analyzer={"window_s": WINDOW_S, "capacity_bucket_s": WINDOW_S, "idle_reclaim_after_s": 2 * WINDOW_S},
    )
    return replay_config.overlay(data, path, SCHEDULER)


def events(pods: pl.DataFrame, base_ms: int) -> list[dict]:
    """The job events of every pod, in the order a collector would report them: by time; at one instant
    the ends of pods that started earlier first (their GPUs are free again), then each pod's own events
    in lifecycle order."""
    rows: list[tuple[int, int, int, int, dict]] = []
    for p, (name, k, qos, phase, t_c, t_s, t_d, node, gpus) in enumerate(
        pods.select(
            "name",
            "num_gpu",
            "qos",
            "pod_phase",
            "creation_time",
            "scheduled_time",
            "deletion_time",
            "node",
            "gpus",
        ).rows()
    ):
        common = {"job_id": name, "attempt": 1, "account": qos, "gpus_requested": k, "source": "file"}
        own = [(t_c, {**common, "event": "submitted"})]
        if t_s is not None:
            placed = {"node": node, "gpu_indices": gpus}
            own += [
                (t_s, {**common, "event": "allocated", **placed}),
                (t_s, {**common, "event": "gang_complete"}),
                (t_s, {**common, "event": "running"}),
            ]
        if t_d is not None:
            own.append((t_d, {**common, "event": PHASE_END[phase]}))
            if t_s is not None:
                own.append((t_d, {**common, "event": "released", "node": node, "gpu_indices": gpus}))
        for j, (t, e) in enumerate(own):
            ends_earlier_pod = (
                0 if e["event"] in ("completed", "failed", "cancelled", "released") and t > t_c else 1
            )
            rows.append((t, ends_earlier_pod, p, j, {**e, "ts_ms": base_ms + t * 1000}))
    rows.sort(key=lambda r: r[:4])
    return [r[4] for r in rows]


def replay(path: Path, out: Path, config_path: str | None = None) -> dict:
    """Imports, loads, analyzes; returns the findings (the `--json` object)."""
    started = time.perf_counter()
    trace = load(path)
    data = config_data(trace.nodes, config_path)
    cfg = replay_config.parse(data, config_path)
    # the trace's start on an hour boundary, its end at most now: every interval as in the trace
    now_ms = int(time.time() * 1000)
    base_ms = (now_ms - trace.end_s * 1000) // 3_600_000 * 3_600_000
    evs = events(trace.pods, base_ms)
    with fresh_store(out, cfg.cluster.name) as store:
        replay_config.write(data, out / "config.toml")  # first: it marks the store as this replay's
        feeder = Feeder(store, cfg)
        progress = Progress("replay openb", len(evs), unit="event")
        i = 0
        while i < len(evs):
            j, t0 = i, evs[i]["ts_ms"]
            while j < len(evs) and j - i < BATCH_ROWS and evs[j]["ts_ms"] - t0 < BATCH_SPAN_MS:
                j += 1
            feeder.send("job", SCHEDULER, event_columns(evs[i:j]), evs[j - 1]["ts_ms"] + 1000)
            progress.update(j)
            i = j
        totals = feeder.finish(progress, path)
        progress = Progress("analyze", 0, unit="statement")
        analyzers.run(store, cfg, base_ms, base_ms + (trace.end_s + WINDOW_S) * 1000, progress)
        progress.done()
        gpus = int(trace.nodes["gpu"].sum())
        result = findings(store, cfg, trace.pods, gpus, trace.end_s, base_ms)
    result["import"] = [s.as_dict() for s in trace.stats]
    result["loaded"] = {"job_events": int(totals.rows.get("job", 0)), "dead_letters": 0}
    result["elapsed_s"] = round(time.perf_counter() - started, 1)
    return result
