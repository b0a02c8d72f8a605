"""The simulated cluster: layout from the config, a seeded job mix, the scheduler run, and the
per-GPU-second ground truth, all as numpy arrays.

Deterministic: the same SimConfig (seed included) gives the same jobs, events, truth and counters.
Ground truth is what the simulator *decided* each GPU-second was; it never enters the messages, so
the analyzers must recover it from counters and events alone, as they would on a real cluster.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import msgspec
import numpy as np

from contracts.catalog import CATEGORIES
from contracts.config import Config, SimulationConfig
from goodput.sim.scheduler import CKPT, GANG, RESTART, RUN, STARTUP, Job, Scheduler

# Category codes of the truth/activity arrays: index into CODES; 0 means not allocated.
CODES = ("unallocated",) + CATEGORIES
C = {name: i for i, name in enumerate(CODES)}
_PHASE_CODE = {
    GANG: C["gang_wait"],
    STARTUP: C["startup"],
    RUN: C["productive"],
    CKPT: C["checkpoint"],
    RESTART: C["retry_waste"],
}


@dataclass(frozen=True)
class PlannedFailure:
    """Forces a failure: job `job_index` fails `after_running_s` into its first attempt's training."""

    job_index: int
    after_running_s: int
    kind: str = "xid"


_KNOBS = SimulationConfig()
"""The `[simulation]` defaults: declared once, in the config model."""


@dataclass(frozen=True)
class SimConfig:
    hours: float = 2.0
    seed: int = 1
    start_ms: int = 0
    batch_s: int = 60
    failures_per_node_hour: float = _KNOBS.failures_per_node_hour
    partial_allocation_probability: float = _KNOBS.partial_allocation_probability
    storage_demand_scale: float = _KNOBS.storage_demand_scale
    network_demand_scale: float = _KNOBS.network_demand_scale
    stragglers_per_hour: float = _KNOBS.stragglers_per_hour
    accounts: tuple[str, ...] = _KNOBS.accounts
    planned_failures: tuple[PlannedFailure, ...] = ()
    max_job_nodes: int = 128

    @property
    def horizon_s(self) -> int:
        return int(self.hours * 3600)

    @classmethod
    def from_config(cls, cfg: Config, **overrides) -> "SimConfig":
        knobs = msgspec.structs.asdict(cfg.simulation)
        knobs.update(overrides)
        return cls(**knobs)


@dataclass
class Straggler:
    job: int
    node: int
    gpu: int
    start: int
    end: int
    slowdown: float


@dataclass
class SimResult:
    """Everything the signal and emit layers need, and the truth."""

    cfg: SimConfig
    config: Config
    node_names: list[str]
    node_pool: list[str]
    node_has_gpm: np.ndarray
    node_ib: np.ndarray
    jobs: list[Job]
    events: list[dict]
    job_of: np.ndarray  # (nodes, T) int32, -1 when no job holds the node
    activity: np.ndarray  # (nodes, 8, T) int8: what the GPU physically did
    truth: np.ndarray  # (nodes, 8, T) int8: the category it counts as
    alive: np.ndarray  # (nodes, T) bool: the node's agent is up and reporting
    f_data: dict[str, np.ndarray]
    f_comm: dict[str, np.ndarray]
    stragglers: list[Straggler]
    failures: list = field(default_factory=list)


