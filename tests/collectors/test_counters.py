import pytest

from collectors.counters import Counters, per_event, sum_rates


def test_first_reading_has_no_rate_then_plain_delta():
    c = Counters()
    assert c.rate("p", "x", 100, 1000) is None
    assert c.rate("p", "x", 300, 3000) == pytest.approx(100.0)
    assert c.delta("p", "x", 300, 4000).value == 0


@pytest.mark.parametrize("width", [4, 8, 16, 32])
def test_wrap_by_declared_width(width):
    c = Counters()
    top = (1 << width) - 1
    c.delta("p", "x", top - 2, 0, width=width)
    d = c.delta("p", "x", 1, 1000, width=width)
    assert (d.kind, d.value) == ("wrap", 4)


def test_64_bit_counter_going_down_is_a_reset_rated_from_new_value():
    c = Counters()
    c.delta("p", "x", 10**15, 0)
    d = c.delta("p", "x", 500, 1000)
    assert (d.kind, d.value) == ("reset", 500)
    assert c.rate("p", "x", 1500, 2000) == 1000.0


def test_implausible_wrap_is_a_reset():
    # a 32-bit counter falling from mid-range to near zero would need an advance of > half the range
    c = Counters()
    c.delta("p", "x", 1000, 0, width=32)
    d = c.delta("p", "x", 10, 1000, width=32)
    assert (d.kind, d.value) == ("reset", 10)


def test_saturating_counter_pinned_at_max_has_no_rate_and_never_wraps():
    c = Counters()
    c.delta("p", "e", 65530, 0, width=16, saturating=True)
    assert c.rate("p", "e", 65535, 1000, width=16, saturating=True) == 5.0  # reached the ceiling: lower bound
    assert c.rate("p", "e", 65535, 2000, width=16, saturating=True) is None  # pinned: unknown, not zero
    d = c.delta("p", "e", 3, 3000, width=16, saturating=True)  # cleared (perfquery -R)
    assert (d.kind, d.value) == ("reset", 3)


def test_time_must_advance_and_rates_are_never_negative():
    c = Counters()
    c.delta("p", "x", 5, 1000)
    assert c.delta("p", "x", 9, 1000) is None  # same instant: the older reading is kept
    assert c.delta("p", "x", 9, 2000).value == 4
    assert c.delta("p", "x", 20, 1500) is None  # clock went back: restart the series
    assert c.delta("p", "x", 30, 2500).value == 10
    for v in (0, 7, 3, 2**63, 1):
        r = c.rate("p", "x", v, 3000 + v % 1000 + 1000 * (v % 7 + 1))
        assert r is None or r >= 0


def test_keys_are_per_source_and_forget_drops_one_source():
    c = Counters()
    c.delta("gpu0", "e", 10, 0)
    c.delta("gpu1", "e", 10, 0)
    c.forget("gpu0")
    assert c.delta("gpu0", "e", 20, 1000) is None
    assert c.delta("gpu1", "e", 20, 1000).value == 10


def test_bad_input_is_refused():
    with pytest.raises(ValueError):
        Counters().delta("p", "x", -1, 0)
    with pytest.raises(ValueError):
        Counters().delta("p", "x", 1, 0, width=65)


def test_helpers():
    assert sum_rates([None, None]) is None
    assert sum_rates([1.0, None, 2.0]) == 3.0
    c = Counters()
    c.delta("d", "ms", 100, 0), c.delta("d", "ops", 10, 0)
    assert per_event(c.delta("d", "ms", 150, 1000), c.delta("d", "ops", 20, 1000)) == 5.0
    assert per_event(c.delta("d", "ms", 150, 2000), c.delta("d", "ops", 20, 2000)) is None  # no ops
    assert per_event(c.delta("d", "ms", 10, 3000), c.delta("d", "ops", 25, 3000)) is None  # reset
