"""Prometheus plumbing shared by goodput's daemons (the agent and the loader service).

Each daemon's series are declared once in `contracts.catalog` as name -> (type, help, label names),
with counters spelt as exposed (`..._total`); `declare` turns such a table into prometheus_client
objects on a private registry (so several daemons in one test process do not collide), and
`MetricsEndpoint` serves that registry over HTTP. Light on purpose: the agent imports it on every
GPU node.
"""

from __future__ import annotations

from typing import Any
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

_TYPES = {"counter": Counter, "gauge": Gauge, "histogram": Histogram}


def declare(spec: dict[str, tuple[str, str, tuple[str, ...]]], registry: CollectorRegistry) -> dict[str, Any]:
    """One metric object per catalog entry, keyed by the exposed name.

    Typed Any: whether an entry is a Counter, Gauge or Histogram is the catalog's row for that name,
    which its callers know and a type checker cannot (a union would refuse every `.inc`/`.set`)."""
    out: dict[str, Any] = {}
    for name, (mtype, help_text, labels) in spec.items():
        declared = name.removesuffix("_total") if mtype == "counter" else name  # prometheus_client appends it
        out[name] = _TYPES[mtype](declared, help_text, labelnames=labels, registry=registry)
    return out


class MetricsEndpoint:
    """/metrics for one registry, in a daemon thread."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        self._server: WSGIServer | None = None

    def serve(self, host: str, port: int) -> tuple[str, int]:
        """Starts the endpoint; returns the bound address (port 0: any free port)."""
        self._server, _thread = start_http_server(port, host, registry=self.registry)
        # typeshed allows a bytes host; a TCP server's is always a str
        bound_host, bound_port = self._server.server_address[:2]
        return str(bound_host), bound_port

    def close(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
