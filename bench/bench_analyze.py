"""How long the analyzers take over a cluster's day, against the bare query over the same rows (issue 19).

    .venv/bin/python bench/bench_analyze.py [--gpus 1024] [--hours 24] [--repeat 3] [--store DIR]
                                             [--raw] [--last SECONDS] [--polars] [--compacted] [--floor]
                                             [--json out.json]

The data is written straight into a chDB store by SQL (`INSERT ... SELECT FROM numbers_mt()`), not
through the simulator and the loader's JSON path, which would take most of the run at this size: per
node-second 8 GPU rows, 8 NIC port rows and 3 storage rows (NFS reads, PSI, a local disk), as a node
agent at 1 Hz sends them, an hour at a time in the tables' sort order, merged once all are in (build());
the store's materialized views roll them up as the loader's inserts would be.
The job events (a few hundred jobs) do go through the loader. Jobs: the nodes in gangs of 8 run jobs of
1-4 hours back to back with a 5-minute gap, saving a checkpoint (40.5 s, ending 3.7 s past a window) every
30 minutes, so phase boundaries cut windows as in life; each job-minute is productive,
or with probability 5 % a data stall (PSI high, SM near zero) or 3 % a comm stall (xmit_wait high),
drawn per (gang, minute) from a hash so every GPU of a gang stalls together. The store is cached under
~/.cache/goodput/bench-analyze-<gpus>g-<hours>h (or --store DIR) and rebuilt only with --rebuild. The
build ends when the background merges of its parts are over (timed, within the build's time), and
a measurement during which the raw or rollup tables merged is flagged as not steady state.

Each measurement runs in a fresh process, so its peak RSS is its own: `goodput analyze` over the whole
day, and the reference, a bare `GROUP BY node, gpu, 10 s window` of SM activity over the same raw GPU
rows; with --raw also the analyzers reading every node's raw rows instead of the rollups (what they did
before the rollups, and do for nodes with a clock offset or a duplicate); with --last SECONDS also the
analysis of the data's last SECONDS, as the loader service runs it every few minutes; with --polars also
the issue's polars baseline, over Parquet copies of the same raw rows (written once beside the store, not
timed): the bare query, and the classification's core (bench/polars_classify.py: goodput.sql 4-12 from
the raw per-second rows), whose GPU-hours per category are checked against the analysis's; with --floor
also the reads the analysis cannot do without (READ_FLOOR), so the analysis is weighed against what its
reads cost as well as against the bare query. Printed: min /
median / max seconds of each, the median CPU-seconds (user + system of the process: steadier than wall
time on a shared machine), the ratios of medians, peak RSS, rows, and the time per statement of the last
run.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import polars_classify  # noqa: E402

from contracts import catalog  # noqa: E402
from contracts import config as config_mod  # noqa: E402
from contracts.envelope import encode_batch  # noqa: E402
from contracts.schema import KINDS, topic_for  # noqa: E402
from goodput.sim.cluster import scaled_config  # noqa: E402
from pipeline import ddl  # noqa: E402
from pipeline.chdb_store import ChdbStore  # noqa: E402
from pipeline.compaction import compact_closed_days  # noqa: E402
from pipeline.loader import Loader, limits_from_config  # noqa: E402
from transport.base import InProcessTransport  # noqa: E402

GANG_NODES = 8
CHECKPOINT_MS = 40_500
MARKER = "built.json"


def _config(gpus: int) -> config_mod.Config:
    return scaled_config(config_mod.load(), gpus)


def _nodes(cfg: config_mod.Config) -> list[str]:
    return [n for p in cfg.pools for n in p.nodes]


def _jobs(nodes: list[str], t0_s: int, hours: float, seed: int = 19) -> list[dict]:
    """Back-to-back jobs per gang of GANG_NODES nodes: (job_id, nodes, start, end) in epoch seconds."""
    rng = random.Random(seed)
    end_s = t0_s + int(hours * 3600)
    out = []
    for g in range(0, len(nodes), GANG_NODES):
        gang = nodes[g : g + GANG_NODES]
        t = t0_s + rng.randrange(0, 600)
        while t < end_s - 600:
            length = rng.randrange(3600, 4 * 3600)
            out.append(
                {
                    "job_id": f"bench-{g // GANG_NODES}-{len(out)}",
                    "nodes": gang,
                    "start": t,
                    "end": min(t + length, end_s),
                }
            )
            t += length + 300
    return out


def _job_events(cfg: config_mod.Config, jobs: list[dict]) -> list[tuple[str, bytes, bytes]]:
    """The jobs' lifecycle as the scheduler's agent sends it: one batch per job."""
    fields = [f.name for f in KINDS["job"].fields]
    sender = cfg.cluster.control_nodes[0]
    batches = []
    for seq, j in enumerate(jobs):
        rows = [dict(ts_ms=j["start"] * 1000 - 60_000, event="submitted", gpus_requested=8 * len(j["nodes"]))]
        rows += [
            dict(ts_ms=j["start"] * 1000, event="allocated", node=n, gpu_indices=list(range(8)))
            for n in j["nodes"]
        ]
        rows += [
            dict(ts_ms=j["start"] * 1000, event="gang_complete"),
            dict(ts_ms=j["start"] * 1000 + 60_000, event="running"),
        ]
        rows += [  # a 40.5 s checkpoint save every 30 minutes: phase boundaries inside windows
            dict(ts_ms=t, event="checkpoint_saved", step=k, duration_ms=CHECKPOINT_MS)
            for k, t in enumerate(range(j["start"] * 1000 + 1_800_000 + 3_700, j["end"] * 1000, 1_800_000))
        ]
        rows += [dict(ts_ms=j["end"] * 1000, event="completed", exit_code=0)]
        rows += [
            dict(ts_ms=j["end"] * 1000, event="released", node=n, gpu_indices=list(range(8)))
            for n in j["nodes"]
        ]
        cols: dict[str, list] = {f: [] for f in fields}
        for r in rows:
            r = {"job_id": j["job_id"], "attempt": 1, "account": "llm", "source": "bench", **r}
            for f in fields:
                cols[f].append(r.get(f, [] if f == "gpu_indices" else None))
        value = encode_batch(
            kind="job",
            cluster=cfg.cluster.name,
            node=sender,
            seq=seq,
            sent_ms=rows[-1]["ts_ms"],
            columns=cols,
            agent="goodput-bench/0",
        )
        batches.append((topic_for("job"), sender.encode(), value))
    return batches


BUILD_SETTINGS = "SETTINGS optimize_on_insert = 0, max_insert_threads = 2, parallel_view_processing = 1"
"""The samples' inserts. optimize_on_insert = 0: ReplacingMergeTree would otherwise collapse each block's
duplicate keys as it writes the part, which took 6x the time of the rest of the insert (256 GPUs x 6 h,
raw_gpu: 21.2 s against 3.4 s) and finds nothing here, where every (node, device, second) is generated
once. numbers_mt and two insert threads: both cores generate and write; the rows do not depend on the
order in which they are made (each is a function of its number). parallel_view_processing: without it
the rollup view runs after the raw write on one core, and the GPU insert spends half its time there
(512 GPUs x 12 h: GPU 17.8 -> 12.7 s; docs/performance.md)."""

CHUNK_S = 3600
"""The generator's time chunk: within a chunk the rows come in the raw tables' sort order (node, device,
second), so each inserted block is already sorted and the engine skips its sort; chunk after chunk, the
day is written in time order, as a loader writes it. An hour of a gang meets at most two jobs' running
time (jobs last at least an hour, 5 minutes apart), which the generator's lookup relies on."""


