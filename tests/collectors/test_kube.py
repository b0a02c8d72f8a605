import copy
import json
import sys
from datetime import datetime, timezone
from pathlib import Path

import pytest

from collectors.base import CollectorError, CollectorUnavailable
from collectors.kube import KubeJobCollector, parse_podgroup, parse_workload
from tests.collectors.conftest import T0, assert_valid

DATA = Path(__file__).parent / "data" / "kube"


def load(name):
    return json.loads((DATA / name).read_text())


def ms(text):
    return int(datetime.fromisoformat(text).replace(tzinfo=timezone.utc).timestamp() * 1000)


class Api:
    """Injected list_objects: serves the gangs in `objects` and the pods in `pods`, records what was asked."""

    def __init__(self):
        self.objects, self.pods, self.asked = [], [], []

    def __call__(self, group, version, plural):
        self.asked.append((group, version, plural))
        return self.pods if (group, version, plural) == ("", "v1", "pods") else self.objects


def replay(scheduler, snapshots, pods=None):
    """One tick per snapshot; `pods[i]` is the pod list of tick i (none when not given)."""
    api = Api()
    c = KubeJobCollector(scheduler, list_objects=api)
    ticks = []
    for i, snap in enumerate(snapshots):
        api.objects, api.pods = [snap], pods[i] if pods else []
        ticks.append(c.collect(T0 + i * 1000))
    return c, api, ticks


def brief(rows):
    """(event, attempt, reason, node) of each row."""
    return [(r["event"], r["attempt"], r.get("reason"), r.get("node")) for r in rows]


def lifecycle(rows):
    """(event, attempt, reason) of the rows that are not allocated/released."""
    return [
        (r["event"], r["attempt"], r.get("reason"))
        for r in rows
        if r["event"] not in ("allocated", "released")
    ]


def placement(rows):
    """(event, attempt, node, ts_ms) of the allocated/released rows."""
    return [
        (r["event"], r["attempt"], r["node"], r["ts_ms"])
        for r in rows
        if r["event"] in ("allocated", "released")
    ]


def ended(pod, phase, finished):
    """The pod after its containers ended at `finished` (Succeeded or Failed), as the API shows it."""
    pod = copy.deepcopy(pod)
    pod["status"]["phase"] = phase
    for c in pod["status"]["containerStatuses"]:
        started = c["state"]["running"]["startedAt"]
        code = 0 if phase == "Succeeded" else 1
        reason = "Completed" if phase == "Succeeded" else "Error"
        c["state"] = {
            "terminated": {"exitCode": code, "reason": reason, "startedAt": started, "finishedAt": finished}
        }
        c["ready"] = c["started"] = False
    return pod


def rebound(pod, uid, name, node, at):
    """A replacement of `pod` (new uid and name) bound to `node` at `at`."""
    pod = copy.deepcopy(pod)
    pod["metadata"].update(uid=uid, name=name, creationTimestamp=at)
    pod["spec"]["nodeName"] = node
    for c in pod["status"]["conditions"]:
        c["lastTransitionTime"] = at
    for c in pod["status"]["containerStatuses"]:
        c["state"]["running"]["startedAt"] = at
    return pod


def kueue_pods():
    """Per tick of kueue_lifecycle.json: the pods the API lists (eval-a's pod belongs to another job)."""
    first, other = load("kueue_pods.json")[:4], load("kueue_pods.json")[4:]
    again = [
        rebound(
            p, p["metadata"]["uid"].replace("-p", "-r"), p["metadata"]["name"] + "r", f"gpu-a-0{i + 5}", at
        )
        for i, p in enumerate(first)
        for at in ["2024-05-01T12:30:06Z"]
    ]
    done = [ended(p, "Succeeded", "2024-05-01T13:59:58Z") for p in again]
    # pending, admitted, running, recovering, recovered, evicted (pods still terminating), requeued (pods
    # gone), readmitted, running, finished
    return [other, first + other, first + other, first, first, first, [], again, again, done]


