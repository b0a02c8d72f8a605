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

Climbing to rung 2 emits gang_complete then running (one edge: the scheduler reports every member
started; `running` means no more than that, docs/messages.md), several rungs at once if the object
moved faster than the poll. Falling back (evicted, recovering, or down a rung with no stated cause)
emits the setback (preempted / failed / cancelled with a reason) and marks the job as needing a
restart; its next climb first emits `restarted` with attempt + 1. Events carry the object's own
timestamps (creationTimestamp, condition lastTransitionTime) where it has them, so a restarted
collector re-emits the same keys and the store deduplicates them. A collector restart forgets
attempts: they count from 1 again.

GPUs are held by pods, not by the gang object, so `allocated`/`released` come from the gang's pods
(`parse_pod`, `node_use`): one `allocated` per node when a GPU pod of the gang is bound to it (at its
PodScheduled time), one `released` when the last of them there has ended (its containers' finishedAt)
or is gone (the poll's time), and both for pods that ran and ended between two polls. The device
plugin's choice of GPUs is known only to the kubelet of the node (pod-resources API), not to the API
server this collector reads, so these rows carry no gpu_indices: allocations without placement, which
docs/messages.md defines and the analyzers count from gpus_requested.

Fetching goes through `list_objects(group, version, plural) -> list[dict]`, injectable (`PODS` asks
for the core API's pods); the default uses the official `kubernetes` client when installed (the `kube`
extra: pip install 'goodput[kube]').
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Callable, Mapping, NamedTuple

from collectors.base import CollectorError, CollectorUnavailable, Row

GPU_RESOURCE = "nvidia.com/gpu"
POD_GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
PODS = ("", "v1", "pods")
"""list_objects arguments for the core API's pods, which place the gangs on nodes."""
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
    pod_keys: frozenset[str] = frozenset()
    """What its pods carry to say they belong to it (see `_gang_keys`)."""
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
        "pod_keys": _gang_keys(meta, source),
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


def _container_gpus(containers: list[Mapping[str, Any]]) -> int | None:
    """`nvidia.com/gpu` over a pod's containers (limits, else requests); None when none asks."""
    total = None
    for c in containers:
        res = c.get("resources", {})
        n = _int((res.get("limits") or {}).get(GPU_RESOURCE) or (res.get("requests") or {}).get(GPU_RESOURCE))
        if n is not None:
            total = (total or 0) + n
    return total


def _workload_gpus(spec: Mapping[str, Any]) -> int | None:
    total = None
    for ps in spec.get("podSets", []):
        n = _container_gpus(ps.get("template", {}).get("spec", {}).get("containers", []))
        if n is not None:
            total = (total or 0) + n * ps.get("count", 1)
    return total


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


@dataclass(frozen=True, slots=True)
class PodState:
    """One pod, reduced to what the gang's placement needs."""

    uid: str
    keys: frozenset[str]
    """How the pod names its gang: see `_gang_keys`."""
    node: str | None
    gpus: int
    live: bool
    bound_ms: int | None
    ended_ms: int | None


def _pod_keys(meta: Mapping[str, Any]) -> frozenset[str]:
    """The pod's own uid, its controller's uid, and Volcano's PodGroup annotation."""
    keys = {f"uid:{meta.get('uid')}"}
    keys |= {f"uid:{o.get('uid')}" for o in meta.get("ownerReferences") or [] if o.get("controller")}
    group = (meta.get("annotations") or {}).get(POD_GROUP_ANNOTATION)
    if group:
        keys.add(f"group:{meta.get('namespace', 'default')}/{group}")
    return frozenset(keys)


def _gang_keys(meta: Mapping[str, Any], source: str) -> frozenset[str]:
    """Pods belong to a gang through the controller they share with it (the batch Job, PyTorchJob or
    Volcano Job owns both the pods and the Workload/PodGroup; a plain pod owns its own Workload), and
    for Volcano also through the PodGroup name every pod carries in `scheduling.k8s.io/group-name`."""
    owners = [o for o in meta.get("ownerReferences") or [] if o.get("controller")]
    keys = {f"uid:{o.get('uid')}" for o in owners} or {f"uid:{meta.get('uid')}"}
    if source == "volcano":
        keys.add(f"group:{meta.get('namespace', 'default')}/{meta.get('name')}")
    return frozenset(keys)


def parse_pod(obj: Mapping[str, Any]) -> PodState:
    """A core/v1 Pod. GPUs are held from binding (spec.nodeName, PodScheduled) until the pod ends or
    is deleted; `ended_ms` is the last container's finishedAt of a Succeeded/Failed pod."""
    meta, spec, status = obj.get("metadata", {}), obj.get("spec", {}), obj.get("status", {})
    sched: Mapping[str, Any] = next(
        (c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"), {}
    )
    live = status.get("phase") not in ("Succeeded", "Failed")
    finished = [
        t
        for c in status.get("containerStatuses") or []
        if (t := _ts_ms(((c.get("state") or {}).get("terminated") or {}).get("finishedAt"))) is not None
    ]
    return PodState(
        uid=meta.get("uid", ""),
        keys=_pod_keys(meta),
        node=spec.get("nodeName") or None,
        gpus=_container_gpus(spec.get("containers", [])) or 0,
        live=live,
        bound_ms=_ts_ms(sched.get("lastTransitionTime")) if sched.get("status") == "True" else None,
        ended_ms=None if live or not finished else max(finished),
    )


@dataclass(frozen=True, slots=True)
class NodeUse:
    """A gang's GPU pods on one node: still holding GPUs (`live`), or all ended."""

    live: bool
    bound_ms: int | None
    ended_ms: int | None


def node_use(pods: list[PodState]) -> dict[str, NodeUse]:
    """Per node, from the gang's pods that hold GPUs there. A live node counts from its live pods'
    first binding; an ended one spans its pods' first binding to their last container's end."""
    by_node: dict[str, list[PodState]] = {}
    for p in pods:
        if p.node and p.gpus > 0:
            by_node.setdefault(p.node, []).append(p)
    out = {}
    for node, ps in by_node.items():
        live = [p for p in ps if p.live]
        bound = [p.bound_ms for p in live or ps if p.bound_ms is not None]
        ended = [p.ended_ms for p in ps if p.ended_ms is not None]
        out[node] = NodeUse(bool(live), min(bound, default=None), None if live else max(ended, default=None))
    return out


class _Event(NamedTuple):
    event: str
    ts: int | None
    attempt: int
    reason: str | None = None
    node: str | None = None


@dataclass
class _Memory:
    """What the collector remembers per object between ticks."""

    last: GangState
    attempt: int = 1
    needs_restart: bool = False
    terminal: bool = False
    allocated: dict[str, int] = field(default_factory=dict)
    """Node -> attempt of its open allocation (allocated sent, released not yet)."""
    done: set[tuple[str, int | None]] = field(default_factory=set)
    """(node, bound_ms) of allocations already released, so that ended pods still listed are not
    taken for a new allocation."""


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
    api, core = client.CustomObjectsApi(), client.CoreV1Api()

    def list_objects(group: str, version: str, plural: str) -> list[Mapping[str, Any]]:
        try:
            if (group, version, plural) == PODS:  # bound pods only, as the API server sends them
                pods = core.list_pod_for_all_namespaces(field_selector="spec.nodeName!=")
                return core.api_client.sanitize_for_serialization(pods)["items"]
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

    def _list(self, group: str, version: str, plural: str) -> list[Mapping[str, Any]]:
        try:
            return self.list_objects(group, version, plural)
        except (CollectorUnavailable, CollectorError):
            raise
        except Exception as e:  # the client's own errors; never read as "every job was deleted"
            raise CollectorError(f"listing {plural}.{group or 'core'}/{version} failed: {e}") from e

    def collect(self, now_ms: int) -> list[Row]:
        s = self.scheduler
        objects = self._list(s.group, s.version, s.plural)
        pods_by_key: dict[str, list[PodState]] = {}
        for pod in map(parse_pod, self._list(*PODS)):
            for key in pod.keys:
                pods_by_key.setdefault(key, []).append(pod)
        rows: list[Row] = []
        seen = set()
        for obj in objects:
            cur = s.parse(obj)
            seen.add(cur.uid)
            mem = self.memory.get(cur.uid)
            events = []
            if mem is None:
                mem = self.memory[cur.uid] = _Memory(cur)
                events.append(_Event("submitted", cur.created_ms, 1))
                prev_state = "pending"
            else:
                prev_state = mem.last.state
            events += self._transition(mem, prev_state, cur)
            pods = {p.uid: p for k in cur.pod_keys for p in pods_by_key.get(k, [])}
            allocs, releases = self._placement(mem, node_use(list(pods.values())), now_ms)
            rows += self._emit(cur, _merge(events, allocs, releases), now_ms)
            mem.last = cur
        for uid in [u for u in self.memory if u not in seen]:
            mem = self.memory.pop(uid)
            # deleted before it finished: the user (or a controller) cancelled it
            events = [] if mem.terminal else [_Event("cancelled", None, mem.attempt, "user")]
            events += [_Event("released", None, a, node=n) for n, a in mem.allocated.items()]
            rows += self._emit(mem.last, events, now_ms)
        return rows

    @staticmethod
    def _transition(mem: _Memory, prev: str, cur: GangState) -> list[_Event]:
        """Lifecycle events for moving from state `prev` (what was seen last) to `cur`; updates `mem`.
        Allocations are not among them: they follow the pods (`_placement`)."""
        if mem.terminal:
            return []
        last = mem.last
        regrouped = prev == cur.state == "running" and cur.running_ms != last.running_ms
        if prev == cur.state and cur.setback == last.setback and not regrouped:
            return []
        out: list[_Event] = []

        def climb(frm: int, to: int) -> None:
            for rung in range(frm + 1, to + 1):
                if mem.needs_restart:
                    mem.attempt += 1
                    mem.needs_restart = False
                    out.append(_Event("restarted", cur.state_ms, mem.attempt))
                if rung == 2:
                    out.append(_Event("gang_complete", cur.running_ms, mem.attempt))
                    out.append(_Event("running", cur.running_ms, mem.attempt))

        if cur.state in TERMINAL:
            mem.terminal = True
            event, reason = cur.setback or (cur.state, None)
            return [_Event(event, cur.state_ms, mem.attempt, reason)]
        if regrouped:  # the gang broke and re-formed between two polls
            mem.needs_restart = True
            out.append(_Event("failed", None, mem.attempt, "pods_not_ready"))
            climb(1, 2)
            return out
        if cur.state in ("evicted", "recovering") or RUNG[cur.state] < RUNG[prev]:
            climb(RUNG[prev], RUNG[cur.state])  # first seen already recovering: it was admitted once
            event, reason = cur.setback or ("failed", "pods_lost")
            if cur.state == "evicted" or not mem.needs_restart:  # one setback per break, unless evicted
                out.append(_Event(event, cur.state_ms, mem.attempt, reason))
            mem.needs_restart = True
            return out
        climb(RUNG[prev], RUNG[cur.state])
        return out

    @staticmethod
    def _placement(mem: _Memory, uses: dict[str, NodeUse], now_ms: int) -> tuple[list[_Event], list[_Event]]:
        """(allocated, released) per node from the gang's pods; updates `mem`.

        A node is allocated while a GPU pod of the gang is bound to it, and released when the last
        one ends (its finishedAt) or is gone (the poll's time). Pods that ran and ended between two
        polls still give their allocated/released pair. The API server does not say which GPUs the
        device plugin gave a pod, so these rows carry no gpu_indices: allocations without placement.
        """
        allocs, releases = [], []
        for node, use in uses.items():
            if use.live and node not in mem.allocated:
                mem.allocated[node] = mem.attempt
                allocs.append(_Event("allocated", use.bound_ms, mem.attempt, node=node))
            elif not use.live and node not in mem.allocated and (node, use.bound_ms) not in mem.done:
                mem.done.add((node, use.bound_ms))  # ran unseen, between two polls
                allocs.append(_Event("allocated", use.bound_ms, mem.attempt, node=node))
                releases.append(_Event("released", use.ended_ms or now_ms, mem.attempt, node=node))
        for node in [n for n in mem.allocated if not (n in uses and uses[n].live)]:
            gone = uses.get(node)
            if gone is not None:
                mem.done.add((node, gone.bound_ms))
            ts = gone.ended_ms if gone is not None and gone.ended_ms is not None else now_ms
            releases.append(_Event("released", ts, mem.allocated.pop(node), node=node))
        return allocs, releases

    @staticmethod
    def _emit(s: GangState, events: list[_Event], now_ms: int) -> list[Row]:
        rows = []
        for e in events:
            row: Row = {
                "ts_ms": e.ts if e.ts is not None else now_ms,
                "job_id": s.job_id,
                "event": e.event,
                "attempt": e.attempt,
                "source": s.source,
            }
            for k in ("account", "queue", "priority", "gpus_requested"):
                if getattr(s, k) is not None:
                    row[k] = getattr(s, k)
            if e.reason is not None:
                row["reason"] = e.reason
            if e.node is not None:
                row["node"] = e.node
            rows.append(row)
        return rows


def _merge(events: list[_Event], allocs: list[_Event], releases: list[_Event]) -> list[_Event]:
    """One tick's rows in the order they happened: an ended attempt's releases before `restarted`,
    new allocations after it and before the gang is complete (or the job ends)."""
    restart = next((i for i, e in enumerate(events) if e.event == "restarted"), None)
    if restart is not None:
        events = events[:restart] + releases + events[restart:]
        releases = []
    after = max((i + 1 for i, e in enumerate(events) if e.event == "restarted"), default=0)
    anchor = next(
        (i for i, e in enumerate(events) if i >= after and e.event not in ("submitted", "restarted")),
        len(events),
    )
    return events[:anchor] + allocs + events[anchor:] + releases
