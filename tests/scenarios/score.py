"""Runs a scenario through the embedded pipeline and scores the analyzers against its truth.

The comparison is per (job, window): goodput_windows holds GPU-seconds per job, window and category,
and the truth is cut the same way. Within a window the seconds both sides put in the same category are
right; what is left over on each side is spread over the other side's leftovers in proportion (the
confusion between them). Seconds one side has and the other does not go to `unallocated`.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

from contracts import catalog
from contracts.catalog import CATEGORIES, WASTE_CATEGORIES
from pipeline import ddl
from pipeline.analyzers import run as analyzers
from pipeline.chdb_store import ChdbStore
from pipeline.loader import Loader, limits_from_config
from tests.scenarios.timeline import Timeline
from transport.base import InProcessTransport

UNALLOCATED = "unallocated"
LABELS = (*CATEGORIES, UNALLOCATED)


@dataclass
class Result:
    name: str
    truth: dict[str, float]
    got: dict[str, float]
    confusion: dict[tuple[str, str], float]
    """(true category, analyzer's category) -> GPU-seconds."""
    dead_letters: int
    placement: dict[str, tuple[int, int, bool]] = field(default_factory=dict)
    """job -> (nodes, leaf switches, crosses the spine), from job_placement."""

    @property
    def allocated(self) -> float:
        return sum(self.truth.values())

    def relative_error(self, category: str) -> float | None:
        """(found - true) / true; against 1 % of the allocated GPU-seconds where the truth holds less,
        so that a category found from nothing (or nearly) counts, and a few seconds of a rare one do
        not dominate. None where neither side has any."""
        want = self.truth.get(category, 0.0)
        got = self.got.get(category, 0.0)
        if want == 0.0 and got == 0.0:
            return None
        return (got - want) / max(want, 0.01 * self.allocated)

    @property
    def lost_right(self) -> float:
        return sum(self.confusion.get((c, c), 0.0) for c in WASTE_CATEGORIES)

    @property
    def lost_truth(self) -> float:
        return sum(self.truth.get(c, 0.0) for c in WASTE_CATEGORIES)

    @property
    def lost_got(self) -> float:
        return sum(self.got.get(c, 0.0) for c in WASTE_CATEGORIES)

    @property
    def lost_score(self) -> float:
        """Lost GPU-seconds in the right category over the larger of the truth's and the analyzer's
        lost seconds: missing a loss and inventing one both lower it."""
        denominator = max(self.lost_truth, self.lost_got)
        return 1.0 if denominator == 0 else self.lost_right / denominator


def run(tl: Timeline, workdir: Path) -> Result:
    """Loads the scenario's messages into a fresh chDB store, analyzes its whole span, scores it."""
    cfg = tl.config
    with ChdbStore(workdir / tl.name) as store:
        ddl.migrate(store)
        loader = Loader(store, limits_from_config(cfg))
        transport = InProcessTransport()
        for topic, key, value in tl.messages():
            transport.send(topic, key, value)
        while records := transport.poll(5000):
            loader.load(records)
            transport.commit(records)
        analyzers.run(store, cfg, tl.start_ms, tl.start_ms + tl.seconds * 1000)
        rows = store.query_arrow(
            f"SELECT job_id, toUnixTimestamp(window_start) AS w, category, sum(gpu_seconds) AS s "
            f"FROM {catalog.GOODPUT_WINDOWS} GROUP BY job_id, w, category"
        ).to_pylist()
        placed = store.query_arrow(
            f"SELECT job_id, nodes, leaves, crosses_spine FROM {catalog.JOB_PLACEMENT}"
        ).to_pylist()
    got = {(r["job_id"], r["w"], r["category"]): r["s"] for r in rows}
    dead = sum(loader.totals.dead_letters.values())
    result = score(tl.name, tl.truth_seconds(cfg.analyzer.window_s), got, dead)
    result.placement = {r["job_id"]: (r["nodes"], r["leaves"], r["crosses_spine"]) for r in placed}
    return result


def score(
    name: str,
    truth: dict[tuple[str, int, str], float],
    got: dict[tuple[str, int, str], float],
    dead_letters: int = 0,
) -> Result:
    """Confusion matrix of two (job, window, category) -> seconds maps."""
    cells: dict[tuple[str, int], tuple[dict[str, float], dict[str, float]]] = defaultdict(lambda: ({}, {}))
    for side, data in ((0, truth), (1, got)):
        for (job, w, cat), s in data.items():
            cell = cells[(job, w)][side]
            cell[cat] = cell.get(cat, 0.0) + s
    confusion: dict[tuple[str, str], float] = defaultdict(float)
    for want, have in cells.values():
        total_want, total_have = sum(want.values()), sum(have.values())
        if total_want < total_have:
            want[UNALLOCATED] = total_have - total_want
        elif total_have < total_want:
            have[UNALLOCATED] = total_want - total_have
        left_want, left_have = {}, {}
        for c in LABELS:
            both = min(want.get(c, 0.0), have.get(c, 0.0))
            if both:
                confusion[(c, c)] += both
            left_want[c] = want.get(c, 0.0) - both
            left_have[c] = have.get(c, 0.0) - both
        spread = sum(left_have.values())
        for cw, sw in left_want.items():
            for ch, sh in left_have.items():
                if sw > 1e-9 and sh > 1e-9:
                    confusion[(cw, ch)] += sw * sh / spread
    totals = [defaultdict(float), defaultdict(float)]
    for side, data in ((0, truth), (1, got)):
        for (_job, _w, cat), s in data.items():
            totals[side][cat] += s
    return Result(name, dict(totals[0]), dict(totals[1]), dict(confusion), dead_letters)
