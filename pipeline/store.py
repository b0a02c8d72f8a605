"""Where goodput keeps its tables: the one small Store interface and its errors. The embedded chDB store
(pipeline/chdb_store.py) and a ClickHouse server (pipeline/server_store.py) implement it;
pipeline/stores.py opens the one the configuration names.

The analyzers are ClickHouse SQL and run unchanged on every store. Data moves in and out as Arrow
tables: columnar end to end, no per-row Python objects on the hot path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # only for annotations: the agent imports StoreError without loading Arrow
    import pyarrow as pa


class StoreError(RuntimeError):
    """A statement failed; the message carries the first line of the SQL and the engine's error."""


class StoreLocked(StoreError):
    """Another process owns the chDB directory."""


class Store(Protocol):
    def execute(self, sql: str) -> None: ...

    def query_arrow(self, sql: str) -> pa.Table: ...

    def insert_arrow(self, table: str, data: pa.Table, dedup_token: str | None = None) -> None:
        """Appends rows; a repeated non-empty `dedup_token` for the same table inserts nothing."""
        ...

    def close(self) -> None: ...


def first_line(text: str, limit: int = 120) -> str:
    line = next((ln.strip() for ln in text.splitlines() if ln.strip()), "")
    return line[:limit]
