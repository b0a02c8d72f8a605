"""Runs test_killed_agent_replays_its_spool_after_restart N times (default 50), each in a fresh pytest
process with its own broker, and prints how many runs passed and how many put a batch into Kafka
twice (the case docs/agent.md, "Delivery", leaves to the loader's dedup). Not part of CI: about 30 s
a run on 2 cores.

    .venv/bin/python -m tests.agents.repeat_killed_agent [N] [--results FILE]

With --results, each run's record (tests/fixtures/reliability.py) is appended to FILE as well, for
docs/reliability.md (tests/reliability_doc.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TEST = "tests/agents/test_agent_kafka.py::test_killed_agent_replays_its_spool_after_restart"


def main(runs: int, keep: Path | None = None) -> int:
    failed = 0
    results: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "results.jsonl"
        env = dict(os.environ, GOODPUT_RELIABILITY_RESULTS=str(out))
        for i in range(runs):
            done = subprocess.run(
                [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "ignore", TEST],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
            )
            if done.returncode != 0:
                failed += 1
                print(f"run {i + 1}: FAILED\n{done.stdout[-3000:]}", flush=True)
            lines = out.read_text().splitlines() if out.exists() else []
            if done.returncode == 0 and lines:
                results.append(json.loads(lines[-1]))
                r = results[-1]
                print(f"run {i + 1}: passed, {r['duplicates']} duplicates {r['extra'] or ''}", flush=True)
        if keep is not None and out.exists():
            with keep.open("a") as f:
                f.write(out.read_text())
    with_dups = [r for r in results if r["duplicates"]]
    print(
        f"{runs} runs: {runs - failed} passed, {failed} failed; {len(with_dups)} runs put a batch into "
        f"Kafka twice ({sum(r['duplicates'] for r in with_dups)} copies of "
        f"{sum(r['produced'] for r in results)} batches)"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    import argparse

    ap = argparse.ArgumentParser(description="repeat the killed-agent test and count duplicates")
    ap.add_argument("runs", type=int, nargs="?", default=50)
    ap.add_argument("--results", type=Path, help="append each run's reliability record here too")
    args = ap.parse_args()
    sys.exit(main(args.runs, args.results))