def _samples_sql(cluster: str, nodes: list[str], jobs: list[dict], t0_s: int, seconds: int) -> list[str]:
    """INSERT ... SELECT statements writing every node-second's GPU, NIC and storage rows.

    Row number -> (chunk, node in name order, device, second of the chunk). Whether a second is running
    is looked up per (gang, chunk) among the running ranges [start + 60 s, end) of the (at most two) jobs
    meeting the chunk; the state of a running minute is drawn per (gang, minute) from a hash, and the SM
    noise per (node-second, GPU) from the second's number in time order (second x nodes + node), so the
    rows do not depend on the chunking (the same rows as a time-major generator: docs/performance.md)."""
    n = len(nodes)
    chunk = math.gcd(seconds, CHUNK_S)
    chunks = seconds // chunk
    by_name = sorted(range(n), key=lambda i: nodes[i])
    node_list = "[" + ",".join(f"'{x}'" for x in nodes) + "]"
    ranges: list[list[tuple[int, int]]] = []  # per (gang, chunk): two running ranges, (0, 0) for none
    for g in range(0, n, GANG_NODES):
        runs = [(j["start"] + 60, j["end"]) for j in jobs if j["nodes"][0] == nodes[g]]
        for c in range(chunks):
            lo, hi = t0_s + c * chunk, t0_s + (c + 1) * chunk
            meet = [r for r in runs if r[0] < hi and r[1] > lo]
            if len(meet) > 2:
                raise ValueError(f"bench jobs: {len(meet)} jobs run in one {chunk} s chunk of a gang")
            ranges.append(meet + [(0, 0)] * (2 - len(meet)))
    lookup = ", ".join(f"{[r[k][e] for r in ranges]} AS r{k}{e}" for k in (0, 1) for e in (0, 1))

    def common(devices: int) -> str:
        per_chunk = n * devices * chunk
        return f"""
    WITH {node_list} AS nodes, {by_name} AS by_name, {lookup},
         number % {per_chunk} AS r, by_name[intDiv(r, {devices * chunk}) + 1] AS ni,
         intDiv(r % {devices * chunk}, {chunk}) AS d, intDiv(number, {per_chunk}) AS c,
         c * {chunk} + r % {chunk} AS s, s * {n} + ni AS num, {t0_s} + s AS t,
         intDiv(ni, {GANG_NODES}) AS gi, gi * {chunks} + c + 1 AS k,
         (t >= r00[k] AND t < r01[k]) OR (t >= r10[k] AND t < r11[k]) AS running,
         cityHash64(gi + 1, intDiv(t, 60)) % 100 AS draw,
         multiIf(NOT running, 'idle', draw < 5, 'data', draw < 8, 'comm', 'run') AS state
    """

    return [
        f"""INSERT INTO raw_gpu (cluster, node, ts, gpu, uuid, sm_active_pct, util_gpu_pct,
                                throttle_reasons, seq)
        {common(8)}
        SELECT '{cluster}', nodes[ni + 1], fromUnixTimestamp64Milli(toInt64(t) * 1000), d,
               concat('GPU-', nodes[ni + 1], '-', toString(d)),
               toFloat32(multiIf(state = 'run', 85 + (cityHash64(num, d) % 1000) / 100.0,
                                 state = 'idle', 0, (cityHash64(num, d) % 200) / 100.0)),
               toFloat32(if(state = 'idle', 0, 90)), 0, s
        FROM numbers_mt({n * 8 * seconds})
        {BUILD_SETTINGS}""",
        f"""INSERT INTO raw_nic (cluster, node, ts, device, port, rate_gbps, tx_bytes_per_s,
                                xmit_wait_per_s, ecn_marked_per_s, cnp_sent_per_s, cnp_handled_per_s, seq)
        {common(8)}
        SELECT '{cluster}', nodes[ni + 1], fromUnixTimestamp64Milli(toInt64(t) * 1000),
               concat('mlx5_', toString(d)), 1, 400, toFloat32(if(state = 'run', 2e10, 1e8)),
               toFloat32(if(state = 'comm', 5e6, 0)), 0, 0, 0, s
        FROM numbers_mt({n * 8 * seconds})
        {BUILD_SETTINGS}""",
        f"""INSERT INTO raw_storage (cluster, node, ts, source, device, read_bytes_per_s,
                                    psi_some_pct, seq)
        {common(3)}, [('diskstats', 'nvme0n1'), ('nfs', 'nfs0'), ('psi', 'io')][d + 1] AS src
        SELECT '{cluster}', nodes[ni + 1], fromUnixTimestamp64Milli(toInt64(t) * 1000), src.1, src.2,
               toFloat32(if(src.1 = 'nfs', if(state = 'data', 5e8, 1e8), 0)),
               toFloat32(if(src.1 = 'psi', if(state = 'data', 60, 1), 0)), s
        FROM numbers_mt({n * 3 * seconds})
        {BUILD_SETTINGS}""",
    ]


