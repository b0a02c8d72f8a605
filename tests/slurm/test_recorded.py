"""The collector on recorded squeue --json output, both shapes, no Slurm needed.

fixtures/squeue-22.05-*.json are captured from Debian's Slurm 22.05 (data_parser v0.0.38) running the
test cluster; fixtures/squeue-v0.0.4[01]-*.json are written from the documented OpenAPI schema of
data_parser v0.0.40/v0.0.41 (23.11, 24.05), covering states and flags a test cluster cannot produce:
multi-node gangs, CONFIGURING, OUT_OF_MEMORY, NODE_FAIL, PREEMPTED and a requeue in flight.
"""

import json
import pathlib

import pytest

from collectors.base import CollectorError, CollectorUnavailable
from collectors.slurm import SlurmCollector, SubprocessRunner, gpu_count, gpu_indices, parse_job
from contracts import schema

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
T0 = 1767225600  # the v0.0.4x samples count from 2026-01-01T00:00:00Z


def replay(*names: str) -> tuple[SlurmCollector, list[list[dict]]]:
    """Feeds the named samples to one collector, one per poll; returns it and each poll's rows."""
    texts = iter([(FIXTURES / n).read_text() for n in names])
    collector = SlurmCollector(run=lambda argv: next(texts))
    return collector, [collector.collect(now_ms=0) for _ in names]


def brief(rows, job_id):
    """(event, attempt, seconds after T0, node, gpu_indices, reason, exit_code) of one job's rows."""
    return [
        (
            r["event"],
            r["attempt"],
            r["ts_ms"] // 1000 - T0,
            r.get("node"),
            r.get("gpu_indices"),
            r.get("reason"),
            r.get("exit_code"),
        )
        for r in rows
        if r["job_id"] == job_id
    ]


def check_schema(rows):
    names = {f.name: f for f in schema.JOB.fields}
    for row in rows:
        assert set(schema.JOB.required) <= set(row), row
        assert set(row) <= set(names), set(row) - set(names)
        assert row["event"] in schema.JOB_EVENTS
        for k, v in row.items():
            want = {"int": int, "str": str, "int_list": list}[names[k].type]
            assert isinstance(v, want), (k, v)
            if names[k].min is not None and isinstance(v, int):
                assert v >= names[k].min, (k, v)


V41 = [f"squeue-v0.0.41-poll{i}.json" for i in (1, 2, 3)]
ALL8 = list(range(8))


def test_v041_lifecycle_across_three_polls():
    _, (p1, p2, p3) = replay(*V41)
    for rows in (p1, p2, p3):
        check_schema(rows)
    # a two-node gang that runs and completes
    assert brief(p1, "101") == [
        ("submitted", 1, 0, None, None, None, None),
        ("allocated", 1, 10, "gpu-01", ALL8, None, None),
        ("allocated", 1, 10, "gpu-02", ALL8, None, None),
        ("gang_complete", 1, 10, None, None, None, None),
        ("running", 1, 10, None, None, None, None),
    ]
    assert brief(p2, "101") == [
        ("completed", 1, 150, None, None, None, 0),
        ("released", 1, 150, "gpu-01", ALL8, None, None),
        ("released", 1, 150, "gpu-02", ALL8, None, None),
    ]
    # pending on Resources, then runs on the nodes 101 freed, then exits 2
    assert brief(p1, "102") == [("submitted", 1, 20, None, None, None, None)]
    assert [e[:4] for e in brief(p2, "102")] == [
        ("allocated", 1, 151, "gpu-01"),
        ("allocated", 1, 151, "gpu-02"),
        ("gang_complete", 1, 151, None),
        ("running", 1, 151, None),
    ]
    assert brief(p3, "102")[0] == ("failed", 1, 250, None, None, "exit_code:2", 2)
    # CONFIGURING: allocated, but the gang is complete only when RUNNING without the flag
    assert [e[0] for e in brief(p1, "103")] == ["submitted", "allocated", "allocated"]
    assert [e[:3] for e in brief(p2, "103")] == [("gang_complete", 1, 40), ("running", 1, 40)]
    assert brief(p3, "103")[0] == ("failed", 1, 260, None, None, "node_lost", 137)
    # OUT_OF_MEMORY, killed by SIGKILL; released with the indices seen while it ran
    assert brief(p2, "104") == [
        ("failed", 1, 160, None, None, "oom", 137),
        ("released", 1, 160, "gpu-05", [0, 1, 4, 5], None, None),
    ]
    # node failure with requeue: the attempt's GPUs are released, attempt 2 starts elsewhere
    assert brief(p2, "105") == [
        ("released", 1, 170, "gpu-06", [4, 5, 6, 7], None, None),
        ("restarted", 2, 170, None, None, None, None),
    ]
    assert brief(p3, "105")[0] == ("allocated", 2, 280, "gpu-09", [0, 1, 2, 3], None, None)
    assert brief(p2, "106") == [
        ("preempted", 1, 180, None, None, "preempted", 143),
        ("released", 1, 180, "gpu-07", [2, 3], None, None),
    ]
    assert brief(p2, "107")[0] == ("failed", 1, 190, None, None, "timeout", 143)
    # cancelled while pending: never allocated, so nothing to release
    assert brief(p2, "108") == [("cancelled", 1, 195, None, None, "user", 0)]


