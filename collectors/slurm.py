"""Slurm job-state collector: `squeue --json --states=all` polled, job lifecycle events emitted on change.

Slurm keeps no event log an agent could tail, so the collector keeps the last state it saw per job
and turns differences between polls into the schema's JOB events (see docs/slurm.md for the full
state -> event table). Event times come from the job's own fields (submit_time, start_time,
end_time), not from the poll, so two agents, or one agent restarted, emit identical rows that the
loader deduplicates on the JOB key; and a job that started and ended between two polls still gets
its whole history, in order, with the right times.

Two JSON shapes are read, because Slurm's changes between releases:
  - 22.05 (openapi/data_parser v0.0.38): `job_state` a string ("RUNNING", or just a flag such as
    "COMPLETING" that hides the base state), plain numbers, `exit_code` a raw wait status (768 = 3<<8).
  - 23.11 and later (data_parser v0.0.40+): `job_state` an array, base state plus flags
    (["PENDING", "REQUEUED"]), numbers as {"set", "infinite", "number"}, `exit_code` an object
    {"status", "return_code", "signal"}, `job_resources.nodes` an object with `list`/`allocation`.

Ended jobs are read from squeue too (it lists them for MinJobAge seconds, 300 by default): no
slurmdbd is needed. docs/slurm.md says why and what that costs.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import re
import subprocess
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from collectors.base import CollectorError, CollectorUnavailable, Row
from contracts import hostlist

log = logging.getLogger(__name__)

Runner = Callable[[Sequence[str]], str]
"""Runs a command (argv) and returns its stdout; raises CollectorError/CollectorUnavailable."""

SQUEUE = ("squeue", "--json", "--states=all")
"""All states asked for explicitly: 22.05 lists ended jobs with --json anyway, but plain squeue's default
filter (pending, running, completing) would hide them wherever a release applies it to --json."""

TERMINAL: dict[str, tuple[str, str | None]] = {
    # base state -> (event, reason); reason None means "derived from the exit code"
    "COMPLETED": ("completed", None),
    "FAILED": ("failed", None),
    "TIMEOUT": ("failed", "timeout"),
    "DEADLINE": ("failed", "timeout"),
    "NODE_FAIL": ("failed", "node_lost"),
    "BOOT_FAIL": ("failed", "node_lost"),
    "LAUNCH_FAILED": ("failed", "launch_failed"),
    "OUT_OF_MEMORY": ("failed", "oom"),
    "CANCELLED": ("cancelled", "user"),
    "PREEMPTED": ("preempted", "preempted"),
}
BASE_STATES = frozenset({"PENDING", "RUNNING", "SUSPENDED", *TERMINAL})
REQUEUE_FLAGS = frozenset({"REQUEUED", "REQUEUE_HOLD", "REQUEUE_FED", "SPECIAL_EXIT"})
NOT_SETTLED_FLAGS = frozenset({"COMPLETING", "CONFIGURING", "STAGE_OUT", "SIGNALING", "RESIZING"})
"""Flags under which the state is in transition: ended jobs still cleaning up, nodes still booting."""
NEVER_STARTED = frozenset({"BOOT_FAIL", "LAUNCH_FAILED"})

_GPU_DETAIL = re.compile(r"(?:^|,)gpu(?::\(null\)|:[^:(),]*)?:\d+\(IDX:([^)]*)\)")
"""One GPU entry of gres_detail: gpu[:type]:count(IDX:ranges); type may print as "(null)"."""


class SubprocessRunner:
    """Default command runner: the command's stdout, or a CollectorError naming it and its stderr."""

    def __init__(self, timeout_s: float = 30.0, env: Mapping[str, str] | None = None) -> None:
        self.timeout_s = timeout_s
        self.env = dict(env) if env is not None else None

    def __call__(self, argv: Sequence[str]) -> str:
        cmd = " ".join(argv)
        try:
            p = subprocess.run(
                list(argv), capture_output=True, text=True, timeout=self.timeout_s, env=self.env
            )
        except FileNotFoundError as e:
            raise CollectorUnavailable(
                f"{argv[0]} not found on PATH: install Slurm's client commands "
                f"(Debian: slurm-client) on the node that runs the job collector"
            ) from e
        except subprocess.TimeoutExpired as e:
            raise CollectorError(
                f"{cmd} did not answer within {self.timeout_s:.0f} s (slurmctld overloaded or unreachable?)"
            ) from e
        if p.returncode != 0:
            raise CollectorError(f"{cmd} exited {p.returncode}: {p.stderr.strip()[:500]}")
        return p.stdout