def test_kueue_lifecycle_with_recovery_preemption_and_readmission():
    c, api, ticks = replay("kueue", load("kueue_lifecycle.json"), kueue_pods())
    assert api.asked[:2] == [("kueue.x-k8s.io", "v1beta1", "workloads"), ("", "v1", "pods")]
    first = [f"gpu-a-0{i}" for i in (1, 2, 3, 4)]
    again = [f"gpu-a-0{i}" for i in (5, 6, 7, 8)]
    assert [brief(t) for t in ticks] == [
        [("submitted", 1, None, None)],
        [("allocated", 1, None, n) for n in first],  # one per node its pods are bound to
        [("gang_complete", 1, None, None), ("running", 1, None, None)],
        [("failed", 1, "pods_not_ready", None)],  # PodsReady=False WaitForRecovery
        [("restarted", 2, None, None), ("gang_complete", 2, None, None), ("running", 2, None, None)],
        [("preempted", 2, "preempted", None)],  # its pods are still terminating
        [("released", 1, None, n) for n in first],  # Requeued, pods gone
        [("restarted", 3, None, None)] + [("allocated", 3, None, n) for n in again],  # readmitted
        [("gang_complete", 3, None, None), ("running", 3, None, None)],
        [("completed", 3, None, None)] + [("released", 3, None, n) for n in again],
    ]
    rows = [r for t in ticks for r in t]
    assert_valid("job", rows)
    first = rows[0]
    assert (
        first["job_id"] == "team-a/train-llm"
        and first["account"] == "team-a"
        and first["queue"] == "team-a-gpu"
    )
    assert first["priority"] == 100 and first["gpus_requested"] == 32 and first["source"] == "kueue"
    assert first["ts_ms"] == ms("2024-05-01T10:00:00")  # the object's own timestamps, not the poll's
    assert ticks[3][0]["ts_ms"] == ms("2024-05-01T11:00:00.250")
    assert ticks[7][0]["ts_ms"] == ms("2024-05-01T12:30:05")
    assert ticks[9][0]["ts_ms"] == ms("2024-05-01T14:00:00")
    # allocations at the pods' binding (PodScheduled), releases when the pods ended or were gone
    assert [ts for *_, ts in placement(ticks[1])] == [ms(f"2024-05-01T10:01:0{s}") for s in (6, 7, 8, 9)]
    assert {ts for *_, ts in placement(ticks[6])} == {T0 + 6000}
    assert {ts for *_, ts in placement(ticks[7])} == {ms("2024-05-01T12:30:06")}
    assert {ts for *_, ts in placement(ticks[9])} == {ms("2024-05-01T13:59:58")}
    assert not any("gpu_indices" in r for r in rows)  # the API server does not know them


def test_kueue_edge_triggered_and_idempotent():
    api = Api()
    c = KubeJobCollector("kueue", list_objects=api)
    api.objects, api.pods = [load("kueue_lifecycle.json")[2]], load("kueue_pods.json")
    assert lifecycle(c.collect(T0)) == [
        ("submitted", 1, None),
        ("gang_complete", 1, None),
        ("running", 1, None),
    ]
    assert c.collect(T0 + 1000) == [] and c.collect(T0 + 2000) == []
    # a second collector (agent restarted) emits the same keys, so the store deduplicates them
    again = KubeJobCollector("kueue", list_objects=api).collect(T0 + 5000)
    assert [(r["event"], r["ts_ms"]) for r in again][:2] == [
        ("submitted", ms("2024-05-01T10:00:00")),
        ("allocated", ms("2024-05-01T10:01:06")),
    ]


