"""Monotonic totals behind the agent's counter series, kept from the rows the collectors return.

Why here and not the raw device counters: those wrap (32-bit port_xmit_wait, diskstats times), saturate
(IB PMA error counters) and are cleared behind our back (driver reload, `perfquery -R`); exported as
they are, Prometheus' rate() would read every wrap as a reset and lose the wrapped span, and a
saturated counter would look idle. collectors.counters already turns each reading into a corrected
advance over the tick (a wrap counts the wrapped span, a reset counts what came after it, a pinned
saturating counter is unknown); the rows carry that advance as a per-second rate. The agent adds
rate x tick back to a total per (entity, field) — the same advance, so the total is the counter's
count since the agent started, and it never decreases. Fields that are the device's own cumulative
counter (GPU energy, ECC errors) are kept monotonic the same way across a reset. Totals start with
the agent: Prometheus' rate() and increase() read an agent restart as an ordinary counter reset.

The tick is the span since the entity's previous row, the same span collectors.counters measured
the rate over, because both are the agent's collection ticks. A field that comes back after ticks it
could not be read (a counter file that read N/A) is a rate over the whole gap and adds only the last
tick's share: a lower bound, never an overcount.
"""

from __future__ import annotations

from typing import Any

from collectors.base import Row
from contracts.schema import KINDS, Field

_Entity = tuple[Any, ...]


class Totals:
    """Per-(kind, entity, field) totals of the schema's counter fields (`Field.counts`)."""

    def __init__(self) -> None:
        self._seen: dict[_Entity, int] = {}
        """Entity -> ts_ms of its latest row."""
        self._raw: dict[tuple[str, _Entity], float] = {}
        """Latest reading of a cumulative field."""
        self._total: dict[tuple[str, _Entity], float] = {}

    @staticmethod
    def entity(kind: str, row: Row) -> _Entity:
        """What one row is about: the kind's key fields other than time (gpu; device and port; ...)."""
        return (kind, *(row.get(k) for k in KINDS[kind].key if k != "ts_ms"))

    def add(self, kind: str, rows: list[Row]) -> None:
        """One tick's rows of `kind`; a row not newer than the entity's last one adds nothing."""
        fields = [f for f in KINDS[kind].fields if f.counts]
        if not fields:
            return
        for r in rows:
            entity, ts = self.entity(kind, r), r["ts_ms"]
            prev = self._seen.get(entity)
            if prev is not None and ts <= prev:
                continue
            self._seen[entity] = ts
            for f in fields:
                v = r.get(f.name)
                if v is not None:
                    self._count(f, entity, float(v), None if prev is None else (ts - prev) / 1000.0)

    def _count(self, f: Field, entity: _Entity, v: float, tick_s: float | None) -> None:
        key = (f.name, entity)
        if f.counts == "rate":
            if tick_s is None:
                return  # no span to count over yet (the first row of an entity carries no rate anyway)
            step = v * tick_s
        else:
            last = self._raw.get(key)
            self._raw[key] = v
            step = v if last is None or v < last else v - last  # lower: reset, count from zero
        self._total[key] = self._total.get(key, 0.0) + step * f.metric_scale

    def value(self, kind: str, f: Field, row: Row) -> float | None:
        """The total for `row`'s entity, or None when the row lacks the field (absent, never a flat
        total that reads as 'no activity') or nothing was counted yet."""
        if row.get(f.name) is None:
            return None
        return self._total.get((f.name, self.entity(kind, row)))