_SAMPLE_TABLES = ", ".join(
    f"'{t}'"
    for t in [*catalog.RAW_TABLES.values(), *catalog.ROLLUP_TABLES.values(), *catalog.ROLLUP_RECENT.values()]
)
ACTIVE_PARTS = (
    f"SELECT (SELECT count() FROM system.merges WHERE table IN ({_SAMPLE_TABLES})) AS merging, "
    "(SELECT count() FROM system.parts WHERE active AND database = currentDatabase() "
    f"AND table IN ({_SAMPLE_TABLES})) AS parts"
)
"""Whether the samples' tables (raw, rollups and the rollups' time-first copies) are merging, and their
active parts: the store is settled when neither changes (an analysis writes its own output tables, which
may merge meanwhile). The copies count as much as the rest: a store given its copies by `migrate` left a
merge of the GPU copy's 9 parts (~14 s) that every measuring process started and abandoned at its exit,
and the live runs measured beside it took 3.3-4.5 s and 6.4-7.9 CPU-s against 2.6-3.1 s and 3.6-4.4
settled (docs/performance.md)."""


def settle_merges(store: ChdbStore, quiet_s: float = 2.0, poll_s: float = 0.5) -> int:
    """Wait until the background merges of the build's parts are over and return the active parts:
    none running and the active parts unchanged for `quiet_s` after the tables were told to look for
    merges again (`SYSTEM START MERGES` wakes each table's merge selection at once; left alone, a table
    that found nothing to merge looks again only after 10 s or more). Otherwise a measurement could pay
    for them: chDB merges in whichever process has the store open, and a process that exits mid-merge
    leaves the merge to the next. Each measurement checks it too (ACTIVE_PARTS before and after)."""
    quiet_since, last, asked = time.perf_counter(), None, False
    while True:
        state = store.query_arrow(ACTIVE_PARTS).to_pylist()[0]
        if state["merging"] or state["parts"] != last:
            quiet_since, last, asked = time.perf_counter(), state["parts"], False
        elif time.perf_counter() - quiet_since >= quiet_s:
            if asked:
                return int(last)
            store.execute("SYSTEM START MERGES")
            quiet_since, asked = time.perf_counter(), True
        time.sleep(poll_s)


