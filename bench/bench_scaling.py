"""Whether the analysis scales linearly with the cluster's size (issue 19): the cost per GPU-day of the
analyzers at 1k, 2k, 4k and 8k GPUs.

    .venv/bin/python bench/bench_scaling.py [--sizes 1024:24,2048:12,4096:6,8192:3] [--repeat 3]
                                            [--json out.json]

Each size is a bench_analyze store (built once and cached the same way, same generator: gangs of 8
nodes, jobs of 1-4 h, a checkpoint every 30 min). The sizes hold the same number of GPU-hours by default
(1,024 GPUs x 24 h ... 8,192 GPUs x 3 h: 88.5 M GPU rows each), so what changes between them is the
number of GPUs, nodes and jobs the analysis joins and groups, not the rows it reads, and every size fits
this machine's memory. Linear means the same cost per GPU-day at every size.

Printed per size: analyze wall time (min / median / max of --repeat fresh processes), median CPU-seconds,
ms and CPU-ms per GPU-day, each size's CPU cost per GPU-day against the first size's, the ratio to the
bare GROUP BY of bench_analyze over the same store (one run), and peak RSS; the JSON also holds each
size's slowest statements.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import bench_analyze  # noqa: E402


def _sizes(text: str) -> list[tuple[int, float]]:
    try:
        return [(int(g), float(h)) for g, h in (part.split(":") for part in text.split(","))]
    except ValueError:
        raise SystemExit(
            f"--sizes {text!r}: give GPUS:HOURS pairs separated by commas, e.g. 1024:24,2048:12"
        ) from None


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=_sizes, default=_sizes("1024:24,2048:12,4096:6,8192:3"))
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--json", help="also write the figures here")
    args = ap.parse_args()
    rows = []
    for gpus, hours in args.sizes:
        path = Path.home() / ".cache" / "goodput" / f"bench-analyze-{gpus}g-{hours:g}h"
        meta = bench_analyze.load_or_build(path, gpus, hours)
        gpu_days = meta["gpus"] * meta["hours"] / 24
        bare = bench_analyze.measure(path, meta, "bare")
        analyze = bench_analyze.repeat(path, meta, "analyze", args.repeat)
        rows.append(
            {
                "gpus": meta["gpus"],
                "hours": meta["hours"],
                "jobs": meta["jobs"],
                "gpu_rows": meta["rows"]["raw_gpu"],
                "build_s": meta["build_s"],
                "bare_s": bare["s"],
                **{k: v for k, v in analyze.items() if k != "steps"},
                "vs_bare": analyze["median_s"] / bare["s"],
                "slowest": sorted(analyze["steps"], key=lambda step: -step[1])[:5],
                "ms_per_gpu_day": analyze["median_s"] / gpu_days * 1000,
                "cpu_ms_per_gpu_day": analyze["median_cpu_s"] / gpu_days * 1000,
            }
        )
    base = rows[0]["cpu_ms_per_gpu_day"]
    print(
        f"{'GPUs':>6} {'hours':>5} {'jobs':>5} {'GPU rows':>10} {'bare s':>7} "
        f"{'analyze s (min/med/max)':>24} {'CPU-s':>6} {'ms/GPU-day':>10} {'CPU-ms/GPU-day':>14} "
        f"{'vs first':>8} {'vs bare':>7} {'RSS MB':>7}"
    )
    for r in rows:
        r["cpu_vs_first"] = r["cpu_ms_per_gpu_day"] / base
        span = f"{r['min_s']:.1f}/{r['median_s']:.1f}/{r['max_s']:.1f}"
        print(
            f"{r['gpus']:>6} {r['hours']:>5g} {r['jobs']:>5} {r['gpu_rows']:>10} {r['bare_s']:>7.1f} "
            f"{span:>24} {r['median_cpu_s']:>6.1f} {r['ms_per_gpu_day']:>10.1f} "
            f"{r['cpu_ms_per_gpu_day']:>14.1f} {r['cpu_vs_first']:>7.2f}x {r['vs_bare']:>6.1f}x "
            f"{r['peak_rss_mb']:>7.0f}"
        )
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
