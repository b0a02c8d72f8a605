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
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from contracts import config as config_mod
from contracts.config import Config, ConfigError
from goodput.replay.feed import Feeder, fresh_store
from goodput.replay.traces import ImportStats, TraceError, dedup_counted, read, sort_counted
from pipeline.analyzers import run as analyzers
from pipeline.progress import Progress
from pipeline.store import Store

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


def config_data(nodes: pl.DataFrame, user: dict | None) -> dict:
    """The replay's config as TOML data: one pool per (GPU model, GPUs per node) of the node list, a
    nominal price of 1 per GPU-hour (the trace has none: cost then reads as GPU-hours), each qos a team
    of its own name; a `--config` file's tables are laid over it (its `[teams]` replaces the default
    mapping whole), except `[[pools]]`, which come from the node list."""
    groups = nodes.group_by("model", "gpu", maintain_order=True).agg(pl.col("sn"))
    data: dict = {
        "schema_version": config_mod.CONFIG_VERSION,
        "cluster": {"name": CLUSTER, "currency": "USD", "control_nodes": [SCHEDULER]},
        "gpu_types": {m: {"price_per_gpu_hour": 1.0, "has_gpm": False} for m in groups["model"].unique()},
        # the trace says nothing of the fabric or storage: placeholders the scheduler-only figures never read
        "network_tiers": {"unknown": {"link_gbps": 100.0, "links_per_node": 1, "link_layer": "Ethernet"}},
        "pools": [
            {
                "name": pool_name(m, g),
                "class": "shared",
                "gpu_type": m,
                "gpus_per_node": g,
                "nodes": sns,
                "network_tier": "unknown",
                "storage_ceiling_bytes_per_s": 1e12,
            }
            for m, g, sns in groups.rows()
        ],
        "teams": {**{c: [c] for c in DEFAULT_CLASSES}, "default_team": "unclassified"},
        "analyzer": {"window_s": WINDOW_S, "capacity_bucket_s": WINDOW_S},
        "store": {"kind": "chdb", "path": "store"},
    }
    if user:
        if "pools" in user:
            raise ConfigError("[[pools]]: a replay takes its pools from the trace's node list; remove them")
        for key, value in user.items():
            if key == "cluster":
                data["cluster"] = {**data["cluster"], **value}
                if SCHEDULER not in data["cluster"].get("control_nodes", []):
                    data["cluster"]["control_nodes"] = [*data["cluster"].get("control_nodes", []), SCHEDULER]
            elif key == "gpu_types":
                for m, t in value.items():
                    data["gpu_types"][m] = {**data["gpu_types"].get(m, {}), **t}
            elif isinstance(value, dict) and isinstance(data.get(key), dict) and key != "teams":
                data[key] = {**data[key], **value}
            else:
                data[key] = value
    return data


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


def columns(batch: list[dict]) -> dict[str, list]:
    fields = sorted({k for e in batch for k in e})
    return {f: [e.get(f, [] if f == "gpu_indices" else None) for e in batch] for f in fields}


def replay(path: Path, out: Path, config_path: str | None = None, quiet: bool = False) -> dict:
    """Imports, loads, analyzes; returns the findings (the `--json` object)."""
    started = time.perf_counter()
    trace = load(path)
    user = config_mod.read_toml(config_path)[0] if config_path else None
    data = config_data(trace.nodes, user)
    cfg = config_mod.parse(data, config_path or "<replay>")
    out.mkdir(parents=True, exist_ok=True)
    # the trace's start on an hour boundary, its end at most now: every interval as in the trace
    now_ms = int(time.time() * 1000)
    base_ms = (now_ms - trace.end_s * 1000) // 3_600_000 * 3_600_000
    evs = events(trace.pods, base_ms)
    with fresh_store(out / "store") as store:
        feeder = Feeder(store, cfg)
        progress = Progress("replay openb", len(evs), unit="event", quiet=quiet)
        i = 0
        while i < len(evs):
            j, t0 = i, evs[i]["ts_ms"]
            while j < len(evs) and j - i < BATCH_ROWS and evs[j]["ts_ms"] - t0 < BATCH_SPAN_MS:
                j += 1
            feeder.send("job", SCHEDULER, columns(evs[i:j]), evs[j - 1]["ts_ms"] + 1000)
            progress.update(j)
            i = j
        totals = feeder.totals
        progress.done(f"{sum(totals.rows.values()):,} rows, {sum(totals.dead_letters.values())} dead letters")
        if totals.dead_letters:
            raise TraceError(
                f"{path}: the loader refused {dict(totals.dead_letters)}; see goodput dead-letters"
            )
        progress = Progress("analyze", 0, unit="statement", quiet=quiet)
        analyzers.run(store, cfg, base_ms, base_ms + (trace.end_s + WINDOW_S) * 1000, progress)
        progress.done()
        result = findings(store, cfg, trace, base_ms)
    _write_config(data, out / "config.toml")
    result["import"] = [s.as_dict() for s in trace.stats]
    result["loaded"] = {"job_events": int(totals.rows.get("job", 0)), "dead_letters": 0}
    result["elapsed_s"] = round(time.perf_counter() - started, 1)
    return result