def build(path: Path, gpus: int, hours: float, now_s: float | None = None) -> dict:
    """Write the bench day into a new store at `path` and return its figures (also in its marker).

    The background merges stop while the samples go in and run once all rows are in: merged as they
    arrived, the day's parts were rewritten at each level of the merge tree as it grew, on the cores the
    inserts needed (1,024 GPUs x 24 h: 140 s of inserts, then 19 s of merges, against 73 s and 52 s;
    docs/performance.md). Which parts remain is the background merges' own choice either way. The day
    ends an hour before the last whole hour of `now_s` (default: now)."""
    cfg = _config(gpus)
    nodes = _nodes(cfg)
    now_h = int(time.time() if now_s is None else now_s) // 3600 * 3600
    t0_s = now_h - int(hours * 3600) - 3600
    seconds = int(hours * 3600)
    jobs = _jobs(nodes, t0_s, hours)
    started = time.perf_counter()
    store = ChdbStore(path)
    try:
        ddl.migrate(store)
        transport = InProcessTransport()
        loader = Loader(store, limits_from_config(cfg))
        for topic, key, value in _job_events(cfg, jobs):
            transport.send(topic, key, value)
        while records := transport.poll(5000):
            loader.load(records)
            transport.commit(records)
        store.execute("SYSTEM STOP MERGES")  # merged once, below
        try:
            for i, sql in enumerate(_samples_sql(cfg.cluster.name, nodes, jobs, t0_s, seconds), 1):
                took = time.perf_counter()
                store.execute(sql)
                print(
                    f"  build: samples {i}/3 in {time.perf_counter() - took:.1f} s",
                    file=sys.stderr,
                    flush=True,
                )
        finally:
            store.execute("SYSTEM START MERGES")
        took = time.perf_counter()
        parts = settle_merges(store)
        print(
            f"  build: background merges settled in {time.perf_counter() - took:.1f} s, {parts} active parts",
            file=sys.stderr,
            flush=True,
        )
        counts = {
            t: int(store.query_arrow(f"SELECT count() AS n FROM {t}").column("n")[0].as_py())
            for t in ("raw_gpu", "raw_nic", "raw_storage", "raw_job")
        }
    finally:
        store.close()
    meta = {
        "gpus": len(nodes) * 8,
        "hours": hours,
        "t0_ms": t0_s * 1000,
        "end_ms": (t0_s + seconds) * 1000,
        "jobs": len(jobs),
        "rows": counts,
        "build_s": round(time.perf_counter() - started, 1),
    }
    (path / MARKER).write_text(json.dumps(meta))
    return meta


def load_or_build(path: Path, gpus: int, hours: float, *, rebuild: bool = False) -> dict:
    """The store at `path` as built before (its marker's figures), or built now."""
    if rebuild or not (path / MARKER).exists():
        if path.exists():
            subprocess.run(["rm", "-rf", str(path)], check=True)
        shutil.rmtree(parquet_dir(path), ignore_errors=True)  # the polars baseline's copy of the old rows
        print(f"building {path} ...", file=sys.stderr, flush=True)
        return build(path, gpus, hours)
    with ChdbStore(path) as store:  # a store cached under an older schema gets what is new since,
        ddl.migrate(store)
        took = time.perf_counter()
        parts = settle_merges(store)  # and its merges end before any run
        print(f"  merges settled in {time.perf_counter() - took:.1f} s, {parts} parts", file=sys.stderr)
    return json.loads((path / MARKER).read_text())


