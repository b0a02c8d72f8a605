"""Structured logs for daemons: one JSON object per line on stderr, for journald and kubectl logs.

Each line has ts (UTC, ISO 8601 with ms), level, logger, msg, and any context passed as `extra`
(collector=..., topic=...), so "which collector failed on which node" is a query, not a grep.
Secrets never reach a log line: the Kafka settings object holds only environment-variable names.
"""

from __future__ import annotations

import logging
import sys
import time

import orjson

_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime", "taskName"}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        out = {
            "ts": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
            + f".{int(record.msecs):03d}Z",
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        out.update({k: v for k, v in vars(record).items() if k not in _STANDARD})
        if record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        return orjson.dumps(out, default=str).decode()


def setup(fmt: str, level: int = logging.INFO) -> None:
    """Replaces the root handlers with one stderr handler in `fmt` ("json" or "text")."""
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        JsonFormatter()
        if fmt == "json"
        else logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s")
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level)
    # kafka-python logs every failed reconnect at ERROR, several times a second during an outage; the
    # sender reports outages itself, once, with what to check. -v lets the library speak again.
    logging.getLogger("kafka").setLevel(logging.WARNING if level <= logging.DEBUG else logging.CRITICAL)
