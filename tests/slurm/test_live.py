"""The Slurm collector against a real Slurm 22.05 (tests/fixtures/slurm.py): real jobs driven through
their lifecycle, and the events the collector emits for them.

All tests share one single-node cluster (gpu-01, gpu:8); each watches only its own job ids. The
time-limit job cannot be quicker than Slurm allows (limits are whole minutes, checked every 30 s), so
it is submitted when this module starts and asserted last, while the other tests run.
"""

from __future__ import annotations

import getpass
import json
import pathlib
import time

import pytest

from collectors.base import CollectorError
from collectors.slurm import SlurmCollector, SubprocessRunner

pytestmark = pytest.mark.slurm
POLL_S = 0.2
FIXTURES = pathlib.Path(__file__).parent / "fixtures"


class Watch:
    """One collector polled in a bounded loop, its rows kept per job, for assertions on event order."""

    def __init__(self, cluster) -> None:
        self.cluster = cluster
        self.collector = SlurmCollector(SubprocessRunner(timeout_s=10, env=cluster.env))
        self.rows: list[dict] = []

    def poll(self) -> None:
        self.rows.extend(self.collector.collect(int(time.time() * 1000)))

    def events(self, job_id: str) -> list[dict]:
        return [r for r in self.rows if r["job_id"] == job_id]

    def names(self, job_id: str) -> list[tuple[str, int]]:
        return [(r["event"], r["attempt"]) for r in self.events(job_id)]

    def wait(self, job_id: str, event: str, attempt: int = 1, timeout: float = 30.0) -> dict:
        """Polls until `job_id` emitted `event` for `attempt`; returns that row, or fails with what
        was seen."""
        deadline = time.monotonic() + timeout
        while True:
            self.poll()
            for r in self.events(job_id):
                if r["event"] == event and r["attempt"] == attempt:
                    return r
            if time.monotonic() > deadline:
                state = self.cluster.run(["squeue", "-h", "-t", "all", "-j", job_id, "-o", "%T %r"]).strip()
                pytest.fail(
                    f"job {job_id}: no {event!r} (attempt {attempt}) within {timeout:.0f} s; "
                    f"emitted {self.names(job_id)}; squeue says {state!r}"
                )
            time.sleep(POLL_S)

    def one(self, job_id: str, event: str, attempt: int = 1) -> dict:
        rows = [r for r in self.events(job_id) if r["event"] == event and r["attempt"] == attempt]
        assert len(rows) == 1, (event, attempt, self.names(job_id))
        return rows[0]


def squeue_job(cluster, job_id: str) -> dict:
    return next(
        j for j in json.loads(cluster.run(["squeue", "--json"]))["jobs"] if str(j["job_id"]) == job_id
    )


@pytest.fixture(scope="module", autouse=True)
def timeout_job(slurm_cluster):
    """Started first so its minute-long time limit runs out while the other tests run (see module doc).

    `--time=0:05` asks for 5 s; Slurm rounds limits up to whole minutes, so the limit is 1 minute, and
    OverTimeLimit=0 with KillWait=1 in the fixture's config make the kill follow the next check.
    """
    return slurm_cluster.sbatch("-A", slurm_cluster.account, "--time=0:05", "--wrap", "sleep 300")


def assert_common(row: dict, cluster, gpus: int) -> None:
    assert row["account"] == cluster.account
    assert row["user"] == getpass.getuser()
    assert row["queue"] == "gpu"
    assert row["gpus_requested"] == gpus
    assert row["source"] == "slurm"
    assert row["priority"] > 0


