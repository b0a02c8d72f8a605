"""Slurm host list and index range expansion (contracts.hostlist)."""

import pytest

from contracts import hostlist


@pytest.mark.parametrize(
    "text, hosts",
    [
        ("gpu-[01-03,07],cpu1", ["gpu-01", "gpu-02", "gpu-03", "gpu-07", "cpu1"]),
        ("gpu-01", ["gpu-01"]),
        ("a,b", ["a", "b"]),
        ("", []),
        ("n[08-10]", ["n08", "n09", "n10"]),
        ("n[9-11]", ["n9", "n10", "n11"]),
        ("rack[1-2]-n[01-02]", ["rack1-n01", "rack1-n02", "rack2-n01", "rack2-n02"]),
        ("gpu[1-2]-ib,login", ["gpu1-ib", "gpu2-ib", "login"]),
        ("n[0]", ["n0"]),
    ],
)
def test_expand(text, hosts):
    assert hostlist.expand(text) == hosts


@pytest.mark.parametrize("text", ["gpu-[01-03", "gpu-01]", "gpu-[3-1]", "gpu-[a-b]", "n[[1-2]]", "n[]"])
def test_malformed_host_lists_are_refused_with_the_input_named(text):
    with pytest.raises(ValueError) as e:
        hostlist.expand(text)
    assert text in str(e.value) or "range" in str(e.value)


def test_absurd_expansion_is_refused():
    with pytest.raises(ValueError, match="more than"):
        hostlist.expand("n[1-99999999]")


def test_expand_indices():
    assert hostlist.expand_indices("0-3,6") == [0, 1, 2, 3, 6]
    assert hostlist.expand_indices("7") == [7]
