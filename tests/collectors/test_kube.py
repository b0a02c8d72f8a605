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
    """Injected list_objects: serves whatever the test puts in `objects`, records what was asked."""

    def __init__(self):
        self.objects, self.asked = [], []

    def __call__(self, group, version, plural):
        self.asked.append((group, version, plural))
        return self.objects


def replay(scheduler, snapshots):
    api = Api()
    c = KubeJobCollector(scheduler, list_objects=api)
    ticks = []
    for i, snap in enumerate(snapshots):
        api.objects = [snap]
        ticks.append(c.collect(T0 + i * 1000))
    return c, api, ticks


def brief(rows):
    return [(r["event"], r["attempt"], r.get("reason")) for r in rows]


def test_kueue_lifecycle_with_recovery_preemption_and_readmission():
    c, api, ticks = replay("kueue", load("kueue_lifecycle.json"))
    assert api.asked[0] == ("kueue.x-k8s.io", "v1beta1", "workloads")
    assert [brief(t) for t in ticks] == [
        [("submitted", 1, None)],
        [("allocated", 1, None)],
        [("gang_complete", 1, None), ("running", 1, None)],
        [("failed", 1, "pods_not_ready")],  # PodsReady=False WaitForRecovery
        [("restarted", 2, None), ("gang_complete", 2, None), ("running", 2, None)],  # Recovered
        [("preempted", 2, "preempted")],
        [],  # Requeued, waiting for quota: nothing new
        [("restarted", 3, None), ("allocated", 3, None)],  # readmitted
        [("gang_complete", 3, None), ("running", 3, None)],
        [("completed", 3, None)],
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
    assert ticks[7][1]["ts_ms"] == ms("2024-05-01T12:30:05")
    assert ticks[9][0]["ts_ms"] == ms("2024-05-01T14:00:00")


def test_kueue_edge_triggered_and_idempotent():
    api = Api()
    c = KubeJobCollector("kueue", list_objects=api)
    api.objects = [load("kueue_lifecycle.json")[2]]
    assert brief(c.collect(T0)) == [
        ("submitted", 1, None),
        ("allocated", 1, None),
        ("gang_complete", 1, None),
        ("running", 1, None),
    ]
    assert c.collect(T0 + 1000) == [] and c.collect(T0 + 2000) == []
    # a second collector (agent restarted) emits the same keys, so the store deduplicates them
    again = KubeJobCollector("kueue", list_objects=api).collect(T0 + 5000)
    assert [(r["event"], r["ts_ms"]) for r in again][:1] == [("submitted", ms("2024-05-01T10:00:00"))]


def test_kueue_odd_states_seen_on_first_poll():
    api = Api()
    api.objects = load("kueue_odd.json")
    rows = KubeJobCollector("kueue", list_objects=api).collect(T0)
    assert_valid("job", rows)
    by = {}
    for r in rows:
        by.setdefault(r["job_id"], []).append((r["event"], r.get("reason")))
    assert by["team-b/eval-a"] == [
        ("submitted", None),
        ("allocated", None),
        ("gang_complete", None),
        ("running", None),
    ]
    assert by["team-a/stuck"] == [("submitted", None), ("failed", "timeout")]
    assert by["team-a/big"] == [("submitted", None), ("failed", "node_lost")]
    assert by["team-a/bad"] == [("submitted", None), ("failed", "job_failed")]
    eval_row = next(r for r in rows if r["job_id"] == "team-b/eval-a")
    assert "priority" not in eval_row and eval_row["gpus_requested"] == 2  # negative priority left out


def test_deleted_before_finishing_is_cancelled_and_finished_is_forgotten():
    api = Api()
    c = KubeJobCollector("kueue", list_objects=api)
    running, finished = load("kueue_lifecycle.json")[2], load("kueue_odd.json")[3]
    api.objects = [running, finished]
    c.collect(T0)
    api.objects = []
    rows = c.collect(T0 + 1000)
    assert brief(rows) == [("cancelled", 1, "user")] and rows[0]["ts_ms"] == T0 + 1000
    assert c.memory == {}


def test_volcano_lifecycle():
    c, api, ticks = replay("volcano", load("volcano_lifecycle.json"))
    assert api.asked[0] == ("scheduling.volcano.sh", "v1beta1", "podgroups")
    assert [brief(t) for t in ticks] == [
        [("submitted", 1, None)],
        [("allocated", 1, None)],  # Inqueue
        [],  # Running but 2 of minMember 4: gang not complete
        [("gang_complete", 1, None), ("running", 1, None)],
        [("failed", 1, "pods_lost")],  # Unknown
        [("restarted", 2, None), ("gang_complete", 2, None), ("running", 2, None)],
        [("completed", 2, None)],
    ]
    rows = [r for t in ticks for r in t]
    assert_valid("job", rows)
    assert rows[0]["job_id"] == "team-c/pretrain-7b" and rows[0]["queue"] == "research"
    assert rows[0]["gpus_requested"] == 32 and rows[0]["ts_ms"] == ms("2024-05-02T08:00:00")
    assert ticks[3][0]["ts_ms"] == T0 + 3000  # PodGroups carry no phase timestamps: the poll's time


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
    with pytest.raises(ValueError, match="unknown scheduler"):
        KubeJobCollector("yunikorn", list_objects=broken)


def test_default_lister_without_kubernetes_package_is_unavailable(monkeypatch):
    """A node without the [kube] extra: `import kubernetes` fails (None in sys.modules makes the
    import raise ImportError, as a missing package does)."""
    monkeypatch.setitem(sys.modules, "kubernetes", None)
    with pytest.raises(CollectorUnavailable, match="pip install kubernetes"):
        KubeJobCollector("volcano")