# ---------------------------------------------------------------- parsing: JSON -> SlurmJob


def _number(value: Any) -> int | None:
    """A Slurm number in either shape; None when unset or infinite."""
    if isinstance(value, Mapping):
        if not value.get("set", True) or value.get("infinite", False):
            return None
        value = value.get("number")
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return int(value)
    return None


def _time_ms(value: Any) -> int | None:
    """Seconds since the epoch -> ms; 0 means "not happened" in Slurm, so it is None too."""
    s = _number(value)
    return s * 1000 if s else None


def _state(value: Any) -> tuple[str | None, frozenset[str]]:
    """(base state, flags). 22.05 prints one string, which is a flag when one is set: base unknown."""
    names = [value] if isinstance(value, str) else list(value or [])
    base = next((n for n in names if n in BASE_STATES), None)
    return base, frozenset(n for n in names if n != base)


def _exit(value: Any) -> tuple[int | None, int | None]:
    """(return code, signal) from a raw wait status (22.05, early 0.0.40) or the verbose object."""
    if isinstance(value, Mapping) and ("return_code" in value or "status" in value or "signal" in value):
        signal = _number((value.get("signal") or {}).get("id"))
        return _number(value.get("return_code")), signal or None
    raw = _number(value)
    if raw is None:
        return None, None
    if raw & 0x7F:
        return None, raw & 0x7F
    return (raw >> 8) & 0xFF, None


def gpu_count(spec: str | None) -> int | None:
    """GPUs in a TRES spec: "gres:gpu:8", "gres/gpu:a100:2", "gres/gpu=16", "gres/gpu" (1); None if absent."""
    if not spec:
        return None
    total = None
    for item in spec.split(","):
        item = item.strip()
        for prefix in ("gres:", "gres/"):
            if item.startswith(prefix):
                item = item[len(prefix) :]
                break
        else:
            continue
        parts = re.split(r"[:=]", item)
        if parts[0] != "gpu":
            continue
        count = int(parts[-1]) if len(parts) > 1 and parts[-1].isdigit() else 1
        total = (total or 0) + count
    return total


def gpu_indices(detail: str) -> list[int] | None:
    """GPU indices in one node's gres_detail entry ("gpu:a100:2(IDX:0,3)"); None when it names none."""
    found: list[int] = []
    for m in _GPU_DETAIL.finditer(detail):
        if m.group(1) not in ("", "N/A"):
            found.extend(hostlist.expand_indices(m.group(1)))
    return found or None


@dataclasses.dataclass(frozen=True)
class SlurmJob:
    """One job as squeue printed it, in either JSON shape; optional fields are None when absent."""

    job_id: str
    state: str | None
    flags: frozenset[str]
    restart_cnt: int
    submit_ms: int | None
    start_ms: int | None
    end_ms: int | None
    nodes: tuple[str, ...]
    gpu_indices: Mapping[str, list[int]]
    account: str | None = None
    user: str | None = None
    partition: str | None = None
    priority: int | None = None
    gpus_requested: int | None = None
    return_code: int | None = None
    signal: int | None = None

    @property
    def attempt(self) -> int:
        return self.restart_cnt + 1


def _node_names(raw: Mapping[str, Any]) -> tuple[str, ...]:
    text = raw.get("nodes")
    res = raw.get("job_resources") or {}
    if not text and isinstance(res, Mapping):
        nodes = res.get("nodes")
        if isinstance(nodes, Mapping):  # 0.0.41+: {"count", "list", "allocation": [{"name"}]}
            text = nodes.get("list") or ",".join(a.get("name", "") for a in nodes.get("allocation") or [])
        elif isinstance(nodes, str):  # 0.0.38/0.0.40: "gpu-[01-02]" with allocated_nodes beside it
            text = nodes
    return tuple(hostlist.expand(text)) if text else ()


