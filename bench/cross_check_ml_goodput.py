"""Job-level goodput, three ways: the scenario's truth, goodput's analyzers, Google's ml-goodput-measurement.

For each single-job scenario with a failure and a restart (and the baseline), the scenario runs through
the pipeline (tests/scenarios/score.py), and the same story is told to ml-goodput-measurement the way a
training program instrumented with it would have told it: job start at allocation and at each restart,
training preparation for the startup phases, one step per second of real compute (productive or later
lost), the restart resuming at the step after the last checkpoint, each checkpoint save as the entry
Orbax's checkpoint manager writes, job end at completion. The library lives in its own venv (its Google
Cloud dependencies are not ours): this script writes each scenario's calls as JSON and runs
bench/ml_goodput_adapter.py with that venv's interpreter, which replays them with an in-memory logger
injected in place of Cloud Logging and writes back the job goodput and badput breakdown.

    python3 -m venv /tmp/mlgp && /tmp/mlgp/bin/pip install ml-goodput-measurement==0.2.3
    .venv/bin/python bench/cross_check_ml_goodput.py [--mlgp-python /tmp/mlgp/bin/python] [--only NAME ...]

Figures are seconds per GPU: the job holds all 16 GPUs from allocation to release, so their job
wall-time and our GPU-seconds / 16 are the same unit here. docs/goodput-model.md discusses the result.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from contracts.catalog import CATEGORIES  # noqa: E402
from tests.scenarios.library import SCENARIOS  # noqa: E402
from tests.scenarios.score import run  # noqa: E402
from tests.scenarios.timeline import CODE, HEALTHY_SM, UNALLOCATED, Timeline  # noqa: E402

CASES = (
    "baseline",
    "simultaneous_restart",
    "restart_without_checkpoint",
    "failure_just_after_checkpoint",
    "failure_just_before_checkpoint",
)
ADAPTER = ROOT / "bench" / "ml_goodput_adapter.py"
VENV_HINT = "python3 -m venv /tmp/mlgp && /tmp/mlgp/bin/pip install ml-goodput-measurement==0.2.3"

# Their BadputType -> our category. None: no counterpart (OTHER is "the rest", DATA_LOADING_ASYNC
# overlaps training and is not counted as badput by them either).
MAPPING = {
    "TPU_INITIALIZATION": "startup",
    "TRAINING_PREP": "startup",
    "PROGRAM_STARTUP": "startup",
    "DATA_LOADING_SYNC": "startup",
    "UNPRODUCTIVE_CHECKPOINT_RESTORE_TIME": "startup",
    "UNPRODUCTIVE_CHECKPOINT_SAVE_TIME": "checkpoint",
    "WASTED_PROGRESS_FROM_DISRUPTION": "retry_waste",
    "INFRASTRUCTURE_RECOVERY_FROM_DISRUPTION": "retry_waste",
    "DATA_LOADING_ASYNC": None,
    "OTHER": "unexplained",
}
ROWS = (*CATEGORIES, "unexplained")
ENDS = ("failed", "completed")


def ml_goodput_calls(tl: Timeline, first_step: int = 0) -> list[dict]:
    """What an instrumented training program would have recorded, derived from the events and the truth
    of one job: times in seconds since the timeline's start, in time order. Steps are numbered from
    `first_step` (0, as MaxText and Orbax do), and a restart with no checkpoint resumes there."""
    n, g, _ = np.argwhere(tl.truth != UNALLOCATED)[0]  # any GPU of the job: they all move together
    cat, sm = tl.truth[n, g], tl.sm[n, g]
    computing = (cat == CODE["productive"]) | ((cat == CODE["retry_waste"]) & (sm >= HEALTHY_SM / 2))
    events = sorted(tl.events, key=lambda e: e["ts_ms"])
    times = [(e["ts_ms"] - tl.start_ms) / 1000 for e in events]
    calls: list[dict] = []
    attempt_start = None
    next_step, saved_step = first_step, first_step - 1
    step_at: dict[int, int] = {}  # second -> step started in it, this attempt
    for i, (t, e) in enumerate(zip(times, events, strict=True)):
        kind = e["event"]
        if (kind == "allocated" and attempt_start is None) or kind == "restarted":
            attempt_start = t
            calls.append({"t": t, "call": "record_job_start_time"})
        elif kind == "running":
            if t > attempt_start:
                calls.append({"t": attempt_start, "call": "record_training_preparation_start_time"})
                calls.append({"t": t, "call": "record_training_preparation_end_time"})
            end = next(times[j] for j in range(i, len(events)) if events[j]["event"] in ENDS)
            step_at = {}
            for s in range(int(t), int(end)):  # one step per second of real compute
                if computing[s]:
                    step_at[s] = next_step
                    calls.append({"t": float(s), "call": "step", "step": next_step})
                    next_step += 1
        elif kind == "checkpoint_saved":
            duration = e["duration_ms"] / 1000
            saved_step = max(step for s, step in step_at.items() if s < t - duration)
            calls.append({"t": t, "call": "checkpoint_save", "step": saved_step, "duration_s": duration})
        elif kind == "failed":
            next_step = saved_step + 1  # the restart resumes after the last checkpoint
        elif kind == "completed":
            calls.append({"t": t, "call": "record_job_end_time"})
    return sorted(calls, key=lambda c: c["t"])


def ml_goodput(tl: Timeline, python: str, workdir: Path, first_step: int = 0) -> dict:
    spec = {"job": tl.name, "start_s": tl.start_ms / 1000, "calls": ml_goodput_calls(tl, first_step)}
    src, out = workdir / f"{tl.name}.calls.json", workdir / f"{tl.name}.mlgp.json"
    src.write_text(json.dumps(spec))
    subprocess.run([python, str(ADAPTER), str(src), str(out)], check=True)
    return json.loads(out.read_text())


def table(name: str, truth: dict, got: dict, theirs: dict, gpus: int) -> str:
    mapped: dict[str, float] = defaultdict(float)
    mapped["productive"] = theirs["productive_s"]
    raw: dict[str, list[str]] = defaultdict(list)
    for kind, s in theirs["badput_s"].items():
        ours = MAPPING.get(kind.split(".")[0], "unexplained")
        if ours is not None:
            mapped[ours] += s
            if s:
                raw[ours].append(f"{kind} {s:.0f}")
    alloc = sum(truth.values())
    lines = [
        f"{name}  ({gpus} GPUs; seconds per GPU; ml-goodput job time {theirs['total_s']:.0f} s, "
        f"{theirs['disruptions']} disruption(s))",
        f"    {'category':14s}{'truth':>9s}{'goodput':>9s}{'ml-gp':>9s}   ml-goodput-measurement BadputType",
    ]
    for c in ROWS:
        t, o, m = truth.get(c, 0.0) / gpus, got.get(c, 0.0) / gpus, mapped.get(c)
        if not (t or o or m):
            continue
        ours = ("-", "-") if c == "unexplained" else (f"{t:.0f}", f"{o:.0f}")  # no such category here
        cell = "—" if m is None else f"{m:.0f}"  # no counterpart there
        lines.append(f"    {c:14s}{ours[0]:>9s}{ours[1]:>9s}{cell:>9s}   {', '.join(raw[c])}")
    lines.append(
        f"    {'goodput':14s}{truth.get('productive', 0) / alloc:9.1%}"
        f"{got.get('productive', 0) / max(sum(got.values()), 1e-9):9.1%}{theirs['goodput_pct'] / 100:9.1%}"
    )
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--mlgp-python", default="/tmp/mlgp/bin/python", help="interpreter of the library's venv")
    ap.add_argument("--only", nargs="*", choices=CASES, help="scenario names (default: all five)")
    ap.add_argument("--first-step", type=int, default=0, help="number of the first training step")
    ap.add_argument("--keep", type=Path, help="keep the derived calls and the library's answers here")
    args = ap.parse_args()
    if not Path(args.mlgp_python).exists():
        print(f"no {args.mlgp_python}: create the library's venv with\n    {VENV_HINT}", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="goodput-crosscheck-") as tmp:
        work = args.keep or Path(tmp)
        work.mkdir(parents=True, exist_ok=True)
        for name in args.only or CASES:
            tl = SCENARIOS[name]()
            gpus = int((tl.truth != UNALLOCATED).any(axis=2).sum())
            theirs = ml_goodput(tl, args.mlgp_python, work, args.first_step)
            r = run(tl, Path(tmp))
            print(table(name, r.truth, r.got, theirs, gpus), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
