"""Inserts into a ClickHouse server over its HTTP interface, each body a Native block
(pipeline/native_format.py).

Why HTTP for inserts while queries use the native protocol (clickhouse-driver): over the native protocol
the client must hand its columns to the driver, which writes Nullable and LowCardinality columns value
by value in Python; over HTTP the server reads a body in any format it knows, so goodput sends Native
bytes it builds column by column. Queries keep the driver, which reads results into Arrow vectorised.

The body is compressed as the native protocol's blocks are (`decompress=1`: per chunk of at most 1 MiB,
a CityHash128 checksum, method byte, sizes, then LZ4) when [store.server].compression asks for it.
Settings travel as URL parameters; the password in an Authorization header, never in a URL or a log.

A server error comes back as the driver's ServerException with ClickHouse's code, and a failed
connection as ConnectionError naming the HTTP address, so ServerStore classifies HTTP failures (retries,
refuses, names what to check) exactly as native ones.
"""

from __future__ import annotations

import base64
import http.client
import re
import socket
import ssl
import struct
import urllib.parse
from typing import cast

import lz4.block
from clickhouse_cityhash.cityhash import CityHash128
from clickhouse_driver import errors

from contracts.config import StoreServerConfig

CHUNK = 1 << 20
"""Uncompressed bytes per compressed block: ClickHouse's own buffer size (DBMS_DEFAULT_BUFFER_SIZE)."""
LZ4_METHOD = 0x82
"""CompressionMethodByte::LZ4 (LZ4HC writes the same format, so the same byte)."""
LZ4_MODES = {"lz4": "default", "lz4hc": "high_compression"}
_CODE = re.compile(r"Code:\s*(\d+)")


def compressed(body: bytes, mode: str) -> bytes:
    """`body` as ClickHouse compressed blocks: what the server reads with `decompress=1`."""
    out = []
    for at in range(0, len(body), CHUNK):
        raw = body[at : at + CHUNK]
        data = lz4.block.compress(raw, store_size=False, mode=mode)
        framed = struct.pack("<BII", LZ4_METHOD, 9 + len(data), len(raw)) + data
        digest = CityHash128(framed)
        out += [struct.pack("<QQ", digest >> 64, digest & (2**64 - 1)), framed]
    return b"".join(out)


class HttpInserter:
    """One keep-alive HTTP(S) connection to the server's HTTP port, reopened after any failure."""

    def __init__(self, config: StoreServerConfig, password: str) -> None:
        self.config = config
        self.address = f"{config.host}:{config.effective_http_port}"
        token = base64.b64encode(f"{config.user}:{password}".encode()).decode()
        self._headers = {"Authorization": f"Basic {token}", "Content-Type": "application/octet-stream"}
        self._mode = LZ4_MODES.get(config.compression)
        self._conn: http.client.HTTPConnection | None = None

    def _connection(self) -> http.client.HTTPConnection:
        """The open connection, connected within connect_timeout_s; its reads and writes then wait up to
        send_receive_timeout_s (http.client has one timeout for both)."""
        c = self.config
        if self._conn is None:
            if c.secure:
                context = ssl.create_default_context(cafile=c.ca_certs or None)
                if not c.verify:
                    context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
                self._conn = http.client.HTTPSConnection(
                    c.host, c.effective_http_port, timeout=c.connect_timeout_s, context=context
                )
            else:
                self._conn = http.client.HTTPConnection(
                    c.host, c.effective_http_port, timeout=c.connect_timeout_s
                )
        conn = self._conn
        if conn.sock is None:  # new, or closed by http.client after a `Connection: close` answer
            conn.connect()
            cast(socket.socket, conn.sock).settimeout(c.send_receive_timeout_s)
        return conn

    def insert(self, query: str, body: bytes, settings: dict[str, object]) -> None:
        """POSTs `body` (Native) as `query` (INSERT INTO t (...) FORMAT Native) with `settings`."""
        params = {"query": query, "database": self.config.database, **settings}
        if self._mode:
            params["decompress"] = 1
            body = compressed(body, self._mode)
        url = "/?" + urllib.parse.urlencode(
            {k: int(v) if isinstance(v, bool) else v for k, v in params.items()}
        )
        try:
            status, text = self._exchange(url, body)
        except (OSError, http.client.HTTPException) as e:  # refused, cut off, timed out, TLS
            raise ConnectionError(f"HTTP {self.address}: {type(e).__name__}: {e}") from None
        if status != 200:
            message = text.decode(errors="replace").strip()
            code = _CODE.search(message)
            raise errors.ServerException(f"HTTP {status}: {message}", int(code[1]) if code else 0)

    def _exchange(self, url: str, body: bytes) -> tuple[int, bytes]:
        """One POST and its answer. A kept-alive connection that the server closed meanwhile (idle past
        its keep_alive_timeout, 3-10 s by default) fails at once on the next request; that request is
        sent again on a new connection, as HTTP clients do, not left to the store's retry (a wait and a
        warning after every quiet spell)."""
        reused = self._conn is not None
        try:
            return self._post(url, body)
        except (BrokenPipeError, ConnectionResetError, http.client.RemoteDisconnected):
            if not reused:
                raise
            return self._post(url, body)

    def _post(self, url: str, body: bytes) -> tuple[int, bytes]:
        conn = self._connection()
        try:
            conn.request("POST", url, body=body, headers=self._headers)
            response = conn.getresponse()
            return response.status, response.read()
        except BaseException:  # the connection is spent, or half-sent if interrupted: never reuse it
            self.close()
            raise

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
