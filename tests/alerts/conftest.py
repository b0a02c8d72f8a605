"""A chDB store per test module (chDB allows one open data directory per process: closed at the end of
the module, so that other modules can open theirs), holding analyzer output written directly: the
exporter reads only the analyzers' tables, and writing them spells out the situations each test needs
(a job whose data stall dominates, one in its checkpoint, a straggler)."""

from __future__ import annotations

import pytest

from pipeline import ddl
from pipeline.chdb_store import ChdbStore

T0 = 1_767_225_600  # 2026-01-01 00:00 UTC
WINDOW_S = 60
WINDOWS = 30
CLUSTER = "demo-east"
STALLED, CHECKPOINTING, HEALTHY = "stall-1", "ckpt-1", "good-1"
STRAGGLER_NODE = "gpu-shared-007"


def _windows() -> list[tuple]:
    """(job, team, pool, window index, category, gpu_seconds, evidence), 8 GPUs x 60 s per window."""
    rows = []
    for i in range(WINDOWS):
        for job, team in ((STALLED, "llm-pretrain"), (CHECKPOINTING, "vision")):
            if job == CHECKPOINTING and i == WINDOWS - 1:
                rows.append((job, team, "core", i, "checkpoint", 480.0, ""))
            else:
                rows.append(
                    (job, team, "core", i, "data_stall", 300.0, "storage /data at 95 % of the ceiling")
                )
                rows.append((job, team, "core", i, "productive", 180.0, ""))
        straggling = i % 10 == 0
        rows.append((HEALTHY, "research", "shared", i, "productive", 420.0 if straggling else 480.0, ""))
        if straggling:
            rows.append(
                (HEALTHY, "research", "shared", i, "comm_stall", 60.0, f"straggler {STRAGGLER_NODE} GPU 3")
            )
    for k in range(5):  # small jobs that ended early: neither top by waste nor running
        rows.append((f"small-{k}", "speech", "experiment", 0, "idle", 1.0 + k, "held after completed"))
    return rows


def fill(store) -> None:
    values = ", ".join(
        f"('{CLUSTER}', '{job}', toDateTime({T0 + i * WINDOW_S}, 'UTC'), {WINDOW_S}, '{team}', "
        f"'{pool}', 'acct', '{cat}', {secs}, 0, '{why}')"
        for job, team, pool, i, cat, secs, why in _windows()
    )
    store.execute(
        "INSERT INTO goodput_windows (cluster, job_id, window_start, window_s, team, pool, account, category,"
        f" gpu_seconds, cost, evidence) VALUES {values}"
    )
    live = ", ".join(  # the stalled job's last 2 windows again and 2 more, as live runs wrote them, and
        # one from an earlier live run, 20 windows before: out of the last live_window_s (600 s)
        f"('{CLUSTER}', '{STALLED}', toDateTime({T0 + i * WINDOW_S}, 'UTC'), {WINDOW_S}, 'llm-pretrain', "
        f"'core', 'acct', '{cat}', {secs}, 0, '')"
        for i, cat, secs in [
            *(
                (i, c, s)
                for i in range(WINDOWS - 2, WINDOWS + 2)
                for c, s in (("data_stall", 300.0), ("productive", 180.0))
            ),
            (WINDOWS - 18, "idle", 480.0),
        ]
    )
    store.execute(
        "INSERT INTO goodput_live (cluster, job_id, window_start, window_s, team, pool, account, category,"
        f" gpu_seconds, cost, evidence) VALUES {live}"
    )
    store.execute(
        "INSERT INTO scheduling_delay (cluster, job_id, team, pool, queue, priority, gpus_requested,"
        " submitted, first_allocated, gang_complete, queue_wait_s, gang_wait_s) VALUES "
        f"('{CLUSTER}', '{STALLED}', 'llm-pretrain', 'core', 'q', 0, 8, toDateTime64({T0 - 600}, 3, 'UTC'),"
        f" toDateTime64({T0 + 60}, 3, 'UTC'), toDateTime64({T0 + 120}, 3, 'UTC'), 660, 60),"
        f"('{CLUSTER}', 'gang-1', 'vision', 'core', 'q', 0, 64, toDateTime64({T0}, 3, 'UTC'),"
        f" toDateTime64({T0 + 300}, 3, 'UTC'), NULL, 300, NULL),"
        f"('{CLUSTER}', 'queued-1', 'vision', 'core', 'q', 0, 64, toDateTime64({T0 + 900}, 3, 'UTC'),"
        " NULL, NULL, NULL, NULL)"
    )
    store.execute(
        "INSERT INTO faults (cluster, job_id, attempt, ts, event, kind, owner, reason, xid, exit_code, node,"
        " gpu, nic, located_by, lost_gpu_seconds, restart_gpu_seconds, held_gpu_seconds, gpu_seconds, cost)"
        f" VALUES ('{CLUSTER}', '{HEALTHY}', 1, toDateTime64({T0 + 400}, 3, 'UTC'), 'failed', 'xid_hw',"
        " 'job', 'xid:79', 79, 1, 'gpu-shared-001', 2, '', 'xid', 10, 10, 0, 20, 1)"
    )


@pytest.fixture(scope="module")
def alert_store(tmp_path_factory):
    store = ChdbStore(tmp_path_factory.mktemp("alerts") / "store")
    ddl.migrate(store)
    fill(store)
    yield store
    store.close()