def test_rows_carry_the_jobs_attributes():
    _, (p1, *_) = replay(V41[0])
    row = next(r for r in p1 if r["job_id"] == "106")
    assert row["account"] == "ml-intern" and row["user"] == "alice" and row["queue"] == "h100"
    assert row["priority"] == 100 and row["gpus_requested"] == 2 and row["source"] == "slurm"
    assert next(r for r in p1 if r["job_id"] == "101")["gpus_requested"] == 16


def test_same_poll_twice_emits_nothing_new():
    _, (first, again) = replay(V41[0], V41[0])
    assert first and again == []


def test_jobs_that_leave_squeue_are_forgotten():
    collector, _ = replay(V41[0], V41[0])
    collector._run = lambda argv: json.dumps({"jobs": [], "errors": []})
    assert collector.collect(0) == []
    assert collector._jobs == {}


def test_v040_numbers_as_structs_raw_exit_status_and_old_job_resources():
    _, (rows,) = replay("squeue-v0.0.40-mixed.json")
    check_schema(rows)
    assert [e[:5] for e in brief(rows, "201")][1:3] == [
        ("allocated", 1, 5, "node1", [0, 1, 2, 3]),
        ("allocated", 1, 5, "node2", [4, 5, 6, 7]),
    ]
    # seen for the first time already ended: its whole history, from the job's own times
    assert [e[:3] for e in brief(rows, "202")] == [
        ("submitted", 1, 0),
        ("allocated", 1, 6),
        ("gang_complete", 1, 6),
        ("running", 1, 6),
        ("failed", 1, 66),
        ("released", 1, 66),
    ]
    assert brief(rows, "202")[4][5:] == ("exit_code:3", 3)  # raw wait status 768
    assert brief(rows, "203")[-2][5:] == ("user", 143)  # raw status 15: SIGTERM
    assert next(r for r in rows if r["job_id"] == "204")["priority"] == 1


def test_2205_capture_running_and_pending():
    _, (rows,) = replay("squeue-22.05-running-pending.json")
    check_schema(rows)
    t = (
        json.loads((FIXTURES / "squeue-22.05-running-pending.json").read_text())["jobs"][0]["start_time"]
        * 1000
    )
    assert [(r["event"], r.get("gpu_indices")) for r in rows if r["job_id"] == "1"] == [
        ("submitted", None),
        ("allocated", ALL8),
        ("gang_complete", None),
        ("running", None),
    ]
    assert all(r["ts_ms"] == t for r in rows if r["job_id"] == "1" and r["event"] != "submitted")
    assert [r["event"] for r in rows if r["job_id"] == "2"] == ["submitted"]
    assert {r["account"] for r in rows} == {"ml"}


