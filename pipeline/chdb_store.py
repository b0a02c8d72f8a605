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
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, TYPE_CHECKING, Callable, TypeVar

from pipeline.store import DEDUP_VIEWS, NO_COLLAPSE_AT_INSERT, Params, StoreError, StoreLocked, first_line

if TYPE_CHECKING:
    import pyarrow as pa

T = TypeVar("T")


ENGINE_OPTIONS = "compile_expressions=0&compile_aggregate_expressions=0&compile_sort_description=0"
"""Settings every session of the store opens with. The engine compiles an expression (an aggregation, a
sort) to machine code with LLVM once it has met it three times: in a process that runs the analyzers
again and again (the loader service's live runs, every minute) the fourth run paid 1.6-2.0 CPU-s for
it, 2.6-3.4 s against 1.4-2.1 s, and the runs after it were no faster (1.61-1.66 s against 1.50-1.56 s
without). Whole runs of the bench day, which compile too, showed no consistent difference either way
(docs/performance.md)."""


_ESCAPED = str.maketrans({"\\": "\\\\", "\t": "\\t", "\n": "\\n", "\r": "\\r", "\0": "\\0"})


def _param_texts(params: Params) -> dict[str, str]:
    """Parameter values as ClickHouse reads them: in its escaped text format, where a backslash starts
    an escape sequence. chDB passes the text through as is, so a value with a backslash would fail to
    parse (`o'brien\\`) or change (`a\\tb` read as a tab) unless escaped here; the server store's
    driver does the same escaping itself."""
    return {k: v.translate(_ESCAPED) if isinstance(v, str) else str(v) for k, v in params.items()}