READ_FLOOR = {
    "gpu rollup, every sample": "SELECT sum(length(samples)) AS n_read, sum(bsum) AS bsum, "
    "groupBitOr(thr) AS thr, sum(arraySum(x -> x.2, samples)) AS levels "
    f"FROM {catalog.ROLLUP_TABLES['gpu']}",
    "nic rollup, FINAL": "SELECT count() AS n_read, sum(rows > bitCount(seconds)) AS twice, "
    "sum(xmit_wait_milli) AS xmit_wait, sum(ecn_milli) AS ecn, sum(cnp_milli) AS cnp, "
    f"sum(line_micro) AS line FROM {catalog.ROLLUP_TABLES['nic']} FINAL",
    "storage rollup": "SELECT sum(length(times)) AS n_read, sum(read_sum) AS read_sum, max(psi_max) AS psi "
    f"FROM {catalog.ROLLUP_TABLES['storage']}",
}
"""The reads no analysis of the whole store can do without (--floor): every GPU sample of the rollup's
arrays (step 7's exact quantiles and dead seconds read them), the NIC rollup merged per key (FINAL, as
3e's duplicate check and step 9 read it) and the storage rollup, each summed and nothing else done: how
far the analysis is from what its reads cost. `n_read` is what each read: the GPU and storage samples
(every second of every GPU and of every storage source: the rollups keep them), every NIC port's window."""

MEASURE = """
import json, re, sys, time
sys.path.insert(0, {root!r})
meta = json.loads({meta!r})
steps = []
read = {{}}
def peak_rss_mb():  # this process's own high-water mark: ru_maxrss would also count the parent's RSS
    # at the fork (Linux keeps it across exec), which after a build in the parent is the larger
    return int(next(x for x in open("/proc/self/status") if x.startswith("VmHWM:")).split()[1]) / 1024
if {what!r}.endswith("_polars"):  # without chDB loaded, so the peak RSS is polars's own
    from pathlib import Path
    import polars as pl
    from contracts import config as config_mod
    sys.path.insert(0, {bench!r})
    import polars_classify
    hours = {{}}
    t, cpu = time.perf_counter(), time.process_time()
    if {what!r} == "bare_polars":
        window = pl.col("ts_ms") // 10_000
        pl.scan_parquet({parquet!r} + "/raw_gpu.parquet").group_by("node", "gpu", window).agg(
            pl.col("sm_active_pct").mean()).collect()
    else:
        hours = polars_classify.classify(Path({parquet!r}), config_mod.load().analyzer)
    took, cpu = time.perf_counter() - t, time.process_time() - cpu
    rss_mb = peak_rss_mb()
    print(json.dumps({{"s": took, "cpu_s": cpu, "rss_mb": rss_mb, "steps": steps, "settled": True,
                      "hours": hours}}))
    sys.exit(0)
from contracts import config as config_mod
from goodput.sim.cluster import scaled_config
from pipeline.analyzers import run as analyzers
from pipeline.chdb_store import ChdbStore
store = ChdbStore({path!r})
parts_before = store.query_arrow({active_parts!r}).to_pylist()[0]["parts"]
t, cpu = time.perf_counter(), time.process_time()
if {what!r}.startswith("analyze"):
    execute = store.execute
    def timed(sql, params=None):
        s = time.perf_counter()
        execute(sql, params)
        name = re.sub(r"_[0-9a-f]{{12}}$", "", analyzers.step_name(sql))  # without the run id
        steps.append((name, round(time.perf_counter() - s, 2)))
    store.execute = timed
    cfg = scaled_config(config_mod.load(), meta["gpus"])
    if {what!r} == "analyze_live":
        analyzers.run_live(store, cfg, meta["end_ms"] - {last_ms})
    else:
        start_ms = meta["end_ms"] - {last_ms} if {what!r} == "analyze_last" else meta["t0_ms"]
        analyzers.run(store, cfg, start_ms, meta["end_ms"], rollups={what!r} != "analyze_raw")
elif {what!r} == "floor":
    for name, sql in {floor!r}.items():
        s = time.perf_counter()
        read[name] = store.query_arrow(sql).to_pylist()[0]["n_read"]
        steps.append((name, round(time.perf_counter() - s, 2)))
else:
    store.query_arrow("SELECT count() AS n FROM (SELECT node, gpu, intDiv(toUnixTimestamp64Milli(ts), 10000) "
                      "AS w, avg(sm_active_pct) AS b FROM raw_gpu GROUP BY node, gpu, w)")
took, cpu = time.perf_counter() - t, time.process_time() - cpu
state = store.query_arrow({active_parts!r}).to_pylist()[0]
store.close()
rss_mb = peak_rss_mb()
settled = state["merging"] == 0 and state["parts"] == parts_before
print(json.dumps({{"s": took, "cpu_s": cpu, "rss_mb": rss_mb, "steps": steps, "settled": settled,
                  "read": read}}))
"""


