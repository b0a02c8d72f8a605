"""What an insert into chDB costs per row, and what the insert-time rollups add to it (issue 19).

    .venv/bin/python bench/bench_ingest.py [--nodes 128] [--seconds 600] [--repeat 3] [--json out.json]

The rows are what the loader hands the store: Arrow tables of decoded batches (pipeline.validate's
output shape), here built once for `--nodes` nodes x `--seconds` seconds of 1 Hz samples (8 GPU rows,
8 NIC port rows and 3 storage rows per node-second, the columns a node agent fills). Each kind is inserted
in blocks of [loader].flush_records rows, as the loader inserts, with a deduplication token per block:

  raw + rollup   the raw table as `goodput` creates it: its materialized view rolls the block up too,
                 and a view on each rollup copies its rows into its time-first copy (ROLLUP_RECENT)
  raw + rollup without the recent copy   the same without those views (the schema of version 3)
  raw only       the same table without its views (the schema before version 2): the baseline

Both run in this process, one fresh store each, alternating, `--repeat` times; printed: rows/s (median
of the runs), the ratio, and the stored bytes per row of the raw table and its rollup.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from contracts import catalog  # noqa: E402
from contracts import config as config_mod  # noqa: E402
from pipeline import ddl  # noqa: E402
from pipeline.chdb_store import ChdbStore  # noqa: E402

KINDS = ("gpu", "nic", "storage")


def _rows(kind: str, nodes: int, seconds: int, t0_ms: int) -> pa.Table:
    """One table of `kind` rows: per node-second its devices, values drawn once with a fixed seed."""
    rng = np.random.default_rng(19)
    per = {"gpu": 8, "nic": 8, "storage": 3}[kind]
    n = nodes * seconds * per
    i = np.arange(n)
    second, rest = i // (nodes * per), i % (nodes * per)
    node = np.array([f"gpu-core-{k:03d}" for k in range(nodes)])[rest // per]
    dev = rest % per
    cols: dict[str, pa.Array] = {
        "cluster": pa.array(np.full(n, "demo-east")).dictionary_encode(),
        "node": pa.array(node).dictionary_encode(),
        "ts": pa.array(t0_ms + second * 1000, pa.timestamp("ms", "UTC")),
        "seq": pa.array(second, pa.uint64()),
    }
    if kind == "gpu":
        cols |= {
            "gpu": pa.array(dev, pa.int64()),
            "uuid": pa.array(np.char.add(np.char.add(node, "-"), dev.astype(str))).dictionary_encode(),
            "job_id": pa.array(np.full(n, "job-1")).dictionary_encode(),
            "sm_active_pct": pa.array(rng.uniform(80, 95, n).astype(np.float32)),
            "util_gpu_pct": pa.array(np.full(n, 98.0, np.float32)),
            "power_w": pa.array(rng.uniform(500, 700, n).astype(np.float32)),
            "temp_c": pa.array(rng.uniform(50, 70, n).astype(np.float32)),
            "throttle_reasons": pa.array(np.zeros(n, np.int64)),
        }
    elif kind == "nic":
        cols |= {
            "device": pa.array(np.char.add("mlx5_", dev.astype(str))).dictionary_encode(),
            "port": pa.array(np.ones(n, np.int64)),
            "rate_gbps": pa.array(np.full(n, 400.0, np.float32)),
            "tx_bytes_per_s": pa.array(rng.uniform(1e9, 4e10, n).astype(np.float32)),
            "rx_bytes_per_s": pa.array(rng.uniform(1e9, 4e10, n).astype(np.float32)),
            "xmit_wait_per_s": pa.array(rng.uniform(0, 1e5, n).astype(np.float32)),
        }
    else:
        src = np.array(["nfs", "psi", "diskstats"])[dev]
        cols |= {
            "source": pa.array(src).dictionary_encode(),
            "device": pa.array(np.array(["/data", "io", "nvme0n1"])[dev]).dictionary_encode(),
            "read_bytes_per_s": pa.array(rng.uniform(0, 1e9, n).astype(np.float32)),
            "psi_some_pct": pa.array(rng.uniform(0, 20, n).astype(np.float32)),
        }
    return pa.table(cols)


def _insert_all(store: ChdbStore, tables: dict[str, pa.Table], block: int) -> float:
    started = time.perf_counter()
    for kind, table in tables.items():
        for k, start in enumerate(range(0, table.num_rows, block)):
            store.insert_arrow(catalog.RAW_TABLES[kind], table.slice(start, block), f"bench-{kind}-{k}")
    return time.perf_counter() - started


def _bytes(store: ChdbStore, table: str) -> int:
    t = store.query_arrow(
        f"SELECT sum(bytes_on_disk) AS b FROM system.parts WHERE active AND table = '{table}'"
    )
    return int(t.column("b")[0].as_py() or 0)


def run_once(tables: dict[str, pa.Table], block: int, views: str) -> dict:
    """One fresh store; `views`: "all" as migrate leaves it, "rollups" without the copies' views,
    "none" without any view."""
    with tempfile.TemporaryDirectory() as tmp, ChdbStore(Path(tmp) / "store") as store:
        ddl.migrate(store)
        if views != "all":
            for copy in catalog.ROLLUP_RECENT.values():
                store.execute(f"DROP VIEW {copy}_mv")
        if views == "none":
            for kind in KINDS:
                store.execute(f"DROP VIEW {catalog.ROLLUP_TABLES[kind]}_mv")
        took = _insert_all(store, tables, block)
        store.execute("OPTIMIZE TABLE raw_gpu FINAL")  # sizes of merged parts, as they settle
        out = {"s": took}
        for kind in KINDS:
            rows = tables[kind].num_rows
            out[f"{kind}_raw_bytes_per_row"] = _bytes(store, catalog.RAW_TABLES[kind]) / rows
            out[f"{kind}_rollup_bytes_per_row"] = _bytes(store, catalog.ROLLUP_TABLES[kind]) / rows
        return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=128)
    ap.add_argument("--seconds", type=int, default=600)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args()
    block = config_mod.load().loader.flush_records
    t0_ms = (int(time.time()) - 7200) // 3600 * 3600 * 1000
    tables = {k: _rows(k, args.nodes, args.seconds, t0_ms) for k in KINDS}
    rows = sum(t.num_rows for t in tables.values())
    print(
        f"rows: {rows:,} ({', '.join(f'{k} {t.num_rows:,}' for k, t in tables.items())}), blocks of {block:,}"
    )
    variants = {"raw only": "none", "raw + rollup": "all", "raw + rollup without the recent copy": "rollups"}
    runs: dict[str, list[dict]] = {name: [] for name in variants}
    for i in range(args.repeat):
        for name, views in variants.items():
            runs[name].append(run_once(tables, block, views))
            print(
                f"  {name} {i + 1}/{args.repeat}: {rows / runs[name][-1]['s'] / 1e6:.2f} M rows/s", flush=True
            )
    result: dict = {"rows": rows, "block": block}
    for name, done in runs.items():
        secs = sorted(r["s"] for r in done)
        result[name] = {"median_s": statistics.median(secs), "rows_per_s": rows / statistics.median(secs)}
        print(f"{name:37s} {rows / statistics.median(secs) / 1e6:.2f} M rows/s (median of {len(secs)})")
    last = runs["raw + rollup"][-1]
    result["bytes_per_row"] = {k: v for k, v in last.items() if k.endswith("bytes_per_row")}
    slowdown = result["raw + rollup"]["median_s"] / result["raw only"]["median_s"]
    result["rollup_cost"] = slowdown
    print(f"the rollups' views make an insert {slowdown:.2f}x as long")
    copy = result["raw + rollup"]["median_s"] / result["raw + rollup without the recent copy"]["median_s"]
    result["recent_copy_cost"] = copy
    print(f"the rollups' time-first copies make an insert {copy:.2f}x as long")
    print(
        "stored bytes per raw row: "
        + ", ".join(
            f"{k} raw {last[f'{k}_raw_bytes_per_row']:.1f} + rollup {last[f'{k}_rollup_bytes_per_row']:.1f}"
            for k in KINDS
        )
    )
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