def _jobs(cfg: SimConfig, config: Config, pools: dict[str, list[int]], rng: np.random.Generator) -> list[Job]:
    """A job mix per pool that keeps it over-subscribed: a burst at t=0 and Poisson arrivals after."""
    jobs: list[Job] = []
    T = cfg.horizon_s
    for pool in config.pools:
        n_nodes = len(pools[pool.name])
        if n_nodes == 0:
            continue
        sizes = [s for s in (1, 2, 4, 8, 16, 32, 64, 128) if s <= min(n_nodes, cfg.max_job_nodes)]
        weights = np.array([1.0 / (1 + i) for i in range(len(sizes))])
        weights /= weights.sum()
        mean_nodes = float(np.dot(sizes, weights))
        mean_run = 2400.0
        rate = 1.15 * n_nodes / (mean_nodes * mean_run)  # arrivals per second, slightly over capacity
        t = 0.0
        burst = max(1, int(1.4 * n_nodes / mean_nodes))
        submits = [int(rng.integers(0, 60)) for _ in range(burst)]
        while True:
            t += rng.exponential(1.0 / rate)
            if t >= T:
                break
            submits.append(int(t))
        per_gpu_storage = pool.storage_ceiling_bytes_per_s / max(1, n_nodes * pool.gpus_per_node)
        for s in sorted(submits):
            nodes = int(rng.choice(sizes, p=weights))
            i = len(jobs)
            jobs.append(
                Job(
                    index=i,
                    job_id=f"{pool.name[:3]}-{100000 + i}",
                    pool=pool.name,
                    account=str(rng.choice(cfg.accounts)),
                    priority=int(rng.integers(1, 4)),
                    nodes_needed=nodes,
                    submit_s=s,
                    run_s=int(np.clip(rng.lognormal(math.log(mean_run), 0.6), 600, 6 * 3600)),
                    healthy_busy=float(rng.uniform(55, 95)),
                    storage_demand=float(
                        nodes * 8 * per_gpu_storage * cfg.storage_demand_scale * rng.lognormal(-0.1, 0.5)
                    ),
                    traffic_fraction=float(min(0.95, rng.uniform(0.2, 0.7) * cfg.network_demand_scale))
                    if nodes > 1
                    else 0.0,
                    ckpt_every_s=int(rng.integers(600, 1800)),
                    ckpt_s=int(rng.integers(20, 90)),
                    startup_s=int(rng.integers(60, 240)),
                    restore_s=int(rng.integers(60, 180)),
                    rendezvous_s=int(rng.integers(5, 30)),
                    partial_ok=bool(rng.random() < cfg.partial_allocation_probability),
                )
            )
    for pf in cfg.planned_failures:
        jobs[pf.job_index].fail_at_running_s.append((pf.after_running_s, pf.kind))
    return jobs


