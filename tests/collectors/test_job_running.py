"""`running` has one meaning (docs/messages.md): the scheduler reports the attempt's processes started.

The job collectors send it at that edge, with `gang_complete` where the scheduler reports both at
once; the first training step is the attempt's first `step` event, never `running`.
"""

import json
from pathlib import Path

import pytest

from collectors.kube import KubeJobCollector
from collectors.slurm import SlurmCollector
from tests.collectors.conftest import T0

ROOT = Path(__file__).resolve().parents[2]
KUBE = Path(__file__).parent / "data" / "kube"
SQUEUE = ROOT / "tests" / "slurm" / "fixtures"


def test_messages_md_gives_running_one_meaning():
    text = (ROOT / "docs" / "messages.md").read_text()
    bullets = [line for line in text.splitlines() if line.startswith("- `running`:")]
    assert len(bullets) == 1
    assert "the scheduler reports the attempt's processes started" in bullets[0]
    assert "first training step of the attempt is its first `step` event" in bullets[0]
    assert "`running` means the first training step" not in text


def job_rows(collector, polls):
    return [r for _ in range(polls) for r in collector.collect(T0)]


def assert_running_at_the_gang_edge(rows):
    running = [r for r in rows if r["event"] == "running"]
    assert running
    gang = {(r["job_id"], r["attempt"]): r["ts_ms"] for r in rows if r["event"] == "gang_complete"}
    for r in running:
        assert gang[(r["job_id"], r["attempt"])] == r["ts_ms"], r
        assert "step" not in r  # no collector knows a training step


def test_slurm_sends_running_with_gang_complete():
    texts = iter((SQUEUE / f"squeue-v0.0.41-poll{i}.json").read_text() for i in (1, 2, 3))
    assert_running_at_the_gang_edge(job_rows(SlurmCollector(run=lambda argv: next(texts)), 3))


@pytest.mark.parametrize(
    "scheduler, name", [("kueue", "kueue_lifecycle.json"), ("volcano", "volcano_lifecycle.json")]
)
def test_kube_sends_running_with_gang_complete(scheduler, name):
    snaps = iter(json.loads((KUBE / name).read_text()))
    pods = json.loads((KUBE / name.replace("lifecycle", "pods")).read_text())
    collector = KubeJobCollector(
        scheduler, list_objects=lambda g, v, p: pods if p == "pods" else [next(snaps)]
    )
    rows = job_rows(collector, 7)
    assert_running_at_the_gang_edge(rows)