def test_second_full_node_job_pends_behind_the_first_then_both_complete(slurm_cluster):
    c, w = slurm_cluster, Watch(slurm_cluster)
    t_submit = int(time.time()) * 1000
    first = c.sbatch("--gres=gpu:8", "-A", c.account, "--wrap", "sleep 3")
    second = c.sbatch("--gres=gpu:8", "-A", c.account, "--wrap", "true")
    running = w.wait(first, "running")
    assert squeue_job(c, second)["state_reason"] in ("Resources", "Priority")
    assert w.names(second) == [("submitted", 1)]
    assert w.names(first) == [("submitted", 1), ("allocated", 1), ("gang_complete", 1), ("running", 1)]
    alloc = w.one(first, "allocated")
    assert (alloc["node"], alloc["gpu_indices"]) == (c.node, list(range(8)))
    start_ms = squeue_job(c, first)["start_time"] * 1000
    assert alloc["ts_ms"] == running["ts_ms"] == w.one(first, "gang_complete")["ts_ms"] == start_ms
    assert t_submit - 1000 <= w.one(first, "submitted")["ts_ms"] <= start_ms
    for r in w.events(first):
        assert_common(r, c, gpus=8)

    done = w.wait(first, "completed")
    released = w.one(first, "released")
    assert (released["node"], released["gpu_indices"], released["ts_ms"]) == (
        c.node,
        list(range(8)),
        done["ts_ms"],
    )
    assert done["exit_code"] == 0
    assert done["ts_ms"] - start_ms >= 3000
    w.wait(second, "completed")
    assert [e for e, _ in w.names(second)] == [
        "submitted",
        "allocated",
        "gang_complete",
        "running",
        "completed",
        "released",
    ]
    assert w.one(second, "allocated")["ts_ms"] >= released["ts_ms"]


def test_non_zero_exit_is_failed_with_the_exit_code(slurm_cluster):
    c, w = slurm_cluster, Watch(slurm_cluster)
    job = c.sbatch("--gres=gpu:1", "-A", c.account, "--wrap", "sleep 1; exit 3")
    alloc = w.wait(job, "allocated")
    assert alloc["node"] == c.node and len(alloc["gpu_indices"]) == 1
    failed = w.wait(job, "failed")
    assert (failed["reason"], failed["exit_code"]) == ("exit_code:3", 3)
    assert w.one(job, "released")["gpu_indices"] == alloc["gpu_indices"]
    assert "completed" not in [e for e, _ in w.names(job)]
    assert_common(failed, c, gpus=1)


def test_scancel_of_a_running_job_is_cancelled_and_releases_its_gpus(slurm_cluster):
    c, w = slurm_cluster, Watch(slurm_cluster)
    job = c.sbatch("--gres=gpu:2", "-A", c.account, "--wrap", "sleep 300")
    w.wait(job, "running")
    alloc = w.one(job, "allocated")
    c.run(["scancel", job])
    cancelled = w.wait(job, "cancelled")
    assert cancelled["reason"] == "user"
    released = w.one(job, "released")
    assert (released["node"], released["gpu_indices"]) == (c.node, alloc["gpu_indices"])
    assert len(alloc["gpu_indices"]) == 2
    assert cancelled["ts_ms"] == released["ts_ms"] >= alloc["ts_ms"]


def test_scancel_of_a_held_job_is_cancelled_without_an_allocation(slurm_cluster):
    c, w = slurm_cluster, Watch(slurm_cluster)
    job = c.sbatch("--hold", "--gres=gpu:1", "-A", c.account, "--wrap", "true")
    w.wait(job, "submitted")
    c.run(["scancel", job])
    w.wait(job, "cancelled")
    assert w.names(job) == [("submitted", 1), ("cancelled", 1)]


def test_requeue_restarts_with_attempt_2(slurm_cluster):
    c, w = slurm_cluster, Watch(slurm_cluster)
    # the second attempt sees SLURM_RESTART_COUNT=1 and exits at once
    job = c.sbatch(
        "--gres=gpu:1",
        "-A",
        c.account,
        "--wrap",
        '[ "${SLURM_RESTART_COUNT:-0}" -ge 1 ] && exit 0; sleep 300',
    )
    w.wait(job, "running")
    c.run(["scontrol", "requeue", job])
    restarted = w.wait(job, "restarted", attempt=2)
    released = w.one(job, "released", attempt=1)
    assert released["ts_ms"] == restarted["ts_ms"]
    # Slurm holds a requeued job back (BeginTime, about two minutes); let it start sooner. Not in
    # the requeue's own second: slurmd revokes the old attempt's credential with 1 s resolution, and
    # a relaunch in that second was seen to fail the job (NonZeroExitCode) instead of running it.
    deadline = time.monotonic() + 15
    while squeue_job(c, job)["state_reason"] != "BeginTime" and time.monotonic() < deadline:
        time.sleep(POLL_S)
    c.run(["scontrol", "update", f"JobId={job}", "StartTime=now+2"])
    done = w.wait(job, "completed", attempt=2)
    assert done["exit_code"] == 0
    assert w.names(job) == [
        ("submitted", 1),
        ("allocated", 1),
        ("gang_complete", 1),
        ("running", 1),
        ("released", 1),
        ("restarted", 2),
        ("allocated", 2),
        ("gang_complete", 2),
        ("running", 2),
        ("completed", 2),
        ("released", 2),
    ]
    assert squeue_job(c, job)["restart_cnt"] == 1


