"""Counters the simulated nodes would report, derived from the per-second activity, vectorized.

For one time slice [t0, t1) this builds every node's GPU, NIC and storage columns at once as numpy
arrays shaped (nodes, gpus, seconds), then hands out per-node slices. The numbers follow the physics
the analyzers rely on: a GPU stalled on data or on its gang shows near-zero SM activity; a saturated
pool's storage reads add up to its ceiling and its nodes show I/O pressure; a congested fabric shows
transmit waits (and ECN/CNP on RoCE); a straggler GPU shows a hardware-slowdown clock event and lower
clocks while it stays busy.
"""

from __future__ import annotations

import numpy as np

from goodput.sim.cluster import C, SimResult


def line_rate_bytes(gbps):
    return gbps * 1e9 / 8


_TRAINING = (C["productive"], C["data_stall"], C["comm_stall"])
_HAS_PROCESS = _TRAINING + (C["checkpoint"], C["startup"])


class SignalState:
    """What carries over from one slice to the next: energy counters and the noise generator."""

    def __init__(self, res: SimResult) -> None:
        self.res = res
        self.rng = np.random.default_rng(res.cfg.seed + 7919)
        n = len(res.node_names)
        self.energy = self.rng.uniform(1e6, 5e6, size=(n, 8))
        jobs = res.jobs
        # Per-job parameters indexed by job index; the extra last entry serves "no job" (-1).
        self.busy = np.array([j.healthy_busy for j in jobs] + [0.0])
        self.read_share = np.array([j.storage_demand / j.nodes_needed for j in jobs] + [0.0])
        self.traffic = np.array([j.traffic_fraction for j in jobs] + [0.0])
        self.job_ids = np.array([j.job_id for j in jobs] + [""], dtype=object)
        pools = sorted(set(res.node_pool))
        self.pool_index = np.array([pools.index(p) for p in res.node_pool])
        self.f_data = np.stack([res.f_data[p] for p in pools])
        self.f_comm = np.stack([res.f_comm[p] for p in pools])
        tiers = {p.name: res.config.network_tiers[p.network_tier] for p in res.config.pools}
        self.link_gbps = np.array([tiers[p].link_gbps for p in res.node_pool])
        self.link_layer = [tiers[p].link_layer for p in res.node_pool]
        self.mem_total = np.array(
            [res.config.gpu_types[res.config.node_pool()[n].gpu_type].memory_bytes for n in res.node_names]
        )
        self.strag_mask = np.zeros((n, 8, res.cfg.horizon_s), dtype=bool)
        for s in res.stragglers:
            held = res.job_of[s.node, s.start : s.end] == s.job
            self.strag_mask[s.node, s.gpu, s.start : s.end] = held
        self.xid = {(f.node, f.gpu, f.t): 79 for f in res.failures if f.kind == "xid"}


def gpu_columns(st: SignalState, t0: int, t1: int) -> tuple[dict[str, np.ndarray], np.ndarray, np.ndarray]:
    """(nodes, 8, L) arrays for every GPU field the simulator fills, which GPUs run a process, and
    the (nodes, L) job index holding each node."""
    res, rng = st.res, st.rng
    act = res.activity[:, :, t0:t1]
    job = res.job_of[:, t0:t1]
    shape = act.shape
    busy = st.busy[job][:, None, :]
    noise = rng.normal(0.0, 1.0, size=shape)
    training = act == C["productive"]
    stalled = (act == C["data_stall"]) | (act == C["comm_stall"])
    sm = np.where(training, busy * (1.0 + 0.02 * noise), 0.0)
    sm = np.where(stalled, rng.uniform(0.0, 2.0, size=shape), sm)
    sm = np.where(act == C["checkpoint"], rng.uniform(1.0, 4.0, size=shape), sm)
    sm = np.where(act == C["startup"], rng.uniform(0.0, 6.0, size=shape), sm)
    sm = np.clip(sm, 0.0, 100.0)
    has_proc = np.isin(act, _HAS_PROCESS)
    util = np.where(has_proc, np.clip(sm + 3.0 + rng.normal(0, 0.5, size=shape), 0, 100), 0.0)
    strag = st.strag_mask[:, :, t0:t1]
    power = 80.0 + 6.0 * sm + rng.normal(0, 2.0, size=shape)
    energy = st.energy[:, :, None] + np.cumsum(power, axis=2)
    st.energy = energy[:, :, -1]
    clock = np.where(strag, 1400.0, 1980.0)
    throttle = np.where(strag, 0x8, np.where(sm < 1.0, 0x1, 0))
    mem_used = np.where(has_proc, 0.8 * st.mem_total[:, None, None], 512 * 2**20).astype(np.int64)
    nvlink = sm * 2.0e9 * (st.traffic[job][:, None, :] + 0.2)
    cols = {
        "util_gpu_pct": np.round(util, 1),
        "util_mem_pct": np.round(sm * 0.6, 1),
        "sm_active_pct": np.round(sm, 2),
        "sm_occupancy_pct": np.round(sm * 0.45, 2),
        "tensor_active_pct": np.round(sm * 0.55, 2),
        "dram_active_pct": np.round(sm * 0.35, 2),
        "mem_used_bytes": mem_used,
        "mem_total_bytes": np.broadcast_to(st.mem_total[:, None, None], shape),
        "power_w": np.round(np.maximum(power, 20.0), 1),
        "energy_j": np.round(energy, 1),
        "temp_c": np.round(30.0 + 0.45 * sm + rng.normal(0, 0.5, size=shape), 1),
        "sm_clock_mhz": clock,
        "mem_clock_mhz": np.full(shape, 2619.0),
        "throttle_reasons": throttle.astype(np.int64),
        "ecc_sbe_total": np.zeros(shape, dtype=np.int64),
        "ecc_dbe_total": np.zeros(shape, dtype=np.int64),
        "remapped_rows": np.zeros(shape, dtype=np.int64),
        "pcie_rx_bytes_per_s": np.round(st.read_share[job][:, None, :] / 8 * training, 0),
        "pcie_tx_bytes_per_s": np.round(sm * 1e7, 0),
        "nvlink_tx_bytes_per_s": np.round(nvlink, 0),
        "nvlink_rx_bytes_per_s": np.round(nvlink, 0),
        "nvlink_errors_per_s": np.zeros(shape),
    }
    return cols, has_proc, job