def test_kueue_odd_states_seen_on_first_poll():
    api = Api()
    api.objects, api.pods = load("kueue_odd.json"), load("kueue_pods.json")[4:]
    rows = KubeJobCollector("kueue", list_objects=api).collect(T0)
    assert_valid("job", rows)
    by = {}
    for r in rows:
        by.setdefault(r["job_id"], []).append((r["event"], r.get("reason"), r.get("node")))
    assert by["team-b/eval-a"] == [
        ("submitted", None, None),
        ("allocated", None, "gpu-b-01"),
        ("gang_complete", None, None),
        ("running", None, None),
    ]
    assert by["team-a/stuck"] == [("submitted", None, None), ("failed", "timeout", None)]
    assert by["team-a/big"] == [("submitted", None, None), ("failed", "node_lost", None)]
    assert by["team-a/bad"] == [("submitted", None, None), ("failed", "job_failed", None)]
    eval_row = next(r for r in rows if r["job_id"] == "team-b/eval-a")
    assert "priority" not in eval_row and eval_row["gpus_requested"] == 2  # negative priority left out


def test_a_gang_that_ran_between_two_polls_keeps_its_allocations():
    api = Api()
    c = KubeJobCollector("kueue", list_objects=api)
    api.objects = [load("kueue_lifecycle.json")[0]]
    c.collect(T0)
    finished = load("kueue_lifecycle.json")[9]
    api.objects = [finished]
    api.pods = [ended(p, "Succeeded", "2024-05-01T13:59:58Z") for p in load("kueue_pods.json")[:4]]
    rows = c.collect(T0 + 1000)
    assert_valid("job", rows)
    nodes = [f"gpu-a-0{i}" for i in (1, 2, 3, 4)]
    assert brief(rows) == [("allocated", 1, None, n) for n in nodes] + [("completed", 1, None, None)] + [
        ("released", 1, None, n) for n in nodes
    ]
    assert placement(rows)[0][3] == ms("2024-05-01T10:01:06")
    assert placement(rows)[-1][3] == ms("2024-05-01T13:59:58")
    assert c.collect(T0 + 2000) == []  # the ended pods, still listed, are not a new allocation


def test_deleted_before_finishing_is_cancelled_and_released_and_finished_is_forgotten():
    api = Api()
    c = KubeJobCollector("kueue", list_objects=api)
    running, finished = load("kueue_lifecycle.json")[2], load("kueue_odd.json")[3]
    api.objects, api.pods = [running, finished], load("kueue_pods.json")[:1]
    c.collect(T0)
    api.objects, api.pods = [], []
    rows = c.collect(T0 + 1000)
    assert brief(rows) == [("cancelled", 1, "user", None), ("released", 1, None, "gpu-a-01")]
    assert {r["ts_ms"] for r in rows} == {T0 + 1000}
    assert c.memory == {}


def volcano_pods():
    """Per tick of volcano_lifecycle.json: two workers bound, then four; worker 3's node is lost and
    the worker replaced on gpu-c-05; then all succeed."""
    w = load("volcano_pods.json")
    lost = ended(w[3], "Failed", "2024-05-02T08:30:00Z")
    spare = rebound(
        w[3],
        "0e6a4c2d-r003-4c3a-8e2d-9f0a1b2c3d4e",
        "pretrain-7b-worker-3",
        "gpu-c-05",
        "2024-05-02T08:31:00Z",
    )
    done = [ended(p, "Succeeded", "2024-05-02T10:00:00Z") for p in w[:3] + [spare]]
    return [[], [], w[:2], w, w[:3] + [lost], w[:3] + [lost, spare], done + [lost]]


