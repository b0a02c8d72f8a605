"""What a loader core spends to insert into a ClickHouse server (issue 19: >= 1 M rows/s per loader core).

    .venv/bin/python bench/bench_server_store.py [--nodes 128] [--seconds 600] [--block 200000]
                                                 [--repeat 3] [--baseline REV] [--json out.json]

Starts the real clickhouse-server the tests start (tests/fixtures/clickhouse.py: Debian's 18.16 here),
creates the raw GPU, NIC and storage tables in the SQL that server accepts (today's DDL without CODEC,
TTL and table settings, DateTime for DateTime64, UInt8 for Bool: `server_1816_ddl`; LowCardinality
through the fixture's profile), and inserts the rows
as the loader hands them to a store (bench_schema.loader_shape: every field of the kind, null where
nothing was measured) through `ServerStore.insert_arrow`, in blocks of `--block` rows.

Printed per kind: rows per CPU-second of this process (the loader's side: encoding Arrow as Native
blocks, compressing and sending them) and of the server, and rows/s of wall time. Client
and server share this machine's cores, so the wall figure is a floor for a server of its own. With
--baseline REV, pipeline/server_store.py as it was at REV is timed too, alternating, in this process.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from baseline import module_at  # noqa: E402
from bench_ingest import KINDS, _rows  # noqa: E402
from bench_schema import loader_shape  # noqa: E402

from contracts import catalog  # noqa: E402
from contracts.schema import KINDS as SCHEMA_KINDS  # noqa: E402
from pipeline import ddl  # noqa: E402
from pipeline.server_store import ServerStore  # noqa: E402


def server_1816_sql(statement: str) -> str:
    """A goodput CREATE TABLE in the SQL ClickHouse 18.16 accepts: the same columns, key and engine,
    without CODEC, TTL and table settings, DateTime for DateTime64 and UInt8 for Bool."""
    statement = re.sub(r" CODEC\((?:[^()]|\([^()]*\))*\)", "", statement)
    statement = statement.replace("DateTime64(3, 'UTC')", "DateTime('UTC')").replace("Bool", "UInt8")
    statement = re.sub(r"\nTTL [^\n]*", "", statement)
    statement = re.sub(r"\nSETTINGS [^\n]*", "", statement)
    if "CODEC" in statement or "TTL" in statement or "DateTime64" in statement:
        raise ValueError(f"a goodput table has something new for 18.16: update server_1816_sql\n{statement}")
    return statement


def server_1816_ddl(kind: str) -> str:
    """Today's raw table of `kind` in 18.16's SQL."""
    return server_1816_sql(ddl.raw_table_ddl(SCHEMA_KINDS[kind]))


def start_server(workdir: Path):
    """The test suite's server class, started outside pytest; returns (server, store config)."""
    from tests.fixtures import clickhouse as fixture

    binary = fixture.find_binary()
    if binary is None:
        raise SystemExit("clickhouse-server not found: run `bash .ci/install.d/clickhouse.sh`")
    server = fixture.start_server(binary, workdir)
    os.environ[fixture.PASSWORD_ENV] = fixture.PASSWORD
    return server, server.store_config()


def cpu_s(pid: int) -> float:
    """User + system CPU-seconds of process `pid` so far (its threads included)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def insert_all(store: ServerStore, table: str, rows: pa.Table, block: int, server_pid: int) -> dict:
    wall, cpu, server = time.perf_counter(), time.process_time(), cpu_s(server_pid)
    for start in range(0, rows.num_rows, block):
        store.insert_arrow(table, rows.slice(start, block))
    out = {
        "wall_s": time.perf_counter() - wall,
        "client_cpu_s": time.process_time() - cpu,
        "server_cpu_s": cpu_s(server_pid) - server,
    }
    stored = store.query_arrow(f"SELECT count() AS n FROM {table}").column("n")[0].as_py()
    if stored != rows.num_rows:
        raise SystemExit(f"{table}: {stored} rows stored of {rows.num_rows}")
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=128)
    ap.add_argument("--seconds", type=int, default=600)
    ap.add_argument("--block", type=int, default=200_000, help="rows per insert (the loader's block)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--baseline", help="also time pipeline/server_store.py as it was at this git revision")
    ap.add_argument("--json")
    args = ap.parse_args()

    t0_ms = (int(time.time()) // 3600 - 2) * 3600 * 1000
    tables = {k: loader_shape(k, _rows(k, args.nodes, args.seconds, t0_ms)) for k in KINDS}
    stores = {"today": ServerStore}
    if args.baseline:
        stores = {args.baseline: module_at(args.baseline, "pipeline/server_store.py").ServerStore, **stores}
    runs: dict[str, dict[str, list[dict]]] = {s: {k: [] for k in KINDS} for s in stores}
    with tempfile.TemporaryDirectory() as tmp:
        server, config = start_server(Path(tmp))
        try:
            for _ in range(args.repeat):
                for label, cls in stores.items():  # alternating, each with its own connection
                    with cls(config) as store:
                        for kind in KINDS:
                            store.execute(f"DROP TABLE IF EXISTS {catalog.RAW_TABLES[kind]}")
                            store.execute(server_1816_ddl(kind))
                            runs[label][kind].append(
                                insert_all(
                                    store, catalog.RAW_TABLES[kind], tables[kind], args.block, server.pid
                                )
                            )
            version = store.version_text
        finally:
            server.stop()

    print(f"ClickHouse {version}, blocks of {args.block:,} rows, median of {args.repeat} runs")
    head = ("store", "kind", "rows", "per client CPU-s", "per server CPU-s", "per s")
    print(f"{head[0]:10s} {head[1]:8s} {head[2]:>9s} {head[3]:>17s} {head[4]:>17s} {head[5]:>9s}")
    report: dict = {"block": args.block, "server": version, "stores": {}}
    for label in stores:
        for kind in KINDS:
            n = tables[kind].num_rows
            med = {key: statistics.median(r[key] for r in runs[label][kind]) for key in runs[label][kind][0]}
            fig = {
                "rows": n,
                "per_client_cpu_s": n / med["client_cpu_s"],
                "per_server_cpu_s": n / med["server_cpu_s"],
                "per_wall_s": n / med["wall_s"],
                "runs": runs[label][kind],
            }
            report["stores"].setdefault(label, {})[kind] = fig
            ratio = ""
            if args.baseline and label == "today":
                before = report["stores"][args.baseline][kind]["per_client_cpu_s"]
                ratio = f"  {fig['per_client_cpu_s'] / before:.2f}x"
            client, server_cpu, wall = fig["per_client_cpu_s"], fig["per_server_cpu_s"], fig["per_wall_s"]
            print(f"{label:10s} {kind:8s} {n:>9,} {client:>17,.0f} {server_cpu:>17,.0f} {wall:>9,.0f}{ratio}")
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
