"""Where goodput keeps its tables: the one small Store interface and its errors. The embedded chDB store
(pipeline/chdb_store.py) and a ClickHouse server (pipeline/server_store.py) implement it;
pipeline/stores.py opens the one the configuration names.

The analyzers are ClickHouse SQL and run unchanged on every store. Data moves in and out as Arrow
tables: columnar end to end, no per-row Python objects on the hot path.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # only for annotations: the agent imports StoreError without loading Arrow
    import pyarrow as pa


class StoreError(RuntimeError):
    """A statement failed; the message carries the first line of the SQL and the engine's error."""


class StoreLocked(StoreError):
    """Another process owns the chDB directory."""


Params = Mapping[str, str | int | float]
"""Query parameters: `{name:Type}` in the SQL, the value here. Every value that comes from outside the
program (a team, a job id, a cluster name, a command-line filter) reaches SQL this way, never by
formatting it into the text: the server parses the statement first and reads the value as data, so a
quote in it cannot end a literal (docs/security.md)."""


DEDUP_VIEWS = "deduplicate_blocks_in_dependent_materialized_views"
"""Set with every deduplication token: a replayed insert that the raw table drops is dropped by its rollup
too (pipeline/ddl.py), instead of reaching the rollup through the materialized view a second time."""

NO_COLLAPSE_AT_INSERT = "optimize_on_insert"
"""Set to 0 with every insert: ReplacingMergeTree would otherwise collapse the duplicate keys inside each
inserted block while writing it, which was most of the engine's work on a raw insert (docs/performance.md,
"Ingest: where the engine's time goes"). Duplicates inside a block are then what duplicates across blocks
always were: `FINAL` and merges collapse them, and the analyzers' duplicate check sees them in a rollup."""


class Store(Protocol):
    def execute(self, sql: str, params: Params | None = None) -> None: ...

    def query_arrow(self, sql: str, params: Params | None = None) -> pa.Table: ...

    def insert_arrow(self, table: str, data: pa.Table, dedup_token: str | None = None) -> None:
        """Appends rows; a repeated non-empty `dedup_token` for the same table inserts nothing."""
        ...

    def close(self) -> None: ...


def quote(value: str) -> str:
    """A ClickHouse string literal: job ids come from the raw data or a command line, quotes and
    backslashes included.

    Only where a value cannot be a query parameter (Params): the analyzers' `alive_jobs` spells ids into
    DELETEs that run ON CLUSTER on replicated tables, which must be self-contained statements. Escaping
    `\\` and `'` is all a ClickHouse quoted string needs (tests/clickhouse/test_injection.py reads such
    ids back unchanged)."""
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def first_line(text: str, limit: int = 120) -> str:
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return line[:limit]