def _write_config(data: dict, path: Path) -> None:
    """The replay's effective config beside its store, so `goodput summary --config` reads the same."""
    import tomli_w

    path.write_bytes(tomli_w.dumps(data).encode())


REPLAY_VERSION = 1
"""Version of the replays' JSON objects (docs/real-traces.md): fields may be added, never removed,
renamed or re-typed within one version."""


def _nearest_rank(values: list[float]) -> dict:
    """p50/p90/p99 as fleet.sql's queue_delay_day takes them: the ceil(q n)-th smallest (nearest rank)."""
    import math

    v = sorted(values)
    if not v:
        return {"jobs": 0, "p50": None, "p90": None, "p99": None, "max": None}
    pick = {q: v[max(1, math.ceil(round(q * len(v), 6))) - 1] for q in (0.5, 0.9, 0.99)}
    return {"jobs": len(v), "p50": pick[0.5], "p90": pick[0.9], "p99": pick[0.99], "max": v[-1]}


def findings(store: Store, cfg: Config, trace: Trace, base_ms: int) -> dict:
    """The replay's figures, read from the analyzers' tables of the store."""
    cluster = {"cluster": cfg.cluster.name}
    delay = pl.from_arrow(
        store.query_arrow(
            "SELECT job_id, team, toInt64(round(queue_wait_s * 1000)) AS w_ms "
            "FROM scheduling_delay WHERE cluster = {cluster:String}",
            cluster,
        )
    )
    assert isinstance(delay, pl.DataFrame)
    scheduled = delay.filter(pl.col("w_ms").is_not_null())
    queue = {"all": _nearest_rank([w / 1000 for w in scheduled["w_ms"]])}
    for team in sorted(delay["team"].unique()):
        queue[team] = _nearest_rank([w / 1000 for w in scheduled.filter(pl.col("team") == team)["w_ms"]])
    withdrawn = delay.filter(pl.col("w_ms").is_null()).group_by("team").len()
    state = pl.from_arrow(
        store.query_arrow(
            "SELECT job_id, countIf(event = 'allocated') > 0 AS allocated, "
            "anyIf(event, event IN ('completed', 'failed', 'cancelled')) AS ended "
            "FROM raw_job FINAL WHERE cluster = {cluster:String} GROUP BY job_id",
            cluster,
        )
    )
    assert isinstance(state, pl.DataFrame)
    state = state.with_columns(pl.col("allocated").cast(pl.Boolean)).with_columns(
        state=pl.when(pl.col("ended") == "completed")
        .then(pl.lit("Succeeded"))
        .when(pl.col("ended") == "failed")
        .then(pl.lit("Failed"))
        .when((pl.col("ended") == "cancelled") & pl.col("allocated"))
        .then(pl.lit("Running"))
        .when(pl.col("ended") == "cancelled")
        .then(pl.lit("Pending"))
        .otherwise(pl.lit("open at trace end"))
    )
    held = pl.from_arrow(
        store.query_arrow(
            "SELECT job_id, team, allocated_gpu_seconds AS s, cost FROM job_summary "
            "WHERE cluster = {cluster:String}",
            cluster,
        )
    )
    assert isinstance(held, pl.DataFrame)
    jobs = (
        state.join(held, on="job_id", how="left")
        .join(trace.pods.select(pl.col("name").alias("job_id"), "share"), on="job_id", how="left")
        .with_columns(pl.col("s").fill_null(0.0), pl.col("cost").fill_null(0.0))
        .with_columns(
            used_h=pl.col("s") * pl.col("share") / 3600,
            held_h=pl.col("s") / 3600,
            used_cost=pl.col("cost") * pl.col("share"),
        )
    )

    def hours(col: str, by: str) -> dict:
        g = jobs.filter(pl.col(by).is_not_null()).group_by(by).agg(pl.col(col).sum()).sort(by)
        return {k: round(v, 6) for k, v in g.rows()}

    cap = pl.from_arrow(
        store.query_arrow(
            "SELECT toInt64(toUnixTimestamp(bucket_start)) * 1000 AS b, sum(capacity_gpu_s) AS cap, "
            "sum(allocated_gpu_s) AS alloc FROM pool_capacity WHERE cluster = {cluster:String} "
            "GROUP BY b ORDER BY b",
            cluster,
        )
    )
    assert isinstance(cap, pl.DataFrame)
    daily = (
        cap.with_columns(day=(pl.col("b") - base_ms) // 86_400_000)
        .group_by("day")
        .agg(
            pct=100 * pl.col("alloc").sum() / pl.col("cap").sum(),
            peak=(100 * pl.col("alloc") / pl.col("cap")).max(),
        )
        .sort("day")
    )
    frag = store.query_arrow(
        "SELECT count() AS instants, countIf(fragmented) AS fragmented, max(stranded_gpus) AS max_stranded "
        "FROM pool_fragmentation WHERE cluster = {cluster:String}",
        cluster,
    ).to_pylist()[0]
    total_cap = float(cap["cap"].sum()) if cap.height else 0.0
    return {
        "replay_version": REPLAY_VERSION,
        "trace": "alibaba-openb",
        "cluster_gpus": int(trace.nodes["gpu"].sum()),
        "trace_days": round(trace.end_s / 86400, 3),
        "pods": {
            "gpu_pods": trace.pods.height,
            "scheduled": int(trace.pods["scheduled_time"].is_not_null().sum()),
            "withdrawn_while_queued": {k: v for k, v in sorted(withdrawn.rows())},
        },
        "queue_delay_s": queue,
        "gpu_hours": {
            "rule": "num_gpu x gpu_milli/1000 x (deletion_time - scheduled_time)",
            "total": round(float(jobs["used_h"].sum()), 6),
            "by_class": hours("used_h", "team"),
            "by_state": hours("used_h", "state"),
        },
        "cost": {
            "rule": "the pool's price per GPU-hour x the GPU-hours by the share rule",
            "currency": cfg.cluster.currency,
            "total": round(float(jobs["used_cost"].sum()), 6),
            "by_class": hours("used_cost", "team"),
        },
        "gpu_hours_held": {
            "rule": "whole GPUs held (a sharing pod holds one GPU in the replay's packing)",
            "total": round(float(jobs["held_h"].sum()), 6),
            "by_class": hours("held_h", "team"),
            "by_state": hours("held_h", "state"),
        },
        "allocated_pct": {
            "of_gpus": int(trace.nodes["gpu"].sum()),
            "mean": round(100 * float(cap["alloc"].sum()) / total_cap, 4) if total_cap else None,
            "peak_hour": round(float(cap.select((100 * pl.col("alloc") / pl.col("cap")).max()).item()), 4)
            if cap.height
            else None,
            "by_trace_day": [
                {"day": int(d), "mean": round(p, 4), "peak_hour": round(k, 4)} for d, p, k in daily.rows()
            ],
        },
        "fragmentation": {
            "basis": "the replay's first-fit packing, not the cluster's own placement",
            "instants_with_pending": int(frag["instants"]),
            "fragmented_instants": int(frag["fragmented"]),
            "max_stranded_gpus": int(frag["max_stranded"] or 0),
        },
    }


def format_findings(f: dict) -> str:
    """The findings as a few plain tables, for a terminal."""
    lines = [
        f"Alibaba openb: {f['pods']['gpu_pods']:,} GPU pods over {f['trace_days']:g} days "
        f"on {f['cluster_gpus']:,} GPUs",
        "",
        f"{'queue delay (s)':<18}{'pods':>7}{'p50':>10}{'p90':>10}{'p99':>10}",
    ]
    for k, q in f["queue_delay_s"].items():
        if q["jobs"]:
            lines.append(f"{k:<18}{q['jobs']:>7}{q['p50']:>10g}{q['p90']:>10g}{q['p99']:>10g}")
    g = f["gpu_hours"]
    lines += ["", f"GPU-hours ({g['rule']}): {g['total']:,.1f}"]
    for by in ("by_class", "by_state"):
        lines.append("  " + ", ".join(f"{k} {v:,.1f}" for k, v in g[by].items()))
    a = f["allocated_pct"]
    lines += [
        "",
        f"allocated: {a['mean']:.2f}% of {a['of_gpus']:,} GPUs on average, "
        f"{a['peak_hour']:.2f}% at the peak hour",
    ]
    return "\n".join(lines)


def main(args) -> int:
    try:
        result = replay(Path(args.path), Path(args.out), args.config, quiet=args.json)
    except TraceError as e:
        print(f"goodput replay alibaba-openb: {e}", file=sys.stderr)
        return 2
    if args.json:
        import json

        json.dump(result, sys.stdout, indent=2)
        print()
    else:
        print(format_findings(result))
        print(
            f"\nwrote {args.out}/: store/ (chDB), config.toml — "
            f"try: goodput summary --config {args.out}/config.toml"
        )
    return 0
