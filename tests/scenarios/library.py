"""The scenario library: one function per edge case, each a `Timeline` with its truth.

Every scenario is a 2-node job (16 H100s of the example config's core pool) over 30 minutes unless it
says otherwise, so that a failure costs a visible share and the numbers stay small enough to reason
about by hand. Thresholds referred to are the example config's `[analyzer]` values.
"""

from __future__ import annotations

import functools
from typing import Callable

import msgspec

from contracts import config as config_mod
from tests.scenarios.timeline import GPUS, HEALTHY_SM, Timeline

SECONDS = 1800
BOTH = [0, 1]
J = "job-1"


def _restartable(tl: Timeline, *, running: int = 60) -> None:
    """submitted, both nodes allocated and complete at 10 s, startup until `running`."""
    tl.event(0, J, "submitted", account="llm", gpus_requested=16, attempt=1)
    for n in BOTH:
        tl.event(10, J, "allocated", node=n, gpu_indices=list(range(GPUS)), attempt=1)
    tl.event(10, J, "gang_complete", attempt=1)
    tl.event(running, J, "running", attempt=1)
    tl.phase(J, BOTH, 10, running, "startup")


def _checkpoint(tl: Timeline, t_end: int, duration_s: int = 20, attempt: int = 1) -> None:
    tl.event(t_end, J, "checkpoint_saved", duration_ms=duration_s * 1000, attempt=attempt)
    tl.phase(J, BOTH, t_end - duration_s, t_end, "checkpoint")


def baseline() -> Timeline:
    """Allocated, startup, productive, completed and released at once: nothing to find."""
    tl = Timeline("baseline", SECONDS)
    tl.simple_job(J, BOTH)
    return tl


def simultaneous_restart() -> Timeline:
    """A failure, then `restarted` and `running` in the same millisecond (an immediate resume)."""
    tl = Timeline("simultaneous_restart", SECONDS)
    _restartable(tl)
    tl.phase(J, BOTH, 60, 580, "productive")
    _checkpoint(tl, 600)
    tl.phase(J, BOTH, 600, 900, "retry_waste", sm=HEALTHY_SM)  # computed, then lost to the failure
    tl.event(900, J, "failed", reason="xid 79", attempt=1)
    tl.phase(J, BOTH, 900, 930, "retry_waste")  # restart overhead
    tl.event(930, J, "restarted", attempt=2)
    tl.event(930, J, "running", attempt=2)
    tl.phase(J, BOTH, 930, 1790, "productive")
    tl.finish(J, BOTH, 1790)
    return tl


def restart_without_checkpoint() -> Timeline:
    """A failure before any checkpoint: everything since `running` is lost."""
    tl = Timeline("restart_without_checkpoint", SECONDS)
    _restartable(tl)
    tl.phase(J, BOTH, 60, 900, "retry_waste", sm=HEALTHY_SM)
    tl.event(900, J, "failed", reason="nccl timeout", attempt=1)
    tl.phase(J, BOTH, 900, 960, "retry_waste")
    tl.event(950, J, "restarted", attempt=2)
    tl.event(960, J, "running", attempt=2)
    tl.phase(J, BOTH, 960, 1790, "productive")
    tl.finish(J, BOTH, 1790)
    return tl


def _failure_near_checkpoint(name: str, ckpt_end: int, fail: int) -> Timeline:
    tl = Timeline(name, SECONDS)
    _restartable(tl)
    tl.phase(J, BOTH, 60, 280, "productive")
    _checkpoint(tl, 300)
    last = 300
    if ckpt_end < fail:
        tl.phase(J, BOTH, 300, ckpt_end - 20, "productive")
        _checkpoint(tl, ckpt_end)
        last = ckpt_end
    tl.phase(J, BOTH, last, fail, "retry_waste", sm=HEALTHY_SM)
    tl.event(fail, J, "failed", reason="xid 48", attempt=1)
    tl.phase(J, BOTH, fail, fail + 40, "retry_waste")
    tl.event(fail + 30, J, "restarted", attempt=2)
    tl.event(fail + 40, J, "running", attempt=2)
    tl.phase(J, BOTH, fail + 40, 1790, "productive")
    tl.finish(J, BOTH, 1790)
    return tl


def failure_just_after_checkpoint() -> Timeline:
    """The checkpoint finished one second before the failure: one second of progress lost."""
    return _failure_near_checkpoint("failure_just_after_checkpoint", ckpt_end=899, fail=900)


def failure_just_before_checkpoint() -> Timeline:
    """The failure came one second before the next checkpoint would have finished: all since the
    previous checkpoint (300 s) is lost, and the interrupted save is lost work too."""
    return _failure_near_checkpoint("failure_just_before_checkpoint", ckpt_end=901, fail=900)


def silent_node() -> Timeline:
    """Node 1's agent is down for 10 minutes while the job trains on: the truth is productive."""
    tl = Timeline("silent_node", SECONDS)
    tl.simple_job(J, BOTH)
    tl.silent[1, 600:1200] = True
    return tl