def live_vs_whole(path: Path, from_ms: int) -> dict:
    """The live run's rows (goodput_live) against the whole analysis's (goodput_windows) over the same
    windows, per (job, window, category): how many differ by more than a micro-second, and the GPU-seconds
    of each. The store's last whole analysis ran over the same rows, so where a job's numbers hold (all of
    them here: the data does not change between the runs) they are the same."""
    w_ms = int(config_mod.load().analyzer.window_s * 1000)  # run_live floors from_ms to a window
    since = f"toDateTime({from_ms // w_ms * w_ms // 1000}, 'UTC')"
    per_key = (
        "SELECT job_id, window_start, category, sum(gpu_seconds) AS {s} FROM {t} "
        "WHERE window_start >= {since} GROUP BY ALL"
    )
    store = ChdbStore(path)
    try:
        row = store.query_arrow(
            "SELECT count() AS keys, countIf(abs(w - l) > 1e-6) AS differing, sum(w) AS whole_s, "
            f"sum(l) AS live_s FROM ({per_key.format(s='w', t='goodput_windows', since=since)}) AS a "
            f"FULL OUTER JOIN ({per_key.format(s='l', t='goodput_live', since=since)}) AS b "
            "USING (job_id, window_start, category)"
        ).to_pylist()[0]
    finally:
        store.close()
    return {k: round(v, 6) if isinstance(v, float) else v for k, v in row.items()}


def parquet_dir(path: Path) -> Path:
    """Where the polars baseline's copy of the store at `path` lies: beside it, a Parquet file per table."""
    return path.with_name(f"{path.name}.parquet")


def parquet_copy(path: Path) -> Path:
    """The columns of the raw rows and dimensions that the polars baseline reads
    (polars_classify.EXPORTS), as Parquet files beside the store (written once, by chDB)."""
    out = parquet_dir(path)
    if not (out / MARKER).exists():
        print(f"writing {out} ...", file=sys.stderr, flush=True)
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        store = ChdbStore(path)
        try:
            write_parquet(store, out)
        finally:
            store.close()
        (out / MARKER).write_text((path / MARKER).read_text())
    return out


def write_parquet(store: ChdbStore, out: Path) -> None:
    """The store's tables as the polars baseline reads them (polars_classify.EXPORTS), one file each."""
    for table, columns in polars_classify.EXPORTS.items():
        store.execute(
            f"INSERT INTO FUNCTION file('{out / table}.parquet', Parquet) SELECT {columns} FROM {table} "
            "SETTINGS engine_file_truncate_on_insert = 1"
        )


