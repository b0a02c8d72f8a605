"""Compacting closed days: each day partition of the rollup tables merged into one part, once the day is
over.

Why: every analyzer read of the rollups is `FINAL`, which merges a partition's parts at read time.
Samples arrive time-major, so each part of a day spans every node, and the read-time merge touches them
all: on the 1,024-GPU bench day ~2 s of a 20 s analysis (docs/performance.md). A day's report, a
re-analysis or a dashboard over past days reads closed days again and again; merged once into one part,
those reads skip the merge. The raw tables are left to the engine's own merges: they are ~9x the
rollups' rows, a merge of a raw day would hold the loader for minutes at 10k GPUs, and the analyzers
read raw samples only where the rollups cannot decide.

A closed day that receives a late batch (a spool replayed after an outage) gets a second part, and the
next run compacts it again. The results never change: `FINAL` reads the same rows from one part as from
many.

The day still running is left alone: it is being written, and merging it would be redone within
minutes. `settle_s` is how long after midnight (UTC) a day counts as closed, so that the last batches
of the day have arrived.

On the cluster layout (docs/clickhouse-server.md) the parts are the local tables' `<name>_local`: the
days are read from this server's, and each merge runs ON CLUSTER, on every shard's local table.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import UTC, datetime

from contracts import catalog
from pipeline import ddl
from pipeline.store import Store

log = logging.getLogger(__name__)

TABLES = tuple(catalog.ROLLUP_TABLES.values())
"""The rollup tables, each partitioned by day (pipeline/ddl.py) and read `FINAL`."""


@dataclass(frozen=True, slots=True)
class Compacted:
    table: str
    day: str
    parts: int
    """Active parts before the merge."""
    seconds: float


def _local(store: Store, table: str) -> str:
    """The table holding `table`'s parts: itself on one server, its local table on the cluster layout."""
    return table if ddl.delete_target(store, table) is None else table + ddl.LOCAL_SUFFIX


def closed_partitions(store: Store, closed_before: datetime) -> list[tuple[str, str, str, int]]:
    """(table, day, partition id, active parts) of every day partition before `closed_before`'s date that
    holds more than one active part, oldest first; `table` is the catalog name."""
    catalog_name = {_local(store, t): t for t in TABLES}
    names = ", ".join(f"'{t}'" for t in catalog_name)
    rows = store.query_arrow(
        "SELECT table, partition, partition_id, count() AS parts FROM system.parts "
        f"WHERE active AND database = currentDatabase() AND table IN ({names}) "
        "AND partition < {day:String} "
        "GROUP BY table, partition, partition_id HAVING parts > 1 ORDER BY partition, table",
        {"day": closed_before.date().isoformat()},
    ).to_pylist()
    return [(catalog_name[r["table"]], r["partition"], r["partition_id"], int(r["parts"])) for r in rows]


def compact_closed_days(store: Store, now_s: float, settle_s: float) -> list[Compacted]:
    """Merges each closed day partition of the rollup tables into one part; returns what it merged.
    A day is closed once `settle_s` have passed since its end (UTC)."""
    closed_before = datetime.fromtimestamp(now_s - settle_s, UTC)
    done = []
    for table, day, partition_id, parts in closed_partitions(store, closed_before):
        started = time.perf_counter()
        target = ddl.delete_target(store, table) or table  # as a DELETE: the local tables ON CLUSTER
        store.execute(f"OPTIMIZE TABLE {target} PARTITION ID '{partition_id}' FINAL")
        done.append(Compacted(table, day, parts, time.perf_counter() - started))
        log.info("compacted %s day %s: %d parts into one in %.1f s", table, day, parts, done[-1].seconds)
    return done