def test_volcano_lifecycle():
    c, api, ticks = replay("volcano", load("volcano_lifecycle.json"), volcano_pods())
    assert api.asked[0] == ("scheduling.volcano.sh", "v1beta1", "podgroups")
    assert [brief(t) for t in ticks] == [
        [("submitted", 1, None, None)],
        [],  # Inqueue: capacity held by the queue, no pod bound yet
        [("allocated", 1, None, "gpu-c-01"), ("allocated", 1, None, "gpu-c-02")],  # 2 of minMember 4
        [
            ("allocated", 1, None, "gpu-c-03"),
            ("allocated", 1, None, "gpu-c-04"),
            ("gang_complete", 1, None, None),
            ("running", 1, None, None),
        ],
        [("failed", 1, "pods_lost", None), ("released", 1, None, "gpu-c-04")],  # Unknown
        [
            ("restarted", 2, None, None),
            ("allocated", 2, None, "gpu-c-05"),
            ("gang_complete", 2, None, None),
            ("running", 2, None, None),
        ],
        [("completed", 2, None, None)]
        + [
            ("released", a, None, n)
            for a, n in ((1, "gpu-c-01"), (1, "gpu-c-02"), (1, "gpu-c-03"), (2, "gpu-c-05"))
        ],
    ]
    rows = [r for t in ticks for r in t]
    assert_valid("job", rows)
    assert rows[0]["job_id"] == "team-c/pretrain-7b" and rows[0]["queue"] == "research"
    assert rows[0]["gpus_requested"] == 32 and rows[0]["ts_ms"] == ms("2024-05-02T08:00:00")
    assert ticks[3][2]["ts_ms"] == T0 + 3000  # PodGroups carry no phase timestamps: the poll's time
    assert ticks[4][1]["ts_ms"] == ms("2024-05-02T08:30:00")  # the lost worker's end
    assert ticks[3][0]["ts_ms"] == ms("2024-05-02T08:01:02")  # bound, from the pod (not the poll)


def test_a_gang_that_re_formed_between_two_polls_fails_in_the_old_attempt():
    running = load("kueue_lifecycle.json")[2]
    re_formed = copy.deepcopy(running)
    next(c for c in re_formed["status"]["conditions"] if c["type"] == "PodsReady")["lastTransitionTime"] = (
        "2024-05-01T11:00:00Z"
    )
    _, _, ticks = replay("kueue", [running, re_formed])
    assert lifecycle(ticks[1]) == [
        ("failed", 1, "pods_not_ready"),
        ("restarted", 2, None),
        ("gang_complete", 2, None),
        ("running", 2, None),
    ]


def test_parsers_on_single_objects():
    assert parse_podgroup(load("volcano_lifecycle.json")[4]).state == "recovering"
    done = load("volcano_lifecycle.json")[6]
    done["status"] = {"phase": "Completed", "failed": 3, "succeeded": 1}
    assert parse_podgroup(done).state == "failed"
    w = load("kueue_lifecycle.json")[3]
    assert (parse_workload(w).state, parse_workload(w).setback) == (
        "recovering",
        ("failed", "pods_not_ready"),
    )
    assert parse_workload(load("kueue_lifecycle.json")[6]).state == "evicted"
    assert (
        parse_workload(load("kueue_lifecycle.json")[7]).state == "admitted"
    )  # Evicted=False after readmission


def test_listing_failures():
    def broken(group, version, plural):
        raise TimeoutError("apiserver timed out")

    c = KubeJobCollector("kueue", list_objects=broken)
    with pytest.raises(CollectorError, match="workloads.kueue.x-k8s.io/v1beta1"):
        c.collect(T0)

    def no_pods(group, version, plural):
        if plural == "pods":
            raise PermissionError("pods is forbidden: cannot list resource pods at the cluster scope")
        return []

    with pytest.raises(CollectorError, match="pods.core/v1 failed: pods is forbidden"):
        KubeJobCollector("kueue", list_objects=no_pods).collect(T0)
    with pytest.raises(ValueError, match="unknown scheduler"):
        KubeJobCollector("yunikorn", list_objects=broken)


def test_default_lister_without_kubernetes_package_is_unavailable(monkeypatch):
    """A node without the [kube] extra: `import kubernetes` fails (None in sys.modules makes the
    import raise ImportError, as a missing package does)."""
    monkeypatch.setitem(sys.modules, "kubernetes", None)
    with pytest.raises(CollectorUnavailable, match="pip install kubernetes"):
        KubeJobCollector("volcano")
