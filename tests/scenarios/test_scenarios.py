"""The analyzers on the scenario library (tests/scenarios/library.py): cases at the edges, with a truth
written second by second rather than by the simulator.

What every scenario must satisfy: no dead letters, and every job's categories add up to its allocated
GPU-seconds. What the analyzers get right today is asserted per scenario: >= 97 % of the lost seconds
in the right category (counted both ways) and every category within 3 % for the lifecycle edges;
>= 90 % and 5 % for stalls with counter evidence (over its threshold, or just under it and risen with
the stall), for noisy counters and for a stall only step events report. bench/accuracy.py measures
them all (docs/goodput-model.md lists its figures).
"""

from __future__ import annotations

import pytest

from tests.scenarios.library import SCENARIOS
from tests.scenarios.score import LABELS, Result, run

EXACT = (
    "baseline",
    "simultaneous_restart",
    "restart_without_checkpoint",
    "failure_just_after_checkpoint",
    "failure_just_before_checkpoint",
    "low_sm_healthy",
    "staggered_gang",
    "held_after_completed",
    "half_node",
    "skewed_clock",
    "skewed_clock_behind",
    "silent_node",
)
EVIDENCED_STALLS = (
    "storage_ceiling_above",
    "psi_above",
    "xmit_wait_above",
    "ecn_above",
    "cnp_sent_above",
    "line_rate_above",
    "storage_ceiling_below",
    "psi_below",
    "xmit_wait_below",
    "ecn_below",
    "cnp_sent_below",
    "line_rate_below",
    "throttled_straggler",
    "phase_straggler",
    "noisy_counters",
    "partial_step_events",
    "gang_scattered_over_two_leaves",
)


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> dict[str, Result]:
    """Every scenario once (about a minute): chDB allows one store directory per process at a time, and
    score.run opens and closes one per scenario."""
    tmp = tmp_path_factory.mktemp("scenarios")
    return {name: run(make(), tmp) for name, make in SCENARIOS.items()}


def _worst_error(r: Result) -> float:
    return max(abs(e) for c in LABELS if (e := r.relative_error(c)) is not None)


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_every_allocated_second_is_classified_once(results, name):
    r = results[name]
    assert r.dead_letters == 0
    assert sum(r.got.values()) == pytest.approx(r.allocated, rel=1e-6), (r.truth, r.got)


@pytest.mark.parametrize("name", EXACT)
def test_lifecycle_edges_are_classified_exactly(results, name):
    r = results[name]
    assert r.lost_score >= 0.97, (r.truth, r.got)
    assert _worst_error(r) <= 0.03, (r.truth, r.got)


@pytest.mark.parametrize("name", EVIDENCED_STALLS)
def test_stalls_with_evidence_over_the_threshold_are_found(results, name):
    r = results[name]
    assert r.lost_score >= 0.9, (r.truth, r.got)
    assert _worst_error(r) <= 0.05, (r.truth, r.got)


def test_placement_shows_the_scattered_gang_crossing_the_spine(results):
    assert results["gang_scattered_over_two_leaves"].placement == {"job-1": (2, 2, True)}
    assert results["xmit_wait_above"].placement == {"job-1": (2, 0, False)}  # no [topology]: no leaves


def test_the_same_scenario_gives_the_same_numbers(tmp_path):
    first = run(SCENARIOS["noisy_counters"](), tmp_path / "a")
    second = run(SCENARIOS["noisy_counters"](), tmp_path / "b")
    assert first.got == second.got
