"""The ClickHouse-server store: the Store interface of pipeline/store.py, queries over the native
protocol and inserts over HTTP.

Queries go through clickhouse-driver (native TCP, port 9000/9440), which reads results into Arrow
tables vectorised. Inserts go to the HTTP port (8123/8443) as Native blocks that goodput encodes
itself (pipeline/native_format.py, pipeline/http_insert.py), LZ4-compressed: the driver's insert writes
Nullable and LowCardinality columns value by value in Python, which bounded a loader core at ~0.65 M
rows/s; the encoder writes each column in one vectorised pass (docs/clickhouse-server.md).

Failures and retries: a server restarted mid-load must not lose data, so every statement is retried
`retries` times with a doubling backoff (0.5 s up to 8 s) on network errors and on the few server
errors that mean "try again" (Keeper hiccups, too many parts); only then does the caller get a
`StoreError`, which names host:port and what to check. The loader commits nothing when insert_arrow
raises, so its next attempt replays the same rows. An insert whose acknowledgement was lost may have
been stored: the retry is dropped by the server when the table deduplicates inserts (Replicated
tables; raw tables on >= 23.8 through non_replicated_deduplication_window) and the insert carries
`insert_deduplication_token`. Servers older than 22.2 have no such setting; there the loader's
sequence ledger (`ingested_batches` + SeqTracker) and ReplacingMergeTree are what keep rows single
(docs/clickhouse-server.md).

Versions: the connection reads `version()` once. The goodput schema needs ClickHouse >= 23.8;
`require_version` (called by pipeline.ddl.migrate) refuses an older server with a message naming both.

The password never appears in the config file, in logs or in error messages: the file names an
environment variable (`password_env`) and the store reads it when it connects.
"""

from __future__ import annotations

import logging
import re
import time
from pathlib import Path

import pyarrow as pa
from tenacity import RetryCallState, Retrying, retry_if_exception_type, stop_after_attempt, wait_exponential

from contracts.config import ConfigError, StoreServerConfig
from pipeline import native_format
from pipeline.http_insert import HttpInserter
from pipeline.store import DEDUP_VIEWS, NO_COLLAPSE_AT_INSERT, Params, StoreError, first_line

log = logging.getLogger("goodput.store.server")

COMPRESSION = {"lz4": "lz4", "lz4hc": "lz4hc", "none": False}
"""LZ4 needs the `lz4` and `clickhouse-cityhash` packages (both goodput dependencies). ZSTD is left out:
the driver's ZSTD needs the separate `zstd` package, and LZ4 is ClickHouse's own default."""
BACKOFF_FIRST_S = 0.5
BACKOFF_MAX_S = 8.0
_INSERT_SELECT = re.compile(r"\s*INSERT\s+INTO\s+[^;]*?\bSELECT\b", re.IGNORECASE | re.DOTALL)

AUTH_CODES = {
    192: "unknown user",
    193: "wrong password",
    194: "password required",
    516: "authentication failed",
}
PARAMS_VERSION = (22, 8)
"""The first ClickHouse that takes query parameters over the native protocol."""
UNKNOWN_DATABASE = 81
UNKNOWN_STATUS_OF_INSERT = 319
TRANSIENT_CODES = {
    202: "too many simultaneous queries",
    209: "socket timeout",
    210: "network error",
    242: "table is read-only (replica lost its Keeper session)",
    252: "too many parts (merges are behind)",
    319: "unknown status of insert (Keeper connection lost during the insert)",
    999: "Keeper error",
}
"""Server error codes after which the same statement may succeed; everything else fails at once."""


class StoreVersionError(StoreError):
    """The server is too old for what was asked of it."""


class _Transient(Exception):
    """A failure after which the same statement may succeed; `_call` retries it. Its text says what
    failed, for the log line and the final StoreError."""


def _null_by_default(ch_type: str, default_kind: str) -> bool:
    """Whether leaving a column out of an insert stores NULL in it: a Nullable column without DEFAULT."""
    return not default_kind and ch_type.startswith(("Nullable(", "LowCardinality(Nullable("))