def test_2205_capture_sequence_failed_requeued_cancelled():
    _, (p1, p2, p3) = replay(
        "squeue-22.05-running-pending.json",
        "squeue-22.05-ended-requeued.json",
        "squeue-22.05-cancelled-pending.json",
    )
    assert [(r["event"], r["attempt"]) for r in p2 if r["job_id"] == "3"] == [
        ("released", 1),
        ("restarted", 2),
    ]
    failed = next(r for r in p2 if r["event"] == "failed")
    assert (failed["job_id"], failed["reason"], failed["exit_code"]) == ("2", "exit_code:3", 3)
    assert [(r["event"], r["attempt"], r["reason"]) for r in p3] == [("cancelled", 2, "user")]


@pytest.mark.parametrize(
    "spec, n",
    [
        ("gres:gpu:8", 8),
        ("gres/gpu:a100:2", 2),
        ("cpu=4,mem=8G,gres/gpu=16", 16),
        ("gres/gpu", 1),
        ("gres:gpu:2,gres:nic:1", 2),
        ("cpu=1,mem=8G", None),
        ("", None),
        (None, None),
    ],
)
def test_gpu_count(spec, n):
    assert gpu_count(spec) == n


@pytest.mark.parametrize(
    "detail, idx",
    [
        ("gpu:8(IDX:0-7)", ALL8),
        ("gpu:a100:2(IDX:0,3)", [0, 3]),
        ("gpu:(null):1(IDX:5)", [5]),
        ("gpu:0(IDX:N/A)", None),
        ("nic:1(IDX:0)", None),
        ("gpu:h100:2(IDX:0-1),nic:1(IDX:0)", [0, 1]),
    ],
)
def test_gpu_indices(detail, idx):
    assert gpu_indices(detail) == idx


def test_gpus_requested_from_tres_per_node_times_nodes_and_zero_without_gpus():
    assert parse_job({"job_id": 1, "tres_per_node": "gres:gpu:4", "node_count": 2}).gpus_requested == 8
    assert parse_job({"job_id": 1, "tres_per_job": "gres/gpu:16"}).gpus_requested == 16
    assert parse_job({"job_id": 1, "tres_req_str": "cpu=1,mem=8G"}).gpus_requested == 0


@pytest.mark.parametrize(
    "output, match",
    [
        ("not json", "invalid JSON"),
        ('{"meta": {}}', "no `jobs` array"),
        (
            '{"jobs": [], "errors": [{"error": "Unable to contact slurm controller", "error_number": 1}]}',
            "contact",
        ),
        ('{"jobs": [{"name": "no id"}]}', "cannot read job"),
    ],
)
def test_bad_output_is_a_collector_error(output, match):
    with pytest.raises(CollectorError, match=match):
        SlurmCollector(run=lambda argv: output).collect(0)


def test_runner_errors_name_the_command_and_stderr():
    with pytest.raises(CollectorError, match=r"sh -c .* exited 3: slurm_load_jobs error"):
        SubprocessRunner()(["sh", "-c", "echo 'slurm_load_jobs error' >&2; exit 3"])
    with pytest.raises(CollectorError, match="did not answer"):
        SubprocessRunner(timeout_s=0.2)(["sleep", "5"])


def test_squeue_not_installed_is_unavailable():
    runner = SubprocessRunner(env={"PATH": "/nonexistent"})
    with pytest.raises(CollectorUnavailable, match="squeue not found"):
        SlurmCollector(run=runner).collect(0)


def squeue(*jobs: dict) -> str:
    return json.dumps({"jobs": list(jobs), "errors": []})


