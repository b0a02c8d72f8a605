"""bench/bench_live_replace.py replays the live runs' replacement of their rows in goodput_live: each run
must leave one row per (job, window, category), none lost and none twice, on the tuned table and on the
engine's defaults alike, or the bench would time something the live runs do not do."""

from __future__ import annotations

import pytest

from tests.bench import bench_module


@pytest.fixture(scope="module")
def bench():
    return bench_module("bench_live_replace")


@pytest.mark.parametrize("tuned", [True, False])
def test_each_run_replaces_its_windows_and_keeps_the_earlier_ones(bench, tmp_path, tuned):
    jobs, runs = 4, 7
    got = bench.replace_runs(tmp_path / "s", jobs, runs, 0.0, tuned)
    windows = bench.WINDOWS + (runs - 1) * 6  # each run starts a minute later: six new 10 s windows
    assert got["rows"] == jobs * len(bench.CATEGORIES) * windows
    assert got["parts"] >= 1 and 0 < got["median_s"] <= got["p90_s"] <= got["max_s"]
