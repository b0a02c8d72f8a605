"""The fleet views of pipeline/analyzers/fleet.sql at their edges: queue delay percentiles, capacity that
reconciles, fragmentation, idle allocations around the reclaim threshold, placement on the network tree,
and re-analysis that changes nothing (docs/goodput-model.md, "Scheduling and capacity", "Topology")."""

from __future__ import annotations

import math
import os
import random
import subprocess
import sys
import textwrap
from datetime import datetime, timezone
from pathlib import Path

import msgspec
import pytest

from contracts import config as config_mod
from tests.analyzers.scenario import T0, Scenario, ms

CORE = [f"gpu-core-{i:03d}" for i in range(1, 17)]
SHR = "gpu-shr-001"


def configured(sc: Scenario, **analyzer) -> Scenario:
    """`sc` with [analyzer] keys replaced and a two-leaf tree over the core pool (8 nodes per leaf, racks
    of 4): the configs the tests below analyse with."""
    cfg = sc.cfg
    topo = config_mod.TopologyConfig(
        switches={
            "leaf1": config_mod.SwitchConfig(nodes=("gpu-core-[001-008]",)),
            "leaf2": config_mod.SwitchConfig(nodes=("gpu-core-[009-016]",)),
            "spine": config_mod.SwitchConfig(switches=("leaf[1-2]",)),
        },
        racks={f"r{i}": (f"gpu-core-[{4 * i - 3:03d}-{4 * i:03d}]",) for i in range(1, 5)},
    )
    sc.cfg = msgspec.structs.replace(
        cfg, analyzer=msgspec.structs.replace(cfg.analyzer, **analyzer), topology=topo
    )
    return sc


def held(sc, job_id, node, gpus, t_sub, t_alloc, t_end, account="llm", queue="core", priority=0, busy=90.0):
    """A job that waits t_alloc - t_sub in the queue, then runs on `gpus` of `node` until t_end."""
    j = dict(job_id=job_id, account=account)
    sc.job(dict(t=t_sub, event="submitted", gpus_requested=len(gpus), queue=queue, priority=priority, **j))
    sc.job(dict(t=t_alloc, event="allocated", node=node, gpu_indices=list(gpus), **j))
    sc.job(dict(t=t_alloc, event="gang_complete", **j), dict(t=t_alloc, event="running", **j))
    sc.job(dict(t=t_end, event="completed", **j), dict(t=t_end, event="released", node=node, **j))
    if busy is not None:
        sc.gpu(node, list(gpus), t_alloc, t_end, busy)


def table(sc, sql: str) -> list[dict]:
    return sc.store.query_arrow(sql).to_pylist()


def nearest_rank(xs: list[float], q: float) -> float:
    return sorted(xs)[math.ceil(round(q * len(xs), 6)) - 1]


def test_queue_delay_percentiles_are_the_nearest_ranks_per_pool_team_and_priority(sc):
    waits = [5.0, 1.0, 9.5, 3.0, 7.0, 2.0, 10.0, 4.25, 8.0, 6.0, 0.5]
    for i, w in enumerate(waits):
        node, gpu = (CORE[0], i) if i < 8 else (SHR, i - 8)
        held(sc, f"q{i}", node, [gpu], 10 * i, 10 * i + w, 200, account="llm" if i % 2 else "cv",
             priority=i % 3, busy=None)  # fmt: skip
    sc.job(dict(t=5, job_id="never", event="submitted", gpus_requested=8, queue="core", account="cv"))
    sc.load()
    sc.analyze(0, 300)
    rows = {(r["by"], r["key"]): r for r in table(sc, "SELECT * FROM queue_delay_day")}
    groups = {
        ("all", ""): range(11),
        ("pool", "core"): range(8),
        ("pool", "shared"): range(8, 11),
        ("team", "llm-pretrain"): range(1, 11, 2),
        ("team", "vision"): range(0, 11, 2),
        **{("priority", str(p)): range(p, 11, 3) for p in range(3)},
    }
    assert set(rows) == set(groups)
    for key, members in groups.items():
        ws = [waits[i] for i in members]
        got = rows[key]
        assert (got["p50_s"], got["p90_s"], got["p99_s"], got["max_s"]) == (
            nearest_rank(ws, 0.5), nearest_rank(ws, 0.9), nearest_rank(ws, 0.99), max(ws)
        ), key  # fmt: skip
        assert got["jobs"] == len(ws)
    # the job still queued counts as waiting, not as a wait of 0
    assert (
        rows["all", ""]["waiting"]
        == rows["pool", "core"]["waiting"]
        == rows["team", "vision"]["waiting"]
        == 1
    )
    assert rows["pool", "core"]["p50_s"] == 4.25  # 8 waits: the 4th smallest (1, 2, 3, 4.25, 5, ...)


