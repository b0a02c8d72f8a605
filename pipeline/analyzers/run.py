"""Runs the analyzer SQL over a time range: refreshes the dimension tables from the config, then
classifies every allocated GPU-second (goodput.sql), rolls it up (rollups.sql), lists the faults, what
each cost and the repeat offenders (faults.sql), and derives the fleet views: queue delay, capacity,
fragmentation, pool holds, idle allocations, placement (fleet.sql).

Re-running a range replaces its outputs, so a late batch or a changed config is fixed by running the
range again. Replacing means deleting rows first; on the cluster layout (pipeline/ddl.py) those deletes
go to the local tables ON CLUSTER (`ddl.delete_target`), while reads and inserts keep the Distributed
tables under the catalog names, so the same SQL means the same on one server and on a cluster.

Each run names its temp tables with its own run id (tmp_events_<run id>, ...), so two runs on one server
never overwrite each other's, and drops them when it ends, failed or not.
"""

from __future__ import annotations

import functools
import logging
import re
import time
import uuid
from collections import ChainMap
from collections.abc import Callable
from decimal import Decimal
from pathlib import Path

import pyarrow as pa

from contracts import catalog
from contracts.config import AnalyzerConfig, Config
from pipeline import ddl
from pipeline.analyzers.schedule import Statement, run_statements
from pipeline.progress import Progress
from pipeline.store import Store, first_line, quote

log = logging.getLogger("goodput.analyzers")
HERE = Path(__file__).parent
TEMP_TABLES = (
    "tmp_events",
    "tmp_job_end",
    "tmp_carried",
    "tmp_mine",
    "tmp_alloc",
    "tmp_clock",
    "tmp_span",
    "tmp_nic_windows",
    "tmp_raw_gpu_nodes",
    "tmp_raw_nic_nodes",
    "tmp_raw_storage_nodes",
    "tmp_coarse",
    "tmp_start",
    "tmp_lifecycle",
    "tmp_segments",
    "tmp_slots",
    "tmp_job_numbers",
    "tmp_node_numbers",
    "tmp_pieces",
    "tmp_piece_windows",
    "tmp_run_hits",
    "tmp_healthy_hist",
    "tmp_healthy",
    "tmp_node_storage",
    "tmp_node_evidence",
    "tmp_stragglers",
    "tmp_step_split",
    "tmp_straggler_windows",
    "tmp_straggler_episodes",
    "tmp_loss",
    "tmp_unsampled",
    "tmp_carried_bases",
    "tmp_evidence_base",
    "tmp_run_split",
    "tmp_classified",
    "tmp_idle_cands",
    "tmp_idle_gaps",
)
OUTPUT_TABLES = catalog.ANALYZER_OUTPUTS
"""What a whole run writes (each replaced for the jobs or ranges it covers); a live run writes LIVE_OUTPUT."""
LIVE_OUTPUT = catalog.GOODPUT_LIVE
SQL_FILES = ("state.sql", "rollups.sql", "faults.sql", "stragglers.sql", "fleet.sql")
"""Run in this order after goodput.sql, in a whole run: they read its temp tables. A live run runs
goodput.sql alone."""
READ_BY_RUN = ("tmp_events", "tmp_span")
"""Temp tables `run` itself reads between the SQL files (alive_jobs, the span's days, fleet_ranges): they
are kept to the end of the run whatever the statements name."""
ALIVE_JOBS = "SELECT DISTINCT job_id FROM tmp_events"
JOBS_PER_DELETE = 1000
"""Job ids spelled out per DELETE on a cluster: ~20 KB of SQL for Slurm-style ids, far below the servers'
max_query_size (256 KiB by default), which also bounds what ON CLUSTER stores in Keeper per statement."""


def refresh_dimensions(store: Store, cfg: Config) -> None:
    """Writes the config's pools, nodes, prices and team mapping where the SQL can join them."""
    nodes = [(n, p) for p in cfg.pools for n in p.nodes]
    tiers = cfg.network_tiers
    placed, racks = cfg.topology.placements(), cfg.topology.rack_of()
    mapped = sorted(set(placed) | set(racks))
    tables = {
        catalog.DIM_NODES: pa.table(
            {
                "node": [n for n, _ in nodes],
                "pool": [p.name for _, p in nodes],
                "pool_class": [p.pool_class for _, p in nodes],
                "gpu_type": [p.gpu_type for _, p in nodes],
                "gpus_per_node": pa.array([p.gpus_per_node for _, p in nodes], pa.uint16()),
                "price_per_gpu_hour": [cfg.price(p) for _, p in nodes],
                "network_tier": [p.network_tier for _, p in nodes],
                "link_gbps": [tiers[p.network_tier].link_gbps for _, p in nodes],
                "links_per_node": pa.array(
                    [tiers[p.network_tier].links_per_node for _, p in nodes], pa.uint16()
                ),
            }
        ),
        catalog.DIM_POOLS: pa.table(
            {
                "pool": [p.name for p in cfg.pools],
                "pool_class": [p.pool_class for p in cfg.pools],
                "nodes": pa.array([len(p.nodes) for p in cfg.pools], pa.uint32()),
                "gpus": pa.array([len(p.nodes) * p.gpus_per_node for p in cfg.pools], pa.uint32()),
                "storage_ceiling_bytes_per_s": [p.storage_ceiling_bytes_per_s for p in cfg.pools],
                "oversubscription": [tiers[p.network_tier].oversubscription for p in cfg.pools],
            }
        ),
        catalog.DIM_TOPOLOGY: pa.table(
            {
                "node": mapped,
                "leaf": [placed[n].leaf if n in placed else "" for n in mapped],
                "spine": [placed[n].spine if n in placed else "" for n in mapped],
                "path": pa.array(
                    [list(placed[n].path) if n in placed else [] for n in mapped], pa.list_(pa.string())
                ),
                "rack": [racks.get(n, "") for n in mapped],
            }
        ),
        catalog.DIM_ACCOUNTS: pa.table(
            {
                "account": [a for accts in cfg.teams.accounts.values() for a in accts],
                "team": [t for t, accts in cfg.teams.accounts.items() for _ in accts],
            }
        ),
    }
    for name, table in tables.items():
        store.execute(f"TRUNCATE TABLE {ddl.delete_target(store, name) or name}")
        store.insert_arrow(name, table)


