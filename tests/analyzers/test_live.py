"""A live run (pipeline/analyzers/run.py run_live) classifies only the last minutes, into goodput_live,
with each job's numbers carried from its last whole run (job_state): its windows equal the whole run's
where those numbers hold, and a job no whole run has seen is classified from its own windows."""

import subprocess
import sys
import threading
import time

import pytest

from contracts import catalog
from pipeline import ddl
from pipeline.analyzers import run as analyzers
from pipeline.analyzers.schedule import Statement
from tests.analyzers.scenario import T0, Scenario, ms
from tests.loader.helpers import GOODPUT

N1, N2 = "gpu-core-001", "gpu-core-002"
XMIT = 1.0e6  # the example config's xmit_wait_per_s
SKEW_S = 20  # N1's clock is this far ahead of the scheduler's
STALL_FROM, END = 900, 1200


def stalled_job(sc: Scenario) -> None:
    """Job j on N1 (clock 20 s ahead), GPUs 0-1: 90 % SM until 900 s, then a steady 45 % to its end at
    1200 s, with xmit_wait at 0.2 of its threshold while healthy and 0.8 in the stall. Minutes of the
    stall alone would say b* = 45 % (no loss), no baseline (0.8 is no evidence) and no clock offset;
    the whole run says half of each stalled second lost, to the fabric, risen 4x over its baseline."""
    j = dict(job_id="j", account="research")
    sc.job(dict(t=0, event="allocated", node=N1, gpu_indices=[0, 1], **j))
    sc.job(dict(t=0, event="gang_complete", **j), dict(t=0, event="running", **j))
    sc.job(
        dict(t=END, event="completed", **j), dict(t=END, event="released", node=N1, gpu_indices=[0, 1], **j)
    )
    busy = lambda s, g: 90.0 if s - SKEW_S <= STALL_FROM else 45.0  # noqa: E731
    sc.gpu(N1, [0, 1], SKEW_S, END + SKEW_S, busy, job_id="j")
    for t0, t1, level in ((0, STALL_FROM, 0.2), (STALL_FROM, END, 0.8)):
        sc.rows(
            "nic",
            N1,
            t0 + SKEW_S,
            t1 + SKEW_S,
            device="mlx5_0",
            port=1,
            link_layer="InfiniBand",
            xmit_wait_per_s=level * XMIT,
        )


def covered(sc: Scenario, from_ms: int) -> bool:
    """Whether a live run from `from_ms` reads the rollups' time-first copies."""
    return analyzers.recent_covers(analyzers.copies_from(sc.store), from_ms)


def new_job(sc: Scenario, start: int) -> None:
    """Job k on N2 from `start` to 1200 s: 90 % SM, every third second of its last 100 s at 20 %."""
    j = dict(job_id="k", account="research")
    sc.job(dict(t=start, event="allocated", node=N2, gpu_indices=[0, 1, 2, 3], **j))
    sc.job(dict(t=start, event="gang_complete", **j), dict(t=start + 10, event="running", **j))
    sc.job(
        dict(t=END, event="completed", **j),
        dict(t=END, event="released", node=N2, gpu_indices=[0, 1, 2, 3], **j),
    )
    sc.gpu(
        N2, [0, 1, 2, 3], start, END, lambda s, g: 20.0 if s > END - 100 and s % 3 == 0 else 90.0, job_id="k"
    )


def rows(sc: Scenario, table: str, since: int, job_id: str | None = None) -> list[tuple]:
    where = f"window_start >= toDateTime({ms(since) // 1000})" + (
        f" AND job_id = '{job_id}'" if job_id else ""
    )
    t = sc.store.query_arrow(
        "SELECT job_id, toUnixTimestamp(window_start) - intDiv({T0}, 1000) AS w, window_s, team, pool, "
        f"account, category, round(gpu_seconds, 9), round(cost, 9), evidence FROM {table} WHERE {where} "
        "ORDER BY job_id, w, category".replace("{T0}", str(T0))
    )
    return list(zip(*(t.column(i).to_pylist() for i in range(t.num_columns)), strict=True))


def live(sc: Scenario, since: float) -> None:
    analyzers.run_live(sc.store, sc.cfg, ms(since), rollups=sc.rollups, parts=sc.parts)