def test_capacity_is_allocated_plus_unallocated_exactly_per_pool_and_bucket(sc):
    configured(sc, capacity_bucket_s=600)
    held(sc, "a", CORE[0], range(8), 0, 10, 1000)
    held(sc, "b", CORE[1], [0, 1, 2], 0, 333.3, 777.7, busy=None)
    sc.gpu(CORE[1], [0, 1, 2], 333, 777, lambda s, g: 90.0 if s % 7 else 20.0)
    held(sc, "c", SHR, [0], 0, 120, 1250)
    sc.load()
    sc.analyze(0, 1300)
    rows = table(
        sc, "SELECT *, toUnixTimestamp(bucket_start) * 1000 AS b FROM pool_capacity ORDER BY b, pool"
    )
    as_of = -(-ms(1250) // 10_000) * 10_000  # the end of the data, window-aligned
    assert {r["pool"] for r in rows} == {"core", "shared", "experiment"}
    allocated = {
        (r["pool"], r["b"]): r["us"]
        for r in table(
            sc,
            "SELECT pool, intDiv(toUnixTimestamp(window_start), 600) * 600000 AS b, "
            "sum(toInt64(round(gpu_seconds * 1e6))) AS us FROM goodput_windows GROUP BY pool, b",
        )
    }
    assert sum(allocated.values()) == (8 * 990 + 3 * 444.4 + 1130) * 1_000_000
    for r in rows:
        cap, al, un = (round(r[c] * 1e6) for c in ("capacity_gpu_s", "allocated_gpu_s", "unallocated_gpu_s"))
        assert cap == al + un
        assert r["allocated_pct"] == pytest.approx(100 * al / cap, rel=1e-12)
        assert al == allocated.get((r["pool"], r["b"]), 0)
        assert cap == r["gpus"] * (min(r["b"] + 600_000, as_of) - r["b"]) * 1000
    assert min(r["b"] for r in rows) == T0 // 600_000 * 600_000 and max(r["b"] for r in rows) < as_of


def test_pool_holds_say_which_team_holds_the_core_pool_and_for_how_long(sc):
    held(sc, "a", CORE[0], range(8), 0, 0, 700, account="llm", busy=None)
    sc.job(dict(t=100, job_id="a", event="allocated", node=CORE[1], gpu_indices=[0, 1], account="llm"))
    held(sc, "b", CORE[2], range(4), 0, 50, 350, account="cv", busy=None)
    held(sc, "c", CORE[3], range(4), 0, 400, 700, account="cv", busy=None)  # as long as b: the tie
    held(sc, "d", SHR, range(8), 0, 0, 900, account="cv", busy=None)
    sc.load()
    sc.analyze(0, 1000)
    holds = {
        r["job_id"]: (r["team"], r["pool"], r["pool_class"], r["hold_s"], r["gpus"], r["gpu_hours"])
        for r in table(sc, "SELECT * FROM pool_holds")
    }
    assert holds == {
        "a": ("llm-pretrain", "core", "core", 700.0, 10, (8 * 700 + 2 * 600) / 3600),
        "b": ("vision", "core", "core", 300.0, 4, 4 * 300 / 3600),
        "c": ("vision", "core", "core", 300.0, 4, 4 * 300 / 3600),
        "d": ("vision", "shared", "shared", 900.0, 8, 8 * 900 / 3600),
    }
    days = table(sc, "SELECT * FROM pool_team_day WHERE pool_class = 'core' ORDER BY team")
    got = [(r["team"], r["gpu_hours"], r["jobs"], r["longest_hold_s"], r["longest_hold_job"]) for r in days]
    assert got == [
        ("llm-pretrain", pytest.approx(6800 / 3600, abs=1e-9), 1, 700.0, "a"),
        ("vision", pytest.approx(2400 / 3600, abs=1e-9), 2, 300.0, "b"),
    ]


def test_free_gpus_scattered_over_nodes_are_stranded_for_a_gang_that_needs_a_whole_node(sc):
    """14 core nodes full, 4 GPUs used on each of the last two: 8 GPUs free, no node with 8. A pending
    8-GPU gang cannot use them (fragmented); a pending 4-GPU job could (nothing stranded); a pending
    24-GPU gang is short of GPUs anyway (stranded, not fragmented)."""
    for i, node in enumerate(CORE[:14]):
        held(sc, f"full{i}", node, range(8), 0, 0, 1000, busy=None)
    held(sc, "half1", CORE[14], range(4), 0, 0, 1000, busy=None)
    held(sc, "half2", CORE[15], range(4, 8), 0, 0, 1000, busy=None)
    for job_id, gpus, t0, t1 in (("p8", 8, 100, 200), ("p4", 4, 300, 400), ("p24", 24, 500, 600)):
        j = dict(job_id=job_id, account="cv")
        sc.job(dict(t=t0, event="submitted", gpus_requested=gpus, queue="core", **j))
        sc.job(dict(t=t1, event="cancelled", **j))
    sc.load()
    sc.analyze(0, 1000)
    rows = table(
        sc,
        f"SELECT toUnixTimestamp(window_start) - {T0 // 1000} AS t, * FROM pool_fragmentation "
        "WHERE pool = 'core' ORDER BY t",
    )
    by_t = {r["t"]: r for r in rows}
    assert sorted(by_t) == [*range(100, 200, 10), *range(300, 400, 10), *range(500, 600, 10)]
    for t in (100, 190):
        r = by_t[t]
        assert (r["free_gpus"], r["free_nodes"], r["max_free_on_node"], r["smallest_pending_gpus"]) == (
            8,
            0,
            4,
            8,
        )
        assert (r["stranded_gpus"], r["fragmented"]) == (8, True)
    assert (by_t[300]["smallest_pending_gpus"], by_t[300]["stranded_gpus"], by_t[300]["fragmented"]) == (
        4,
        0,
        False,
    )
    assert (by_t[500]["stranded_gpus"], by_t[500]["fragmented"]) == (8, False)


def test_free_gpus_count_a_gpu_held_twice_once_and_change_exactly_at_allocation_edges(sc):
    """One node's GPUs over time, every other core node full. A job allocated without GPU indices while
    another holds GPUs 0-3 is placed on them too (goodput.sql 3 fills an unplaced job's GPUs from the
    node's, and only a placed allocation cuts another's hold): a GPU held twice is in use once. One job
    starts and one ends exactly at a window's start: in use from its start, free from its end."""
    for i, node in enumerate(CORE[1:]):
        held(sc, f"full{i}", node, range(8), 0, 0, 1000, busy=None)
    spans = {"a": (range(0, 4), 0, 300), "x": (range(0, 4), 100, 150), "c": (range(6, 8), 200, 260)}
    for job_id, (gpus, t0, t1) in spans.items():
        j = dict(job_id=job_id, account="llm")
        placed = {} if job_id == "x" else dict(gpu_indices=list(gpus))
        sc.job(dict(t=t0, event="submitted", gpus_requested=len(gpus), queue="core", **j))
        sc.job(dict(t=t0, event="allocated", node=CORE[0], **placed, **j))
        sc.job(dict(t=t0, event="gang_complete", **j), dict(t=t0, event="running", **j))
        sc.job(dict(t=t1, event="completed", **j), dict(t=t1, event="released", node=CORE[0], **j))
    j = dict(job_id="p", account="cv")
    sc.job(dict(t=0, event="submitted", gpus_requested=8, queue="core", **j))
    sc.job(dict(t=400, event="cancelled", **j))
    sc.load()
    sc.analyze(0, 1000)
    rows = table(
        sc,
        f"SELECT toUnixTimestamp(window_start) - {T0 // 1000} AS t, free_gpus, free_nodes "
        "FROM pool_fragmentation WHERE pool = 'core' ORDER BY t",
    )

    def free_at(t: int) -> int:
        return 8 - len({g for gpus, t0, t1 in spans.values() if t0 <= t < t1 for g in gpus})

    want = [(t, free_at(t), int(free_at(t) == 8)) for t in range(0, 400, 10)]
    assert [(r["t"], r["free_gpus"], r["free_nodes"]) for r in rows] == want
    assert {t: f for t, f, _ in want if t in (90, 100, 150, 200, 260, 300)} == {
        90: 4,
        100: 4,
        150: 4,
        200: 2,
        260: 4,
        300: 8,
    }


@pytest.mark.parametrize("idle_s, candidate", [(59, False), (60, True), (61, True)])
def test_an_idle_allocation_is_a_reclaim_candidate_from_the_threshold_on(sc, idle_s, candidate):
    configured(sc, idle_reclaim_after_s=60.0)
    j = dict(job_id="i", account="research")
    sc.job(dict(t=0, event="allocated", node=CORE[0], gpu_indices=[0, 1], **j))
    sc.job(dict(t=0, event="gang_complete", **j), dict(t=0, event="running", **j))
    sc.job(dict(t=100, event="completed", **j))
    sc.job(dict(t=100 + idle_s, event="released", node=CORE[0], gpu_indices=[0, 1], **j))
    # GPU 1 shows 1.5 % in the middle of the idle stretch: above idle_busy_pct (1 %), it breaks it
    sc.gpu(
        CORE[0], [0, 1], 0, 100 + idle_s, lambda s, g: 90.0 if s <= 100 else (1.5 if g and s == 130 else 1.0)
    )
    sc.load()
    sc.analyze(0, 200)
    rows = table(sc, "SELECT * FROM idle_allocations ORDER BY gpu")
    want = [("i", "research", "core", CORE[0], 0, float(idle_s), idle_s - 60.0)] if candidate else []
    got = [
        (r["job_id"], r["team"], r["pool"], r["node"], r["gpu"], r["idle_s"], r["reclaimable_s"])
        for r in rows
    ]
    assert got == want
    if candidate:
        assert rows[0]["idle_from"].timestamp() * 1000 == ms(100)
        assert rows[0]["gpu_hours"] == pytest.approx(idle_s / 3600, abs=1e-12)


def test_a_gang_scattered_over_two_leaves_crosses_the_spine_beside_its_comm_stall(sc):
    configured(sc)
    held(sc, "one-leaf", CORE[0], range(8), 0, 0, 300)
    sc.job(
        dict(
            t=0, job_id="one-leaf", event="allocated", node=CORE[1], gpu_indices=list(range(8)), account="llm"
        )
    )
    sc.gpu(CORE[1], range(8), 0, 300, 90.0)
    held(sc, "two-leaves", CORE[7], range(8), 0, 0, 300, busy=lambda s, g: 90.0 if s % 2 else 30.0)
    sc.job(
        dict(
            t=0,
            job_id="two-leaves",
            event="allocated",
            node=CORE[8],
            gpu_indices=list(range(8)),
            account="llm",
        )
    )
    sc.gpu(CORE[8], range(8), 0, 300, lambda s, g: 90.0 if s % 2 else 30.0)
    sc.rows("nic", CORE[8], 0, 300, device="mlx5_0", port=1, link_layer="InfiniBand", xmit_wait_per_s=5e6)
    held(sc, "unmapped", SHR, [0], 0, 0, 300)
    sc.load()
    sc.analyze(0, 400)
    rows = {r["job_id"]: r for r in table(sc, "SELECT * FROM job_placement")}
    keys = ("nodes", "leaves", "racks", "crosses_spine", "top_switch", "unmapped_nodes")
    place = {j: tuple(r[k] for k in keys) for j, r in rows.items()}
    assert place == {
        "one-leaf": (2, 1, 1, False, "leaf1", 0),
        "two-leaves": (2, 2, 2, True, "spine", 0),
        "unmapped": (1, 0, 0, False, "", 1),
    }
    assert rows["one-leaf"]["comm_stall_gpu_s"] == 0 and rows["two-leaves"]["comm_stall_pct"] > 10
    dim = table(sc, f"SELECT * FROM dim_topology WHERE node = '{CORE[8]}'")
    assert dim == [
        {"node": CORE[8], "leaf": "leaf2", "spine": "spine", "path": ["leaf2", "spine"], "rack": "r3"}
    ]


def fleet_day(sc):
    """Every fleet view at once: queued jobs, a core hold across the range, idle GPUs, a scattered gang."""
    configured(sc, idle_reclaim_after_s=60.0, capacity_bucket_s=300)
    held(sc, "a", CORE[0], range(8), 0, 12, 700, priority=2)
    sc.job(dict(t=12, job_id="a", event="allocated", node=CORE[9], gpu_indices=list(range(8)), account="llm"))
    sc.gpu(CORE[9], range(8), 12, 700, 90.0)
    held(sc, "b", CORE[1], range(6), 30, 95, 480, account="cv", busy=lambda s, g: 90.0 if s < 300 else 0.0)
    for i in range(2, 16):
        held(sc, f"f{i}", CORE[i], range(8), 0, 1, 900, account="research", busy=None)
    sc.job(dict(t=200, job_id="p", event="submitted", gpus_requested=8, queue="core", account="asr"))
    sc.job(
        dict(t=640, job_id="p", event="allocated", node=CORE[1], gpu_indices=list(range(8)), account="asr")
    )
    sc.job(dict(t=640, job_id="p", event="gang_complete"), dict(t=700, job_id="p", event="cancelled"))


def test_reanalysing_overlapping_ranges_changes_no_fleet_view(sc):
    fleet_day(sc)
    sc.load()
    sc.analyze(0, 1000)
    first = sc.dump()
    for name in ("queue_delay_day", "pool_capacity", "pool_fragmentation", "pool_holds", "pool_team_day",
                 "idle_allocations", "job_placement"):  # fmt: skip
        assert first[name], name
    for t0, t1 in [(333.3, 777.7), (111.1, 555.5), (500.5, 1000), (0, 1000)]:
        sc.analyze(t0, t1)
        assert sc.dump() == first, (t0, t1)
    for name in first:
        sc.store.execute(f"TRUNCATE TABLE {name}")
    sc.analyze(0, 400)
    sc.analyze(400, 1000)
    assert sc.dump() == first


def test_days_are_utc_days_whatever_the_servers_timezone():
    """The day tables compare UTC dates of UTC columns with bounds computed from epoch ms: on a server
    whose timezone puts T0 on another date, a bound read in local time would delete and fill the wrong
    day (here: nothing). chDB takes the process's TZ, so the check runs in a child process."""
    tz = "Pacific/Kiritimati" if T0 // 3_600_000 % 24 >= 12 else "Etc/GMT+12"  # T0's local date != UTC's
    code = textwrap.dedent(
        """
        import sys, tempfile
        from pipeline import ddl
        from pipeline.chdb_store import ChdbStore
        from tests.analyzers.scenario import Scenario
        from tests.analyzers.test_fleet import CORE, held
        with ChdbStore(tempfile.mkdtemp() + "/s") as store:
            ddl.migrate(store)
            sc = Scenario(store)
            held(sc, "a", CORE[0], range(8), 0, 30, 300)
            sc.load()
            for _ in range(2):
                sc.analyze(0, 400)
            for name in ("queue_delay_day", "pool_team_day", "team_day"):
                days = store.query_arrow(f"SELECT DISTINCT toString(day) AS d FROM {name}").column("d")
                print(name, days.to_pylist())
        """
    )
    p = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
        env={**os.environ, "TZ": tz, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )  # fmt: skip
    assert p.returncode == 0, p.stderr[-3000:]
    utc_day = str(datetime.fromtimestamp(T0 / 1000, timezone.utc).date())
    assert p.stdout.splitlines() == [
        f"{n} ['{utc_day}']" for n in ("queue_delay_day", "pool_team_day", "team_day")
    ]


def _idle_stretches(
    samples: dict[int, list[tuple[int, float]]], a0: int, a1: int, after_ms: int
) -> list[tuple]:
    """The definition, per second: per GPU the maximal runs (in time) of its samples at or below 1 %
    (milli-% <= 1000) inside [a0, a1), from a second's start to the next's, clipped to the allocation."""
    out = []
    for g, xs in samples.items():
        run: list[int] = []
        for t, pct in sorted(xs) + [(a1 + 10**9, 100.0)]:
            if not a0 <= t < a1 and t < a1 + 10**9:
                continue
            if round(pct * 1000) <= 1000:
                run.append(t)
                continue
            if run:
                f, last = max(run[0] - 999, a0), min(run[-1] + 1, a1)
                if last - f >= after_ms:
                    out.append((g, f, last))
            run = []
    return sorted(out)


@pytest.mark.parametrize("seed, after_s", [(1, 60), (2, 60), (3, 60), (1, 11)])
def test_idle_stretches_follow_the_per_second_definition_whatever_the_rows(sc, seed, after_s):
    """Idle runs of 20-200 s between bursts of activity, a sample in 20 missing, values at exactly 1 % and
    just above, the allocation's ends inside windows, and each window's samples stored by two inserts
    (even seconds, then odd ones): the rows the rollup holds before it merges them interleave. Also with
    the shortest stretch the config takes (a window and a second), which a window next to itself, as
    two rows of the rollup, would reach."""
    configured(sc, idle_reclaim_after_s=float(after_s))
    rng = random.Random(seed)
    a0, a1, horizon = 3.4, 1797.3, 1800
    level: dict[tuple[int, int], float | None] = {}
    for g in (0, 1):
        s = 0
        while s < horizon:
            idle, busy = rng.randint(20, 200), rng.randint(1, 15)
            for k in range(idle):
                level[s + k, g] = rng.choice([0.5, 1.0, 0.0]) if rng.random() > 0.05 else None
            for k in range(idle, idle + busy):
                level[s + k, g] = rng.choice([50.0, 1.001]) if rng.random() > 0.05 else None
            s += idle + busy
    j = dict(job_id="idle", account="research")
    sc.job(dict(t=a0, event="allocated", node=CORE[0], gpu_indices=[0, 1], **j))
    sc.job(dict(t=a0, event="gang_complete", **j), dict(t=a0, event="running", **j))
    sc.job(dict(t=a1 - 50, event="completed", **j))
    sc.job(dict(t=a1, event="released", node=CORE[0], gpu_indices=[0, 1], **j))
    for parity in (0, 1):
        sc.gpu(CORE[0], [0, 1], 0, horizon, lambda s, g, p=parity: level.get((s, g)) if s % 2 == p else None)
        sc.load()
    sc.analyze(0, horizon)
    samples: dict[int, list[tuple[int, float]]] = {0: [], 1: []}
    for (s, g), pct in level.items():
        if pct is not None and 0 < s <= horizon:
            samples[g].append((ms(s) - 1, pct))
    want = _idle_stretches(samples, ms(a0), ms(a1), after_s * 1000)
    assert len(want) >= 4
    got = table(
        sc,
        "SELECT gpu, toUnixTimestamp64Milli(idle_from) AS f, toUnixTimestamp64Milli(idle_to) AS l "
        "FROM idle_allocations ORDER BY gpu, f",
    )
    assert [(r["gpu"], r["f"], r["l"]) for r in got] == want


def test_idle_stretches_at_the_busy_level_follow_the_definition_where_window_sums_decide(sc):
    """The first pass of step 6 takes a window whose busy sum is above the level on average as active
    without reading its samples. At the edges of that rule: windows whose every sample sits exactly at
    the level (idle), whose every sample is just above it (active), whose mean is below the level but
    one sample is above it (active, found from the samples), and a window the allocation's end cuts,
    busy after the end (the part inside is idle)."""
    configured(sc, idle_reclaim_after_s=60.0)
    a0, a1 = 100.4, 695.5

    def level(s: int, g: int) -> float:
        if s <= 100 or s > 695:
            return 90.0  # outside the allocation, on both sides of it
        if g == 0:
            return 1.0 if s <= 300 else (1.001 if s <= 310 else 0.0)  # at the level, then just above
        return 1.5 if s == 505 else 0.0  # one sample above in a window whose mean is 0.15 %

    j = dict(job_id="edge", account="research")
    sc.job(dict(t=a0, event="allocated", node=CORE[0], gpu_indices=[0, 1], **j))
    sc.job(dict(t=a0, event="gang_complete", **j), dict(t=a0, event="running", **j))
    sc.job(dict(t=a1 - 50, event="completed", **j))
    sc.job(dict(t=a1, event="released", node=CORE[0], gpu_indices=[0, 1], **j))
    sc.gpu(CORE[0], [0, 1], 0, 800, level)
    sc.load()
    sc.analyze(0, 800)
    samples = {g: [(ms(s) - 1, level(s, g)) for s in range(1, 801)] for g in (0, 1)}
    want = _idle_stretches(samples, ms(a0), ms(a1), 60_000)
    assert {g for g, *_ in want} == {0, 1} and len(want) == 4  # the rule's every edge makes a stretch end
    got = table(
        sc,
        "SELECT gpu, toUnixTimestamp64Milli(idle_from) AS f, toUnixTimestamp64Milli(idle_to) AS l "
        "FROM idle_allocations ORDER BY gpu, f",
    )
    assert [(r["gpu"], r["f"], r["l"]) for r in got] == want