def job9(state, gres=(), nodes="gpu-01", restart_cnt=0, submit=0, start=1, end=9):
    """Job 9 in the v0.0.41 shape, times in seconds after T0."""
    return {
        "job_id": 9,
        "job_state": state,
        "nodes": nodes,
        "gres_detail": list(gres),
        "restart_cnt": restart_cnt,
        "submit_time": {"set": True, "number": T0 + submit},
        "start_time": {"set": True, "number": T0 + start},
        "end_time": {"set": True, "number": T0 + end},
        "tres_per_node": "gres/gpu:2",
    }


def run_polls(*polls: dict) -> list[dict]:
    texts = iter([squeue(p) for p in polls])
    collector = SlurmCollector(run=lambda argv: next(texts))
    rows = [r for _ in polls for r in collector.collect(0)]
    check_schema(rows)
    return rows


def test_indices_that_appear_after_the_allocation_correct_it_and_are_kept_for_the_release():
    rows = run_polls(
        job9(["RUNNING", "CONFIGURING"]), job9(["RUNNING"], ["gpu:2(IDX:4-5)"]), job9(["COMPLETED"])
    )
    assert brief(rows, "9") == [
        ("submitted", 1, 0, None, None, None, None),
        ("allocated", 1, 1, "gpu-01", None, None, None),
        # the same JOB key again, now with the placement: the store keeps this row
        ("allocated", 1, 1, "gpu-01", [4, 5], None, None),
        ("gang_complete", 1, 1, None, None, None, None),
        ("running", 1, 1, None, None, None, None),
        ("completed", 1, 9, None, None, None, None),
        ("released", 1, 9, "gpu-01", [4, 5], None, None),
    ]


def test_a_job_that_ran_between_two_polls_is_allocated_without_placement():
    pending = job9(["PENDING"], nodes="", start=0, end=0)
    rows = run_polls(pending, job9(["COMPLETED"]))
    assert [e[:5] for e in brief(rows, "9")] == [
        ("submitted", 1, 0, None, None),
        ("allocated", 1, 1, "gpu-01", None),  # gres_detail is emptied at the end: no indices
        ("gang_complete", 1, 1, None, None),
        ("running", 1, 1, None, None),
        ("completed", 1, 9, None, None),
        ("released", 1, 9, "gpu-01", None),
    ]


def test_an_attempt_that_ran_and_was_requeued_between_two_polls_keeps_its_allocation():
    pending = job9(["PENDING"], nodes="", start=0, end=0)
    # requeued: restart_cnt grew, submit_time reset to the requeue, old nodes/start kept while COMPLETING
    requeued = job9(["PENDING", "REQUEUED", "COMPLETING"], restart_cnt=1, submit=50, start=5, end=50)
    rows = run_polls(pending, requeued)
    assert [e[:5] for e in brief(rows, "9")] == [
        ("submitted", 1, 0, None, None),
        ("allocated", 1, 5, "gpu-01", None),
        ("released", 1, 50, "gpu-01", None),
        ("restarted", 2, 50, None, None),
    ]
    # an agent that first sees the job in that state emits the same rows, less `submitted`
    assert brief(run_polls(requeued), "9") == brief(rows, "9")[1:]


def test_a_preempted_and_requeued_job_first_seen_ended_is_allocated_before_its_release():
    rows = run_polls(job9(["PREEMPTED", "REQUEUED"], gres=[]))
    assert [e[:6] for e in brief(rows, "9")] == [
        ("submitted", 1, 0, None, None, None),
        ("allocated", 1, 1, "gpu-01", None, None),
        ("preempted", 1, 9, None, None, "preempted"),
        ("released", 1, 9, "gpu-01", None, None),
    ]


def test_a_job_requeued_before_it_was_first_seen_with_nothing_left_of_the_old_attempt():
    rows = run_polls(job9(["PENDING", "REQUEUED"], nodes="", restart_cnt=2, submit=50, start=0, end=0))
    assert brief(rows, "9") == [("restarted", 3, 50, None, None, None, None)]