def test_a_whole_run_keeps_what_a_live_run_needs(sc):
    stalled_job(sc)
    sc.load()
    sc.analyze(0, END + 100)
    t = sc.store.query_arrow(
        "SELECT healthy_half_keys, noise_half_keys, starts, baselines, clock_offsets "
        f"FROM {catalog.JOB_STATE}"
    ).to_pylist()
    assert len(t) == 1
    state = t[0]
    assert state["healthy_half_keys"] == 2 * 9000  # b* = 90.00 %
    assert state["noise_half_keys"] == 0
    # `running` in gang_complete's millisecond is coarse (3c): training started with the first sample
    assert [tuple(a.values()) for a in state["starts"]] == [(1, ms(0))]
    assert [tuple(b.values()) for b in state["baselines"]] == [(N1, 0, 200_000)]
    assert [tuple(o.values()) for o in state["clock_offsets"]] == [(N1, SKEW_S * 1000)]


def test_live_windows_equal_the_whole_runs_where_the_numbers_hold(sc):
    stalled_job(sc)
    sc.load()
    sc.analyze(0, END + 100)
    whole = rows(sc, catalog.GOODPUT_WINDOWS, STALL_FROM)
    assert {c for _, _, _, _, _, _, c, _, _, _ in whole} == {"productive", "comm_stall"}
    before = sc.dump()
    live(sc, STALL_FROM)
    got = rows(sc, catalog.GOODPUT_LIVE, 0)
    assert got == whole
    assert sum(r[7] for r in got if r[6] == "comm_stall") == pytest.approx(300 * 2 * 0.5, rel=0.01)
    live(sc, STALL_FROM)  # again: its rows replaced, not added
    assert rows(sc, catalog.GOODPUT_LIVE, 0) == whole
    after = sc.dump()
    after.pop(catalog.GOODPUT_LIVE), before.pop(catalog.GOODPUT_LIVE)
    assert after == before  # goodput_windows, job_summary, job_state and the rest untouched


def test_the_time_first_copies_are_read_where_they_cover_the_minutes(sc, monkeypatch):
    """A live run reads its minutes from the rollups' time-first copies when they cover them, and from
    the rollups when they do not (minutes older than the copies keep, a store not migrated to version 4):
    the same windows either way. An emptied copy stands for an expired one: read, it would lose rows."""
    stalled_job(sc)
    sc.load()
    sc.analyze(0, END + 100)
    whole = rows(sc, catalog.GOODPUT_WINDOWS, STALL_FROM)
    assert covered(sc, ms(STALL_FROM))
    live(sc, STALL_FROM)
    assert rows(sc, catalog.GOODPUT_LIVE, 0) == whole
    for copy in catalog.ROLLUP_RECENT.values():
        sc.store.execute(f"TRUNCATE TABLE {copy}")
    monkeypatch.setattr(ddl, "RECENT_TTL_DAYS", 0.1)  # 2.4 h: the minutes (5.75-6.75 h old) are older
    assert not covered(sc, ms(STALL_FROM))
    assert covered(sc, int(time.time() * 1000) - 3_600_000)  # an hour ago is not
    live(sc, STALL_FROM)
    assert rows(sc, catalog.GOODPUT_LIVE, 0) == whole
    monkeypatch.undo()
    sc.store.execute(f"DELETE FROM {catalog.SCHEMA_MIGRATIONS} WHERE version = 4")
    assert not covered(sc, ms(STALL_FROM))
    ddl.migrate(sc.store)  # copies the rollups' last days again and records version 4
    assert covered(sc, ms(STALL_FROM))
    live(sc, STALL_FROM)
    assert rows(sc, catalog.GOODPUT_LIVE, 0) == whole


def test_without_its_state_the_stall_is_read_off_the_minutes_alone(sc):
    """The same live run before any whole run: what the carried numbers change (and a test above that
    equality could not pass without them)."""
    stalled_job(sc)
    sc.load()
    live(sc, STALL_FROM)
    got: dict[str, float] = {}
    for _, _, _, _, _, _, c, s, _, _ in rows(sc, catalog.GOODPUT_LIVE, 0):
        got[c] = got.get(c, 0.0) + s
    assert got == {"productive": pytest.approx(300 * 2, abs=1e-6)}


@pytest.mark.parametrize("start", [STALL_FROM, STALL_FROM + 55])  # at the live span's start, inside it
def test_a_job_no_whole_run_has_seen_is_classified_from_its_own_windows(sc, start):
    stalled_job(sc)
    sc.load()
    sc.analyze(0, STALL_FROM)
    new_job(sc, start=start)
    sc.load()
    live(sc, STALL_FROM)
    provisional = rows(sc, catalog.GOODPUT_LIVE, 0, "k")
    sc.analyze(0, END + 100)
    assert provisional == rows(sc, catalog.GOODPUT_WINDOWS, 0, "k")
    assert {c for _, _, _, _, _, _, c, _, _, _ in provisional} >= {"startup", "productive", "idle"}