def scaled_config(config: Config, gpus: int) -> Config:
    """The same cluster shape at another size: pools keep their share of nodes (at least one each),
    node names keep their pattern, storage ceilings scale with the node count."""
    total = sum(len(p.nodes) for p in config.pools)
    want = max(len(config.pools), gpus // 8)
    counts = [max(1, round(len(p.nodes) * want / total)) for p in config.pools]
    counts[0] += want - sum(counts)
    pools = []
    for p, n in zip(config.pools, counts, strict=True):
        stem = p.nodes[0].rstrip("0123456789")
        width = len(p.nodes[0]) - len(stem)
        pools.append(
            msgspec.structs.replace(
                p,
                nodes=tuple(f"{stem}{i:0{width}d}" for i in range(1, n + 1)),
                storage_ceiling_bytes_per_s=p.storage_ceiling_bytes_per_s * n / len(p.nodes),
            )
        )
    return msgspec.structs.replace(config, pools=tuple(pools))


def _fraction_over(capacity: float, demand: np.ndarray) -> np.ndarray:
    """Share of demand that cannot be served: 1 - capacity/demand where demand exceeds capacity."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(demand > capacity, 1.0 - capacity / np.maximum(demand, 1e-9), 0.0)


def simulate(cfg: SimConfig, config: Config) -> SimResult:
    """Runs the scheduler and derives per-second activity and truth for every GPU."""
    rng = np.random.default_rng(cfg.seed)
    T = cfg.horizon_s
    node_names = [n for p in config.pools for n in p.nodes]
    node_pool = [p.name for p in config.pools for _ in p.nodes]
    pools = {p.name: [i for i, pn in enumerate(node_pool) if pn == p.name] for p in config.pools}
    jobs = _jobs(cfg, config, pools, rng)
    sched = Scheduler(
        pools=pools,
        node_names=node_names,
        jobs=jobs,
        horizon_s=T,
        start_ms=cfg.start_ms,
        rng=rng,
        failures_per_node_hour=cfg.failures_per_node_hour,
    )
    sched.run()

    N = len(node_names)
    job_of = np.full((N, T), -1, dtype=np.int32)
    activity = np.zeros((N, 8, T), dtype=np.int8)
    truth = np.zeros((N, 8, T), dtype=np.int8)
    alive = np.ones((N, T), dtype=bool)
    for n, a, b in sched.node_down:
        alive[n, a:b] = False

    # Job-level phase per second, and demand on each pool's storage and network.
    phase = {}
    storage_demand = {p: np.zeros(T) for p in pools}
    net_demand = {p: np.zeros(T) for p in pools}
    tiers = {p.name: config.network_tiers[p.network_tier] for p in config.pools}
    for job in jobs:
        if not job.phase_log:
            continue
        ph = np.zeros(T, dtype=np.int8)
        marks = job.phase_log + [(T, -1)]
        for (t0, code), (t1, _) in zip(marks, marks[1:], strict=False):  # consecutive pairs
            if code in _PHASE_CODE:
                ph[t0 : min(t1, T)] = _PHASE_CODE[code]
        phase[job.index] = ph
        running = ph == C["productive"]
        storage_demand[job.pool] += running * job.storage_demand
        tier = tiers[job.pool]
        net_demand[job.pool] += running * (
            job.traffic_fraction * job.nodes_needed * tier.links_per_node * tier.link_gbps * 1e9 / 8
        )
    f_data, f_comm = {}, {}
    for pool in config.pools:
        tier = tiers[pool.name]
        nodes = len(pools[pool.name])
        f_data[pool.name] = _fraction_over(pool.storage_ceiling_bytes_per_s, storage_demand[pool.name])
        capacity = nodes * tier.links_per_node * tier.link_gbps * 1e9 / 8 / tier.oversubscription
        f_comm[pool.name] = _fraction_over(capacity, net_demand[pool.name])

    # Stragglers: one GPU of a running multi-GPU job slows down; the rest of the gang waits on it.
    stragglers: list[Straggler] = []
    n_strag = rng.poisson(cfg.stragglers_per_hour * cfg.hours)
    for _ in range(n_strag):
        t0 = int(rng.integers(0, T))
        candidates = [j for j in jobs if j.index in phase and phase[j.index][t0] == C["productive"]]
        if not candidates:
            continue
        job = candidates[int(rng.integers(len(candidates)))]
        held = [n for n, a, b in job.allocations if a <= t0 < b]
        if not held:
            continue
        stragglers.append(
            Straggler(
                job.index,
                held[int(rng.integers(len(held)))],
                int(rng.integers(8)),
                t0,
                min(T, t0 + int(rng.integers(180, 900))),
                float(rng.uniform(1.25, 1.6)),
            )
        )

    for job in jobs:
        if job.index not in phase:
            continue
        ph = phase[job.index]
        # Each running second of the gang is productive, or stalled on data or communication: one
        # draw per job-second, since the ranks of a synchronous job stall together.
        u = rng.random(T)
        fd = f_data[job.pool]
        fc = f_comm[job.pool]
        act_job = ph.copy()
        run = ph == C["productive"]
        act_job[run & (u < fd)] = C["data_stall"]
        act_job[run & (u >= fd) & (u < fd + fc)] = C["comm_stall"]
        fs = np.zeros(T)
        mine = [s for s in stragglers if s.job == job.index]
        for s in mine:
            fs[s.start : s.end] = np.maximum(fs[s.start : s.end], 1.0 - 1.0 / s.slowdown)
        straggle = run & (u >= fd + fc) & (u < fd + fc + fs)
        act_job[straggle] = C["comm_stall"]
        lost = np.zeros(T, dtype=bool)
        for a, b, _ in job.lost:
            lost[a:b] = True
        for n, a, b in job.allocations:
            job_of[n, a:b] = job.index
            activity[n, :, a:b] = act_job[a:b]
            for s in mine:
                if s.node == n:  # the straggler itself computes (slowly) while the others wait
                    sl = slice(max(a, s.start), min(b, s.end))
                    activity[n, s.gpu, sl] = np.where(straggle[sl], C["productive"], activity[n, s.gpu, sl])
            truth[n, :, a:b] = np.where(lost[a:b], C["retry_waste"], activity[n, :, a:b])
    return SimResult(
        cfg,
        config,
        node_names,
        node_pool,
        np.array([config.gpu_types[config.node_pool()[n].gpu_type].has_gpm for n in node_names]),
        np.array([tiers[p].link_layer == "InfiniBand" for p in node_pool]),
        jobs,
        sorted(sched.events, key=lambda e: e["ts_ms"]),
        job_of,
        activity,
        truth,
        alive,
        f_data,
        f_comm,
        stragglers,
        sched.failures,
    )
