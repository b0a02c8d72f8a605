"""The simulated cluster's gang scheduler and job lifecycles, second by second.

This is the part of the simulator that is event-like (a few hundred jobs, thousands of events), so it
is plain Python over a one-second clock. Everything per GPU-second is done afterwards, vectorized, in
`goodput.sim.signals`.

What it models, because these are what goodput must measure:
- a priority queue per pool; the first job that does not fit blocks the ones behind it (no backfill),
  and some jobs take a *partial* allocation and hold those nodes until the rest free up (gang wait);
- rendezvous after the last node arrives, then startup (first attempt) or restore (later attempts);
- periodic checkpoints that block training for their duration;
- failures — XID on one GPU, NCCL timeout, node loss — with restart from the last checkpoint: the
  progress since it is lost, and a lost node is replaced from the pool's free nodes (the job holds the
  rest meanwhile); a job that fails more than `max_restarts` times ends failed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

# Job-level phases; the per-GPU category comes from these (signals.py).
GANG, STARTUP, RUN, CKPT, RESTART, DONE = range(6)


@dataclass
class Job:
    index: int
    job_id: str
    pool: str
    account: str
    priority: int
    nodes_needed: int
    submit_s: int
    run_s: int
    healthy_busy: float
    storage_demand: float
    """Bytes/s the whole job reads while it trains (spread over its nodes)."""
    traffic_fraction: float
    """Share of NIC line rate each port carries while it trains (multi-node jobs only)."""
    ckpt_every_s: int
    ckpt_s: int
    startup_s: int
    restore_s: int
    rendezvous_s: int
    partial_ok: bool
    fail_at_running_s: list[tuple[int, str]] = field(default_factory=list)
    """Failures planned by running-time offset into an attempt: (seconds after `running`, kind)."""
    # --- state, filled while simulating
    attempt: int = 1
    nodes: list[int] = field(default_factory=list)
    phase: int = -1
    phase_log: list[tuple[int, int]] = field(default_factory=list)
    lost: list[tuple[int, int, str]] = field(default_factory=list)
    allocations: list[tuple[int, int, int]] = field(default_factory=list)
    """(node index, first second, end second) per held node."""
    progress: int = 0
    saved_progress: int = 0
    last_saved_wall: int = 0
    running_since: int = 0
    running_wall: int = 0
    phase_until: int = 0
    ckpt_end: int = 0
    next_fail: tuple[int, str] | None = None
    failure_gpu: tuple[int, int] | None = None
    restarts: int = 0
    alloc_since: dict[int, int] = field(default_factory=dict)
    restoring: bool = False
    restart_at: int = 0
    ended: bool = False


@dataclass
class Failure:
    """What the signal layer needs to draw a failure: where (node, gpu) and what (xid code)."""

    t: int
    job: int
    node: int
    gpu: int
    kind: str


class Scheduler:
    def __init__(
        self,
        *,
        pools: dict[str, list[int]],
        node_names: list[str],
        jobs: list[Job],
        horizon_s: int,
        start_ms: int,
        rng: np.random.Generator,
        max_restarts: int = 3,
        repair_s: int = 1800,
        failures_per_node_hour: float = 0.0,
    ) -> None:
        self.pools = pools
        self.node_names = node_names
        self.jobs = jobs
        self.horizon = horizon_s
        self.start_ms = start_ms
        self.rng = rng
        self.max_restarts = max_restarts
        self.repair_s = repair_s
        self.fail_rate = failures_per_node_hour / 3600.0
        self.free: dict[str, list[int]] = {p: list(n) for p, n in pools.items()}
        self.queue: dict[str, list[Job]] = {p: [] for p in pools}
        self.down: dict[int, int] = {}  # node -> second it is back
        self.events: list[dict] = []
        self.failures: list[Failure] = []
        self.node_down: list[tuple[int, int, int]] = []  # (node, from, to): no telemetry

    # ---- events -------------------------------------------------------------------------------
    def _event(self, t: int, job: Job, event: str, **extra) -> None:
        row = {
            "ts_ms": self.start_ms + t * 1000,
            "job_id": job.job_id,
            "event": event,
            "attempt": job.attempt,
            "account": job.account,
            "queue": job.pool,
            "priority": job.priority,
            "gpus_requested": job.nodes_needed * 8,
            "source": "sim",
        }
        row.update(extra)
        self.events.append(row)

    def _set_phase(self, job: Job, t: int, phase: int) -> None:
        if phase != job.phase:
            job.phase = phase
            job.phase_log.append((t, phase))

    # ---- allocation -------------------------------------------------------------------------------
    def _allocate(self, job: Job, t: int, count: int) -> None:
        free = self.free[job.pool]
        for _ in range(count):
            n = free.pop(0)
            job.nodes.append(n)
            job.alloc_since[n] = t
            self._event(t, job, "allocated", node=self.node_names[n], gpu_indices=list(range(8)))
        if job.phase == -1:
            self._set_phase(job, t, GANG)

    def _release(self, job: Job, t: int, node: int, *, to_free: bool = True) -> None:
        job.nodes.remove(node)
        job.allocations.append((node, job.alloc_since.pop(node), t))
        self._event(t, job, "released", node=self.node_names[node], gpu_indices=list(range(8)))
        if to_free:
            self.free[job.pool].append(node)
            self.free[job.pool].sort()

    def _schedule(self, t: int) -> None:
        for pool, queue in self.queue.items():
            queue.sort(key=lambda j: (j.attempt == 1, -j.priority, j.submit_s, j.index))  # restarts first
            while queue:
                job = queue[0]
                missing = job.nodes_needed - len(job.nodes)
                free = len(self.free[pool])
                if free >= missing:
                    self._allocate(job, t, missing)
                    queue.pop(0)
                    job.phase_until = max(t + job.rendezvous_s, job.restart_at + 5)
                    continue
                if job.partial_ok and free > 0:
                    self._allocate(job, t, free)
                break  # head of line blocks: no backfill

    # ---- the clock ---------------------------------------------------------------------------------
    def run(self) -> None:
        arrivals = sorted(self.jobs, key=lambda j: j.submit_s)
        ai = 0
        active: list[Job] = []
        for t in range(self.horizon):
            for n, back in list(self.down.items()):
                if back == t:
                    del self.down[n]
                    pool = next(p for p, ns in self.pools.items() if n in ns)
                    self.free[pool].append(n)
                    self.free[pool].sort()
            while ai < len(arrivals) and arrivals[ai].submit_s <= t:
                job = arrivals[ai]
                ai += 1
                self._event(t, job, "submitted")
                self.queue[job.pool].append(job)
                active.append(job)
            self._schedule(t)
            for job in active:
                if not job.ended:
                    self._step(job, t)
            active = [j for j in active if not j.ended]
        end = self.horizon
        for job in active:  # still holding nodes at the horizon: close the intervals there
            for n in list(job.nodes):
                job.allocations.append((n, job.alloc_since.pop(n), end))
            job.nodes.clear()
        self.node_down = [(n, a, min(b, end)) for n, a, b in self.node_down]

    def _step(self, job: Job, t: int) -> None:
        if len(job.nodes) < job.nodes_needed or job.phase == -1:
            return  # still queued (maybe holding a partial allocation)
        if job.phase in (GANG, RESTART) and not job.restoring and t == job.phase_until:
            self._event(t, job, "gang_complete")
            if job.phase == GANG:
                self._set_phase(job, t, STARTUP)
                job.phase_until = t + job.startup_s
            else:
                job.phase_until = t + job.restore_s
                job.restoring = True
            return
        if t == job.phase_until and (job.phase == STARTUP or (job.phase == RESTART and job.restoring)):
            job.restoring = False
            self._event(t, job, "running", step=job.saved_progress)
            self._set_phase(job, t, RUN)
            job.running_since = t
            job.last_saved_wall = t
            job.running_wall = 0
            job.next_fail = self._draw_failure(job)
            return
        if job.phase in (RUN, CKPT):
            self._train(job, t)

    def _draw_failure(self, job: Job) -> tuple[int, str] | None:
        planned = [f for f in job.fail_at_running_s if f[0] >= 0]
        if planned:
            at, kind = planned[0]
            job.fail_at_running_s.remove(planned[0])
            return (at, kind)
        if self.fail_rate <= 0:
            return None
        at = int(self.rng.exponential(1.0 / (self.fail_rate * job.nodes_needed)))
        kind = str(self.rng.choice(["xid", "nccl_timeout", "node_lost"], p=[0.5, 0.3, 0.2]))
        return (at, kind) if at < 10 * 86400 else None

    def _train(self, job: Job, t: int) -> None:
        if job.next_fail and job.running_wall == job.next_fail[0]:
            self._fail(job, t, job.next_fail[1])
            return
        job.running_wall += 1
        if job.phase == CKPT:
            if t == job.ckpt_end:
                job.saved_progress = job.progress
                job.last_saved_wall = t
                self._event(t, job, "checkpoint_saved", step=job.progress, duration_ms=job.ckpt_s * 1000)
                self._set_phase(job, t, RUN)
            else:
                return
        if job.progress >= job.run_s:
            self._event(t, job, "completed", exit_code=0)
            self._finish(job, t)
            return
        job.progress += 1
        if job.progress % job.ckpt_every_s == 0 and job.progress < job.run_s:
            self._set_phase(job, t + 1, CKPT)
            job.ckpt_end = t + 1 + job.ckpt_s

    def _fail(self, job: Job, t: int, kind: str) -> None:
        node = job.nodes[int(self.rng.integers(len(job.nodes)))]
        gpu = int(self.rng.integers(8))
        reason = {"xid": "xid:79", "nccl_timeout": "nccl_timeout", "node_lost": "node_lost"}[kind]
        job.lost.append((job.last_saved_wall, t, reason))
        self.failures.append(Failure(t, job.index, node, gpu, kind))
        job.progress = job.saved_progress
        self._event(t, job, "failed", reason=reason, exit_code=1)
        if kind == "node_lost":
            self._release(job, t, node, to_free=False)
            self.down[node] = t + self.repair_s
            self.node_down.append((node, t, t + self.repair_s))
        job.restarts += 1
        if job.restarts > self.max_restarts:
            self._finish(job, t)
            return
        self._set_phase(job, t, RESTART)
        job.attempt += 1
        detect = 30
        self._event(t + detect, job, "restarted")
        job.restoring = False
        if kind == "node_lost":
            job.phase_until = -1  # set when the replacement node arrives
            job.restart_at = t + detect
            self.queue[job.pool].append(job)
        else:
            job.phase_until = t + detect + 5

    def _finish(self, job: Job, t: int) -> None:
        for n in list(job.nodes):
            self._release(job, t, n)
        self._set_phase(job, t, DONE)
        job.ended = True
