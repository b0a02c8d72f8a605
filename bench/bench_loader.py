"""Loader throughput from a real Kafka broker into chDB, per core, and what bounds it.

Workload: the simulated cluster's own messages (goodput/sim: one GPU, NIC and storage batch per node per
60 s, job and step events), the same batches in each message schema version (1: JSON, 2: columnar
binary; --versions), each produced once into fresh topics of a real broker (zstd, as agents send).
Then this one process consumes them as the loader service does (KafkaConsumerTransport polls, batches of
[loader].flush_records, Loader.load, commit) into a fresh chDB store and times each phase:

  fetch            KafkaConsumerTransport.poll: kafka-python's network, zstd and record parsing
  decode/validate  Loader.load's decode_s: parse, seq dedup, pipeline.validate → Arrow
  insert           Loader.load's insert_s: the store's inserts (raw tables, ledger)
  commit           offset commits

and the same loop, and LoaderService, into the ClickHouse server the tests start (bench_server_store.py:
Debian's 18.16, in its own process), counting the loader process's CPU only: a loader core's work with
a server store; the server is checked to hold every row.

"per core" divides rows by the CPU seconds of the whole process (every thread: kafka-python's network
thread and chDB's background merges too), so a phase that runs on other threads does not flatter it.
Then `goodput ingest`'s own loop (LoaderService, --until-caught-up) consumes the same topics in a new
group into another store, end to end.

Then each phase alone on the same records, best of 3; last, the versions side by side, each figure's
ratio against the first version, measured in the same process. With --baseline REV, decode/validate of
the first version's records by pipeline/validate.py as it was at REV, loaded from git.

Run:  .venv/bin/python bench/bench_loader.py [--gpus 128] [--hours 0.5] [--bootstrap HOST:PORT]
      [--versions 1,2] [--baseline REV] [--json out.json]
Needs the Kafka jars (bash .ci/install.d/kafka.sh) unless --bootstrap names a running broker, and
clickhouse-server (bash .ci/install.d/clickhouse.sh).
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import sys
import tempfile
import time
import uuid
from pathlib import Path

import zstandard
from msgspec.structs import replace

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from baseline import module_at  # noqa: E402
from bench_server_store import server_1816_ddl, server_1816_sql, start_server  # noqa: E402

from contracts import catalog  # noqa: E402
from contracts import config as config_mod  # noqa: E402
from contracts.schema import KINDS, topic_for  # noqa: E402
from goodput.sim.cluster import SimConfig, scaled_config, simulate  # noqa: E402
from goodput.sim.emit import messages  # noqa: E402
from pipeline import ddl, validate  # noqa: E402
from pipeline.chdb_store import ChdbStore  # noqa: E402
from pipeline.loader import Loader, _expected_kind, cycle_collector_paused, limits_from_config  # noqa: E402
from pipeline.loader_service import LoaderService  # noqa: E402
from pipeline.server_store import ServerStore  # noqa: E402
from transport.kafka import KafkaConsumerTransport, KafkaProducerTransport, KafkaSettings, ensure_topics  # noqa: E402


def start_broker(workdir: Path):
    """The test suite's broker class (tests/fixtures/kafka.py), started outside pytest."""
    from tests.fixtures import kafka as fixture
    from tests.fixtures import kafka_dist

    if not kafka_dist.is_installed():
        raise SystemExit(
            f"Kafka jars missing in {kafka_dist.libs_dir()}: run `bash .ci/install.d/kafka.sh`, "
            f"or pass --bootstrap HOST:PORT of a running broker"
        )
    socks = [socket.socket() for _ in range(4)]
    for s in socks:
        s.bind(("127.0.0.1", 0))
    ports = [s.getsockname()[1] for s in socks]
    for s in socks:
        s.close()
    broker = fixture.KafkaBroker(
        libs=kafka_dist.libs_dir(),
        workdir=workdir,
        port=ports[0],
        controller_port=ports[1],
        ssl_port=ports[2],
        sasl_ssl_port=ports[3],
        java=shutil.which("java") or "java",
    )
    broker.configure()
    broker.start()
    return broker


