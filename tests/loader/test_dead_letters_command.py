"""`goodput dead-letters` end to end, as an operator uses it: ingest a file with bad lines, list the dead
letters (text and JSON, by reason and time), fix the cause, export the dead letters and replay them
with `goodput ingest --from`; and ingest says how many messages were already stored."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from contracts.envelope import encode_batch, message_line
from tests.loader.helpers import CLUSTER, GOODPUT, NODES, SCHEDULER, batch, columns, write_config

NEW_NODE = "gpu-017"  # in no pool of the config until the fix


def goodput(*args: str, cwd: Path, check: int = 0) -> subprocess.CompletedProcess:
    p = subprocess.run([GOODPUT, *args], capture_output=True, text=True, cwd=cwd, timeout=300)
    assert p.returncode == check, p.stderr[-3000:]
    return p


def allocation(seq: int, node: str, version: int = 1) -> bytes:
    cols = {**columns("job", 1, seq), "node": [node], "gpu_indices": [[0, 1]]}
    return encode_batch(
        version=version,
        kind="job",
        cluster=CLUSTER,
        node=SCHEDULER,
        seq=seq,
        sent_ms=int(time.time() * 1000),
        columns=cols,
        agent="t",
    )


@pytest.fixture
def loaded(tmp_path):
    """A store loaded from a file of 6 good batches, one allocation on a node in no pool, one line of
    broken JSON, one with a non-finite number and a columnar allocation on the node in no pool, by
    `goodput ingest --from`."""
    config = write_config(tmp_path / "goodput.toml", "127.0.0.1:9", "goodput", tmp_path / "store")
    lines = [batch("gpu", NODES[0], s) for s in range(3)]
    lines += [allocation(0, NEW_NODE), b"{broken", batch("gpu", NODES[1], 0).replace(b"400.5", b"NaN", 1)]
    lines += [message_line(allocation(1, NEW_NODE, version=2))]
    assert lines[-1].startswith(b"GPC2:")
    lines += [batch("gpu", NODES[0], s) for s in range(3, 6)]
    (tmp_path / "msgs.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    p = goodput("ingest", "--config", str(config), "--from", "msgs.jsonl", "--no-analyze", cwd=tmp_path)
    assert "10 messages: 6 batches (48 rows) stored, 0 already stored, 4 dead letters" in p.stderr
    return tmp_path, config, lines


def test_listing_shows_reason_detail_position_and_raw_prefix(loaded):
    tmp, config, lines = loaded
    p = goodput("dead-letters", "--config", str(config), cwd=tmp)
    out = p.stdout.splitlines()
    assert len(out) == 4
    assert "unknown_node" in out[0] and "file:msgs.jsonl:0:4" in out[0] and NEW_NODE in out[0]
    assert "not_json" in out[1] and "file:msgs.jsonl:0:5" in out[1] and "'{broken'" in out[1]
    assert "non_finite" in out[2] and "file:msgs.jsonl:0:6" in out[2] and '{"schema_version":1' in out[2]
    assert "unknown_node" in out[3] and "file:msgs.jsonl:0:7" in out[3] and "'GPC2" in out[3]
    assert p.stderr.strip() == "4 dead letters (unknown_node=2, non_finite=1, not_json=1)"


def test_json_filters_by_reason_and_time(loaded):
    tmp, config, lines = loaded
    doc = json.loads(
        goodput("dead-letters", "--config", str(config), "--json", "--reason", "not_json", cwd=tmp).stdout
    )
    assert doc["total"] == 1 and doc["by_reason"] == {"not_json": 1}
    [d] = doc["dead_letters"]
    assert (d["reason"], d["source"], d["offset"], d["raw_prefix"], d["raw_bytes"]) == (
        "not_json",
        "file:msgs.jsonl",
        5,
        "{broken",
        7,
    )
    assert d["detail"] and d["received_at"].endswith("Z")
    recent = json.loads(
        goodput("dead-letters", "--config", str(config), "--json", "--since", "1h", cwd=tmp).stdout
    )
    assert recent["total"] == 4
    future = json.loads(
        goodput("dead-letters", "--config", str(config), "--json", "--since", "2999-01-01", cwd=tmp).stdout
    )
    assert future == {"total": 0, "by_reason": {}, "dead_letters": []}
    limited = goodput("dead-letters", "--config", str(config), "--limit", "1", cwd=tmp)
    assert len(limited.stdout.splitlines()) == 1 and "showing the oldest 1" in limited.stderr


@pytest.mark.parametrize(
    "args, words",
    [
        (("--since", "yesterday"), "--since 'yesterday'"),
        (("--reason", "x' OR 1=1 --"), "--reason"),
        (("--limit", "-1"), "--limit -1"),
    ],
    ids=["since", "reason", "limit"],
)
def test_bad_filters_are_one_line_and_exit_2(loaded, args, words):
    tmp, config, _ = loaded
    p = goodput("dead-letters", "--config", str(config), *args, cwd=tmp, check=2)
    assert len(p.stderr.strip().splitlines()) == 1 and words in p.stderr and "Traceback" not in p.stderr


def test_export_after_the_fix_replays_into_the_store(loaded):
    tmp, config, lines = loaded
    goodput(
        "dead-letters",
        "--config",
        str(config),
        "--reason",
        "unknown_node",
        "--export",
        "replay.jsonl",
        cwd=tmp,
    )
    assert (tmp / "replay.jsonl").read_bytes() == lines[3] + b"\n" + lines[6] + b"\n"
    fixed = config.with_name("fixed.toml")
    fixed.write_text(config.read_text().replace("gpu-[001-016]", "gpu-[001-017]"))
    p = goodput("ingest", "--config", str(fixed), "--from", "replay.jsonl", "--no-analyze", cwd=tmp)
    assert "2 messages: 2 batches (2 rows) stored, 0 already stored, 0 dead letters" in p.stderr
    p = goodput("ingest", "--config", str(fixed), "--from", "msgs.jsonl", "--no-analyze", cwd=tmp)
    assert "10 messages: 0 batches (0 rows) stored, 8 already stored, 2 dead letters" in p.stderr, p.stderr


def test_the_whole_export_holds_every_dead_letter_once_byte_for_byte(loaded):
    tmp, config, lines = loaded
    goodput("ingest", "--config", str(config), "--from", "msgs.jsonl", "--no-analyze", cwd=tmp)  # again
    goodput("dead-letters", "--config", str(config), "--export", "all.jsonl", cwd=tmp)
    assert (tmp / "all.jsonl").read_bytes().splitlines() == [lines[3], lines[4], lines[5], lines[6]]
