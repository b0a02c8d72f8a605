"""The embedded ClickHouse engine (chDB) in a directory: goodput's zero-setup store.

chDB lets exactly one process own a data directory. Rather than let a second process meet chDB's own
opaque error ("Error initializing EmbeddedServer" / "Cannot lock file .../status"), `ChdbStore` takes
an advisory lock on `<dir>/goodput.lock` first and, when another process holds it, raises
`StoreLocked` naming that process and what to do instead.
"""

from __future__ import annotations

import fcntl
import json
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

from pipeline.store import Params, StoreError, StoreLocked, first_line

if TYPE_CHECKING:
    import pyarrow as pa


_ESCAPED = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r", "\0": "\\0"})


def _param_texts(params: Params) -> dict[str, str]:
    """Parameter values as ClickHouse reads them: in its escaped text format, where a backslash starts
    an escape sequence. chDB passes the text through as is, so a value with a backslash would fail to
    parse (`o'brien\\`) or change (`a\\tb` read as a tab) unless escaped here; the server store's
    driver does the same escaping itself."""
    return {k: v.translate(_ESCAPED) if isinstance(v, str) else str(v) for k, v in params.items()}


class ChdbStore:
    """The embedded ClickHouse engine in a directory (default ./goodput-data)."""

    LOCK_NAME = "goodput.lock"

    def __init__(self, path: str | os.PathLike) -> None:
        self.path = Path(path).resolve()
        self.path.mkdir(parents=True, exist_ok=True)
        self._lock_file = open(self.path / self.LOCK_NAME, "a+")
        try:
            fcntl.flock(self._lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            self._lock_file.seek(0)
            holder = self._lock_file.read().strip() or "an unknown process"
            self._lock_file.close()
            raise StoreLocked(
                f"the goodput store {self.path} is in use by {holder}. chDB allows one process per "
                f"data directory: stop that process, or point this command at its own --store/--out "
                f"directory. A loader service (`goodput ingest --config FILE`) runs the analyzers itself "
                f"with --analyze-every SECONDS; for other processes to read while it loads, use a "
                f'ClickHouse server store ([store] kind = "server", docs/loader.md)'
            ) from None
        self._lock_file.seek(0)
        self._lock_file.truncate()
        self._lock_file.write(
            json.dumps(
                {
                    "pid": os.getpid(),
                    "command": " ".join(sys.argv[:3]),
                    "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                }
            )
        )
        self._lock_file.flush()
        from chdb import session  # imported late: chdb is heavy and only the store needs it

        self._session: session.Session | None = session.Session(str(self.path))

    def execute(self, sql: str, params: Params | None = None) -> None:
        self._run(sql, "CSV", params)

    def query_arrow(self, sql: str, params: Params | None = None) -> pa.Table:
        return self._run(sql, "ArrowTable", params)

    def insert_arrow(self, table: str, data: pa.Table, dedup_token: str | None = None) -> None:
        if data.num_rows == 0:
            return
        settings = ""
        if dedup_token:
            settings = f" SETTINGS insert_deduplication_token='{dedup_token}'"
        cols = ", ".join(f"`{c}`" for c in data.column_names)
        # chDB's Python() table function finds `data` in this frame by name.
        self._run(f"INSERT INTO {table} ({cols}){settings} SELECT {cols} FROM Python(data)", "CSV")

    def _run(self, sql: str, fmt: str, params: Params | None = None):
        if self._session is None:
            raise StoreError(f"chDB store {self.path} is closed [{first_line(sql)}]")
        try:
            return self._session.query(sql, fmt, params=_param_texts(params) if params else None)
        except Exception as e:  # chDB raises plain RuntimeError for every engine error
            raise StoreError(f"chDB statement failed [{first_line(sql)}]: {e}") from None

    def close(self) -> None:
        if self._session is not None:
            self._session.close()
            self._session = None
        if not self._lock_file.closed:
            self._lock_file.seek(0)
            self._lock_file.truncate()
            fcntl.flock(self._lock_file, fcntl.LOCK_UN)
            self._lock_file.close()

    def __enter__(self) -> "ChdbStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
