"""The one interface every collector implements, and its two domain errors.

A collector is a reader of one source (NVML, /sys/class/infiniband, /proc/diskstats, squeue, ...).
Given its roots or handles at construction, `collect(now_ms)` returns rows of one signal kind as
dicts keyed by the field names in `contracts.schema`; a field it cannot measure is left out (absent,
not zero). Collectors that report rates keep the previous counter reading themselves, through
`collectors.counters`, so the first call may return rows without rate fields.

No threads, no Kafka, no global state: the agent owns scheduling, batching and delivery, and wraps
every collector so one failing source never takes the others down.
"""

from __future__ import annotations

from typing import Any, Protocol

Row = dict[str, Any]


class CollectorUnavailable(Exception):
    """The source does not exist on this node (no NVML library, no InfiniBand devices, no Lustre).

    Not a failure at start-up: the agent logs it once and does not run the collector. Raised later
    (the source went away: a driver reload removing /sys/class/infiniband), the agent reports the
    collector as failing and keeps trying each tick, so it comes back by itself.
    """


class CollectorError(Exception):
    """The source exists but could not be read this time; the message names the file or call."""


class Collector(Protocol):
    name: str
    """Short stable name used in logs and in goodput_collector_success{collector=...}."""

    kind: str
    """The schema kind (contracts.schema.KINDS) of the rows it returns."""

    def collect(self, now_ms: int) -> list[Row]:
        """Rows for this tick, stamped `now_ms` unless the source carries its own time."""
        ...
