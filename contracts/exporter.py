"""Prometheus plumbing shared by goodput's daemons (the agent and the loader service).

Each daemon's series are declared once in `contracts.catalog` as name -> (type, help, label names),
with counters spelt as exposed (`..._total`); `declare` turns such a table into prometheus_client
objects on a private registry (so several daemons in one test process do not collide), and
`MetricsEndpoint` serves that registry over HTTP. Light on purpose: the agent imports it on every
GPU node.

The daemon code reaches its metrics as attributes of a frozen dataclass that it writes out, one field
per catalog entry (`m.agent_batches_sent`), not by string keys: a type checker reports a misspelt
attribute before anything runs (mypy: `has no attribute "agent_batches_snet"; maybe
"agent_batches_sent"?`), where a misspelt key failed only at run time, on the path that used it.
`declare` refuses a class whose fields differ from the catalog, and tests/test_metric_series.py checks
the field types too.
"""

from __future__ import annotations

from typing import TypeVar
from wsgiref.simple_server import WSGIServer

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

TYPES = {"counter": Counter, "gauge": Gauge, "histogram": Histogram}
"""Catalog type -> the prometheus_client class, which is also the field's type in the metrics class."""

_M = TypeVar("_M")


def attribute(name: str) -> str:
    """A series' field in its daemon's metrics class: `goodput_agent_batches_sent_total` ->
    `agent_batches_sent`."""
    return name.removeprefix("goodput_").removesuffix("_total")


def declare(
    cls: type[_M], spec: dict[str, tuple[str, str, tuple[str, ...]]], registry: CollectorRegistry
) -> _M:
    """`cls` with one metric object per catalog entry, in the field `attribute(name)`; a field missing
    from the catalog, or a catalog entry without a field, raises TypeError at start-up."""
    metrics = {}
    for name, (mtype, help_text, labels) in spec.items():
        declared = name.removesuffix("_total") if mtype == "counter" else name  # prometheus_client appends it
        metrics[attribute(name)] = TYPES[mtype](declared, help_text, labelnames=labels, registry=registry)
    return cls(**metrics)


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
