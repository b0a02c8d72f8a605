"""The commands a user runs: simulate → ingest → summary, the demo, and the store's lock message."""

import json
import subprocess
import sys

from pipeline.chdb_store import ChdbStore

GOODPUT = [sys.executable, "-m", "goodput.cli"]


def run(*args, check=True, cwd=None):
    p = subprocess.run([*GOODPUT, *args], capture_output=True, text=True, timeout=600, cwd=cwd)
    if check:
        assert p.returncode == 0, p.stderr[-3000:]
    return p


def test_simulate_ingest_summary_json(tmp_path):
    msgs = tmp_path / "msgs.jsonl"
    run("simulate", "--gpus", "32", "--hours", "0.25", "--out", str(msgs))
    lines = msgs.read_bytes().splitlines()
    assert len(lines) > 50
    with open(msgs, "ab") as f:  # two bad lines and one duplicate batch: dead-lettered, not fatal
        f.write(b"{broken\n" + lines[5] + b"\n")
    store = tmp_path / "store"
    p = run("ingest", "--from", str(msgs), "--store", str(store))
    assert "not_json=1" in p.stderr and "duplicate_seq=1" in p.stderr
    doc = json.loads(run("summary", "--store", str(store), "--json").stdout)
    assert doc["teams"] and doc["jobs"]
    for job in doc["jobs"]:
        assert abs(sum(job["gpu_seconds"].values()) - job["allocated_gpu_seconds"]) < 1e-3 * max(
            1.0, job["allocated_gpu_seconds"]
        )
        assert set(job["gpu_seconds"]) == set(doc["categories"])


def test_second_process_gets_a_clear_message_not_a_chdb_error(tmp_path):
    store = tmp_path / "store"
    with ChdbStore(store):
        p = run("summary", "--store", str(store), "--json", check=False)
    assert p.returncode == 2
    assert "in use by" in p.stderr and "one process per data directory" in p.stderr
    assert "Traceback" not in p.stderr


def test_demo_writes_its_outputs(tmp_path):
    """As the README runs it: a relative --out, then `summary --config <out>/config.toml`, whose store
    path is relative to the config file (the demo's directory can be moved as a whole)."""
    p = run("demo", "--gpus", "32", "--hours", "0.3", "--out", "demo", cwd=tmp_path)
    assert "TOTAL" in p.stdout and "goodput" in p.stdout
    out = tmp_path / "demo"
    for name in ("team_summary.csv", "job_summary.csv", "ground_truth.parquet", "config.toml", "store"):
        assert (out / name).exists(), name
    doc = json.loads(run("summary", "--config", "demo/config.toml", "--json", cwd=tmp_path).stdout)
    assert doc["cluster"] == "demo-east" and doc["teams"]
    moved = tmp_path / "elsewhere"
    out.rename(moved)
    doc = json.loads(run("summary", "--config", str(moved / "config.toml"), "--json").stdout)
    assert doc["teams"]
