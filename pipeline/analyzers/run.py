"""Runs the analyzer SQL over a time range: refreshes the dimension tables from the config, then
classifies every allocated GPU-second (goodput.sql) and rolls it up (rollups.sql).

Re-running a range replaces its outputs, so a late batch or a changed config is fixed by running the
range again.
"""

from __future__ import annotations

import logging
import re
import time
from pathlib import Path

import pyarrow as pa

from pipeline import catalog
from pipeline.config import Config
from pipeline.store import Store

log = logging.getLogger("goodput.analyzers")
HERE = Path(__file__).parent
TEMP_TABLES = ("tmp_events", "tmp_job_end", "tmp_alloc", "tmp_segments", "tmp_pieces", "tmp_piece_windows",
               "tmp_run_gpu", "tmp_healthy", "tmp_node_evidence", "tmp_stragglers", "tmp_run_split",
               "tmp_classified")


def refresh_dimensions(store: Store, cfg: Config) -> None:
    """Writes the config's pools, nodes, prices and team mapping where the SQL can join them."""
    nodes = [(n, p) for p in cfg.pools for n in p.nodes]
    tiers = cfg.network_tiers
    tables = {
        catalog.DIM_NODES: pa.table({
            "node": [n for n, _ in nodes],
            "pool": [p.name for _, p in nodes],
            "pool_class": [p.pool_class for _, p in nodes],
            "gpu_type": [p.gpu_type for _, p in nodes],
            "gpus_per_node": pa.array([p.gpus_per_node for _, p in nodes], pa.uint16()),
            "price_per_gpu_hour": [cfg.price(p) for _, p in nodes],
            "network_tier": [p.network_tier for _, p in nodes],
            "link_gbps": [tiers[p.network_tier].link_gbps for _, p in nodes],
            "links_per_node": pa.array([tiers[p.network_tier].links_per_node for _, p in nodes], pa.uint16()),
        }),
        catalog.DIM_POOLS: pa.table({
            "pool": [p.name for p in cfg.pools],
            "pool_class": [p.pool_class for p in cfg.pools],
            "nodes": pa.array([len(p.nodes) for p in cfg.pools], pa.uint32()),
            "gpus": pa.array([len(p.nodes) * p.gpus_per_node for p in cfg.pools], pa.uint32()),
            "storage_ceiling_bytes_per_s": [p.storage_ceiling_bytes_per_s for p in cfg.pools],
            "oversubscription": [tiers[p.network_tier].oversubscription for p in cfg.pools],
        }),
        catalog.DIM_ACCOUNTS: pa.table({
            "account": [a for accts in cfg.teams.values() for a in accts],
            "team": [t for t, accts in cfg.teams.items() for _ in accts],
        }),
    }
    for name, table in tables.items():
        store.execute(f"TRUNCATE TABLE {name}")
        store.insert_arrow(name, table)


def _params(cfg: Config, start_ms: int, end_ms: int) -> dict[str, str]:
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", cfg.cluster) or not re.fullmatch(r"[A-Za-z0-9_.-]+", cfg.default_team):
        raise ValueError(f"cluster {cfg.cluster!r} / default team {cfg.default_team!r}: use letters, digits, . _ -")
    a = cfg.analyzer
    cats = catalog.CATEGORIES
    return {
        "cluster": cfg.cluster, "default_team": cfg.default_team,
        "start": str(int(start_ms)), "end": str(int(end_ms)), "W": str(int(a.window_s * 1000)),
        "healthy_quantile": repr(float(a.healthy_quantile)), "healthy_cutoff": repr(float(a.healthy_cutoff)),
        "percentile_levels": ", ".join(f"{i / 100:.2f}" for i in range(1, 100)), "healthy_tolerance": repr(float(a.healthy_tolerance)),
        "storage_saturation": repr(float(a.storage_saturation)), "psi_some_pct": repr(float(a.psi_some_pct)),
        "nic_line_rate_fraction": repr(float(a.nic_line_rate_fraction)),
        "xmit_wait_per_s": repr(float(a.xmit_wait_per_s)), "ecn_marked_per_s": repr(float(a.ecn_marked_per_s)),
        "cnp_per_s": repr(float(a.cnp_per_s)), "straggler_mask": str(int(a.straggler_clock_event_mask)),
        "category_columns": ", ".join(f"s_{c}" for c in cats),
        "category_sums": ", ".join(f"sumIf(w.gpu_seconds, w.category = '{c}')" for c in cats),
    }


def statements(name: str, params: dict[str, str]) -> list[str]:
    text = (HERE / name).read_text()
    body = "\n".join(ln for ln in text.splitlines() if not ln.lstrip().startswith("--"))
    return [s.strip().format(**params) for s in body.split(";;") if s.strip()]


def run(store: Store, cfg: Config, start_ms: int, end_ms: int) -> dict[str, float]:
    """Classifies [start_ms, end_ms) and returns seconds per step, for the progress log."""
    timings: dict[str, float] = {}
    t = time.perf_counter()
    refresh_dimensions(store, cfg)
    params = _params(cfg, start_ms, end_ms)
    try:
        for name in ("goodput.sql", "rollups.sql"):
            for sql in statements(name, params):
                store.execute(sql)
            timings[name] = time.perf_counter() - t
            t = time.perf_counter()
    finally:
        for tmp in TEMP_TABLES:
            store.execute(f"DROP TABLE IF EXISTS {tmp}")
    return timings