def workload(gpus: int, hours: float, versions: tuple[int, ...]):
    """The simulated cluster's batches, the same run encoded in each message schema version."""
    cfg = scaled_config(config_mod.load(), gpus)
    start_ms = (int(time.time()) // 60) * 60_000 - int(hours * 3_600_000)
    res = simulate(SimConfig.from_config(cfg, hours=hours, seed=1, start_ms=start_ms), cfg)
    return cfg, {v: list(messages(res, version=v)) for v in versions}


def produce(bootstrap: str, prefix: str, msgs) -> float:
    ensure_topics(bootstrap, partitions=4, prefix=prefix)
    p = KafkaProducerTransport(bootstrap)
    t = time.perf_counter()
    for topic, key, value in msgs:
        if p.pending_bytes > 32 * 2**20:  # stay under the producer's max_pending_bytes
            p.flush(300)
        p.send(topic.replace("goodput.", f"{prefix}.", 1), key, value)
    p.flush(300)
    p.close()
    return time.perf_counter() - t


def consume_and_load(bootstrap: str, prefix: str, cfg, store, expected: int) -> dict:
    """The service's loop, with a stopwatch on each phase; returns seconds per phase and totals."""
    topics = [topic_for(k, prefix) for k in KINDS]
    consumer = KafkaConsumerTransport(bootstrap, topics, group_id=f"bench-{uuid.uuid4().hex[:6]}")
    loader = Loader(store, limits_from_config(cfg), topic_prefix=prefix)
    lc = cfg.loader
    fetch = commit = fetch_cpu = load_cpu = 0.0
    pending: list = []
    pending_bytes = 0
    while not pending:  # joining the group (a fixed cost per start) is not timed
        pending = consumer.poll(1, 0.2)
    seen = len(pending)
    pending_bytes = sum(len(r.value) for r in pending)
    wall0, cpu0, main0 = time.perf_counter(), time.process_time(), time.thread_time()
    while seen < expected or pending:
        if seen < expected and len(pending) < lc.flush_records and pending_bytes < lc.flush_bytes:
            t, c = time.perf_counter(), time.thread_time()
            got = consumer.poll(min(lc.max_poll_records, lc.flush_records - len(pending)), 1.0)
            fetch += time.perf_counter() - t
            fetch_cpu += time.thread_time() - c
            pending.extend(got)
            pending_bytes += sum(len(r.value) for r in got)
            seen += len(got)
            continue
        c = time.thread_time()
        loader.load(pending)
        load_cpu += time.thread_time() - c
        t = time.perf_counter()
        consumer.commit(pending)
        commit += time.perf_counter() - t
        pending, pending_bytes = [], 0
    out = {
        "wall": time.perf_counter() - wall0,
        "cpu": time.process_time() - cpu0,
        "main_cpu": time.thread_time() - main0,
        "fetch": fetch,
        "commit": commit,
        "fetch_cpu": fetch_cpu,
        "load_cpu": load_cpu,
        "decode": loader.totals.decode_s,
        "insert": loader.totals.insert_s,
        "rows": sum(loader.totals.rows.values()),
        "records": loader.totals.records,
        "dead": sum(loader.totals.dead_letters.values()),
    }
    consumer.close()
    return out


def service_end_to_end(bootstrap: str, prefix: str, cfg, store) -> dict:
    cfg = replace(
        cfg,
        transport=replace(cfg.transport, kind="kafka", topic_prefix=prefix),
        loader=replace(cfg.loader, metrics_address=""),
    )
    kafka = KafkaSettings.from_config(
        {"bootstrap": bootstrap, "group_id": f"bench-svc-{uuid.uuid4().hex[:6]}"}
    )
    svc = LoaderService(cfg, store, kafka, until_caught_up=True)
    wall0, cpu0 = time.perf_counter(), time.process_time()
    totals = svc.run()
    return {
        "wall": time.perf_counter() - wall0,
        "cpu": time.process_time() - cpu0,
        "rows": sum(totals.rows.values()),
    }


def _decode_rows(module, records, limits, prefix: str) -> int:
    envs = [module.decode(r.value, limits, _expected_kind(r.topic, prefix)) for r in records]
    tables, _ = module.to_tables(
        [e for e in envs if isinstance(e, module.Envelope)], int(time.time() * 1000), limits
    )
    return sum(t.num_rows for t in tables.values())


def decode_only(module, records, limits, prefix: str, paused: bool) -> tuple[float, int]:
    """Best CPU seconds of three runs of decode + to_tables over the records (as Loader.load runs them,
    with the cycle collector paused or not), and the rows they made."""
    best, rows = float("inf"), 0
    for _ in range(3):
        t = time.process_time()
        if paused:
            with cycle_collector_paused():
                rows = _decode_rows(module, records, limits, prefix)
        else:
            rows = _decode_rows(module, records, limits, prefix)
        best = min(best, time.process_time() - t)
    return best, rows


def fetch_all(bootstrap: str, prefix: str, expected: int) -> tuple[list, float]:
    """Every record, read by a new group; and the process CPU seconds the reading took after joining."""
    consumer = KafkaConsumerTransport(
        bootstrap, [topic_for(k, prefix) for k in KINDS], group_id=f"bench-raw-{uuid.uuid4().hex[:6]}"
    )
    out: list = []
    while not out:
        out = consumer.poll(1, 0.2)
    t = time.process_time()
    while len(out) < expected:
        out.extend(consumer.poll(5000, 1.0))
    cpu = time.process_time() - t
    consumer.close()
    return out, cpu


def decoded_tables(records, cfg, prefix: str) -> dict:
    """The records as the loader hands them to a store: one Arrow table per kind."""
    limits = limits_from_config(cfg)
    envs = [validate.decode(r.value, limits, _expected_kind(r.topic, prefix)) for r in records]
    tables, _ = validate.to_tables(envs, int(time.time() * 1000), limits)
    return tables


def insert_only(records, cfg, prefix: str, workdir: Path) -> float:
    """Process CPU seconds (chDB's threads included) to insert the records' tables into a fresh store."""
    tables = decoded_tables(records, cfg, prefix)
    with ChdbStore(workdir) as store:
        ddl.migrate(store)
        t = time.process_time()
        for kind, table in tables.items():
            store.insert_arrow(f"raw_{kind}", table)
        return time.process_time() - t


def fresh_server_tables(server: ServerStore) -> None:
    """The tables the loader writes, empty, as the test server's SQL has them (bench_server_store)."""
    for kind in KINDS:
        server.execute(f"DROP TABLE IF EXISTS raw_{kind}")
        server.execute(server_1816_ddl(kind))
    for table in (catalog.INGESTED_BATCHES, catalog.DEAD_LETTERS):
        server.execute(f"DROP TABLE IF EXISTS {table}")
        server.execute(server_1816_sql(ddl.FIXED_TABLES[table]))


def server_rows(server: ServerStore) -> int:
    """The raw rows the server holds."""
    return sum(
        server.query_arrow(f"SELECT count() AS n FROM raw_{kind}").column("n")[0].as_py() for kind in KINDS
    )


def server_insert_only(records, cfg, prefix: str, server: ServerStore) -> float:
    """The loader process's CPU seconds (best of 3) to insert the records' tables into the ClickHouse
    server the tests start, in the raw tables as that server's SQL has them
    (bench_server_store.server_1816_ddl): encoding Arrow as Native blocks and sending them; the
    server's own work runs in its own process."""
    tables = decoded_tables(records, cfg, prefix)
    best = float("inf")
    for _ in range(3):
        fresh_server_tables(server)
        t = time.process_time()
        for kind, table in tables.items():
            server.insert_arrow(f"raw_{kind}", table)
        best = min(best, time.process_time() - t)
    return best


def measure(bootstrap: str, scaled, msgs: list, tmp: Path, server: ServerStore) -> dict:
    """Every measurement of one version's records: the loop, the service, and each phase alone."""
    prefix = f"bench{uuid.uuid4().hex[:6]}"
    produced_s = produce(bootstrap, prefix, msgs)
    with ChdbStore(tmp / f"{prefix}-store") as store:
        ddl.migrate(store)
        loop = consume_and_load(bootstrap, prefix, scaled, store, len(msgs))
    with ChdbStore(tmp / f"{prefix}-svc") as store:
        ddl.migrate(store)
        service = service_end_to_end(bootstrap, prefix, scaled, store)
    fresh_server_tables(server)
    server_loop = consume_and_load(bootstrap, prefix, scaled, server, len(msgs))
    assert server_rows(server) == server_loop["rows"] == loop["rows"], (server_loop["rows"], loop["rows"])
    fresh_server_tables(server)
    server_service = service_end_to_end(bootstrap, prefix, scaled, server)
    assert server_rows(server) == server_service["rows"] == loop["rows"], (server_service, loop["rows"])
    fetches = [fetch_all(bootstrap, prefix, len(msgs)) for _ in range(3)]
    records = fetches[0][0]
    limits = limits_from_config(scaled)
    decode_on, _ = decode_only(validate, records, limits, prefix, paused=False)
    decode_paused, _ = decode_only(validate, records, limits, prefix, paused=True)
    return {
        "bytes": sum(len(v) for *_, v in msgs),
        "zstd_bytes": sum(len(zstandard.ZstdCompressor().compress(v)) for *_, v in msgs),
        "produced_s": produced_s,
        "loop": loop,
        "server_loop": server_loop,
        "server_service": server_service,
        "service": service,
        "fetch_cpu": min(cpu for _, cpu in fetches),
        "decode_cpu": decode_paused,
        "decode_cpu_collector_on": decode_on,
        "insert_cpu": min(
            insert_only(records, scaled, prefix, tmp / f"{prefix}-insert{i}") for i in range(3)
        ),
        "server_insert_cpu": server_insert_only(records, scaled, prefix, server),
        "records": records,
        "prefix": prefix,
    }


def report(version: int, m: dict) -> None:
    r, s = m["loop"], m["service"]
    rows = r["rows"]
    print(
        f"\n=== message schema version {version} ({'JSON' if version == 1 else 'columnar binary'}): "
        f"{len(m['records']):,} records, {m['bytes'] / 1e6:,.1f} MB ({m['zstd_bytes'] / 1e6:,.1f} MB as "
        f"zstd per message), {m['bytes'] / rows:.0f} B/row; produced in {m['produced_s']:.1f} s"
    )
    print(f"Kafka → chDB, one process: {rows:,} rows, {r['dead']} dead letters\n")
    print(f"{'phase':18} {'seconds':>8} {'share':>6} {'rows/s in phase':>16}")
    phases = {
        "fetch": r["fetch"],
        "decode/validate": r["decode"],
        "insert": r["insert"],
        "commit": r["commit"],
    }
    other = r["wall"] - sum(phases.values())
    for name, sec in [*phases.items(), ("other", other)]:
        print(f"{name:18} {sec:8.2f} {sec / r['wall']:6.1%} {rows / sec if sec > 0.01 else 0:16,.0f}")
    print(f"{'total (wall)':18} {r['wall']:8.2f} {'':6} {rows / r['wall']:16,.0f}")
    print(
        f"\nCPU: {r['cpu']:.2f} s in the process: {r['main_cpu']:.2f} s on the loader thread (poll "
        f"{r['fetch_cpu']:.2f} s, load {r['load_cpu']:.2f} s), {r['cpu'] - r['main_cpu']:.2f} s on "
        "kafka-python's and chDB's own threads. Wall above CPU is waiting (for the broker, or for a core "
        "on a busy machine)."
    )
    print(f"rows/s per core (rows / process CPU s): {rows / r['cpu']:,.0f}")
    sl = m["server_loop"]
    print(
        f"The same loop into the ClickHouse server (18.16, its own process): {sl['rows']:,} rows, "
        f"{sl['rows'] / sl['wall']:,.0f} rows/s wall, {sl['rows'] / sl['cpu']:,.0f} rows per loader CPU-s "
        f"(insert {sl['insert']:.2f} s of {sl['wall']:.2f} s)"
    )
    ss = m["server_service"]
    print(
        f"LoaderService into the server, end to end: {ss['rows']:,} rows, {ss['rows'] / ss['wall']:,.0f} "
        f"rows/s wall, {ss['rows'] / ss['cpu']:,.0f} rows per loader CPU-s"
    )
    print(
        "LoaderService end to end (goodput ingest --until-caught-up, incl. group join and the final "
        f"lag check): {s['rows']:,} rows, {s['rows'] / s['wall']:,.0f} rows/s wall, "
        f"{s['rows'] / s['cpu']:,.0f} rows/CPU-s"
    )
    print("\nEach phase alone on the same records, best of 3, process CPU s (what one core does per phase):")
    print(f"{'phase':18} {'CPU s':>7} {'share':>6} {'rows/CPU-s':>12}")
    alone = {"fetch": m["fetch_cpu"], "decode/validate": m["decode_cpu"], "insert": m["insert_cpu"]}
    for name, sec in alone.items():
        print(f"{name:18} {sec:7.2f} {sec / sum(alone.values()):6.1%} {rows / sec:12,.0f}")
    print(f"{'all three':18} {sum(alone.values()):7.2f} {'':6} {rows / sum(alone.values()):12,.0f}")
    own = m["fetch_cpu"] + m["decode_cpu"]
    print(f"{'fetch + decode':18} {own:7.2f} {'':6} {rows / own:12,.0f}")
    print(
        f"{'server insert':18} {m['server_insert_cpu']:7.2f} {'':6} {rows / m['server_insert_cpu']:12,.0f}"
        "  (into ClickHouse 18.16: the loader's side only)"
    )
    print(
        f"{'fetch+decode+server':18} {own + m['server_insert_cpu']:7.2f} {'':6} "
        f"{rows / (own + m['server_insert_cpu']):12,.0f}  (a loader core's work with a server store)"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gpus", type=int, default=128)
    ap.add_argument("--hours", type=float, default=0.5)
    ap.add_argument("--bootstrap", help="a running broker (default: start one from the cached jars)")
    ap.add_argument(
        "--versions",
        default="1,2",
        help="message schema versions to measure, the first the baseline of the ratios (default 1,2)",
    )
    ap.add_argument(
        "--baseline",
        help="a git revision whose pipeline/validate.py to compare decode/validate with (on the first "
        "version's records); it must import against today's tree (the walking skeleton's, 43ffd1d, no "
        "longer does: it read collectors.schema)",
    )
    ap.add_argument("--json", help="write the figures to this file")
    args = ap.parse_args()
    versions = tuple(int(v) for v in args.versions.split(","))
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        broker = None if args.bootstrap else start_broker(tmp / "kafka")
        bootstrap = args.bootstrap or broker.bootstrap
        clickhouse, config = start_server(tmp / "clickhouse")
        server = ServerStore(config)
        try:
            scaled, by_version = workload(args.gpus, args.hours, versions)
            print(
                f"workload: {args.gpus} simulated GPUs x {args.hours:g} h, the same batches in each of "
                f"versions {versions}"
            )
            results = {v: measure(bootstrap, scaled, by_version[v], tmp, server) for v in versions}
        finally:
            server.close()
            clickhouse.stop()
            if broker is not None:
                broker.stop()
    from kafka.record import util as kafka_record_util

    crc = (
        "C (crc32c package)"
        if kafka_record_util._crc32c is not kafka_record_util.crc32c_py
        else "pure Python (the crc32c package is not installed)"
    )
    print(f"kafka-python checks record CRC32C in {crc}")
    for v, m in results.items():
        report(v, m)

    base = results[versions[0]]
    rows = base["loop"]["rows"]
    print(f"\nVersions side by side (rows per CPU-s; ratio against version {versions[0]}):")
    figures = {
        "decode/validate alone": lambda m: rows / m["decode_cpu"],
        "fetch + decode/validate alone": lambda m: rows / (m["fetch_cpu"] + m["decode_cpu"]),
        "fetch + decode + insert alone": lambda m: (
            rows / (m["fetch_cpu"] + m["decode_cpu"] + m["insert_cpu"])
        ),
        "fetch + decode + server insert alone": lambda m: (
            rows / (m["fetch_cpu"] + m["decode_cpu"] + m["server_insert_cpu"])
        ),
        "the bench's loop, end to end": lambda m: rows / m["loop"]["cpu"],
        "the loop into the server, end to end": lambda m: rows / m["server_loop"]["cpu"],
        "LoaderService, end to end": lambda m: m["service"]["rows"] / m["service"]["cpu"],
        "LoaderService into the server": lambda m: m["server_service"]["rows"] / m["server_service"]["cpu"],
    }
    print(f"{'':32}" + "".join(f"{'v' + str(v):>12}{'ratio':>7}" for v in versions))
    for name, f in figures.items():
        print(f"{name:32}" + "".join(f"{f(m):12,.0f}{f(m) / f(base):6.2f}x" for m in results.values()))
    assert all(m["loop"]["rows"] == rows for m in results.values()), "the versions stored different rows"

    if args.baseline:
        limits = limits_from_config(scaled)
        before, n0 = decode_only(
            module_at(args.baseline, "pipeline/validate.py"),
            base["records"],
            limits,
            base["prefix"],
            paused=False,
        )
        print(
            f"\ndecode/validate of version {versions[0]}'s records by {args.baseline}'s validator, cycle "
            f"collector on: {n0 / before:,.0f} rows/CPU-s; today's: "
            f"{rows / base['decode_cpu_collector_on']:,.0f} (collector on), "
            f"{rows / base['decode_cpu']:,.0f} (paused, as the loader runs it)"
        )
    if args.json:
        out = {
            "gpus": args.gpus,
            "hours": args.hours,
            "rows": rows,
            "versions": {
                str(v): {
                    "bytes": m["bytes"],
                    "zstd_bytes": m["zstd_bytes"],
                    **{name: f(m) for name, f in figures.items()},
                    "loop": m["loop"],
                    "service": m["service"],
                }
                for v, m in results.items()
            },
        }
        Path(args.json).write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