def _server_message(e) -> str:
    """The server's own sentence, without the stack trace the server appends."""
    return first_line(str(e.message).split("Stack trace", 1)[0]).rstrip(". ,")


def _is_tls_failure(e: Exception) -> bool:
    return "[SSL" in str(e)


class ServerStore:
    """A ClickHouse server (or cluster) reached over the native protocol; see the module docstring."""

    def __init__(self, config: StoreServerConfig) -> None:
        from clickhouse_driver import Client  # imported late: only the server store needs it

        if config.ca_certs and not Path(config.ca_certs).is_file():
            raise ConfigError(f"[store.server].ca_certs: {config.ca_certs} is not a readable file")
        try:
            password = config.password()
        except ConfigError as e:
            raise StoreError(f"{e}: export the ClickHouse password for user {config.user!r} in it") from None
        self.config = config
        self.address = config.address
        self.database = config.database
        self.cluster = config.cluster or None
        # Query parameters go to the server as parameters ({name:Type} in the SQL), not substituted
        # into the text by the driver: the server reads each value as data (pipeline.store.Params).
        settings: dict[str, int | bool] = {"server_side_params": True}
        if self.cluster:
            # A returned insert is on the shards (not queued on this server's disk), and IN/JOIN
            # subqueries are computed once here and shipped: the analyzers' reads over Distributed
            # tables then see the same rows as on one server.
            settings |= {"insert_distributed_sync": 1, "prefer_global_in_and_join": 1}
        self._client = Client(
            host=config.host,
            port=config.effective_port,
            database=config.database,
            user=config.user,
            password=password,
            secure=config.secure,
            verify=config.verify,
            ca_certs=config.ca_certs or None,
            compression=COMPRESSION[config.compression],
            connect_timeout=config.connect_timeout_s,
            send_receive_timeout=config.send_receive_timeout_s,
            client_name="goodput",
            settings=settings,
        )
        self._http = HttpInserter(config, password)
        self._token_warned = False
        self._column_types: dict[str, dict[str, tuple[str, str]]] = {}
        version, has_token, has_no_collapse = self._call(
            "SELECT version(), "
            "(SELECT count() FROM system.settings WHERE name = 'insert_deduplication_token'), "
            f"(SELECT count() FROM system.settings WHERE name = '{NO_COLLAPSE_AT_INSERT}')",
            lambda sql: self._client.execute(sql),
        )[0]
        self.version_text = version
        self.version = tuple(int(p) for p in re.findall(r"\d+", version)[:4])
        self.supports_dedup_token = bool(has_token)
        self.supports_no_collapse = bool(has_no_collapse)  # optimize_on_insert: not in 18.16
        log.info(
            "connected to ClickHouse %s at %s as %s (database %s%s)",
            version,
            self.address,
            config.user,
            self.database,
            f", cluster {self.cluster}" if self.cluster else "",
        )

    def require_version(self, minimum: tuple[int, ...], needs: str) -> None:
        """Refuses a server older than `minimum`, naming both versions and what needs the newer one."""
        if self.version[: len(minimum)] < minimum:
            wanted = ".".join(str(p) for p in minimum)
            raise StoreVersionError(
                f"ClickHouse at {self.address} is version {self.version_text}, but {needs} need "
                f"ClickHouse >= {wanted}. Upgrade the server (or point [store.server] at one >= {wanted}), "
                'or use the embedded store (kind = "chdb"); docs/clickhouse-server.md says what runs on '
                "older servers"
            )

    def _parameters(self, sql: str, params: Params | None) -> Params | None:
        """`params` for a server that takes them (22.8 brought query parameters to the native protocol).
        An older one gets a StoreError: never a fallback that writes the values into the SQL text."""
        if params and self.version < PARAMS_VERSION:
            raise StoreError(
                f"ClickHouse at {self.address} is version {self.version_text}; query parameters need "
                f"ClickHouse >= {'.'.join(map(str, PARAMS_VERSION))} [{first_line(sql)}]"
            )
        return params

    def execute(self, sql: str, params: Params | None = None) -> None:
        """Runs a statement. An INSERT ... SELECT cut off after it reached the server is not retried: it
        may have been applied, and the analyzers' output tables do not deduplicate, so the caller must
        rerun its whole step (the analyzers replace their range). Everything else goodput executes is
        idempotent by form (IF NOT EXISTS, DELETE/TRUNCATE, CREATE OR REPLACE) and is retried."""
        params = self._parameters(sql, params)
        self._call(
            sql, lambda s: self._client.execute(s, params), retry_after_send=not _INSERT_SELECT.match(sql)
        )

    def query_arrow(self, sql: str, params: Params | None = None) -> pa.Table:
        params = self._parameters(sql, params)
        return self._call(sql, lambda s: self._client.query_arrow(s, params, field_metadata=False))

    def insert_arrow(self, table: str, data: pa.Table, dedup_token: str | None = None) -> None:
        """Columnar insert of `data`: one Native block over HTTP, so one part, all or nothing.

        `dedup_token` goes to the server as insert_deduplication_token where the server knows that
        setting; older servers get the rows without it (logged once) and rely on the loader's ledger."""
        if data.num_rows == 0:
            return
        settings: dict[str, object] = {"insert_distributed_sync": 1} if self.cluster else {}
        if self.supports_no_collapse:
            settings[NO_COLLAPSE_AT_INSERT] = False
        if dedup_token:
            if self.supports_dedup_token:
                settings["insert_deduplication_token"] = dedup_token
                settings[DEDUP_VIEWS] = True
            elif not self._token_warned:
                self._token_warned = True
                log.warning(
                    "ClickHouse %s at %s has no insert_deduplication_token: a replayed insert is not "
                    "dropped by the server; the loader's sequence ledger and ReplacingMergeTree keep rows "
                    "single",
                    self.version_text,
                    self.address,
                )
        types = self._types(table)
        if not set(data.column_names) <= types.keys():  # a column added since: read the table again
            types = self._types(table, refresh=True)
        names = [
            name
            for name, col in zip(data.column_names, data.columns, strict=True)
            # an all-null column the server stores as NULL anyway: no null map and no values to send
            if not (col.null_count == len(col) and _null_by_default(*types.get(name, ("", ""))))
        ] or data.column_names[:1]  # every column null: one of them still carries the block's rows
        try:
            body = native_format.encode(data.select(names), {n: t for n, (t, _) in types.items()})
        except native_format.UnsupportedType as e:
            raise StoreError(f"cannot insert into {table} at {self.address}: {e}") from None
        cols = ", ".join(f"`{c}`" for c in names)
        self._call(
            f"INSERT INTO {table} ({cols}) FORMAT Native", lambda s: self._http.insert(s, body, settings)
        )

    def _types(self, table: str, refresh: bool = False) -> dict[str, tuple[str, str]]:
        """(type, default kind) of each column of `table`, read once per store (and again when an insert
        names a column added since): the types insert_arrow writes, and which all-null columns it may
        leave out."""
        if refresh or table not in self._column_types:
            database, _, name = table.rpartition(".")
            where = f"database = '{database}'" if database else "database = currentDatabase()"
            rows = self.query_arrow(
                f"SELECT name, type, default_kind FROM system.columns WHERE {where} AND table = '{name}'"
            ).to_pylist()
            self._column_types[table] = {r["name"]: (r["type"], r["default_kind"]) for r in rows}
        return self._column_types[table]

    def _call(self, sql: str, run, retry_after_send: bool = True):
        """Runs `run(sql)`, retrying transient failures; raises StoreError naming what to check.
        With `retry_after_send` off, only failures before the statement was sent are retried."""
        started = time.monotonic()
        attempts = self.config.retries + 1

        def retrying(state: RetryCallState) -> None:
            log.warning(
                "ClickHouse at %s: [%s] failed (%s); retry %d of %d in %.1f s",
                self.address,
                first_line(sql)[:60],
                state.outcome and state.outcome.exception(),
                state.attempt_number,
                self.config.retries,
                state.next_action.sleep if state.next_action else 0.0,
            )

        try:
            return Retrying(
                retry=retry_if_exception_type(_Transient),
                stop=stop_after_attempt(attempts),
                wait=wait_exponential(multiplier=BACKOFF_FIRST_S, max=BACKOFF_MAX_S),
                before_sleep=retrying,
                reraise=True,
            )(self._attempt, sql, run, retry_after_send)
        except _Transient as last:
            raise StoreError(
                f"ClickHouse at {self.address} did not answer [{first_line(sql)}] after {attempts} attempts "
                f"over {time.monotonic() - started:.1f} s (last: {last}). Check that clickhouse-server runs "
                f"and listens there (host/port/secure in [store.server]: 9000 plain, 9440 TLS; inserts go to "
                f"http_port: 8123 plain, 8443 TLS), and its "
                f"error log (clickhouse-server.err.log). Nothing was committed, so retrying the same load is "
                f"safe"
            ) from None

    def _attempt(self, sql: str, run, retry_after_send: bool):
        """One try of `_call`: raises _Transient for what may succeed when tried again, StoreError for
        what will not."""
        from clickhouse_driver import errors

        sent = False
        try:
            if not retry_after_send:
                conn = self._client.connection
                if not conn.connected or not conn.ping():
                    conn.connect()  # a failure here means nothing was sent
            sent = True
            return run(sql)
        except errors.ServerException as e:
            if e.code in AUTH_CODES:
                raise self._auth_error(e) from None
            if e.code == UNKNOWN_DATABASE and "atabase" in str(e.message):
                raise StoreError(
                    f"ClickHouse at {self.address}: {_server_message(e)}. Create it "
                    f"(CREATE DATABASE {self.database}) or fix [store.server].database"
                ) from None
            if e.code not in TRANSIENT_CODES:
                raise StoreError(
                    f"ClickHouse at {self.address} refused [{first_line(sql)}]: "
                    f"{_server_message(e)} (code {e.code})"
                ) from None
            last = f"{TRANSIENT_CODES[e.code]}: {_server_message(e)}"
            if e.code == UNKNOWN_STATUS_OF_INSERT and not retry_after_send:
                raise self._ambiguous(sql, last) from None
            raise _Transient(last) from None
        except (errors.NetworkError, errors.SocketTimeoutError, EOFError, OSError) as e:
            if _is_tls_failure(e):
                raise StoreError(
                    f"TLS with ClickHouse at {self.address} failed: {e}. Check [store.server].secure (the "
                    f"server's TLS ports: 9440 native, 8443 HTTPS by default), ca_certs (the CA that signed "
                    f"the server's certificate) and verify"
                ) from None
            last = f"{type(e).__name__}: {e}"
            if sent and not retry_after_send:
                raise self._ambiguous(sql, last) from None
            raise _Transient(last) from None
        except errors.Error as e:  # client side: a value that does not fit the column, ...
            raise StoreError(f"ClickHouse client error for {self.address} [{first_line(sql)}]: {e}") from None

    def _ambiguous(self, sql: str, what: str) -> StoreError:
        return StoreError(
            f"ClickHouse at {self.address}: [{first_line(sql)}] was cut off ({what}). It may or may not have "
            f"been applied, so it is not retried: rerun the step that issued it once the server answers again"
        )

    def _auth_error(self, e) -> StoreError:
        where = (
            f"the environment variable {self.config.password_env} ([store.server].password_env)"
            if self.config.password_env
            else "no password: [store.server].password_env is not set"
        )
        return StoreError(
            f"ClickHouse at {self.address} refused user {self.config.user!r}: {AUTH_CODES[e.code]} "
            f"(code {e.code}). The password came from {where}; check it, and that the user exists and may "
            f"connect from this host (users.xml <networks>, or CREATE USER ... HOST)"
        )

    def close(self) -> None:
        self._http.close()
        self._client.disconnect()

    def __enter__(self) -> "ServerStore":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