class ChdbStore:
    """The embedded ClickHouse engine in a directory (default ./goodput-data).

    Opening fails with a one-line StoreError naming the path and what to do (a file where the directory
    should be, a directory this user cannot create or write, a store another process holds, chDB
    refusing the directory) and leaves nothing behind that it made: a command run with a mistyped
    --store must not litter the disk with half-made stores."""

    LOCK_NAME = "goodput.lock"

    concurrent_statements = 2
    """How many statements a caller may run at once from as many threads (the analyzers' live runs do,
    pipeline/analyzers/run.py `_execute`): each thread's statement goes through a session of its own
    (`_checkout`), as one session runs its statements one at a time. The sessions are connections to the
    one engine of this process: the same tables, each one's work on its own threads."""

    def __init__(self, path: str | os.PathLike, *, create: bool = True) -> None:
        """`create`: make the store if it does not exist (loading); else an absent store is an error
        (commands that only read or reanalyse: nothing to read there)."""
        from chdb import session  # imported late: chdb is heavy and only the store needs it

        self.path = Path(path).resolve()
        made = _make_directory(self.path, create)
        try:
            before = set(os.listdir(self.path))
        except OSError as e:
            raise StoreError(
                f"cannot read the goodput store directory {self.path} ({e.strerror}): run as its owner, "
                f"or choose another --store (or [store].path)"
            ) from None
        try:
            self._lock_file = self._lock()
            self._session: session.Session | None = self._connect(session)
            self._start_pool()
        except BaseException:
            _remove_new(self.path, made, before)
            raise

    def _lock(self) -> IO[str]:
        lock_path = self.path / self.LOCK_NAME
        try:
            lock_file = open(lock_path, "a+")
        except OSError as e:
            raise StoreError(
                f"cannot open the store's lock file {lock_path} ({e.strerror}): the goodput store "
                f"{self.path} must be writable by this user (uid {os.getuid()}); run as its owner, or "
                f"choose another --store (or [store].path)"
            ) from None
        try:
            fcntl.flock(lock_file, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock_file.seek(0)
            holder = lock_file.read().strip() or "an unknown process"
            lock_file.close()
            raise StoreLocked(
                f"the goodput store {self.path} is in use by {holder}. chDB allows one process per "
                f"data directory: stop that process, or point this command at its own --store/--out "
                f"directory. A loader service (`goodput ingest --config FILE`) runs the analyzers itself "
                f"with --analyze-every SECONDS; for other processes to read while it loads, use a "
                f'ClickHouse server store ([store] kind = "server", docs/loader.md)'
            ) from None
        lock_file.seek(0)
        lock_file.truncate()
        lock_file.write(
            json.dumps(
                {
                    "pid": os.getpid(),
                    "command": " ".join(sys.argv[:3]),
                    "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                }
            )
        )
        lock_file.flush()
        return lock_file

    def _connect(self, session):
        """chDB's session; when the engine refuses the directory, a StoreError carrying the engine's own
        first line (it names the file it could not open), so the command's error stays one line."""
        started, error, said = _engine_start(lambda: session.Session(self.connection))
        if error is None:
            sys.stderr.write(said)  # nothing held back when it started
            return started
        self._release_lock()
        why = first_line(said, 300) or first_line(str(error), 300)
        raise StoreError(
            f"chDB could not open the store {self.path} ({why}): every file under it must be writable by "
            f"this user (uid {os.getuid()}); run as its owner, or choose another --store (or [store].path)"
        )

    def execute(self, sql: str, params: Params | None = None) -> None:
        self._run(sql, "CSV", params)

    def query_arrow(self, sql: str, params: Params | None = None) -> pa.Table:
        return self._run(sql, "ArrowTable", params)

    def insert_arrow(self, table: str, data: pa.Table, dedup_token: str | None = None) -> None:
        if data.num_rows == 0:
            return
        settings = f" SETTINGS {NO_COLLAPSE_AT_INSERT}=0"
        if dedup_token:
            settings += f", insert_deduplication_token='{dedup_token}', {DEDUP_VIEWS}=1"
        cols = ", ".join(f"`{c}`" for c in data.column_names)
        # chDB's Python() table function finds `data` in this frame by name.
        self._run(f"INSERT INTO {table} ({cols}){settings} SELECT {cols} FROM Python(data)", "CSV")

    def _run(self, sql: str, fmt: str, params: Params | None = None):
        session = self._checkout(sql)
        try:
            return session.query(sql, fmt, params=_param_texts(params) if params else None)
        except Exception as e:  # chDB raises plain RuntimeError for every engine error
            raise StoreError(f"chDB statement failed [{first_line(sql)}]: {e}") from None
        finally:
            with self._pool_lock:
                self._idle.append(session)

    @property
    def connection(self) -> str:
        """What chDB opens: the store's directory and the engine's options (ENGINE_OPTIONS)."""
        return f"{self.path}?{ENGINE_OPTIONS}"

    def _start_pool(self) -> None:
        """The store's own session is the first of its pool; `_checkout` adds others as threads need."""
        self._extra: list = []  # the connections `_checkout` added
        self._idle = [self._session]
        self._pool_lock = threading.Lock()

    def _checkout(self, sql: str):
        """An idle session for one statement: the store's own, or (a statement already running on every
        session, from another thread) one more connection to the same engine, kept for the next."""
        with self._pool_lock:
            if self._session is None:
                raise StoreError(f"chDB store {self.path} is closed [{first_line(sql)}]")
            if self._idle:
                return self._idle.pop()
            from chdb import session

            extra = session.Session(self.connection)
            self._extra.append(extra)
            return extra

    def close(self) -> None:
        with self._pool_lock:
            for extra in self._extra:
                extra.close()
            self._extra, self._idle = [], []
            if self._session is not None:
                self._session.close()
                self._session = None
        self._release_lock()

    def _release_lock(self) -> None:
        if not self._lock_file.closed:
            self._lock_file.seek(0)
            self._lock_file.truncate()
            fcntl.flock(self._lock_file, fcntl.LOCK_UN)
            self._lock_file.close()

    def __enter__(self) -> "ChdbStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _engine_start(start: Callable[[], T]) -> tuple[T | None, Exception | None, str]:
    """Runs `start` with file descriptor 2 held in a file: chDB's C++ engine writes its errors there,
    where Python's sys.stderr does not see them. Returns (start's result, its exception, what was
    written)."""
    sys.stderr.flush()
    saved = os.dup(2)
    result, error = None, None
    try:
        with tempfile.TemporaryFile() as held:
            os.dup2(held.fileno(), 2)
            try:
                result = start()
            except Exception as e:  # chDB raises RuntimeError("... Error initializing EmbeddedServer")
                error = e
            finally:
                os.dup2(saved, 2)
            held.seek(0)
            said = held.read().decode(errors="replace")
    finally:
        os.close(saved)
    return result, error, said


def _make_directory(path: Path, create: bool) -> Path | None:
    """Makes the store's directory where it is missing; returns the topmost directory made (None if it
    existed), for `_remove_new` to take away again if the store then cannot be opened."""
    if path.is_dir():
        if not create and not (path / ChdbStore.LOCK_NAME).exists():
            raise StoreError(_missing(path, "holds no goodput store"))
        return None
    if path.exists() or path.is_symlink():
        raise StoreError(
            f"the goodput store {path} is a file, not a directory: point --store (or [store].path) at a "
            f"directory (it is made if missing)"
        )
    if not create:
        raise StoreError(_missing(path, "does not exist"))
    top = path
    while not top.parent.exists() and top.parent != top:
        top = top.parent
    try:
        path.mkdir(parents=True)
    except OSError as e:
        raise StoreError(
            f"cannot make the goodput store directory {path}: {e.strerror} ({e.filename}); choose a "
            f"--store (or [store].path) where this user can make a directory"
        ) from None
    return top


def _missing(path: Path, what: str) -> str:
    return (
        f"{path} {what}: load one first (`goodput ingest`, `goodput demo`), or point --store (or "
        f"[store].path) at an existing store"
    )


def _remove_new(path: Path, made: Path | None, before: set[str]) -> None:
    """Takes away what a failed open made: the directories it created, else the entries new in `path`."""
    if made is not None:
        shutil.rmtree(made, ignore_errors=True)
        return
    for name in set(os.listdir(path)) - before:
        target = path / name
        if target.is_dir() and not target.is_symlink():
            shutil.rmtree(target, ignore_errors=True)
        else:
            target.unlink(missing_ok=True)