def measure(path: Path, meta: dict, what: str, last_s: int = 0) -> dict:
    code = MEASURE.format(
        root=str(ROOT),
        meta=json.dumps(meta),
        path=str(path),
        what=what,
        last_ms=last_s * 1000,
        parquet=str(parquet_dir(path)),
        bench=str(Path(__file__).resolve().parent),
        active_parts=ACTIVE_PARTS,
        floor=READ_FLOOR,
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    if out.returncode:
        raise SystemExit(f"measuring {what} on {path} failed (exit {out.returncode}):\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def repeat(path: Path, meta: dict, what: str, times: int, last_s: int = 0) -> dict:
    """`what` measured `times` times, each in a fresh process: min / median / max seconds, the median
    CPU-seconds, the peak RSS, the runs during which the samples' tables merged (not steady state: flagged,
    and counted), and the last run's time per statement."""
    runs = []
    for i in range(times):
        runs.append(measure(path, meta, what, last_s))
        print(
            f"  {meta['gpus']} GPUs x {meta['hours']:g} h, {what} {i + 1}/{times}: {runs[-1]['s']:.2f} s "
            f"({runs[-1]['cpu_s']:.1f} CPU-s), peak RSS {runs[-1]['rss_mb']:.0f} MB"
            + ("" if runs[-1]["settled"] else "  [the store merged meanwhile: not steady state]"),
            file=sys.stderr,
            flush=True,
        )
    secs = sorted(r["s"] for r in runs)
    return {
        "min_s": secs[0],
        "median_s": statistics.median(secs),
        "max_s": secs[-1],
        "median_cpu_s": statistics.median(r["cpu_s"] for r in runs),
        "peak_rss_mb": max(r["rss_mb"] for r in runs),
        "unsettled_runs": sum(not r["settled"] for r in runs),
        "steps": runs[-1]["steps"],
        **({"hours": runs[-1]["hours"]} if runs[-1].get("hours") else {}),  # the polars baseline's findings
        **({"read": runs[-1]["read"]} if runs[-1].get("read") else {}),  # the floor's rows read
    }


def compacted_copy(path: Path, meta: dict) -> tuple[Path, list]:
    """A copy of the store (made once, next to it) with every day of its rollups compacted, as the loader
    service leaves a closed day (pipeline/compaction.py): each day's partitions one part. Returns the copy
    and what the compaction merged (nothing when the copy was compacted before)."""
    copy = path.with_name(path.name + "-compacted")
    if not (copy / MARKER).exists() or json.loads((copy / MARKER).read_text()) != meta:
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(path, copy, symlinks=True)  # the database's links are relative: kept as links
    store = ChdbStore(copy)
    try:
        done = compact_closed_days(store, meta["end_ms"] / 1000 + 2 * 86_400, settle_s=0)
        settle_merges(store)
    finally:
        store.close()
    return copy, done


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gpus", type=int, default=1024)
    ap.add_argument("--hours", type=float, default=24.0)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--rebuild", action="store_true")
    ap.add_argument(
        "--store",
        type=Path,
        help="the store's directory (default ~/.cache/goodput/bench-analyze-<gpus>g-<hours>h)",
    )
    ap.add_argument("--raw", action="store_true", help="also time the analyzers on the raw rows")
    ap.add_argument(
        "--last",
        type=int,
        default=0,
        metavar="SECONDS",
        help="also time the analysis of the data's last SECONDS: as the loader service's periodic run "
        "(each job it finds classified whole) and as a live run (only those windows, each job with the "
        "numbers the whole analysis kept: run_live), and compare the live rows with the whole run's",
    )
    ap.add_argument(
        "--polars",
        action="store_true",
        help="also time the bare query and the classification's core in polars over Parquet copies of "
        "the same raw rows (bench/polars_classify.py)",
    )
    ap.add_argument(
        "--compacted",
        action="store_true",
        help="also time the analysis on a copy whose rollup days are compacted (closed days, as the "
        "loader service leaves them: pipeline/compaction.py)",
    )
    ap.add_argument(
        "--floor",
        action="store_true",
        help="also time the reads the analysis cannot do without (READ_FLOOR: the rollups' columns it "
        "reads, summed): the analysis against what its reads cost",
    )
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args()
    path = args.store or Path.home() / ".cache" / "goodput" / f"bench-analyze-{args.gpus}g-{args.hours:g}h"
    meta = load_or_build(path, args.gpus, args.hours, rebuild=args.rebuild)
    print(
        f"data: {meta['gpus']} GPUs x {meta['hours']:g} h, {meta['jobs']} jobs, rows {meta['rows']}, "
        f"built in {meta['build_s']} s"
    )
    result: dict = {"data": meta}
    if args.polars:
        parquet_copy(path)
    for what in (
        ("bare", "analyze")
        + (("bare_polars", "classify_polars") if args.polars else ())
        + (("floor",) if args.floor else ())
        + (("analyze_raw",) if args.raw else ())
        + (("analyze_last", "analyze_live") if args.last else ())
    ):
        result[what] = repeat(path, meta, what, args.repeat, args.last)
        print(
            f"{what:8s} min {result[what]['min_s']:.2f} s  median {result[what]['median_s']:.2f} s  "
            f"max {result[what]['max_s']:.2f} s  median {result[what]['median_cpu_s']:.1f} CPU-s  "
            f"peak RSS {result[what]['peak_rss_mb']:.0f} MB"
        )
    ratio = result["analyze"]["median_s"] / result["bare"]["median_s"]
    result["ratio"] = ratio
    print(
        f"analyze / bare GROUP BY: {ratio:.1f}x (target 1.0-1.5x); "
        f"{result['analyze']['median_s'] / (meta['gpus'] * meta['hours'] / 24) * 1000:.1f} ms per GPU-day"
    )
    if args.polars:
        polars_s = result["bare_polars"]["median_s"]
        classify_s = result["classify_polars"]["median_s"]
        print(
            f"bare GROUP BY in polars (Parquet) / in chDB: {polars_s / result['bare']['median_s']:.2f}x; "
            f"analyze / bare in polars: {result['analyze']['median_s'] / polars_s:.1f}x; "
            f"analyze (chDB, rollups) / the classification's core in polars (raw rows): "
            f"{result['analyze']['median_s'] / classify_s:.2f}x"
        )
    if args.floor:
        floor = result["floor"]
        print(
            f"analyze / its reads' floor: {result['analyze']['median_s'] / floor['median_s']:.1f}x "
            f"({floor['median_s']:.2f} s; last run: "
            + ", ".join(f"{name} {s:.2f} s, {floor['read'][name]:,} rows" for name, s in floor["steps"])
            + ")"
        )
    if args.raw:
        gain = result["analyze_raw"]["median_s"] / result["analyze"]["median_s"]
        print(f"analyze on raw rows / on rollups: {gain:.1f}x")
    if args.raw and args.polars:  # the like-for-like pair: both read the raw rows
        raw_s = result["analyze_raw"]["median_s"] / result["classify_polars"]["median_s"]
        print(f"analyze on raw rows / the classification's core in polars (raw rows): {raw_s:.2f}x")
    if args.last:
        share = result["analyze_last"]["median_s"] / result["analyze"]["median_s"]
        live = result["analyze_live"]["median_s"]
        print(
            f"analyze of the last {args.last} s: {result['analyze_last']['median_s']:.2f} s, "
            f"{share:.2f}x the whole {meta['hours']:g} h (a run re-classifies each job it finds over the "
            f"job's whole allocation); live: {live:.2f} s (target < 1 s at 10k GPUs), "
            f"{live / result['bare']['median_s']:.2f}x the bare query over the whole {meta['hours']:g} h"
        )
        result["live_vs_whole"] = live_vs_whole(path, meta["end_ms"] - args.last * 1000)
        print("live rows against the whole run's:", result["live_vs_whole"])
    if args.compacted:
        copy, done = compacted_copy(path, meta)
        for c in done:
            print(f"  compacted {c.table} {c.day}: {c.parts} parts in {c.seconds:.1f} s", file=sys.stderr)
        result["analyze_compacted"] = repeat(copy, meta, "analyze", args.repeat)
        r = result["analyze_compacted"]
        print(
            f"analyze, rollup days compacted: min {r['min_s']:.2f} s  median {r['median_s']:.2f} s  max "
            f"{r['max_s']:.2f} s  median {r['median_cpu_s']:.1f} CPU-s; "
            f"{r['median_s'] / result['analyze']['median_s']:.2f}x the store as loaded"
        )
    slowest = sorted(result["analyze"]["steps"], key=lambda s: -s[1])[:8]
    print("slowest statements (last run):", ", ".join(f"{name} {s:.1f} s" for name, s in slowest))
    store = ChdbStore(path)
    try:  # what the last analysis found: the run did the real work, and it reconciles
        found = store.query_arrow(
            "SELECT category, sum(gpu_seconds) / 3600 AS h FROM goodput_windows GROUP BY category "
            "ORDER BY h DESC"
        ).to_pylist()
    finally:
        store.close()
    result["gpu_hours_by_category"] = {r["category"]: r["h"] for r in found}
    print("GPU-hours found:", ", ".join(f"{r['category']} {r['h']:.1f}" for r in found))
    if args.polars:  # the polars baseline did the same work: the same GPU-hours, or it says where not
        theirs = result["classify_polars"].pop("hours")
        result["polars_gpu_hours_by_category"] = theirs
        diffs = {r["category"]: r["h"] - theirs.get(r["category"], 0.0) for r in found}
        print(
            "GPU-hours in polars (analysis - polars):",
            ", ".join(f"{c} {theirs.get(c, 0.0):.1f} ({d:+.6f})" for c, d in diffs.items()),
        )
        if any(abs(d) > 1e-6 for d in diffs.values()) or set(theirs) - set(diffs):
            print(
                "WARNING: the polars baseline did not find the analysis's GPU-hours: its timing is not "
                "of the same work (bench/polars_classify.py says what it leaves out)"
            )
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