def _dead_level(a: AnalyzerConfig) -> str:
    """SQL of the dead level (goodput.sql 10c, 11) in millionths of a half key (0.005 %) as an Int64:
    stalled_second_fraction x b* or noise_z x sigma, over the columns bh and sh (b* and sigma in half
    keys). A second of key k is dead where 2,000,000 k < it: compared in integers, a level met exactly
    (b* = 50.10 %, a second at 5.01 %: 501.00000000000006 keys in floats) is live, as the rule says."""
    return f"greatest({a.ppm('stalled_second_fraction')} * bh, {a.ppm('noise_z')} * sh)"


def _at_healthy_level(a: AnalyzerConfig) -> str:
    """SQL of "a mean short of b* by less than the tolerance" (goodput.sql 10c, 11), exact in integers:
    over live_n seconds, short_n = 5 live_n bh - their sum in milli-% (live_n x 1,000 x (b* - mean)).
    The tolerance is healthy_tolerance, or noise_z x sigma / sqrt(live_n) over b*: short < either one
    (squared for the second, in Int128, so no root is rounded). In floats, 1 - b_live/b* against the
    tolerance fell either way where the two are equal, as on the 0.01 % grid they often are (a window's
    single live second at b* - 3 sigma, or ten seconds at 0.95 b*)."""
    t, z = a.ppm("healthy_tolerance"), a.ppm("noise_z")
    return (
        f"(short_n * 200000 < {t} * bh * live_n"
        f" OR toInt128(short_n) * short_n * 40000000000 < toInt128({z} * sh) * ({z} * sh) * live_n)"
    )


CHECK_WINDOWS = 256 // catalog.ROLLUP_WINDOW_S
"""The rollup windows whose seconds (ddl: one bit a second) step 3e's duplicate check ORs side by side in
one UInt256: 25 of 10 s. Fewer and wider groups hash faster (the GPU check on the bench day: 6 windows in
a UInt64 0.51-0.59 s, 12 in a UInt128 0.38-0.46 s, 25 0.37 s)."""

DUPLICATES = (
    "{numbers}SELECT DISTINCT {node} AS node FROM ("
    "SELECT {block}, sum(rows) AS stored, "
    "bitCount(groupBitOr(bitShiftLeft(toUInt256(seconds), {R_S} * (wi % {n})))) AS held "
    "FROM (SELECT *, intDiv(toUInt32(window_start), {R_S}) AS wi{number} FROM {table} "
    "WHERE {rollups} AND cluster = '{cluster}' AND {span}{ours}) "
    "GROUP BY {group}) WHERE stored > held"
)
"""{<kind>_duplicates}, step 3e's check of the GPU and storage rollups: the nodes with a window of more
rows than seconds (a batch stored twice) over the span. The rows of a (node, key, window) are summed
across parts (and the GPU's across job tags: a second stored under two tags is a duplicate all the same)
per block of CHECK_WINDOWS windows, their seconds ORed side by side (the block's i-th window at bits R_S i
and up): a block holds more rows than set bits exactly where one of its windows holds more rows than
seconds, as no window holds fewer. Sums in any order, so read without FINAL, and a hash of 350 k blocks a
day at 1,024 GPUs instead of 9 M windows (goodput.sql 3e). Each kind's blocks: DUPLICATE_BLOCKS."""

DUPLICATE_BLOCKS = {
    "gpu": {  # the run's nodes only: no reader of {gpu_windows} reads another's GPUs
        "numbers": "WITH (SELECT groupUniqArray(node) FROM tmp_alloc) AS run_nodes ",
        "number": ", transform(node, run_nodes, arrayEnumerate(run_nodes), 0) AS nn",
        "ours": " AND nn > 0",
        "block": "bitOr(bitShiftLeft(toUInt64(nn), 40), bitOr(bitShiftLeft(toUInt64(gpu), 32), "
        "toUInt64(intDiv(wi, {n})))) AS block",
        "group": "block",
        "node": "run_nodes[bitShiftRight(block, 40)]",
    },
    "storage": {  # every node's: the pools' read rates (goodput.sql 9) sum them all
        "numbers": "",
        "number": "",
        "ours": "",
        "block": "node",
        "group": f"node, {ddl.ROLLUP_KEY['storage']}, intDiv(wi, {{n}})",
        "node": "node",
    },
}
"""Per kind, the blocks DUPLICATES sums: the storage check's by the node's name and the source's key; the
GPU check's by one integer, the node's number among the run's nodes, the GPU index (0-63,
docs/messages.md) and the block packed (on the bench day 0.21-0.27 s against 0.35-0.45 s for the names
and the index as keys)."""


