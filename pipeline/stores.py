"""Opens the store the configuration names. Kept apart from the stores themselves so that neither
implementation imports the other, and the ClickHouse driver loads only for a server store."""

from __future__ import annotations

import os

from contracts.config import StoreServerConfig
from pipeline.store import Store, StoreError


def open_store(
    kind: str, path: str | os.PathLike, server: StoreServerConfig | None = None, *, create: bool = True
) -> Store:
    """The store named by configuration: "chdb" in directory `path`, or "server", a ClickHouse server
    described by the `[store.server]` table (pipeline/server_store.py, docs/clickhouse-server.md).
    `create`: a missing chDB store is made (loading), else refused (reading: nothing would be there)."""
    if kind == "chdb":
        from pipeline.chdb_store import ChdbStore  # chDB loads only for the embedded store

        return ChdbStore(path, create=create)
    if kind == "server":
        from pipeline.server_store import ServerStore  # the driver loads only when used

        return ServerStore(server or StoreServerConfig())
    raise StoreError(f"store kind {kind!r} is not known; use 'chdb' or 'server'")