def test_a_job_that_starts_and_ends_between_two_polls_still_has_its_allocation(slurm_cluster):
    """gres_detail is emptied at the end, so the allocation has its node but no placement."""
    c, w = slurm_cluster, Watch(slurm_cluster)
    job = c.sbatch("--gres=gpu:2", "-A", c.account, "--wrap", "true")
    deadline = time.monotonic() + 30
    while squeue_job(c, job)["job_state"] != "COMPLETED":
        assert time.monotonic() < deadline, squeue_job(c, job)["job_state"]
        time.sleep(POLL_S)
    w.poll()
    assert w.names(job) == [
        ("submitted", 1),
        ("allocated", 1),
        ("gang_complete", 1),
        ("running", 1),
        ("completed", 1),
        ("released", 1),
    ]
    alloc, released = w.one(job, "allocated"), w.one(job, "released")
    assert alloc["node"] == released["node"] == c.node
    assert "gpu_indices" not in alloc and "gpu_indices" not in released
    assert alloc["ts_ms"] == squeue_job(c, job)["start_time"] * 1000
    assert alloc["gpus_requested"] == 2


def test_a_restarted_collector_re_emits_identical_rows(slurm_cluster):
    """Times come from the job, so a second agent (or one restarted) emits rows the loader dedupes."""
    c, w = slurm_cluster, Watch(slurm_cluster)
    job = c.sbatch("-A", c.account, "--wrap", "true")
    w.wait(job, "completed")
    late = Watch(c)
    late.poll()
    key = ("event", "attempt", "node", "ts_ms")
    assert [tuple(r.get(k) for k in key) for r in late.events(job)] == [
        tuple(r.get(k) for k in key) for r in w.events(job)
    ]


def test_live_json_is_the_shape_of_the_recorded_2205_capture(slurm_cluster):
    """Guards the recorded fixtures: if the installed Slurm prints other fields, they need recapturing."""
    c = slurm_cluster
    live = json.loads(c.run(["squeue", "--json"]))
    recorded = json.loads((FIXTURES / "squeue-22.05-running-pending.json").read_text())
    assert live["meta"]["plugin"] == recorded["meta"]["plugin"]
    assert live["jobs"], "the earlier tests left jobs in squeue (MinJobAge)"
    assert set(live["jobs"][0]) - {"job_resources"} == set(recorded["jobs"][1]) - {"job_resources"}


def test_time_limit_is_failed_with_reason_timeout(slurm_cluster, timeout_job):
    c, w = slurm_cluster, Watch(slurm_cluster)
    failed = w.wait(timeout_job, "failed", timeout=150)
    assert failed["reason"] == "timeout"
    assert failed["exit_code"] == 128 + 15  # slurmstepd's SIGTERM
    running = w.one(timeout_job, "running")
    assert failed["ts_ms"] - running["ts_ms"] >= 60_000
    assert w.one(timeout_job, "released")["ts_ms"] == failed["ts_ms"]
    assert_common(failed, c, gpus=0)


def test_squeue_that_cannot_read_its_config_is_a_collector_error_within_the_timeout(slurm_cluster):
    """squeue retries a missing slurm.conf for 60 s; the runner's timeout bounds that and says so."""
    env = {**slurm_cluster.env, "SLURM_CONF": str(slurm_cluster.root / "missing.conf")}
    with pytest.raises(CollectorError, match=r"squeue --json --states=all did not answer within 2 s"):
        SlurmCollector(SubprocessRunner(timeout_s=2, env=env)).collect(0)