def _params(cfg: Config, start_ms: int, end_ms: int, as_of_ms: int = 0, live: bool = False) -> dict[str, str]:
    """Placeholders of the SQL. The range is widened to whole windows ([floor, ceil) of W), so a window is
    never half inside it; `as_of_ms` (the end of the data) bounds jobs still open, else the range's end.
    A `live` run classifies only the range's windows, from its start on ({live_from}), into goodput_live."""
    cluster, default_team = cfg.cluster.name, cfg.teams.default_team
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", cluster) or not re.fullmatch(r"[A-Za-z0-9_.-]+", default_team):
        raise ValueError(f"cluster {cluster!r} / default team {default_team!r}: use letters, digits, . _ -")
    a = cfg.analyzer
    cats = catalog.CATEGORIES
    w = int(a.window_s * 1000)
    start, end = int(start_ms) // w * w, -(-int(end_ms) // w) * w
    as_of = -(-int(as_of_ms) // w) * w if as_of_ms > 0 else end
    return {
        "cluster": cluster,
        "default_team": default_team,
        "start": str(start),
        "end": str(end),
        "as_of": str(as_of),
        "W": str(w),
        "live": "1" if live else "0",
        "live_from": str(start) if live else "0",
        "temp_engine": LIVE_TEMP_ENGINE if live else TEMP_ENGINE,
        "windows_table": LIVE_OUTPUT if live else catalog.GOODPUT_WINDOWS,
        "healthy_quantile": repr(float(a.healthy_quantile)),
        "healthy_cutoff": repr(float(a.healthy_cutoff)),
        "healthy_cutoff_ppm": str(a.ppm("healthy_cutoff")),
        "healthy_tolerance": repr(float(a.healthy_tolerance)),
        "stalled_second_fraction": repr(float(a.stalled_second_fraction)),
        "noise_z": repr(float(a.noise_z)),
        "clock_offset_ms": str(int(round(a.clock_offset_s * 1000))),
        "storage_saturation": repr(float(a.storage_saturation)),
        "storage_reader_fraction": repr(float(a.storage_reader_fraction)),
        "coarse_running_sources": "[" + ", ".join(f"'{s}'" for s in a.coarse_running_sources) + "]",
        "psi_some_pct": repr(float(a.psi_some_pct)),
        "nic_line_rate_fraction": repr(float(a.nic_line_rate_fraction)),
        "xmit_wait_per_s": repr(float(a.xmit_wait_per_s)),
        "ecn_marked_per_s": repr(float(a.ecn_marked_per_s)),
        "cnp_per_s": repr(float(a.cnp_per_s)),
        "evidence_floor": repr(float(a.evidence_floor)),
        "evidence_floor_ppm": str(a.ppm("evidence_floor")),
        "evidence_rise": repr(float(a.evidence_rise)),
        "evidence_rise_ppm": str(a.ppm("evidence_rise")),
        "evidence_baseline_windows": str(int(a.evidence_baseline_windows)),
        "evidence_split": a.evidence_split,
        "step_wait_min": repr(float(a.step_wait_min)),
        "straggler_min_slowdown": repr(float(a.straggler_min_slowdown)),
        "straggler_min_slowdown_ppm": str(a.ppm("straggler_min_slowdown")),
        "straggler_min_ratio": str(1 + Decimal(a.ppm("straggler_min_slowdown")) / 1_000_000),
        "dead_level": _dead_level(a),
        "at_healthy_level": _at_healthy_level(a),
        "straggler_min_steps": str(int(a.straggler_min_steps)),
        "straggler_min_windows": str(int(a.straggler_min_windows)),
        "straggler_persistent_fraction": repr(float(a.straggler_persistent_fraction)),
        "straggler_persistent_fraction_ppm": str(a.ppm("straggler_persistent_fraction")),
        "straggler_score": repr(float(a.straggler_score)),
        "straggler_mask": str(int(a.straggler_clock_event_mask)),
        "fault_evidence_ms": str(int(round(a.fault_evidence_s * 1000))),
        "repeat_window_ms": str(int(round(a.repeat_window_s * 1000))),
        "xid_hw": ", ".join(str(c) for c in catalog.XID_CLASSES["xid_hw"]),
        "xid_app": ", ".join(str(c) for c in catalog.XID_CLASSES["xid_app"]),
        "bucket": str(int(a.capacity_bucket_s) * 1000),
        "idle_after_ms": str(int(round(a.idle_reclaim_after_s * 1000))),
        "idle_busy_milli": str(int(round(a.idle_busy_pct * 1000))),
        "category_columns": ", ".join(f"s_{c}" for c in cats),
        "category_sums": ", ".join(f"sumIf(w.us, w.category = '{c}') / 1e6" for c in cats),
    }


def alive_jobs(store: Store, run_id: str = "") -> list[str]:
    """What rollups.sql's `job_id IN ({alive_jobs})` reads, one entry per statement: the jobs of the range.

    On one server that is the subquery over tmp_events itself. On the cluster layout those DELETEs run
    on every shard's local table, where the initiator's tmp_ tables do not exist and where replicated
    tables accept only deterministic mutations, so the ids are spelled out, JOBS_PER_DELETE per
    statement; no jobs, no statement."""
    jobs = temp_names(ALIVE_JOBS, run_id)
    if ddl.delete_target(store, catalog.JOB_SUMMARY) is None:
        return [jobs]
    ids = [quote(j) for j in store.query_arrow(f"{jobs} ORDER BY job_id").column("job_id").to_pylist()]
    return [", ".join(ids[i : i + JOBS_PER_DELETE]) for i in range(0, len(ids), JOBS_PER_DELETE)]


_TEMP = re.compile(r"\b(" + "|".join(TEMP_TABLES) + r")\b")


NODE_OFFSET_MS = (
    "transform(node, (SELECT groupArray(node) FROM tmp_clock), "
    "(SELECT groupArray(offset_ms) FROM tmp_clock), toInt64(0))"
)
"""The clock offset of a raw row's node (goodput.sql step 3a), 0 where none was estimated: every raw
sample read in classification is filed at ts - this. A placeholder, so the SQL spells it once."""


RAW_WINDOWS = (
    "SELECT * REPLACE (fromUnixTimestamp64Milli(toUnixTimestamp64Milli(ts) - {offset}, 'UTC') AS ts) FROM ("
    "SELECT * FROM {raw} FINAL WHERE cluster = '{cluster}' "
    "AND (NOT {rollups} OR node IN (SELECT node FROM tmp_raw_{kind}_nodes)) "
    "AND ts > fromUnixTimestamp64Milli((SELECT intDiv(lo - skew, {W}) * {W} - skew FROM tmp_span)) "
    "AND ts <= fromUnixTimestamp64Milli("
    "(SELECT (intDiv(hi + skew - 1, {W}) + 1) * {W} + skew FROM tmp_span)))"
)
"""The raw rows goodput.sql reads where it cannot read a rollup (step 3e): of its nodes for the kind,
deduplicated (FINAL), each filed at ts - its node's clock offset, over whole windows of the run's span."""


ROLLUP_SPAN = (
    "window_start >= toDateTime(intDiv((SELECT lo - skew FROM tmp_span), {W}) * {W} / 1000, 'UTC') "
    "AND window_start < "
    "toDateTime((intDiv((SELECT hi + skew FROM tmp_span) - 1, {W}) + 1) * {W} / 1000, 'UTC')"
)
"""{rollup_span}: the rollup rows over whole windows of the run's span (its jobs' allocations, widened by
the largest clock offset corrected, as the raw rows' reads are), spelt once for every read of a rollup."""


GPU_WINDOWS = (
    "SELECT node, gpu, toInt64(toUnixTimestamp(window_start)) * 1000 AS ws, intDiv(ws, {W}) AS wi, "
    "n, bsum, thr, samples, {W} = {R_MS} AND bitCount(seconds) = {R_S} AS alone "
    "FROM {rollup} WHERE cluster = '{cluster}' AND {rollups} "
    "AND node NOT IN (SELECT node FROM tmp_raw_gpu_nodes) AND {span} "
    "UNION ALL "
    "SELECT node, gpu, toInt64(toUnixTimestamp(window_start)) * 1000 AS ws, intDiv(ws, {W}) AS wi, "
    "n, bsum, thr, samples, toUInt8(0) AS alone FROM ({raw})"
)
"""{gpu_windows}: the GPU rows of the run's allocations as rollup rows (10 s) or, for step 3e's nodes, the
same sums over their raw rows (per window of W); `ws` is the row's window start (ms), `wi` its window of W.
`alone`: a rollup row that holds every second of its window of W, so no other row of its (node, GPU,
window) is read (step 3e's check: any other would repeat one of its seconds); never a raw row's, whose
job tags may each hold a sample of the same second."""


RUN_GPU = (
    "SELECT slot, jn, nn, gpu, wi, n, bsum, bsum / n / 1000 AS b, thr, keys FROM tmp_run_hits "
    "WHERE alone AND n > 0 "
    "UNION ALL "
    "SELECT slot, any(jn) AS jn, any(nn) AS nn, any(gpu) AS gpu, wi, sum(n) AS n, sum(bsum) AS bsum, "
    "bsum / n / 1000 AS b, groupBitOr(thr) AS thr, groupArrayArray(keys) AS keys FROM tmp_run_hits "
    "WHERE NOT alone GROUP BY slot, wi HAVING n > 0"
)
"""{run_gpu}: goodput.sql step 7's GPU busy level, one row per (job, GPU, window) with samples: the rows
of `tmp_run_hits` alone in their window as they are, the others summed per window (goodput.sql 7). Read
where a reader needs one row per window (10c, 11); computed on each read, as the rows to sum are few and
a table of the result cost more to write than the reads cost to repeat."""


NIC_ROLLUP_PORTS = (
    "SELECT node, device, port, wi, {columns}, {twice} AS stored_twice FROM ("
    "SELECT *, intDiv(toInt64(toUnixTimestamp(window_start)) * 1000, {W}) AS wi, "
    "rows > bitCount(seconds) AS twice FROM ({rows})) {group}"
)
"""A NIC port's sums per window of W from its rollup ({rows}: `nic_rollup_rows`), every node's (step 3e
has not chosen yet), one row per port and 10 s for step 3e's check (more rows than seconds: a batch stored
twice). A longer window sums its 10 s rows per port."""

NIC_ROLLUP_ROWS = "SELECT * FROM {table} FINAL WHERE cluster = '{cluster}' AND {rollups} AND {span}{since}"


def nic_rollup_rows(params: dict, since: int | None) -> str:
    """The NIC rollup's rows of the span, read FINAL: their parts merged per key as they are read, in sort
    order (half the CPU of grouping the 9 M keys of a day), where the key is step 3e's check's. The
    windows from `since` (`copies_from`) come from the rollup's time-first copy (catalog.ROLLUP_RECENT),
    which holds the same rows: FINAL merges only the parts whose key ranges meet, and the rollup's parts
    (sorted by node, device, window) each span every port, so each meets all the others of its day, while
    the copy's, written at different times, meet where their minutes do. On the bench day (1,024 GPUs, its
    day in 3 parts) `tmp_nic_windows` takes 0.90-1.14 s against 1.74-2.05 s, the same rows
    (docs/performance.md). The storage rollup's FINAL read (3e) took as long from its copy: it stays."""
    one = functools.partial(
        NIC_ROLLUP_ROWS.format,
        cluster=params["cluster"],
        rollups=params["rollups"],
        span=params["rollup_span"],
    )
    rollup, copy = catalog.ROLLUP_TABLES["nic"], catalog.ROLLUP_RECENT["nic"]
    if since is None:
        return one(table=rollup, since="")
    at = f"toDateTime({-(-since // 1000)}, 'UTC')"  # DateTime is in seconds: the first one held
    return (
        f"{one(table=copy, since=f' AND window_start >= {at}')} UNION ALL "
        f"{one(table=rollup, since=f' AND window_start < {at}')}"
    )


NIC_RAW_PORTS = (
    "SELECT node, device, port, intDiv(toInt64(toUnixTimestamp(window_start)) * 1000, {W}) AS wi, "
    "{columns}, toUInt8(0) AS stored_twice FROM ({raw})"
)
"""The same from the raw rows of step 3e's nodes (deduplicated by FINAL: nothing stored twice)."""

NIC_WINDOWS = (
    "SELECT node, wi, "
    "max(if(xmit_wait_n > 0, xmit_wait_milli / xmit_wait_n / 1000, NULL)) AS xmit_wait, "
    "max(if(ecn_n > 0, ecn_milli / ecn_n / 1000, NULL)) AS ecn, "
    "max(cnp_milli / rows / 1000) AS cnp, "
    "max(if(line_n > 0, line_micro / line_n / 1e6, NULL)) AS line_frac, "
    "max(stored_twice) AS stored_twice "
    "FROM ({ports}) GROUP BY node, wi"
)
"""A node's fabric signals per window (goodput.sql 9): each the highest of its ports' averages, from the
ports' integer sums, so any merge order of the rollup's parts gives the same numbers. {nic_rollup_windows}
reads the rollup once, for both step 3e's check and step 9; {nic_raw_windows} the raw rows of 3e's nodes."""


def rollup_params(kind: str, params: dict, run_id: str, since: int | None) -> dict[str, str]:
    """What goodput.sql reads of `kind` from both sources, its rollup (or in a live run its time-first
    copy: {<kind>_rollup_read}; the NIC rollup's windows from `since` in the copy: `nic_rollup_rows`)
    and, for step 3e's nodes, the rollup's sums over their raw rows
    (ddl.rollup_select, per window of W): {gpu_windows} in one shape of row from both, {nic_rollup_windows}
    and {nic_raw_windows} (per node and window), and {raw_storage_windows} (the storage step adds its
    rollup rows itself); and {rollup_gpu}, the GPU rollup itself, which steps 3 and 3a read by job over
    the jobs' whole allocations."""
    source = RAW_WINDOWS.format(
        offset=NODE_OFFSET_MS,
        raw=catalog.RAW_TABLES[kind],
        kind=kind,
        **{k: params[k] for k in ("cluster", "rollups", "W")},
    )
    raw = temp_names(ddl.rollup_select(kind, f"({source})", int(params["W"])), run_id)
    common = {
        "raw": raw,
        "span": params["rollup_span"],
        **{k: params[k] for k in ("cluster", "rollups", "W")},
    }
    out: dict[str, str] = {}
    if kind in ("gpu", "storage"):
        out[f"{kind}_duplicates"] = temp_names(
            DUPLICATES.format(
                **{k: v.format(n=CHECK_WINDOWS) for k, v in DUPLICATE_BLOCKS[kind].items()},
                R_S=catalog.ROLLUP_WINDOW_S,
                n=CHECK_WINDOWS,
                table=params[f"{kind}_rollup_read"],
                **common,
            ),
            run_id,
        )
    if kind == "gpu":
        out["rollup_gpu"] = catalog.ROLLUP_TABLES[kind]
        out["gpu_windows"] = temp_names(
            GPU_WINDOWS.format(
                rollup=params["gpu_rollup_read"], R_MS=ddl.R_MS, R_S=catalog.ROLLUP_WINDOW_S, **common
            ),
            run_id,
        )
    elif kind == "nic":
        columns = ["rows"] + [c for c, _, _ in ddl.ROLLUP_COLUMNS[kind]]
        whole = int(params["W"]) == ddl.R_MS
        rollup_ports = NIC_ROLLUP_PORTS.format(
            columns=", ".join(columns if whole else (f"sum({c}) AS {c}" for c in columns)),
            twice="twice" if whole else "max(twice)",
            group="" if whole else "GROUP BY node, device, port, wi",
            rows=nic_rollup_rows(params, since),
            **common,
        )
        raw_ports = NIC_RAW_PORTS.format(columns=", ".join(columns), **common)
        out["nic_rollup_windows"] = temp_names(NIC_WINDOWS.format(ports=rollup_ports), run_id)
        out["nic_raw_windows"] = temp_names(NIC_WINDOWS.format(ports=raw_ports), run_id)
    else:
        out[f"raw_{kind}_windows"] = raw
    return out


def temp_names(sql: str, run_id: str) -> str:
    """`sql` with every temp table renamed to its run's own (tmp_events -> tmp_events_<run_id>): two runs
    on one server never read or drop each other's."""
    return _TEMP.sub(lambda m: f"{m[1]}_{run_id}", sql) if run_id else sql


_COPIED = (
    f"(SELECT count() FROM {catalog.SCHEMA_MIGRATIONS} WHERE version = 4) AS copied, "
    "toInt64(toUnixTimestamp(now())) * 1000 AS now_ms"
)
"""What `_copies_from` needs to know, as columns of a read: whether `migrate` copied the rollups' last days
into their time-first copies (version 4 recorded), and the store's clock."""


def _copies_from(row: dict) -> int | None:
    """The first instant (epoch ms) from which the time-first copies hold every rollup row, given
    `_COPIED`'s columns: the ddl.RECENT_TTL_DAYS they keep before the store's clock, once copied; None
    before."""
    return int(row["now_ms"] - ddl.RECENT_TTL_DAYS * 86_400_000) if row["copied"] > 0 else None


def copies_from(store: Store) -> int | None:
    """The first instant (epoch ms) from which the rollups' time-first copies (catalog.ROLLUP_RECENT) hold
    every rollup row: the copies' views exist and `migrate` has copied the rollups' last days (version 4
    recorded), and their rows from ddl.RECENT_TTL_DAYS before the store's clock on have not expired. From
    then on each insert fills a rollup and its copy alike (ddl.rollup_views). A batch a migration copied
    twice (inserted while it copied) shows in the copy as a window with more rows than seconds, which step
    3e reads there and answers with that node's raw rows, as it does for a batch stored twice. None where
    the copies hold nothing yet (a store not migrated to version 4). One small read, whatever the store
    holds: a check comparing the tables' rows read the rollups' day, 0.35-0.4 s at 10k GPUs x 4 h."""
    return _copies_from(store.query_arrow(f"SELECT {_COPIED}").to_pylist()[0])


def _holds(since: int | None, from_ms: int) -> bool:
    """Whether copies holding every rollup row from `since` (`copies_from`) hold those from `from_ms` on."""
    return since is not None and from_ms >= since


def data_end(store: Store, cluster: str) -> int:
    """The end of the data of `cluster`, epoch ms: its latest job event or GPU sample (0 when none). Jobs
    still open are classified up to here, whatever range is asked for.

    Read where it is cheap, as every run (a live run each minute) starts here. The latest sample is the
    latest `last_ms` (a sample's own ts, kept per window at insert) of the cluster's newest window, found
    by reading the GPU rollup's time-first copy (catalog.ROLLUP_RECENT) backwards in its key order: a few
    granules, 3-9 ms on 10,240 GPUs x 4 h. A window's samples lie within it (its start, +10 s], so no
    older window holds a later one. The copy answers where it holds every row of its days (version 4
    recorded: `migrate` copied the rollups' last days) and its answer lies within the days it keeps (an
    expired day part may linger after a newer one is dropped). Otherwise from the GPU rollup: its
    `last_ms` over the store's newest day partitions (the newest window of any cluster, from the parts'
    min/max index, less a day), 0.1-0.2 s there, bounded by a day however many the store keeps; over all
    its days for a cluster with no sample that recent (its agents silent for a day while another
    cluster's write)."""
    rollup, recent, params = catalog.ROLLUP_TABLES["gpu"], catalog.ROLLUP_RECENT["gpu"], {"cluster": cluster}
    mine = "WHERE cluster = {cluster:String}"
    newest = f"SELECT window_start FROM {recent} {mine} ORDER BY window_start DESC LIMIT 1"
    row = store.query_arrow(
        f"SELECT (SELECT toUnixTimestamp64Milli(max(ts)) FROM {catalog.RAW_TABLES['job']} "
        f"WHERE cluster = {{cluster:String}}) AS events, "
        f"(SELECT max(last_ms) FROM {recent} {mine} AND window_start = ({newest})) AS copy, {_COPIED}",
        params,
    ).to_pylist()[0]
    if row["copy"] and _holds(_copies_from(row), row["copy"]):
        return max(int(row["events"] or 0), int(row["copy"]))
    latest = f"SELECT max(last_ms) FROM {rollup} WHERE cluster = {{cluster:String}}"
    recent_day = f" AND window_start >= (SELECT max(window_start) FROM {rollup}) - INTERVAL 1 DAY"
    sample = store.query_arrow(f"SELECT ({latest}{recent_day}) AS sample", params).column(0)[0].as_py()
    if not sample:
        sample = store.query_arrow(f"SELECT ({latest}) AS sample", params).column(0)[0].as_py()
    return max(int(row["events"] or 0), int(sample or 0))


def recent_covers(since: int | None, from_ms: int) -> bool:
    """Whether a live run may read its minutes, from `from_ms` on, in the rollups' time-first copies, which
    hold every rollup row from `since` (`copies_from`). Otherwise (older minutes, a store not yet migrated)
    it reads the rollups: slower (docs/performance.md "Live runs"), the same result."""
    covers = _holds(since, from_ms)
    if not covers:
        log.info("live run reads the rollups: their time-first copies do not cover %d ms on", from_ms)
    return covers


ROWS_PER_PART = 10_000_000
"""The rows of allocated time per (job, GPU, window) (tmp_piece_windows) that one part of goodput.sql's
widest statements takes. Each statement naming {part} runs once per part, over the nodes or jobs whose
number is {part} modulo {parts}: its hash tables then hold one part's keys, not the run's, and the run's
peak memory is the tables kept plus one part's working set. But each part also reads the whole of the
temp tables it joins (a Memory table has no index to skip the other parts' rows), so fewer parts cost
less time. On the bench day (docs/performance.md), 8.8 M rows: one part since step 7 stopped grouping
every window, 14.3-15.0 s and a peak RSS of 1.71-1.72 GB, against 16.0-18.7 s and 1.28-1.34 GB in 3 parts
of 3 M rows (2 parts: 15.7-16.8 s, 1.38-1.52 GB). A run of fewer rows is one part."""

TEMP_ENGINE = "Memory SETTINGS compress = 1"
"""The engine of the analyzers' temp tables ({temp_engine} in the SQL files): in memory, as they live for
one run, and compressed (LZ4 per block), as the per-(job, GPU, window) tables alive at once are most of
a run's peak memory. On the bench day they take less than half the bytes (1.33 -> 0.57 GB at the
fullest) for 4-5 % more CPU time, which the fewer parts this allows (`ROWS_PER_PART`) win back
(docs/performance.md)."""

LIVE_TEMP_ENGINE = "Memory"
"""A live run's temp tables ({temp_engine} when {live} = 1): uncompressed, as they hold the span's rows only
(10 minutes of 10,240 GPUs: 614,400 (job, GPU, window) rows, 30-90 MB more at the peak, 0.85 GB in all)
and compressing and reading back every block is CPU the run waits on: 8-9 % of a live run
(docs/performance.md "Live runs: uncompressed temp tables")."""

_FIXED = {"part": "{part}", "parts": "{parts}"}
_CREATE = re.compile(
    rf"CREATE OR REPLACE TABLE (\w+) ENGINE = (?:{re.escape(TEMP_ENGINE)}|{re.escape(LIVE_TEMP_ENGINE)}) AS\s"
)


def statements(name: str, params: dict) -> list[str]:
    """The statements of one SQL file with its placeholders filled and its temp tables named for the run
    (params["run_id"]); a statement naming {alive_jobs} comes once per entry of params["alive_jobs"]
    (see `alive_jobs`). {part} and {parts} stay, for `in_parts` to number when the run's size is known."""
    text = temp_names((HERE / name).read_text(), params.get("run_id", ""))
    body = "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("--"))
    fill = ChainMap(_FIXED, params)
    out = []
    for s in (s.strip() for s in body.split(";;") if s.strip()):
        if "{alive_jobs}" in s:
            out += [s.format_map(ChainMap({"alive_jobs": jobs}, fill)) for jobs in params["alive_jobs"]]
        else:
            out.append(s.format_map(fill))
    return out


PARTS_COUNTED_IN = "tmp_piece_windows"
"""The temp table whose rows `part_count` counts: a statement in parts waits for it (schedule.py)."""


def part_count(store: Store, run_id: str) -> int:
    """How many parts the run's partitioned statements take (`ROWS_PER_PART`)."""
    counted = temp_names(PARTS_COUNTED_IN, run_id)
    rows = store.query_arrow(f"SELECT count() AS n FROM {counted}").column("n")[0].as_py()
    return max(1, -(-int(rows) // ROWS_PER_PART))


def in_parts(sql: str, parts: int) -> list[str]:
    """`sql` once per part, {part} numbered from 0 of {parts}: a CREATE makes its table of the first part
    and inserts the others into it (a statement of another shape is refused: each part would replace
    the last)."""
    insert = _CREATE.sub(r"INSERT INTO \1 ", sql, count=1)
    if not insert.startswith("INSERT INTO "):
        raise ValueError(
            "a statement naming {part} must be 'CREATE OR REPLACE TABLE <t> ENGINE = {temp_engine} AS ...' "
            f"or an INSERT: {first_line(sql)}"
        )
    numbered = [(insert if part else sql).replace("{parts}", str(parts)) for part in range(parts)]
    return [one.replace("{part}", str(part)) for part, one in enumerate(numbered)]


class _StandIns(dict):
    """Placeholders with "0" standing in for the values `run` learns only after goodput.sql (the days and
    ranges, numbers that name no table): enough to read which temp tables a later file names."""

    def __missing__(self, key: str) -> str:
        return "0"


def temp_reads(sql: str, run_id: str) -> set[str]:
    """The run's temp tables (with their run id) that `sql` names."""
    return set(re.findall(rf"\btmp_[a-z_]+_{run_id}\b", sql))


def named_after_each_file(params: dict, run_id: str, files: tuple[str, ...]) -> dict[str, set[str]]:
    """Per SQL file of the run (goodput.sql, then `files`), the temp tables that the files after it name
    (and those `run` reads itself), so that each file can drop a table with the last statement naming it."""
    names = {name: set[str]() for name in ("goodput.sql", *files)}
    for name in files:
        for sql in statements(name, _StandIns({**params, "alive_jobs": ["0"]})):
            names[name] |= temp_reads(sql, run_id)
    later, out = {f"{t}_{run_id}" for t in READ_BY_RUN}, {}
    for name in reversed(names):
        out[name] = set(later)
        later |= names[name]
    return out


def fleet_ranges(store: Store, params: dict, run_id: str) -> dict[str, str]:
    """The literal ranges fleet.sql replaces (its header says which table each bounds), read before
    rollups.sql rewrites scheduling_delay: the days of the alive jobs' submissions, now and as stored
    before; the capacity buckets of the run's days up to the end of the data; the range's windows up to
    the end of the data. Literals, as the DELETEs may run ON CLUSTER."""
    stored = (
        f"FROM {catalog.SCHEDULING_DELAY} "
        f"WHERE cluster = {quote(params['cluster'])} AND job_id IN (SELECT job_id FROM tmp_events)"
    )
    q = temp_names(
        "SELECT (SELECT min(t) FROM tmp_events WHERE event = 'submitted') AS new_lo, "
        "(SELECT max(t) FROM tmp_events WHERE event = 'submitted') AS new_hi, "
        f"(SELECT min(toUnixTimestamp64Milli(submitted)) {stored}) AS old_lo, "
        f"(SELECT max(toUnixTimestamp64Milli(submitted)) {stored}) AS old_hi",
        run_id,
    )
    row = {k: v[0] for k, v in store.query_arrow(q).to_pydict().items()}
    start, end, as_of = int(params["start"]), int(params["end"]), int(params["as_of"])
    los = [int(params["day_lo"])] + [int(row[k]) for k in ("new_lo", "old_lo") if row[k]]
    his = [int(params["day_hi"])] + [int(row[k]) for k in ("new_hi", "old_hi") if row[k]]
    b = int(params["bucket"])
    cap_lo, cap_hi = int(params["day_lo"]) // b * b, -(-min(int(params["day_hi"]), as_of) // b) * b
    return {
        "sub_lo": str(min(los)),
        "sub_hi": str(max(his)),
        "cap_lo": str(cap_lo),
        "cap_hi": str(max(cap_lo, cap_hi)),
        "frag_hi": str(max(start, min(end, as_of))),
    }


def step_name(sql: str) -> str:
    """A statement in a progress line: its verb and table (`INSERT goodput_windows`)."""
    m = re.match(r"\s*(\w+).*?\b(?:TABLE|INTO|FROM)\s+(\w+)", sql, re.S)
    return f"{m[1]} {m[2]}" if m else first_line(sql)


def _execute(
    store: Store,
    sqls: list[str],
    name: str,
    progress: Progress | None,
    named_later: set[str],
    run_id: str,
    parts: Callable[[], int],
    workers: int = 1,
) -> None:
    """Runs `sqls`, each naming {part} once per part of `parts()` (`in_parts`), and drops each temp table
    after the last statement of the run naming it (`named_later`: those the run names after `sqls`). The
    widest hold a row per (job, GPU, window), about 0.5 GB each on the bench day (docs/performance.md), and
    the run's peak memory is the sum of those alive at once, plus the working set of one statement.
    `workers` > 1 runs statements that share no table written by either at once (schedule.py)."""
    if progress:
        progress.grow(len(sqls))
    reads = [temp_reads(sql, run_id) for sql in sqls]
    after = [set(named_later)]
    for names in reversed(reads[1:]):
        after.insert(0, after[0] | names)
    todo: list[Statement] = []
    counted = frozenset({temp_names(PARTS_COUNTED_IN, run_id)})
    for sql, names, still_named in zip(sqls, reads, after, strict=True):
        label = f"{name}: {step_name(sql)}"
        todo.append(Statement(sql, label=label, reads=counted if "{part}" in sql else frozenset()))
        todo += [Statement(f"DROP TABLE IF EXISTS {table}") for table in sorted(names - still_named)]

    def expand(s: Statement) -> list[Statement]:
        if "{part}" not in s.sql:
            return [s]
        *first, last = in_parts(s.sql, parts())
        return [*(Statement(one) for one in first), Statement(last, label=s.label)]

    def ran(s: Statement) -> None:
        if progress and s.label:
            progress.step(s.label)

    run_statements(todo, store.execute, workers, expand, ran)


def run(
    store: Store,
    cfg: Config,
    start_ms: int,
    end_ms: int,
    progress: Progress | None = None,
    *,
    rollups: bool = True,
    parts: int | None = None,
) -> dict[str, float]:
    """Classifies [start_ms, end_ms) and returns seconds per SQL file, for the log; `progress` gets a
    step per statement (the commands pass one; the loader service's periodic runs do not). Every job
    alive in the range is classified whole, and what a live run needs of it is kept (state.sql).

    `rollups=False` reads every node's raw rows, as a window that is no multiple of the rollups' does:
    the tests check that both give the same tables. `parts` sets how many parts the widest statements
    take (default: one per `ROWS_PER_PART` rows); the tests check that any number gives the same tables."""
    as_of = data_end(store, cfg.cluster.name)
    return _run(store, cfg, start_ms, end_ms, as_of, progress, rollups=rollups, parts=parts, live=False)


def run_live(
    store: Store,
    cfg: Config,
    from_ms: int,
    progress: Progress | None = None,
    *,
    rollups: bool = True,
    parts: int | None = None,
    as_of_ms: int | None = None,
) -> dict[str, float]:
    """Classifies the windows from `from_ms` (floored to a window) to the end of the data into
    goodput_live, replacing its rows from there; returns seconds per SQL file. `as_of_ms`: the end of
    the data where the caller has just read it (`data_end`).

    What the on-call engineer looks at every minute, in a time that grows with the minutes, not with the
    jobs' lengths: only those windows are read and classified (goodput.sql `{live_from}`), each job with
    the numbers its last whole run kept (job_state: b*, the noise, the real starts, the evidence
    baselines, the clock offsets), and a job no whole run has seen yet with what its windows show. The
    rows are provisional: they equal a whole run's where those numbers still hold (the tests compare),
    and differ where the job's level moved since, or where a straggler episode or a failure's lost
    progress reaches back before `from_ms`. goodput_windows, job_summary and the rest are untouched."""
    as_of = data_end(store, cfg.cluster.name) if as_of_ms is None else as_of_ms
    return _run(
        store, cfg, from_ms, max(as_of, from_ms), as_of, progress, rollups=rollups, parts=parts, live=True
    )


def _run(
    store: Store,
    cfg: Config,
    start_ms: int,
    end_ms: int,
    as_of_ms: int,
    progress: Progress | None,
    *,
    rollups: bool,
    parts: int | None,
    live: bool,
) -> dict[str, float]:
    timings: dict[str, float] = {}
    t = time.perf_counter()
    refresh_dimensions(store, cfg)
    run_id = uuid.uuid4().hex[:12]
    params: dict = {
        **_params(cfg, start_ms, end_ms, as_of_ms, live),
        "run_id": run_id,
        "node_offset_ms": temp_names(NODE_OFFSET_MS, run_id),
        "delete_from": {
            name: ddl.delete_target(store, name) or name for name in (*OUTPUT_TABLES, LIVE_OUTPUT)
        },
    }
    params["delete_windows"] = params["delete_from"][params["windows_table"]]
    params["rollups"] = "1" if rollups and int(params["W"]) % ddl.R_MS == 0 else "0"
    params["rollup_span"] = temp_names(ROLLUP_SPAN.format(W=params["W"]), run_id)
    params["run_gpu"] = temp_names(RUN_GPU, run_id)
    since = copies_from(store)
    recent = live and params["rollups"] == "1" and recent_covers(since, int(params["live_from"]))
    for kind in ("gpu", "storage"):  # {<kind>_rollup_read}: where the run reads the span's rollup rows
        params[f"{kind}_rollup_read"] = (catalog.ROLLUP_RECENT if recent else catalog.ROLLUP_TABLES)[kind]
    for kind in catalog.ROLLUP_TABLES:
        params.update(rollup_params(kind, params, run_id, since))
    files = () if live else SQL_FILES
    later = named_after_each_file(params, run_id, files)
    count_parts = functools.cache(lambda: parts or part_count(store, run_id))
    try:
        selection, *rest = statements("goodput.sql", {**params, "alive_jobs": ["..."]})
        named_later = later["goodput.sql"] | temp_reads("\n".join(rest), run_id)
        _execute(store, [selection], "goodput.sql", progress, named_later, run_id, count_parts)
        # the deletes that follow name the jobs the selection read
        params["alive_jobs"] = alive_jobs(store, run_id)
        _execute(
            store,
            statements("goodput.sql", params)[1:],
            "goodput.sql",
            progress,
            later["goodput.sql"],
            run_id,
            count_parts,
            # a live run's statements are small and mostly planned on one thread: two at once where they
            # may; a whole run's are wide, each on every core, and two at once would add their memory
            getattr(store, "concurrent_statements", 1) if live else 1,
        )
        timings["goodput.sql"] = time.perf_counter() - t
        t = time.perf_counter()
        if files:
            span = store.query_arrow(temp_names("SELECT day_lo, day_hi FROM tmp_span", run_id))
            for c in ("day_lo", "day_hi"):  # team_day's days: literals, as its DELETE may run ON CLUSTER
                params[c] = str(int(span.column(c)[0].as_py()))
            params.update(fleet_ranges(store, params, run_id))
        for name in files:
            _execute(store, statements(name, params), name, progress, later[name], run_id, count_parts)
            timings[name] = time.perf_counter() - t
            t = time.perf_counter()
    finally:
        for tmp in TEMP_TABLES:
            try:
                store.execute(f"DROP TABLE IF EXISTS {tmp}_{run_id}")
            except Exception:  # the store itself failed: the original error is the one to see
                log.warning("could not drop temp table %s_%s", tmp, run_id, exc_info=True)
    return timings