def skewed_clock() -> Timeline:
    """Node 1's clock runs 30 s ahead (a broken NTP): its samples carry times 30 s late."""
    tl = Timeline("skewed_clock", SECONDS)
    tl.simple_job(J, BOTH)
    tl.offset_ms[1] = 30_000
    return tl


def skewed_clock_behind() -> Timeline:
    """Node 1's clock runs 45 s behind: its samples carry times 45 s early (before the allocation)."""
    tl = Timeline("skewed_clock_behind", SECONDS)
    tl.simple_job(J, BOTH)
    tl.offset_ms[1] = -45_000
    return tl


def _stalled(name: str, category: str, evidence: Callable[[Timeline], None]) -> Timeline:
    tl = Timeline(name, SECONDS)
    tl.simple_job(J, BOTH)
    tl.stall(J, BOTH, 600, 1200, category)
    evidence(tl)
    return tl


def _storage(fraction: float) -> Callable[[Timeline], None]:
    return lambda tl: tl.storage_load(BOTH, 600, 1200, fraction)


def _node_signal(attr: str, value: float) -> Callable[[Timeline], None]:
    def apply(tl: Timeline) -> None:
        getattr(tl, attr)[:, 600:1200] = value

    return apply


def threshold_scenarios() -> dict[str, Callable[[], Timeline]]:
    """A real stall with its evidence just above and just below each threshold (0.85 of the storage
    ceiling, PSI some 20 %, xmit_wait 1e6/s, ECN and CNP 1000/s, 90 % of line rate). Below the
    threshold the stall is still real: what the analyzer should make of it is the question."""
    cases = {
        "storage_ceiling": ("data_stall", lambda f: _storage(0.85 * f)),
        "psi": ("data_stall", lambda f: _node_signal("psi", 20.0 * f)),
        "xmit_wait": ("comm_stall", lambda f: _node_signal("xmit_wait", 1e6 * f)),
        "ecn": ("comm_stall", lambda f: _node_signal("ecn", 1000.0 * f)),
        "cnp_sent": ("comm_stall", lambda f: _node_signal("cnp_sent", 1000.0 * f)),
        "line_rate": ("comm_stall", lambda f: _node_signal("tx_fraction", 0.9 * f)),
    }
    out = {}
    for signal, (category, make) in cases.items():
        for side, factor in (("above", 1.02), ("below", 0.98)):
            name = f"{signal}_{side}"
            out[name] = functools.partial(_stalled, name, category, make(factor))
    return out


def low_sm_healthy() -> Timeline:
    """A model whose healthy SM activity is 35 %: low, steady, and all productive."""
    tl = Timeline("low_sm_healthy", SECONDS)
    tl.simple_job(J, BOTH)
    tl.sm[tl.truth == 0] = 35.0  # productive seconds run at 35 %
    return tl


def throttled_straggler() -> Timeline:
    """GPU 3 of node 0 is thermally throttled for 10 minutes: it computes flat out while the other 15
    GPUs wait for it at every collective (comm stall caused by the straggler)."""
    tl = Timeline("throttled_straggler", SECONDS)
    tl.simple_job(J, BOTH)
    others = [g for g in range(GPUS) if g != 3]
    tl.stall(J, [0], 600, 1200, "comm_stall", stalled_per_window=3, gpus=others)
    tl.stall(J, [1], 600, 1200, "comm_stall", stalled_per_window=3)
    tl.clock_events[0, 3, 600:1200] = 0x40  # HW thermal slowdown
    return tl


def phase_straggler() -> Timeline:
    """GPU 3 of node 0 is slower for 10 minutes with no clock event (say a noisy neighbour or a slow data
    loader rank): only its SM activity tells, busy while the other 15 GPUs wait at every collective."""
    tl = Timeline("phase_straggler", SECONDS)
    tl.simple_job(J, BOTH)
    others = [g for g in range(GPUS) if g != 3]
    tl.stall(J, [0], 600, 1200, "comm_stall", stalled_per_window=3, gpus=others)
    tl.stall(J, [1], 600, 1200, "comm_stall", stalled_per_window=3)
    return tl


def staggered_gang() -> Timeline:
    """Node 0 is allocated at 10 s, node 1 only at 200 s: node 0's GPUs wait for the gang."""
    tl = Timeline("staggered_gang", SECONDS)
    tl.event(0, J, "submitted", account="llm", gpus_requested=16, attempt=1)
    tl.event(10, J, "allocated", node=0, gpu_indices=list(range(GPUS)), attempt=1)
    tl.phase(J, [0], 10, 200, "gang_wait")
    tl.event(200, J, "allocated", node=1, gpu_indices=list(range(GPUS)), attempt=1)
    tl.event(200, J, "gang_complete", attempt=1)
    tl.phase(J, BOTH, 200, 260, "startup")
    tl.event(260, J, "running", attempt=1)
    tl.phase(J, BOTH, 260, 1790, "productive")
    tl.finish(J, BOTH, 1790)
    return tl


