"""`goodput compact` as an operator runs it: a day two days back, loaded in two files (two parts in each
rollup), is merged into one part and said so; today's day is left alone; a bad --settle-s is refused."""

from __future__ import annotations

import subprocess
from pathlib import Path

from contracts.envelope import message_line
from tests.loader.helpers import GOODPUT, NODES, batch, ingest_old_day_in_parts, write_config


def goodput(*args: str, cwd: Path, check: int = 0) -> subprocess.CompletedProcess:
    p = subprocess.run([GOODPUT, *args], capture_output=True, text=True, cwd=cwd, timeout=300)
    assert p.returncode == check, p.stderr[-3000:]
    return p


def test_compact_merges_the_closed_days_and_leaves_today(tmp_path):
    config = write_config(tmp_path / "goodput.toml", "127.0.0.1:9", "goodput", tmp_path / "store")
    day = ingest_old_day_in_parts(config, tmp_path)
    for i in range(2):  # the last minute, in two parts too: never closed (compact_after_s is an hour)
        (tmp_path / f"today-{i}.jsonl").write_bytes(message_line(batch("gpu", NODES[1], i, rows=2)) + b"\n")
        goodput("ingest", "--config", str(config), "--from", f"today-{i}.jsonl", "--no-analyze", cwd=tmp_path)
    p = goodput("compact", "--config", str(config), cwd=tmp_path)
    lines = p.stderr.strip().splitlines()
    assert f"gpu_rollup_10s {day}: 2 parts into one" in lines[1], p.stderr
    assert "1 partitions merged" in lines[-1], p.stderr
    again = goodput("compact", "--config", str(config), cwd=tmp_path)
    assert "0 partitions merged" in again.stderr, "today's two parts stay; the closed day is one part"
    bad = goodput("compact", "--config", str(config), "--settle-s", "-5", cwd=tmp_path, check=2)
    assert "--settle-s -5" in bad.stderr and "Traceback" not in bad.stderr
