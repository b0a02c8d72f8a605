"""Turning a simulation into the documented messages, and its ground truth into a table.

Each node sends one envelope per kind per `batch_s` seconds of samples (real agents send one per
tick; a batch may carry any number of ticks). The job-state collector's events go out from the first
control node. Sequence numbers start at 0 per (node, kind) and grow by one per batch.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from typing import Callable, Iterator

import numpy as np
import pyarrow as pa

from contracts.envelope import encode_batch
from contracts.schema import SCHEMA_VERSION, topic_for
from goodput.sim.cluster import CODES, SimResult
from goodput.sim.signals import ROCE_ONLY, SignalState, gpu_columns, nic_columns, storage_columns

AGENT = "goodput-sim/0.1.0"
GPM_FIELDS = ("sm_active_pct", "sm_occupancy_pct", "tensor_active_pct", "dram_active_pct")
GPU_MODEL = {"H100": "NVIDIA H100 80GB HBM3", "A100": "NVIDIA A100-SXM4-80GB"}


def _rows_by_time(arr: np.ndarray) -> np.ndarray:
    """(devices, L) → rows ordered by second, then device."""
    return arr.T.reshape(-1)


def messages(
    res: SimResult,
    progress: Callable[[int, int], None] | None = None,
    topic_prefix: str = "goodput",
    version: int = SCHEMA_VERSION,
) -> Iterator[tuple[str, bytes, bytes]]:
    """Yields (topic, key, value) for every batch of the run, in time order, as envelopes of message
    schema `version` (1: JSON, 2: columnar binary)."""
    cfg, config = res.cfg, res.config
    st = SignalState(res)
    seq: dict[tuple[str, str], int] = defaultdict(int)
    sender = config.cluster.control_nodes[0] if config.cluster.control_nodes else "scheduler"
    node_pool = config.node_pool()
    uuids = [
        [f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{config.cluster.name}.{n}.{g}')}" for g in range(8)]
        for n in res.node_names
    ]
    events = res.events
    ei = 0
    T = cfg.horizon_s

    def envelope(kind: str, node: str, columns: dict, t1: int) -> tuple[str, bytes, bytes]:
        key = (node, kind)
        value = encode_batch(
            kind=kind,
            cluster=config.cluster.name,
            node=node,
            seq=seq[key],
            sent_ms=cfg.start_ms + t1 * 1000,
            columns=columns,
            agent=AGENT,
            version=version,
        )
        seq[key] += 1
        return topic_for(kind, topic_prefix), node.encode(), value

    for t0 in range(0, T, cfg.batch_s):
        t1 = min(T, t0 + cfg.batch_s)
        # a sample describes the second before its timestamp (docs/messages.md): second t is stamped t + 1
        ts = cfg.start_ms + np.arange(t0 + 1, t1 + 1, dtype=np.int64) * 1000
        batch_events = []
        while ei < len(events) and events[ei]["ts_ms"] < cfg.start_ms + t1 * 1000:
            batch_events.append(events[ei])
            ei += 1
        if batch_events:
            event_fields = sorted({k for e in batch_events for k in e})
            cols = {
                f: [e.get(f, [] if f == "gpu_indices" else None) for e in batch_events] for f in event_fields
            }
            yield envelope("job", sender, cols, t1)
        gpu, has_proc, job = gpu_columns(st, t0, t1)
        nic = nic_columns(st, t0, t1)
        storage = storage_columns(st, t0, t1)
        for n, node in enumerate(res.node_names):
            alive = res.alive[n, t0:t1]
            if not alive.any():
                continue
            keep8 = np.repeat(alive, 8)
            pool = node_pool[node]
            gcols = {
                "ts_ms": np.repeat(ts, 8)[keep8],
                "gpu": np.tile(np.arange(8), t1 - t0)[keep8],
                "uuid": [uuids[n][g] for g in range(8)] * int(alive.sum()),
                "model": [GPU_MODEL.get(pool.gpu_type, pool.gpu_type)] * int(keep8.sum()),
            }
            jid = np.where(has_proc[n], st.job_ids[job[n]][None, :], None)
            gcols["job_id"] = _rows_by_time(jid)[keep8]  # type: ignore[arg-type]  # numpy stubs: where(c, x, None) is an array
            for name, arr in gpu.items():
                if name in GPM_FIELDS and not res.node_has_gpm[n]:
                    continue  # NOT_SUPPORTED on this GPU: absent, not zero
                gcols[name] = _rows_by_time(arr[n])[keep8]
            xids = [(g, t) for (nn, g, t) in st.xid if nn == n and t0 <= t < t1]
            if xids:
                xid = np.full((8, t1 - t0), None, dtype=object)
                for g, t in xids:
                    xid[g, t - t0] = 79
                gcols["xid"] = _rows_by_time(xid)[keep8]
            yield envelope("gpu", node, gcols, t1)
            ib = bool(res.node_ib[n])
            ncols = {
                "ts_ms": np.repeat(ts, 8)[keep8],
                "device": [f"mlx5_{p}" for p in range(8)] * int(alive.sum()),
                "port": [1] * int(keep8.sum()),
                "link_layer": ["InfiniBand" if ib else "Ethernet"] * int(keep8.sum()),
                "state": ["ACTIVE"] * int(keep8.sum()),
            }
            for name, arr in nic.items():
                if ib and name in ROCE_ONLY:
                    continue
                ncols[name] = _rows_by_time(arr[n])[keep8]
            yield envelope("nic", node, ncols, t1)
            k = int(alive.sum())
            scols: dict[str, list] = defaultdict(list)
            for source, device, fields in (
                ("disk", "nvme0n1", storage["disk"]),
                ("nfs", "/mnt/datasets", storage["nfs"]),
                ("psi", "io", storage["psi"]),
            ):
                scols["ts_ms"].extend(ts[alive].tolist())
                scols["source"].extend([source] * k)
                scols["device"].extend([device] * k)
                for name in (
                    "read_bytes_per_s",
                    "write_bytes_per_s",
                    "read_ops_per_s",
                    "write_ops_per_s",
                    "read_latency_ms",
                    "busy_pct",
                    "psi_some_pct",
                    "psi_full_pct",
                ):
                    col = fields.get(name)
                    scols[name].extend(col[n][alive].tolist() if col is not None else [None] * k)
            yield envelope("storage", node, scols, t1)
        if progress:
            progress(t1, T)


def truth_table(res: SimResult) -> pa.Table:
    """Ground truth as run-length intervals: (job_id, node, gpu, start_ms, end_ms, category)."""
    out: dict[str, list] = {"job_id": [], "node": [], "gpu": [], "start_ms": [], "end_ms": [], "category": []}
    start_ms = res.cfg.start_ms
    for n, node in enumerate(res.node_names):
        job = res.job_of[n]
        for g in range(8):
            cat = res.truth[n, g]
            key = job.astype(np.int64) * 16 + cat
            edges = np.flatnonzero(np.diff(key)) + 1
            starts = np.concatenate(([0], edges))
            ends = np.concatenate((edges, [len(key)]))
            for s, e in zip(starts, ends, strict=True):
                if cat[s] == 0:
                    continue
                out["job_id"].append(res.jobs[job[s]].job_id)
                out["node"].append(node)
                out["gpu"].append(g)
                out["start_ms"].append(start_ms + int(s) * 1000)
                out["end_ms"].append(start_ms + int(e) * 1000)
                out["category"].append(CODES[cat[s]])
    return pa.table(out)