def _requested_gpus(raw: Mapping[str, Any], node_count: int) -> int:
    for key in ("tres_req_str", "tres_per_job"):
        n = gpu_count(raw.get(key))
        if n is not None:
            return n
    nodes = _number(raw.get("node_count")) or node_count or 1
    n = gpu_count(raw.get("tres_per_node"))
    if n is not None:
        return n * nodes
    n = gpu_count(raw.get("tres_per_task"))
    if n is not None:
        return n * (_number(raw.get("tasks")) or 1)
    return 0


def parse_job(raw: Mapping[str, Any]) -> SlurmJob:
    """One element of squeue's `jobs` array -> SlurmJob. Raises ValueError naming what is malformed."""
    if "job_id" not in raw:
        raise ValueError("job without job_id")
    job_id = raw["job_id"] if isinstance(raw["job_id"], str) else _number(raw["job_id"])
    if job_id is None or job_id == "":
        raise ValueError(f"job_id is not set: {raw['job_id']!r}")
    job_id = str(job_id)
    state, flags = _state(raw.get("job_state"))
    nodes = _node_names(raw)
    details = [d for d in raw.get("gres_detail") or [] if isinstance(d, str)]
    # gres_detail is absent on a pending job and may list fewer entries than nodes
    indices = {n: idx for n, d in zip(nodes, details, strict=False) if (idx := gpu_indices(d)) is not None}
    rc, sig = _exit(raw.get("exit_code"))
    return SlurmJob(
        job_id=job_id,
        state=state,
        flags=flags,
        restart_cnt=_number(raw.get("restart_cnt")) or 0,
        submit_ms=_time_ms(raw.get("submit_time")),
        start_ms=_time_ms(raw.get("start_time")),
        end_ms=_time_ms(raw.get("end_time")),
        nodes=nodes,
        gpu_indices=indices,
        account=raw.get("account") or None,
        user=raw.get("user_name") or None,
        partition=raw.get("partition") or None,
        priority=_number(raw.get("priority")),
        gpus_requested=_requested_gpus(raw, len(nodes)),
        return_code=rc,
        signal=sig,
    )


def parse_squeue(text: str) -> list[SlurmJob]:
    """squeue --json output -> jobs; CollectorError when it is not the JSON squeue documents."""
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise CollectorError(f"squeue --json printed invalid JSON ({e}); first bytes: {text[:120]!r}") from e
    if not isinstance(doc, Mapping) or not isinstance(doc.get("jobs"), list):
        raise CollectorError("squeue --json printed no `jobs` array: not Slurm's JSON output?")
    errors = [e for e in doc.get("errors") or [] if e]
    if errors:
        raise CollectorError(f"squeue --json reported errors: {json.dumps(errors)[:500]}")
    jobs = []
    for raw in doc["jobs"]:
        try:
            jobs.append(parse_job(raw))
        except (ValueError, TypeError, AttributeError) as e:
            raise CollectorError(f"squeue --json: cannot read job {raw.get('job_id', '?')!r}: {e}") from e
    return jobs


# ---------------------------------------------------------------- state tracking: SlurmJob -> rows


@dataclasses.dataclass
class _Track:
    """What was already emitted for one job's current attempt."""

    attempt: int
    allocated: dict[str, list[int] | None] = dataclasses.field(default_factory=dict)
    running: bool = False
    ended: bool = False


def _ran_before_requeue(job: SlurmJob) -> bool:
    """A requeued job still listing the old attempt's nodes and start (while COMPLETING): that
    attempt ran from start_time until the requeue, which Slurm records as the new submit_time."""
    return bool(job.nodes and job.start_ms and job.submit_ms and job.start_ms <= job.submit_ms)