def nic_columns(st: SignalState, t0: int, t1: int) -> dict[str, np.ndarray]:
    """(nodes, ports, L) arrays; port p serves GPU p (rail-optimised)."""
    res, rng = st.res, st.rng
    act = res.activity[:, :, t0:t1]
    job = res.job_of[:, t0:t1]
    fc = st.f_comm[st.pool_index][:, None, t0:t1]
    line = line_rate_bytes(st.link_gbps)[:, None, None]
    on = np.isin(act, _TRAINING)
    tx = on * st.traffic[job][:, None, :] * line * (1.0 - fc) * rng.uniform(0.95, 1.05, size=act.shape)
    cong = on * fc
    return {
        "rate_gbps": np.broadcast_to(st.link_gbps[:, None, None], act.shape),
        "tx_bytes_per_s": np.round(tx, 0),
        "rx_bytes_per_s": np.round(tx * rng.uniform(0.97, 1.03, size=act.shape), 0),
        "tx_packets_per_s": np.round(tx / 4096, 0),
        "rx_packets_per_s": np.round(tx / 4096, 0),
        "xmit_wait_per_s": np.round(cong * 5e7 + rng.uniform(0, 1e3, size=act.shape), 0),
        "ecn_marked_per_s": np.round(cong * 2e5, 0),
        "cnp_sent_per_s": np.round(cong * 1e5, 0),
        "cnp_handled_per_s": np.round(cong * 1e5, 0),
        "pfc_pause_rx_per_s": np.round(cong * 5e3, 0),
        "pfc_pause_us_per_s": np.round(cong * 2e5, 0),
        "symbol_errors_per_s": np.zeros(act.shape),
        "rcv_errors_per_s": np.zeros(act.shape),
        "link_downed_per_s": np.zeros(act.shape),
    }


ROCE_ONLY = (
    "ecn_marked_per_s",
    "cnp_sent_per_s",
    "cnp_handled_per_s",
    "pfc_pause_rx_per_s",
    "pfc_pause_us_per_s",
)


def storage_columns(st: SignalState, t0: int, t1: int) -> dict[str, dict[str, np.ndarray]]:
    """Per source (disk, nfs, psi): (nodes, L) arrays."""
    res, rng = st.res, st.rng
    act0 = res.activity[:, 0, t0:t1]
    job = res.job_of[:, t0:t1]
    L = t1 - t0
    fd = st.f_data[st.pool_index][:, t0:t1]
    reading = np.isin(act0, _TRAINING)
    ckpt = act0 == C["checkpoint"]
    nfs_read = reading * st.read_share[job] * (1.0 - fd)
    some = np.clip(reading * fd * 95.0 + rng.uniform(0, 0.5, size=(len(act0), L)), 0, 100)
    return {
        "disk": {
            "read_bytes_per_s": np.round(rng.uniform(0, 2e6, size=act0.shape), 0),
            "write_bytes_per_s": np.round(np.where(ckpt, 3e9, 1e6), 0),
            "read_ops_per_s": np.round(rng.uniform(0, 50, size=act0.shape), 0),
            "write_ops_per_s": np.round(np.where(ckpt, 3000.0, 20.0), 0),
            "read_latency_ms": np.round(rng.uniform(0.05, 0.2, size=act0.shape), 3),
            "busy_pct": np.round(np.where(ckpt, 85.0, 2.0), 1),
        },
        "nfs": {
            "read_bytes_per_s": np.round(nfs_read, 0),
            "read_ops_per_s": np.round(nfs_read / 2**20, 1),
            "read_latency_ms": np.round(1.5 + 40.0 * fd * reading, 2),
            "write_bytes_per_s": np.zeros(act0.shape),
            "write_ops_per_s": np.zeros(act0.shape),
        },
        "psi": {
            "psi_some_pct": np.round(some, 2),
            "psi_full_pct": np.round(some * 0.5, 2),
        },
    }
