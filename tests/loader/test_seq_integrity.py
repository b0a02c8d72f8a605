"""Only a stored batch occupies its sequence number: a rejected copy of a batch must not make the valid
one look like a duplicate (issue 14: 480 good GPU rows were lost to a false `duplicate_seq`)."""

from __future__ import annotations

import pytest

from tests.loader.helpers import NODES, batch, raw_counts
from tests.loader.inprocess import InProcessLoader


@pytest.fixture
def embedded(tmp_path):
    e = InProcessLoader(tmp_path)
    yield e
    e.close()


def test_a_rejected_copy_before_the_valid_batch_in_one_poll_does_not_take_its_seq(embedded):
    bad = batch("gpu", NODES[0], 7, rows=480, power_w=["hot"] * 480)
    good = batch("gpu", NODES[0], 7, rows=480)
    embedded.send("gpu", bad)
    embedded.send("gpu", good)
    stats = embedded.load()
    assert raw_counts(embedded.store)["gpu"] == 480, "the valid batch is stored"
    assert dict(stats.dead_letters) == {"bad_type": 1}
    assert [d["raw"] for d in embedded.dead_letters()] == [bad]


def test_a_rejected_copy_in_an_earlier_poll_does_not_take_its_seq(embedded):
    embedded.send("gpu", batch("gpu", NODES[0], 7, rows=4, power_w=["hot"] * 4))
    assert dict(embedded.load().dead_letters) == {"bad_type": 1}
    embedded.send("gpu", batch("gpu", NODES[0], 7, rows=4))
    stats = embedded.load()
    assert not stats.dead_letters and stats.rows["gpu"] == 4


def test_of_two_valid_copies_in_one_poll_the_first_is_stored_and_the_second_is_a_duplicate(embedded):
    first = batch("gpu", NODES[0], 7, rows=4)
    second = batch("gpu", NODES[0], 7, rows=3)
    embedded.send("gpu", batch("gpu", NODES[0], 7, rows=2, power_w=["hot"] * 2))
    embedded.send("gpu", first)
    embedded.send("gpu", second)
    embedded.send("gpu", batch("gpu", NODES[0], 8, rows=5))
    stats = embedded.load()
    assert stats.rows["gpu"] == 4 + 5
    assert [(d["reason"], d["raw"] == second) for d in embedded.dead_letters()][1:] == [
        ("duplicate_seq", True)
    ]
    assert dict(stats.dead_letters) == {"bad_type": 1, "duplicate_seq": 1}
