"""How right the analyzers are on the scenario library (tests/scenarios): cases at the edges that the
simulator never produces, each with a truth written second by second.

Prints, per scenario, the confusion matrix in GPU-seconds (rows: the truth, columns: the analyzer) and
each category's relative error; then the suite-wide share of lost GPU-seconds in the right category,
counted both ways (over the larger of the true and the found lost seconds, so a category that
over-counts lowers it as much as one that misses). Goal: >= 97 % right, every category within +-3 %.

    .venv/bin/python bench/accuracy.py [--only NAME ...] [--matrices]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.scenarios.library import SCENARIOS  # noqa: E402
from tests.scenarios.score import LABELS, Result, run  # noqa: E402

GOAL_SCORE = 0.97
GOAL_CATEGORY = 0.03


def matrix(r: Result) -> str:
    used = [
        c for c in LABELS if any(r.confusion.get((c, o), 0) or r.confusion.get((o, c), 0) for o in LABELS)
    ]
    head = "truth \\ got".ljust(16) + "".join(c[:11].rjust(12) for c in used)
    lines = [head]
    for want in used:
        lines.append(want.ljust(16) + "".join(f"{r.confusion.get((want, h), 0.0):12.0f}" for h in used))
    return "\n".join("    " + line for line in lines)


def errors(r: Result) -> str:
    parts = []
    for c in LABELS:
        e = r.relative_error(c)
        if e is None:
            continue
        parts.append(f"{c} {e:+.1%}")
    return ", ".join(parts)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", nargs="*", help="scenario names (default: all)")
    ap.add_argument("--matrices", action="store_true", help="print every confusion matrix")
    args = ap.parse_args()
    names = args.only or list(SCENARIOS)
    results = []
    with tempfile.TemporaryDirectory(prefix="goodput-accuracy-") as tmp:
        for i, name in enumerate(names, 1):
            t = time.perf_counter()
            r = run(SCENARIOS[name](), Path(tmp))
            results.append(r)
            worst = max((abs(e) for c in LABELS if (e := r.relative_error(c)) is not None), default=0.0)
            ok = r.lost_score >= GOAL_SCORE and worst <= GOAL_CATEGORY
            print(
                f"[{i}/{len(names)}] {name:32s} lost right {r.lost_score:6.1%}  "
                f"{'ok ' if ok else 'MISS'}  ({time.perf_counter() - t:.1f} s)",
                flush=True,
            )
            print(f"    {errors(r)}")
            if args.matrices or not ok:
                print(matrix(r))
            if r.dead_letters:
                print(f"    !! {r.dead_letters} dead letters")
    right = sum(r.lost_right for r in results)
    denominator = sum(max(r.lost_truth, r.lost_got) for r in results)
    suite = right / denominator if denominator else 1.0
    passed = sum(
        1
        for r in results
        if r.lost_score >= GOAL_SCORE
        and all(abs(e) <= GOAL_CATEGORY for c in LABELS if (e := r.relative_error(c)) is not None)
    )
    print(
        f"\nsuite: {suite:.1%} of lost GPU-seconds in the right category (counted both ways); "
        f"{passed}/{len(results)} scenarios meet >= {GOAL_SCORE:.0%} and every category within "
        f"+-{GOAL_CATEGORY:.0%}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