def partial_step_events() -> Timeline:
    """A data stall with no counter evidence (reads far below the ceiling, no PSI), reported by the
    training loop's step events of node 0's ranks only: the step events alone tell."""
    tl = Timeline("partial_step_events", SECONDS)
    tl.simple_job(J, BOTH)
    tl.stall(J, BOTH, 600, 1200, "data_stall")
    step = 0
    for t in range(60, 1790):
        stalled = 600 <= t < 1200 and (t - 600) % 10 < 6
        for g in range(GPUS):
            tl.steps.append(
                {
                    "t": t,
                    "node": 0,
                    "ts_ms": tl.start_ms + (t + 1) * 1000,
                    "job_id": J,
                    "rank": g,
                    "step": step,
                    "attempt": 1,
                    "gpu": g,
                    "duration_ms": 1000.0,
                    "data_ms": 1000.0 if stalled else 5.0,
                    "compute_ms": 0.0 if stalled else 900.0,
                    "comm_ms": 0.0 if stalled else 95.0,
                }
            )
        step += 1
    return tl


def noisy_counters() -> Timeline:
    """SM activity with a 10-point standard deviation and a real data stall with clear evidence."""
    tl = _stalled("noisy_counters", "data_stall", _storage(0.95))
    tl.noise_sd = 10.0
    return tl


def held_after_completed() -> Timeline:
    """The job completes at 1500 s but releases its GPUs only at 1790 s: idle, held after completion."""
    tl = Timeline("held_after_completed", SECONDS)
    _restartable(tl)
    tl.phase(J, BOTH, 60, 1500, "productive")
    tl.phase(J, BOTH, 1500, 1790, "idle", sm=0.0)
    tl.finish(J, BOTH, 1500, released=1790)
    return tl


def half_node() -> Timeline:
    """A job on 4 GPUs of one node: GPU-seconds count 4 GPUs, not a node's 8."""
    tl = Timeline("half_node", SECONDS, nodes=1)
    tl.event(0, J, "submitted", account="llm", gpus_requested=4, attempt=1)
    tl.event(10, J, "allocated", node=0, gpu_indices=[0, 1, 2, 3], attempt=1)
    tl.event(10, J, "gang_complete", attempt=1)
    tl.event(60, J, "running", attempt=1)
    tl.phase(J, [0], 10, 60, "startup", gpus=[0, 1, 2, 3])
    tl.phase(J, [0], 60, 1790, "productive", gpus=[0, 1, 2, 3])
    tl.event(1790, J, "completed", exit_code=0)
    tl.event(1790, J, "released", node=0, gpu_indices=[0, 1, 2, 3])
    return tl


TWO_LEAVES = config_mod.TopologyConfig(
    switches={
        "leaf1": config_mod.SwitchConfig(nodes=("gpu-core-[001,003-008]",)),
        "leaf2": config_mod.SwitchConfig(nodes=("gpu-core-[002,009-016]",)),
        "spine": config_mod.SwitchConfig(switches=("leaf[1-2]",)),
    }
)
"""A tree on which the scenarios' two nodes (gpu-core-001, -002) hang off different leaf switches."""


def gang_scattered_over_two_leaves() -> Timeline:
    """The gang's two nodes hang off two leaf switches under one spine, and the fabric between them is
    congested (xmit_wait at 1.5x its threshold) for 10 minutes: comm stall, with a placement that
    crosses the spine (job_placement) as the evidence that the gang was scattered."""
    config = msgspec.structs.replace(config_mod.load(), topology=TWO_LEAVES)
    tl = Timeline("gang_scattered_over_two_leaves", SECONDS, config=config)
    tl.simple_job(J, BOTH)
    tl.stall(J, BOTH, 600, 1200, "comm_stall")
    tl.xmit_wait[:, 600:1200] = 1.5e6
    return tl


SCENARIOS: dict[str, Callable[[], Timeline]] = {
    "baseline": baseline,
    "simultaneous_restart": simultaneous_restart,
    "restart_without_checkpoint": restart_without_checkpoint,
    "failure_just_after_checkpoint": failure_just_after_checkpoint,
    "failure_just_before_checkpoint": failure_just_before_checkpoint,
    "silent_node": silent_node,
    "skewed_clock": skewed_clock,
    "skewed_clock_behind": skewed_clock_behind,
    **threshold_scenarios(),
    "low_sm_healthy": low_sm_healthy,
    "throttled_straggler": throttled_straggler,
    "phase_straggler": phase_straggler,
    "staggered_gang": staggered_gang,
    "partial_step_events": partial_step_events,
    "noisy_counters": noisy_counters,
    "held_after_completed": held_after_completed,
    "half_node": half_node,
    "gang_scattered_over_two_leaves": gang_scattered_over_two_leaves,
}
