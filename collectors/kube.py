"""Job lifecycle events from Kubernetes gang schedulers: Volcano PodGroups and Kueue Workloads.

Two halves, as everywhere in collectors/: `parse_podgroup` / `parse_workload` turn one API object (a
plain dict, exactly as the API server returns it) into a `GangState` — where the gang is in one small
common lifecycle — and `KubeJobCollector` compares each object's state with the one it saw last and
emits schema.JOB events only on change (edge-triggered), so a job that sits in Running for a week
costs nothing after its first tick.

The common lifecycle, with the rung each state stands on:

    pending (0)    queued; Kueue QuotaReserved without Admitted also counts here
    evicted (0)    Kueue Evicted after the latest admission: preempted, PodsReadyTimeout, NodeFailures...
    admitted (1)   Kueue Admitted / Volcano Inqueue: the gang's capacity is held
    recovering (1) Kueue PodsReady=False WaitForRecovery / Volcano Unknown: the gang broke while running
    running (2)    Kueue PodsReady=True (Started, Recovered) / Volcano Running with running >= minMember
    completed, failed, cancelled: terminal (Kueue Finished, Volcano Completed, object deleted)

Climbing a rung emits its events (1: allocated; 2: gang_complete then running), several at once if the
object moved faster than the poll. Falling back (evicted, recovering, or down a rung with no stated
cause) emits the setback (preempted / failed / cancelled with a reason) and marks the job as needing a
restart; its next climb first emits `restarted` with attempt + 1. Events carry the object's own
timestamps (creationTimestamp, condition lastTransitionTime) where it has them, so a restarted
collector re-emits the same keys and the store deduplicates them. A collector restart forgets
attempts: they count from 1 again.

Fetching goes through `list_objects(group, version, plural) -> list[dict]`, injectable; the default
uses the official `kubernetes` client when installed (the `kube` extra: pip install 'goodput[kube]').
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any, Callable, Mapping

from collectors.base import CollectorError, CollectorUnavailable, Row

GPU_RESOURCE = "nvidia.com/gpu"
RUNG = {"pending": 0, "evicted": 0, "admitted": 1, "recovering": 1, "running": 2}
TERMINAL = ("completed", "failed", "cancelled")

# Kueue Evicted reasons -> (event, reason in schema.JOB terms)
EVICTION = {
    "Preempted": ("preempted", "preempted"),
    "PodsReadyTimeout": ("failed", "timeout"),
    "NodeFailures": ("failed", "node_lost"),
    "InactiveWorkload": ("cancelled", "user"),
}

ListObjects = Callable[[str, str, str], list[Mapping[str, Any]]]


@dataclass(frozen=True, slots=True)
class GangState:
    """One PodGroup or Workload, reduced to the common lifecycle (see module doc)."""

    job_id: str
    uid: str
    source: str
    state: str
    setback: tuple[str, str] | None = None
    """For evicted/recovering/terminal failure: (event, reason) to emit on entering the state."""
    created_ms: int | None = None
    admitted_ms: int | None = None
    running_ms: int | None = None
    state_ms: int | None = None
    account: str | None = None
    queue: str | None = None
    priority: int | None = None
    gpus_requested: int | None = None


def _ts_ms(text: str | None) -> int | None:
    """RFC 3339 (`2024-05-01T10:00:00Z`, fractions allowed) -> epoch ms."""
    if not text:
        return None
    try:
        return int(datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp() * 1000)
    except ValueError:
        return None


def _int(v: Any) -> int | None:
    try:
        return int(v)
    except (TypeError, ValueError):
        return None  # a fractional or suffixed quantity is not a GPU count


def _job_id(meta: Mapping[str, Any]) -> str:
    """`namespace/name` of the owning job (what users know), else of the object itself."""
    owners = meta.get("ownerReferences") or []
    owner = next((o for o in owners if o.get("controller")), owners[0] if owners else None)
    return f"{meta.get('namespace', 'default')}/{(owner or meta).get('name', '')}"


def _common(obj: Mapping[str, Any], source: str) -> dict[str, Any]:
    meta = obj.get("metadata", {})
    return {
        "job_id": _job_id(meta),
        "uid": meta.get("uid") or _job_id(meta),
        "source": source,
        "created_ms": _ts_ms(meta.get("creationTimestamp")),
        "account": meta.get("namespace"),
    }


def parse_podgroup(obj: Mapping[str, Any]) -> GangState:
    """A Volcano PodGroup (scheduling.volcano.sh/v1beta1)."""
    spec, status = obj.get("spec", {}), obj.get("status", {})
    phase = status.get("phase", "Pending")
    min_member = spec.get("minMember", 1)
    setback = None
    if phase == "Completed":
        failed = status.get("failed", 0) > 0 and status.get("succeeded", 0) < min_member
        state, setback = ("failed", ("failed", "pods_failed")) if failed else ("completed", None)
    elif phase == "Unknown":
        state, setback = "recovering", ("failed", "pods_lost")
    elif phase == "Running":
        state = "running" if status.get("running", 0) >= min_member else "admitted"
    else:
        state = {"Inqueue": "admitted"}.get(phase, "pending")
    return GangState(
        **_common(obj, "volcano"),
        state=state,
        setback=setback,
        queue=spec.get("queue"),
        gpus_requested=_int((spec.get("minResources") or {}).get(GPU_RESOURCE)),
    )


def _workload_gpus(spec: Mapping[str, Any]) -> int | None:
    total, seen = 0, False
    for ps in spec.get("podSets", []):
        containers = ps.get("template", {}).get("spec", {}).get("containers", [])
        for c in containers:
            res = c.get("resources", {})
            n = _int(
                (res.get("limits") or {}).get(GPU_RESOURCE) or (res.get("requests") or {}).get(GPU_RESOURCE)
            )
            if n is not None:
                total, seen = total + n * ps.get("count", 1), True
    return total if seen else None


def parse_workload(obj: Mapping[str, Any]) -> GangState:
    """A Kueue Workload (kueue.x-k8s.io/v1beta1), from its conditions."""
    spec, status = obj.get("spec", {}), obj.get("status", {})
    cond = {c.get("type"): c for c in status.get("conditions", [])}

    def true(t: str) -> bool:
        return cond.get(t, {}).get("status") == "True"

    def since(t: str) -> int | None:
        return _ts_ms(cond.get(t, {}).get("lastTransitionTime"))

    admitted = true("Admitted")
    setback, state_ms = None, None
    if true("Finished"):
        ok = cond["Finished"].get("reason") != "Failed"
        state, state_ms = ("completed" if ok else "failed"), since("Finished")
        setback = None if ok else ("failed", "job_failed")
    elif true("Evicted") and (not admitted or (since("Evicted") or 0) >= (since("Admitted") or 0)):
        reason = cond["Evicted"].get("reason", "")
        state, state_ms = "evicted", since("Evicted")
        setback = EVICTION.get(reason, ("failed", f"evicted:{reason}"))
    elif admitted:
        ready = cond.get("PodsReady", {})
        if ready.get("status") == "True":
            state, state_ms = "running", since("PodsReady")
        elif ready.get("status") == "False" and ready.get("reason") == "WaitForRecovery":
            state, state_ms, setback = "recovering", since("PodsReady"), ("failed", "pods_not_ready")
        else:
            state, state_ms = "admitted", since("Admitted")
    else:
        state = "pending"
    priority = _int(spec.get("priority"))
    return GangState(
        **_common(obj, "kueue"),
        state=state,
        setback=setback,
        state_ms=state_ms,
        admitted_ms=since("Admitted") if admitted else None,
        running_ms=since("PodsReady") if state == "running" else None,
        queue=spec.get("queueName"),
        priority=priority if priority is not None and priority >= 0 else None,
        gpus_requested=_workload_gpus(spec),
    )


@dataclass
class _Memory:
    """What the collector remembers per object between ticks."""

    last: GangState
    attempt: int = 1
    needs_restart: bool = False
    terminal: bool = False


@dataclass(frozen=True)
class Scheduler:
    group: str
    version: str
    plural: str
    parse: Callable[[Mapping[str, Any]], GangState]


SCHEDULERS = {
    "volcano": Scheduler("scheduling.volcano.sh", "v1beta1", "podgroups", parse_podgroup),
    "kueue": Scheduler("kueue.x-k8s.io", "v1beta1", "workloads", parse_workload),
}


def kubernetes_lister() -> ListObjects:
    """`list_objects` over the official client: in-cluster config, else ~/.kube/config."""
    try:
        from kubernetes import client, config
    except ImportError as e:
        raise CollectorUnavailable(
            "the Kubernetes job collector needs the 'kubernetes' package (pip install 'goodput[kube]' "
            "or pip install kubernetes), or pass list_objects"
        ) from e
    try:
        config.load_incluster_config()
    except config.ConfigException:
        config.load_kube_config()
    api = client.CustomObjectsApi()

    def list_objects(group: str, version: str, plural: str) -> list[Mapping[str, Any]]:
        try:
            listed: Any = api.list_cluster_custom_object(group, version, plural)  # typed `object`: a dict
            return listed["items"]
        except client.exceptions.ApiException as e:
            if e.status == 404:
                raise CollectorUnavailable(
                    f"{plural}.{group}/{version} is not served (CRD not installed)"
                ) from e
            raise

    return list_objects


class KubeJobCollector:
    """Job events (kind "job") from one scheduler's objects; `scheduler` is "volcano" or "kueue"."""

    kind = "job"

    def __init__(self, scheduler: str, list_objects: ListObjects | None = None) -> None:
        if scheduler not in SCHEDULERS:
            raise ValueError(f"unknown scheduler {scheduler!r}; known: {', '.join(SCHEDULERS)}")
        self.name = scheduler
        self.scheduler = SCHEDULERS[scheduler]
        self.list_objects = list_objects or kubernetes_lister()
        self.memory: dict[str, _Memory] = {}

    def collect(self, now_ms: int) -> list[Row]:
        s = self.scheduler
        try:
            objects = self.list_objects(s.group, s.version, s.plural)
        except (CollectorUnavailable, CollectorError):
            raise
        except Exception as e:  # the client's own errors; never read as "every job was deleted"
            raise CollectorError(f"listing {s.plural}.{s.group}/{s.version} failed: {e}") from e
        rows: list[Row] = []
        seen = set()
        for obj in objects:
            cur = s.parse(obj)
            seen.add(cur.uid)
            mem = self.memory.get(cur.uid)
            if mem is None:
                mem = self.memory[cur.uid] = _Memory(cur)
                rows += self._emit(mem, cur, [("submitted", cur.created_ms, None)], now_ms)
                prev_state = "pending"
            else:
                prev_state = mem.last.state
            rows += self._emit(mem, cur, self._transition(mem, prev_state, cur), now_ms)
            mem.last = cur
        for uid in [u for u in self.memory if u not in seen]:
            mem = self.memory.pop(uid)
            if not mem.terminal:  # deleted before it finished: the user (or a controller) cancelled it
                rows += self._emit(mem, mem.last, [("cancelled", None, "user")], now_ms)
        return rows

    @staticmethod
    def _transition(mem: _Memory, prev: str, cur: GangState) -> list[tuple[str, int | None, str | None]]:
        """Events for moving from state `prev` (what was seen last) to `cur`; updates `mem`."""
        if mem.terminal:
            return []
        last = mem.last
        regrouped = prev == cur.state == "running" and cur.running_ms != last.running_ms
        if prev == cur.state and cur.setback == last.setback and not regrouped:
            return []
        out: list[tuple[str, int | None, str | None]] = []

        def climb(frm: int, to: int) -> None:
            for rung in range(frm + 1, to + 1):
                if mem.needs_restart:
                    mem.attempt += 1
                    mem.needs_restart = False
                    out.append(("restarted", cur.state_ms, None))
                if rung == 1:
                    out.append(("allocated", cur.admitted_ms, None))
                else:
                    out.extend([("gang_complete", cur.running_ms, None), ("running", cur.running_ms, None)])

        if cur.state in TERMINAL:
            mem.terminal = True
            event, reason = cur.setback or (cur.state, None)
            return [(event, cur.state_ms, reason)]
        if regrouped:  # the gang broke and re-formed between two polls
            mem.needs_restart = True
            out.append(("failed", None, "pods_not_ready"))
            climb(1, 2)
            return out
        if cur.state in ("evicted", "recovering") or RUNG[cur.state] < RUNG[prev]:
            climb(RUNG[prev], RUNG[cur.state])  # first seen already recovering: it was admitted once
            event, reason = cur.setback or ("failed", "pods_lost")
            if cur.state == "evicted" or not mem.needs_restart:  # one setback per break, unless evicted
                out.append((event, cur.state_ms, reason))
            mem.needs_restart = True
            return out
        climb(RUNG[prev], RUNG[cur.state])
        return out

    def _emit(
        self, mem: _Memory, s: GangState, events: list[tuple[str, int | None, str | None]], now_ms: int
    ) -> list[Row]:
        rows = []
        for event, ts, reason in events:
            row: Row = {
                "ts_ms": ts if ts is not None else now_ms,
                "job_id": s.job_id,
                "event": event,
                "attempt": mem.attempt,
                "source": s.source,
            }
            for k in ("account", "queue", "priority", "gpus_requested"):
                if getattr(s, k) is not None:
                    row[k] = getattr(s, k)
            if reason is not None:
                row["reason"] = reason
            rows.append(row)
        return rows
