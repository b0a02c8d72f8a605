"""GPU indices of an allocation are checked against the node's inventory (issue 14): an allocation is
charged per GPU it names, so a GPU named twice, a negative index, one beyond the node's GPUs or a node
in no pool is dead-lettered with its reason, and the good job batches around it are stored."""

from __future__ import annotations

import json
import time

import pytest

from contracts.envelope import encode_batch
from pipeline.validate import Envelope, Limits, decode, to_tables
from tests.loader.helpers import CLUSTER, NODES, SCHEDULER, columns, raw_counts
from tests.loader.inprocess import InProcessLoader


@pytest.fixture
def embedded(tmp_path):
    e = InProcessLoader(tmp_path)
    yield e
    e.close()


def _job(seq: int, **cols) -> bytes:
    """A one-row job batch from the scheduler host, with `cols` replacing the helper's columns."""
    return encode_batch(
        kind="job",
        cluster=CLUSTER,
        node=SCHEDULER,
        seq=seq,
        sent_ms=int(time.time() * 1000),
        columns={**columns("job", 1, seq), **{k: [v] for k, v in cols.items()}},
        agent="t",
    )


def _allocation(seq: int, node: str, gpus: list[int], event: str = "allocated") -> bytes:
    return _job(seq, node=node, gpu_indices=gpus, event=event)


CASES = {
    "0..15 plus 0,0,0 on an 8-GPU node": (list(range(16)) + [0, 0, 0], "bad_gpu_indices", "more than once"),
    "a GPU named twice": ([3, 3], "bad_gpu_indices", "more than once"),
    "negative indices": ([-1, -2], "bad_gpu_indices", "negative"),
    "0..15 on an 8-GPU node": (list(range(16)), "bad_gpu_indices", "the node has 8 GPUs"),
    "index 8 on an 8-GPU node": ([8], "bad_gpu_indices", "names GPU 8"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_an_allocation_naming_gpus_the_node_does_not_have_is_dead_lettered(embedded, case):
    gpus, reason, words = CASES[case]
    embedded.send("job", _allocation(0, NODES[0], [0, 1]))
    embedded.send("job", _allocation(1, NODES[0], gpus))
    embedded.send("job", _allocation(2, NODES[1], list(range(8)), event="released"))
    stats = embedded.load()
    assert stats.rows["job"] == 2, "the good batches around it are stored"
    [dead] = embedded.dead_letters()
    assert dead["reason"] == reason and words in dead["detail"] and NODES[0] in dead["detail"]
    assert dead["offset"] == 1


def test_a_release_is_checked_like_an_allocation(embedded):
    embedded.send("job", _allocation(0, NODES[0], [7, 7], event="released"))
    assert dict(embedded.load().dead_letters) == {"bad_gpu_indices": 1}


def test_an_allocation_on_a_node_in_no_pool_is_dead_lettered_not_charged_at_no_price(embedded):
    embedded.send("job", _allocation(0, "gpu-999", [0]))
    embedded.send("job", _allocation(1, SCHEDULER, [0]))  # a control node holds no GPUs
    embedded.send("job", _allocation(2, NODES[0], []))  # an allocation without placement is fine
    stats = embedded.load()
    assert raw_counts(embedded.store)["job"] == 1
    dead = embedded.dead_letters()
    assert [d["reason"] for d in dead] == ["unknown_node", "unknown_node"]
    assert "gpu-999" in dead[0]["detail"] and "[[pools]]" in dead[0]["detail"]
    assert stats.rows["job"] == 1


def test_events_that_place_no_gpus_are_not_checked(embedded):
    embedded.send("job", _job(0, event="submitted", node="anywhere"))
    assert embedded.load().rows["job"] == 1


def test_without_pools_the_schema_bound_and_the_duplicate_check_still_apply():
    now = int(time.time() * 1000)
    limits = Limits()  # no [[pools]]: no inventory

    def check(gpus):
        doc = {
            "schema_version": 1,
            "kind": "job",
            "cluster": "c",
            "node": "s",
            "seq": 0,
            "sent_ms": now,
            "columns": {
                "ts_ms": [now],
                "job_id": ["j"],
                "event": ["allocated"],
                "attempt": [1],
                "node": ["n"],
                "gpu_indices": [gpus],
            },
        }
        env = decode(json.dumps(doc).encode(), limits, "job")
        assert isinstance(env, Envelope)
        _, rejected = to_tables([env], now, limits)
        return rejected[0][1].reason if rejected else None

    assert check(list(range(64))) is None
    assert check([64]) == "bad_gpu_indices"
    assert check([1, 1]) == "bad_gpu_indices"