def test_a_live_span_starts_at_a_window_boundary(sc):
    """A start inside a window takes the whole window: a window is never half classified."""
    stalled_job(sc)
    sc.load()
    sc.analyze(0, END + 100)
    live(sc, STALL_FROM + 9.999)
    assert rows(sc, catalog.GOODPUT_LIVE, 0) == rows(sc, catalog.GOODPUT_WINDOWS, STALL_FROM)


def test_a_live_run_replaces_only_its_windows(sc):
    stalled_job(sc)
    sc.load()
    sc.analyze(0, END + 100)
    live(sc, STALL_FROM - 300)
    earlier = rows(sc, catalog.GOODPUT_LIVE, STALL_FROM - 300)
    live(sc, STALL_FROM)
    assert rows(sc, catalog.GOODPUT_LIVE, 0) == earlier
    assert [r for r in earlier if r[1] < STALL_FROM] == [
        r for r in rows(sc, catalog.GOODPUT_WINDOWS, 0) if STALL_FROM - 300 <= r[1] < STALL_FROM
    ]


def test_goodput_analyze_live_after_an_ingest_carries_the_whole_runs_numbers(tmp_path):
    """The command: `goodput ingest --from` loads and runs a whole analysis, `goodput analyze --live`
    then classifies the data's last SECONDS with its numbers (the stall is lost to the fabric)."""
    sc = Scenario(store=None)  # only encodes the batches
    stalled_job(sc)
    (tmp_path / "msgs.jsonl").write_bytes(b"\n".join(value for _, _, value in sc.batches) + b"\n")
    store = str(tmp_path / "store")

    def goodput(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([GOODPUT, *args], capture_output=True, text=True, timeout=300)

    assert goodput("ingest", "--from", str(tmp_path / "msgs.jsonl"), "--store", store).returncode == 0
    bad = goodput("analyze", "--live", "0", "--store", store)
    assert bad.returncode == 2 and bad.stderr.strip().splitlines() == [
        "goodput analyze: --live 0.0: give the seconds back from the end of the data (> 0), without "
        "--since-ms/--until-ms (a live run always ends at the end of the data)"
    ]
    # the data ends at 1,220 s (N1's clock is 20 s ahead): its last 320 s are the stall's windows
    p = goodput("analyze", "--live", "320", "--store", store)
    assert p.returncode == 0 and "live analyzers: goodput.sql" in p.stderr, p.stderr
    read = (
        "import sys; from pipeline.chdb_store import ChdbStore; s = ChdbStore(sys.argv[1]); "
        "print(s.query_arrow(\"SELECT sumIf(gpu_seconds, category = 'comm_stall') AS c "
        "FROM goodput_live\").to_pylist()[0]['c']); s.close()"
    )
    got = subprocess.run([sys.executable, "-c", read, store], capture_output=True, text=True, timeout=120)
    assert float(got.stdout) == pytest.approx(300 * 2 * 0.5, rel=0.01), got.stderr


class Recording:
    """A store that notes how many statements run at once at most (the live run's own threads), DELETEs
    aside: they take no worker (schedule.py). Until it has seen two at once, a temp table's statement
    waits for company (2 s at most), so that the count does not hang on how fast a thread starts."""

    def __init__(self, store, workers: int):
        self.store, self.concurrent_statements = store, workers
        self.running, self.most, self.lock = 0, 0, threading.Condition()

    def execute(self, sql, params=None):
        works = not Statement(sql).waits
        with self.lock:
            self.running += works
            self.most = max(self.most, self.running)
            self.lock.notify_all()
            if self.concurrent_statements > 1 and sql.startswith("CREATE OR REPLACE TABLE tmp_"):
                self.lock.wait_for(lambda: self.most > 1, timeout=2)
        try:
            self.store.execute(sql, params)
        finally:
            with self.lock:
                self.running -= works

    def __getattr__(self, name):
        return getattr(self.store, name)


def test_statements_two_at_a_time_give_the_rows_of_one_at_a_time(sc):
    """A live run runs its statements two at once where no table orders them (schedule.py): the same
    rows as one after the other, here with two jobs, a stall, a clock offset and a job no whole run saw."""
    stalled_job(sc)
    new_job(sc, 1000)
    sc.load()
    sc.analyze(0, 950)  # k unseen: its b* comes from the live minutes
    got = {}
    for workers in (1, 2):
        store = Recording(sc.store, workers)
        analyzers.run_live(store, sc.cfg, ms(STALL_FROM), rollups=sc.rollups, parts=sc.parts)
        assert store.most == workers
        got[workers] = rows(sc, catalog.GOODPUT_LIVE, 0)
    assert got[2] == got[1] and {r[0] for r in got[1]} == {"j", "k"}
