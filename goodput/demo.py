"""`goodput demo`: a simulated cluster through the embedded path, end to end.

simulated agents → in-process transport → loader (decode, validate, dead-letter) → chDB → analyzers →
per-team table, CSV files, ground truth. The same loader and SQL serve production; only the transport
(Kafka) and the store (a server) change by configuration.
"""

from __future__ import annotations

import shutil
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq

from contracts import config as config_mod
from goodput.sim.cluster import SimConfig, scaled_config, simulate
from goodput.sim.emit import messages, truth_table
from pipeline import ddl
from pipeline.analyzers import run as analyzers
from pipeline.chdb_store import ChdbStore
from pipeline.loader import Loader, limits_from_config
from pipeline.progress import Progress
from pipeline.report.build import build as build_report
from pipeline.report.data import last_day
from pipeline.report.write import write as write_report
from pipeline.store import StoreLocked
from pipeline.summary import format_team_table, job_table, team_table
from transport.base import InProcessTransport

POLL_RECORDS = 2000


def write_config(cfg: config_mod.Config, path: Path) -> None:
    """The effective (scaled) cluster config, so later `goodput summary --config` runs price the same."""
    import tomli_w

    data = {
        "schema_version": config_mod.CONFIG_VERSION,
        "cluster": {
            "name": cfg.cluster.name,
            "currency": cfg.cluster.currency,
            "control_nodes": list(cfg.cluster.control_nodes),
        },
        "gpu_types": {
            name: {
                "price_per_gpu_hour": g.price_per_gpu_hour,
                "memory_bytes": g.memory_bytes,
                "has_gpm": g.has_gpm,
            }
            for name, g in cfg.gpu_types.items()
        },
        "network_tiers": {
            name: {
                "link_gbps": t.link_gbps,
                "links_per_node": t.links_per_node,
                "oversubscription": t.oversubscription,
                "link_layer": t.link_layer,
            }
            for name, t in cfg.network_tiers.items()
        },
        "pools": [
            {
                k: v
                for k, v in {
                    "name": p.name,
                    "class": p.pool_class,
                    "gpu_type": p.gpu_type,
                    "gpus_per_node": p.gpus_per_node,
                    "nodes": list(p.nodes),
                    "network_tier": p.network_tier,
                    "storage_ceiling_bytes_per_s": p.storage_ceiling_bytes_per_s,
                    "price_per_gpu_hour": p.price_per_gpu_hour,
                }.items()
                if v is not None
            }
            for p in cfg.pools
        ],
        "teams": {
            **{t: list(a) for t, a in cfg.teams.accounts.items()},
            "default_team": cfg.teams.default_team,
        },
        "store": {"kind": "chdb", "path": "store"},  # relative to this file: the directory moves as one
    }
    path.write_bytes(tomli_w.dumps(data).encode())


def run_demo(
    *,
    gpus: int,
    hours: float,
    seed: int,
    out: Path,
    config_path: str | None,
    sim_overrides: dict | None = None,
    quiet: bool = False,
    end_ms: int | None = None,
) -> dict:
    """Runs the whole embedded path; returns paths and timings (tests read them).

    The simulated span ends at `end_ms`, by default the current minute, so the demo reads as live data.
    A test that reads a local day pins it: otherwise which day holds what depends on the hour it runs."""
    base = config_mod.load(config_path)
    cfg = scaled_config(base, gpus)
    out.mkdir(parents=True, exist_ok=True)
    store_dir = out / "store"
    if store_dir.exists():
        try:
            ChdbStore(store_dir).close()  # refuses, naming the holder, if another process uses it
        except StoreLocked as e:
            raise SystemExit(f"goodput demo: {e}") from None
        shutil.rmtree(store_dir)
    if end_ms is None:
        end_ms = (int(time.time()) // 60) * 60_000
    start_ms = end_ms - int(hours * 3_600_000)
    sim_cfg = SimConfig.from_config(cfg, hours=hours, seed=seed, start_ms=start_ms, **(sim_overrides or {}))
    timings: dict[str, float] = {}

    t = time.perf_counter()
    res = simulate(sim_cfg, cfg)
    timings["simulate"] = time.perf_counter() - t
    log = (lambda *a: None) if quiet else (lambda *a: print(*a, file=sys.stderr))
    log(
        f"simulated {len(cfg.node_pool())} nodes x 8 GPUs for {hours:g} h: "
        f"{len(res.jobs)} jobs, {len(res.events)} job events, {len(res.failures)} failures "
        f"({timings['simulate']:.1f}s)"
    )

    with ChdbStore(store_dir) as store:
        ddl.migrate(store)
        transport = InProcessTransport()
        loader = Loader(store, limits_from_config(cfg), topic_prefix=cfg.transport.topic_prefix)
        progress = Progress("load", sim_cfg.horizon_s, unit="sim s", quiet=quiet)
        t = time.perf_counter()
        sent = 0
        for topic, key, value in messages(
            res, progress=lambda done, total: progress.update(done), topic_prefix=cfg.transport.topic_prefix
        ):
            transport.send(topic, key, value)
            sent += 1
            if sent % POLL_RECORDS == 0:
                _drain(transport, loader)
        _drain(transport, loader)
        totals = loader.totals
        timings["load"] = progress.done(
            f"{totals.records} batches, {sum(totals.rows.values()):,} rows, "
            f"{sum(totals.dead_letters.values())} dead letters"
        )
        progress = Progress("analyze", 0, unit="statement", quiet=quiet)
        analyzers.run(store, cfg, start_ms, start_ms + sim_cfg.horizon_s * 1000, progress)
        timings["analyze"] = progress.done()
        teams = team_table(store, cfg.cluster.name)
        jobs = job_table(store, cfg.cluster.name)
        t = time.perf_counter()
        report = build_report(store, cfg, last_day(start_ms + sim_cfg.horizon_s * 1000, cfg.report.timezone))
        report_pages = write_report(report, out / "report", "en")
        timings["report"] = time.perf_counter() - t
    teams.write_csv(out / "team_summary.csv")
    jobs.write_csv(out / "job_summary.csv")
    pq.write_table(truth_table(res), out / "ground_truth.parquet")
    write_config(cfg, out / "config.toml")
    if not quiet:
        print(format_team_table(teams, cfg.cluster.currency))
        print(
            f"\nwrote {out}/: store/ (chDB), team_summary.csv, job_summary.csv, ground_truth.parquet, "
            f"config.toml — try: goodput summary --config {out}/config.toml --json"
        )
        print(f"daily report ({timings['report']:.1f}s): open {report_pages[0]}")
    return {
        "out": out,
        "store": store_dir,
        "timings": timings,
        "result": res,
        "config": cfg,
        "teams": teams,
        "jobs": jobs,
        "loader": totals,
        "report": report_pages,
    }


def _drain(transport: InProcessTransport, loader: Loader) -> None:
    while True:
        records = transport.poll(POLL_RECORDS)
        if not records:
            return
        loader.load(records)
        transport.commit(records)
