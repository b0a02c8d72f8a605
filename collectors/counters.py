"""Deltas and rates from monotonic hardware counters: the one helper every collector uses.

Why one helper: counters in this field come in every width (4-bit IB integrity errors, 8-bit
link_downed, 16-bit symbol_error, 32-bit port_xmit_wait and diskstats times, 64-bit extended data) and
in two overflow behaviours (wrap to zero, or saturate at the maximum as IB PMA error counters do), and
they are cleared behind our back (driver reload, `perfquery -R`, `echo clear > stats`). Getting any of
this wrong produces a negative or astronomically large rate, which the loader dead-letters (schema
`min=0`) or, worse, a dashboard plots. Every collector therefore goes through `Counters`, and no rate
is ever computed by hand.

Rules, for a new reading `v` after a previous reading `p` of a counter of width `w` bits:
- first reading, or time did not advance: no delta (None), the reading is kept.
- `v >= p`: delta `v - p`; a saturating counter pinned at its maximum in both readings yields None
  (the true count is unknown, and zero would be a lie).
- `v < p`, wrapping counter, `w < 64`, and the wrapped advance `v + 2**w - p` is under half the range:
  a wrap, delta is the wrapped advance.
- otherwise (64-bit counters never wrap in practice; saturating counters never wrap; an advance of
  more than half the range is indistinguishable from a reset): a reset, delta `v` — the counts since
  the reset, a lower bound of the true delta, never negative.

Time comes from the caller (`now_ms`), so the helper is deterministic and collectors stay testable.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Delta:
    """One counter advance over `dt_ms` milliseconds; `kind` says how it was derived."""

    value: int
    dt_ms: int
    kind: str  # "normal" | "wrap" | "reset"

    @property
    def per_s(self) -> float:
        return self.value * 1000.0 / self.dt_ms


class Counters:
    """Keyed previous readings, one entry per (source, counter); one instance per collector."""

    def __init__(self) -> None:
        self._last: dict[tuple[str, str], tuple[int, int]] = {}

    def delta(
        self, source: str, counter: str, value: int, now_ms: int, *, width: int = 64, saturating: bool = False
    ) -> Delta | None:
        """Record `value` read at `now_ms` and return its advance since the previous reading."""
        if value < 0 or not 1 <= width <= 64:
            raise ValueError(f"counter {source}/{counter}: value {value} or width {width} out of range")
        key = (source, counter)
        prev = self._last.get(key)
        if prev is not None and now_ms == prev[0]:
            return None  # same instant: keep the older reading so the next tick spans a real interval
        self._last[key] = (now_ms, value)
        if prev is None or now_ms < prev[0]:
            return None
        t0, p = prev
        dt = now_ms - t0
        top = (1 << width) - 1
        if value >= p:
            if saturating and value == p == top:
                return None
            return Delta(value - p, dt, "normal")
        if not saturating and width < 64:
            wrapped = value + (1 << width) - p
            if wrapped < (1 << (width - 1)):
                return Delta(wrapped, dt, "wrap")
        return Delta(value, dt, "reset")

    def rate(
        self,
        source: str,
        counter: str,
        value: int,
        now_ms: int,
        *,
        width: int = 64,
        saturating: bool = False,
        scale: float = 1.0,
    ) -> float | None:
        """Per-second rate of `value * scale` since the previous reading, or None (see module rules)."""
        d = self.delta(source, counter, value, now_ms, width=width, saturating=saturating)
        return None if d is None else d.per_s * scale

    def forget(self, source: str) -> None:
        """Drop every counter of `source` (a GPU that was lost, a port that vanished), so the next
        reading starts a fresh series instead of being compared with a stale one."""
        for key in [k for k in self._last if k[0] == source]:
            del self._last[key]


def sum_rates(rates: list[float | None]) -> float | None:
    """Sum of the known rates (per link, per priority); None when none is known."""
    known = [r for r in rates if r is not None]
    return sum(known) if known else None


def per_event(total: Delta | None, events: Delta | None) -> float | None:
    """Mean of `total` per event over the tick (ms per read op); None when either advance is unknown,
    no event happened, or either counter was reset (the two advances then cover different spans)."""
    if total is None or events is None or events.value == 0 or "reset" in (total.kind, events.kind):
        return None
    return total.value / events.value
