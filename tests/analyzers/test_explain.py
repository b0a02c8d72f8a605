"""`goodput explain JOB` and `goodput summary --json` as a user runs them (subprocesses on a store of
their own): the why per category in merged time ranges, the faults, the versioned JSON keys that
docs/summary.md documents, and an unknown job."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from contracts import catalog
from contracts import config as config_mod
from pipeline.explain import explain, format_explain
from pipeline.summary import SUMMARY_VERSION
from tests.analyzers.scenario import Scenario, fails_once, ms

GOODPUT = [sys.executable, "-m", "goodput.cli"]
DOC = Path(__file__).parents[2] / "docs" / "summary.md"
N1 = "gpu-core-001"
GPUS = [0, 1, 2, 3]


def goodput(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    p = subprocess.run([*GOODPUT, *args], capture_output=True, text=True, timeout=600)
    if check:
        assert p.returncode == 0, p.stderr[-3000:]
    return p


def iso(t_s: float) -> str:
    return (
        datetime.fromtimestamp(ms(t_s) / 1000, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    )


def stall_then_failure(sc: Scenario) -> None:
    """4 GPUs: startup 0 -> 10, a data stall 100 -> 200 (storage at 95 % of the ceiling, every other
    second at a third of the healthy level), a checkpoint 240 -> 250, an XID 79 on GPU 2 at 300,
    restarted at 320, running again at 350, completed at 500."""
    j = dict(job_id="js", account="research")
    sc.job(dict(t=0, event="submitted", gpus_requested=4, queue="core", **j))
    sc.job(dict(t=0, event="allocated", node=N1, gpu_indices=GPUS, **j))
    sc.job(dict(t=0, event="gang_complete", **j), dict(t=10, event="running", **j))
    sc.job(dict(t=250, event="checkpoint_saved", step=10, duration_ms=10_000, **j))
    sc.job(dict(t=300, event="failed", reason="xid:79", exit_code=1, **j))
    sc.job(dict(t=320, event="restarted", attempt=2, **j), dict(t=350, event="running", attempt=2, **j))
    sc.job(dict(t=500, event="completed", attempt=2, **j))
    sc.job(dict(t=500, event="released", node=N1, gpu_indices=GPUS, attempt=2, **j))
    sc.gpu(
        N1,
        GPUS,
        0,
        500,
        lambda s, g: None if (s, g) == (299, 2) else 30.0 if 100 < s <= 200 and s % 2 else 90.0,
    )
    sc.rows("gpu", N1, 298, 299, gpu=2, uuid=f"GPU-{N1}-2", xid=79)
    ceiling = sc.cfg.pools[0].storage_ceiling_bytes_per_s
    sc.rows("storage", N1, 100, 200, source="nfs", device="/data", read_bytes_per_s=0.95 * ceiling)


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> str:
    """A store of its own, loaded and analysed by `goodput ingest --from` (this process holds none)."""
    tmp = tmp_path_factory.mktemp("explain")
    sc = Scenario(store=None, cfg=config_mod.load())
    stall_then_failure(sc)
    msgs = tmp / "msgs.jsonl"
    msgs.write_bytes(b"".join(value + b"\n" for _, _, value in sc.batches))
    goodput("ingest", "--from", str(msgs), "--store", str(tmp / "store"))
    return str(tmp / "store")


@pytest.fixture(scope="module")
def explained(store) -> dict:
    return json.loads(goodput("explain", "js", "--json", "--store", store).stdout)


def ranges(doc: dict, category: str) -> list[tuple]:
    (c,) = [c for c in doc["categories"] if c["category"] == category]
    return [(r["start"], r["end"], round(r["gpu_seconds"], 3), r["evidence"]) for r in c["ranges"]]


def test_explain_gives_each_category_its_evidence_in_merged_ranges(explained):
    assert explained["version"] == SUMMARY_VERSION
    assert [c["category"] for c in explained["categories"]] == list(catalog.CATEGORIES)
    (data,) = ranges(explained, "data_stall")  # ten windows of one storage ceiling: one range
    assert data[:2] == (iso(100), iso(200))
    assert data[2] == pytest.approx(4 * 100 / 3, abs=0.01)
    assert re.fullmatch(r"storage of pool \S+ at 95% of its ceiling", data[3])
    assert ranges(explained, "retry_waste") == [
        (iso(250), iso(300), 200.0, "lost progress: xid:79"),
        (iso(300), iso(350), 200.0, "restart after xid:79"),  # restart and the new attempt's startup
    ]
    assert ranges(explained, "checkpoint") == [(iso(240), iso(250), 40.0, "checkpoint save")]
    assert ranges(explained, "startup") == [(iso(0), iso(10), 40.0, "first attempt startup")]
    assert ranges(explained, "productive") == [] and ranges(explained, "idle") == []
    total = sum(c["gpu_seconds"] for c in explained["categories"])
    assert total == pytest.approx(explained["job"]["allocated_gpu_seconds"]) == pytest.approx(2000)
    assert sum(c["pct"] for c in explained["categories"]) == pytest.approx(100)
    (fault,) = explained["faults"]
    assert fault["time"] == iso(300)
    assert (fault["kind"], fault["owner"], fault["reason"], fault["xid"]) == ("xid_hw", "job", "xid:79", 79)
    assert (fault["node"], fault["gpu"], fault["located_by"], fault["gpu_seconds"]) == (N1, 2, "xid", 400.0)
    assert fault["node_repeats"] is None and fault["gpu_repeats"] is None
    assert explained["scheduling"]["queue_wait_s"] == 0 and explained["scheduling"]["submitted"] == iso(0)


def test_explain_text_is_a_table_then_the_why(store):
    out = goodput("explain", "js", "--store", store).stdout
    lines = out.splitlines()
    assert lines[0].startswith("job js (") and "goodput " in lines[0]
    head = lines.index("why:")
    table = lines[2 : head - 1]
    assert table[0].split() == ["category", "GPU-s", "GPU-h", "%"]
    assert any(r.split()[:2] == ["retry_waste", "400.0"] for r in table)
    assert table[-1].split()[:2] == ["total", "2,000.0"]
    assert any("data_stall" in ln and "storage of pool" in ln for ln in lines[head:])
    (f,) = [ln for ln in lines if "xid_hw" in ln]
    assert f"node {N1} GPU 2" in f and "cost owner job" in f and "400.0 GPU-s" in f


def test_unknown_job_is_one_line_and_exit_2(store):
    p = goodput("explain", "nope", "--store", store, check=False)
    assert p.returncode == 2 and p.stdout == ""
    assert p.stderr.count("\n") == 1 and p.stderr.startswith("goodput explain: no job 'nope' in cluster")


def keys(doc, path="") -> set[str]:
    """Every key path of a JSON document: a.b for objects, a[].b for lists of objects; the keys of
    objects keyed by category are not spelled (they are the categories)."""
    out = set()
    if isinstance(doc, dict):
        for k, v in doc.items():
            if k in catalog.CATEGORIES:
                out |= keys(v, f"{path}.<category>")
                continue
            out.add(f"{path}.{k}".lstrip("."))
            out |= keys(v, f"{path}.{k}")
    elif isinstance(doc, list):
        for v in doc:
            out |= keys(v, f"{path}[]")
    return {k.lstrip(".") for k in out}


def documented(section: str) -> set[str]:
    """The key paths listed in a section of docs/summary.md: the first column of its field tables."""
    text = DOC.read_text().split(f"## {section}", 1)[1].split("\n## ", 1)[0]
    return set(re.findall(r"^\| `([^`]+)` \|", text, re.M))


def test_json_keys_are_the_documented_contract(store, explained):
    summary = json.loads(goodput("summary", "--json", "--store", store).stdout)
    assert summary["version"] == SUMMARY_VERSION
    (job,) = summary["jobs"]
    assert [w["evidence"] for w in job["why"]["retry_waste"]] == [
        "lost progress: xid:79",
        "restart after xid:79",
    ]
    assert set(job["why"]) == set(catalog.WASTE_CATEGORIES)
    (kind,) = summary["faults"]["by_kind"]
    assert (kind["kind"], kind["owner"], kind["faults"], kind["gpu_seconds"]) == ("xid_hw", "job", 1, 400.0)
    assert keys(summary) - {"faults.repeat_offenders[]"} <= documented("summary --json")
    assert keys(explained) <= documented("explain --json")
    assert documented("summary --json") - keys(summary) <= {
        f"faults.repeat_offenders[].{k}" for k in REPEAT_KEYS
    }
    assert documented("explain --json") - keys(explained) <= {
        f"faults[].{scope}_repeats.{k}"
        for scope in ("node", "gpu")
        for k in ("failures", "repeats", "max_in_window", "window_s")
    } | {k for k in documented("explain --json") if k.startswith("stragglers[].")}  # test_stragglers.py


REPEAT_KEYS = (
    "scope",
    "node",
    "gpu",
    "failures",
    "repeats",
    "max_in_window",
    "window_s",
    "first_failure",
    "last_failure",
    "gpu_seconds",
    "kinds",
    "jobs",
)


def test_a_job_still_queued_has_only_its_scheduling(sc):
    sc.job(dict(t=0, event="submitted", job_id="queued", account="research", gpus_requested=8, queue="core"))
    sc.load()
    sc.analyze(0, 100)
    e = explain(sc.store, sc.cfg.cluster.name, "queued", "USD")
    assert set(e["job"].values()) == {None}
    assert e["scheduling"]["submitted"] == iso(0) and e["scheduling"]["queue_wait_s"] is None
    assert [c["gpu_seconds"] for c in e["categories"]] == [0] * len(catalog.CATEGORIES)
    assert format_explain(e).splitlines() == [
        "job queued (demo-east)",
        "",
        "scheduling: never allocated (queue core)",
    ]


def test_explain_names_a_repeat_offender(sc):
    fails_once(sc, "first", 0, 100, xid_gpu=2)
    fails_once(sc, "second", 110, 200, xid_gpu=2)
    sc.load()
    sc.analyze(0, 300)
    e = explain(sc.store, sc.cfg.cluster.name, "second", "USD")
    (f,) = e["faults"]
    want = dict(failures=2, repeats=1, max_in_window=2, window_s=sc.cfg.analyzer.repeat_window_s)
    assert f["node_repeats"] == want and f["gpu_repeats"] == want
    (line,) = [ln for ln in format_explain(e).splitlines() if "xid_hw" in ln]
    assert "repeat offender: this node failed 2x, 1 within 7 d of the last" in line
    assert "repeat offender: this GPU failed 2x" in line