class SlurmCollector:
    """Polls squeue and emits JOB rows for each lifecycle change since the previous poll."""

    name = "slurm"
    kind = "job"

    def __init__(self, run: Runner | None = None, *, squeue: Sequence[str] = SQUEUE) -> None:
        self._run = run or SubprocessRunner()
        self._squeue = list(squeue)
        self._jobs: dict[str, _Track] = {}

    def collect(self, now_ms: int) -> list[Row]:
        jobs = parse_squeue(self._run(self._squeue))
        rows: list[Row] = []
        seen = set()
        for job in jobs:
            seen.add(job.job_id)
            rows.extend(self._update(job, now_ms))
        for gone in set(self._jobs) - seen:
            if not self._jobs[gone].ended:
                log.info(
                    "slurm job %s left squeue before its end was seen (agent down longer than "
                    "MinJobAge?); no terminal event for it",
                    gone,
                )
            del self._jobs[gone]
        return rows

    def _update(self, job: SlurmJob, now_ms: int) -> list[Row]:
        rows: list[Row] = []

        def emit(event: str, ts: int | None, attempt: int, **extra: Any) -> None:
            row = {
                "ts_ms": ts or now_ms,
                "job_id": job.job_id,
                "event": event,
                "attempt": attempt,
                "account": job.account,
                "user": job.user,
                "queue": job.partition,
                "priority": job.priority,
                "gpus_requested": job.gpus_requested,
                "source": "slurm",
                **extra,
            }
            rows.append({k: v for k, v in row.items() if v is not None})

        track = self._jobs.get(job.job_id)
        if track is None:
            # First seen after a requeue (agent started late): tracked as if the previous attempt had
            # been seen, so the requeue below emits `restarted` and what is still known of that attempt.
            track = self._jobs[job.job_id] = _Track(attempt=max(job.attempt - 1, 1))
            if job.attempt == 1:
                emit("submitted", job.submit_ms, 1)

        requeueing = bool(job.flags & REQUEUE_FLAGS)
        if job.state in TERMINAL and requeueing and not track.ended:
            # The attempt ended (preempted, node failure) and Slurm puts the job back in the queue.
            self._end(emit, job, track)
        if job.attempt > track.attempt:
            # Requeued: Slurm resets submit_time to the requeue, which is when the old attempt ended.
            if not track.ended:
                if _ran_before_requeue(job):
                    self._allocate(emit, job, track)  # it started and was requeued between two polls
                for node, idx in track.allocated.items():
                    emit("released", job.submit_ms, track.attempt, node=node, gpu_indices=idx)
            emit("restarted", job.submit_ms, job.attempt)
            track = self._jobs[job.job_id] = _Track(attempt=job.attempt)
        if requeueing or track.ended or job.state is None:
            return rows

        ran = (
            job.state == "RUNNING"
            or job.state == "SUSPENDED"
            or (job.state in TERMINAL and job.state not in NEVER_STARTED)
        )
        if job.nodes and ran:
            self._allocate(emit, job, track)
        settled = not (job.flags & NOT_SETTLED_FLAGS)
        if ran and settled and track.allocated and not track.running:
            # Slurm sets RUNNING only once every node of the allocation is up: the gang is complete.
            emit("gang_complete", job.start_ms, job.attempt)
            emit("running", job.start_ms, job.attempt)
            track.running = True
        if job.state in TERMINAL and settled:
            self._end(emit, job, track)
        return rows

    @staticmethod
    def _allocate(emit: Callable[..., None], job: SlurmJob, track: _Track) -> None:
        """`allocated` per node not yet sent, and again for a node whose GPU indices became known.

        gres_detail can lag the start by a poll. The corrected row has the same JOB key (job_id,
        ts_ms, event, attempt, node) as the first, so the store keeps the later one: the allocation
        is recorded at once, and its placement as soon as Slurm tells it. A node whose indices are
        never known keeps the row without gpu_indices: an allocation without placement.
        """
        for node in job.nodes:
            idx = job.gpu_indices.get(node)
            if node not in track.allocated or (track.allocated[node] is None and idx is not None):
                track.allocated[node] = idx
                emit("allocated", job.start_ms, track.attempt, node=node, gpu_indices=idx)

    @staticmethod
    def _end(emit: Callable[..., None], job: SlurmJob, track: _Track) -> None:
        assert job.state is not None  # the caller checked job.state in TERMINAL
        event, reason = TERMINAL[job.state]
        exit_code = job.return_code
        if job.signal:
            exit_code = 128 + job.signal  # the shell's convention for "killed by signal N"
        if reason is None and event == "failed":
            reason = f"signal:{job.signal}" if job.signal else f"exit_code:{exit_code}"
        if job.nodes and job.state not in NEVER_STARTED:
            SlurmCollector._allocate(emit, job, track)  # it ran unseen, between two polls
        emit(event, job.end_ms, track.attempt, reason=reason, exit_code=exit_code)
        for node, idx in track.allocated.items():
            emit("released", job.end_ms, track.attempt, node=node, gpu_indices=idx)
        track.ended = True
