"""The bad-input corpus (tests/loader/corpus.py) through the in-process transport into a real chDB
store, in one load, interleaved with good batches: each message must be dead-lettered with its own
reason and a detail, and every good row must be stored."""

from __future__ import annotations

import time

import pytest

from contracts.schema import KINDS
from tests.loader.corpus import CASES, CORPUS, FILE_CASES, message
from tests.loader.helpers import NODES, SCHEDULER, batch, raw_counts
from tests.loader.inprocess import InProcessLoader


@pytest.fixture(scope="module")
def loaded(tmp_path_factory):
    """One load: a good batch of every kind from a good node, then each bad message, in turn."""
    embedded = InProcessLoader(tmp_path_factory.mktemp("bad_input"))
    now_ms = int(time.time() * 1000) - 60_000
    good_rows = dict.fromkeys(KINDS, 0)
    bad = {}
    for i, case in enumerate(CASES):
        kind = list(KINDS)[i % len(KINDS)]
        embedded.send(kind, batch(kind, SCHEDULER if kind == "job" else NODES[i % 4], i, rows=3))
        good_rows[kind] += 3
        bad[case["name"]] = message(case["name"], now_ms)
        embedded.send(case["topic"], bad[case["name"]])
    stats = embedded.load()
    got = {d["raw"]: d for d in embedded.dead_letters()}
    yield {"stats": stats, "good_rows": good_rows, "bad": bad, "dead": got, "store": embedded.store}
    embedded.close()


def test_the_corpus_holds_at_least_40_kinds_each_message_distinct():
    assert len(CASES) >= 40
    assert len({c["name"] for c in CASES}) == len(CASES)
    assert {p.stem for p in CORPUS.glob("*.msg")} == {c["name"] for c in FILE_CASES}, "a file for every case"
    now = int(time.time() * 1000)
    assert len({message(c["name"], now) for c in CASES}) == len(CASES)


@pytest.mark.parametrize("case", CASES, ids=[c["name"] for c in CASES])
def test_each_bad_message_is_dead_lettered_with_its_reason(loaded, case):
    dead = loaded["dead"].get(loaded["bad"][case["name"]])
    assert dead is not None, f"{case['what']}: not dead-lettered"
    assert dead["reason"] == case["reason"], f"{case['what']}: {dead['reason']}: {dead['detail']}"
    assert dead["detail"].strip()


def test_the_good_batches_around_them_are_stored(loaded):
    assert dict(raw_counts(loaded["store"])) == loaded["good_rows"]
    assert sum(loaded["stats"].dead_letters.values()) == len(CASES) == len(loaded["dead"])
