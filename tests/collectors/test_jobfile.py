import json
import os

import pytest

from collectors.base import CollectorUnavailable
from collectors.jobfile import JobFileCollector
from tests.collectors.conftest import T0, assert_valid


def line(**row):
    return json.dumps({"ts_ms": T0, "job_id": "j1", "event": "submitted", "attempt": 1, **row}) + "\n"


def test_tails_by_offset_and_waits_for_complete_lines(tmp_path):
    path = tmp_path / "jobs.jsonl"
    path.write_text(line() + line(event="allocated", node="gpu-001", gpu_indices=[0, 1, 2, 3]))
    c = JobFileCollector(path)
    rows = c.collect(T0)
    assert [r["event"] for r in rows] == ["submitted", "allocated"] and rows[0]["source"] == "file"
    assert_valid("job", rows)
    assert c.collect(T0 + 1000) == []  # nothing new
    partial = line(event="running")
    with path.open("a") as f:
        f.write(partial[:20])  # the writer is mid-line
    assert c.collect(T0 + 2000) == []
    with path.open("a") as f:
        f.write(partial[20:])
    assert [r["event"] for r in c.collect(T0 + 3000)] == ["running"]


def test_bad_lines_are_rejected_with_reasons_not_fatal(tmp_path):
    path = tmp_path / "jobs.jsonl"
    path.write_text(
        "".join(
            [
                "{not json\n",
                "[1, 2]\n",
                line(event="exploded"),
                line(attempt=0),
                line(gpus="eight"),
                json.dumps({"ts_ms": T0, "event": "running", "attempt": 1}) + "\n",
                "\n",
                line(event="completed", exit_code=0, source="sim"),
            ]
        )
    )
    c = JobFileCollector(path)
    rows = c.collect(T0)
    assert [(r["event"], r["source"]) for r in rows] == [("completed", "sim")]
    reasons = [(r["line"], r["reason"]) for r in c.rejected]
    assert [n for n, _ in reasons] == [1, 2, 3, 4, 5, 6]
    assert "not JSON" in reasons[0][1] and "JSON object" in reasons[1][1]
    assert "'event'" in reasons[2][1] and "minimum" in reasons[3][1]
    assert "unknown field" in reasons[4][1] and "missing required field 'job_id'" in reasons[5][1]


def test_rotation_and_truncation_restart_from_the_top(tmp_path):
    path = tmp_path / "jobs.jsonl"
    path.write_text(line() + line(event="allocated"))
    c = JobFileCollector(path)
    assert len(c.collect(T0)) == 2
    path.write_text(line(event="running"))  # truncated and rewritten in place: smaller than the offset
    assert [r["event"] for r in c.collect(T0 + 1000)] == ["running"]
    rotated = tmp_path / "jobs.jsonl.new"
    rotated.write_text(line(event="completed") + line(event="released"))
    os.replace(rotated, path)  # logrotate-style: a new inode
    assert [r["event"] for r in c.collect(T0 + 2000)] == ["completed", "released"]


def test_missing_file_is_unavailable(tmp_path):
    with pytest.raises(CollectorUnavailable, match="does not exist"):
        JobFileCollector(tmp_path / "none.jsonl").collect(T0)
