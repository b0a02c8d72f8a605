"""The `[agent]` table of the goodput config file: what one node agent collects, how often, where it
keeps its state and where it serves /metrics.

The agent reads the same file as every other component (cluster name, Kafka settings and topic prefix
come from `contracts.config`); only the node-local settings live here. Filesystem roots are parameters
so a container can mount the host's /sys and /proc elsewhere (the DaemonSet mounts them at /host/...),
and so tests point the real collectors at fixture trees.

Precedence for the node name: `--node` flag > GOODPUT_NODE environment variable (the DaemonSet sets it
from the downward API's spec.nodeName) > `[agent].node` > the host name.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from collectors.diskstats import DEFAULT_EXCLUDE
from collectors.lustre import DEFAULT_ROOTS as LUSTRE_ROOTS
from contracts.config import ConfigError, parse_address, read_toml
from contracts.schema import KINDS

SOURCES = (
    "nvml",
    "rdma",
    "diskstats",
    "psi",
    "nfs",
    "lustre",
    "steps",
    "slurm",
    "volcano",
    "kueue",
    "jobfile",
)
"""Collectors the agent knows how to build, by the name each reports in goodput_collector_success."""
NODE_SOURCES = ("nvml", "rdma", "diskstats", "psi", "nfs", "lustre", "steps")
"""The default set: what every GPU node has. Job-state sources run on one node per cluster."""
DEFAULT_INTERVALS_S = {"gpu": 1.0, "nic": 1.0, "storage": 1.0, "job": 5.0, "step": 1.0}


@dataclass(frozen=True)
class AgentConfig:
    node: str = ""
    """Name the agent reports as (envelope `node`, Kafka key); must match the config's pool nodes."""
    state_dir: str = "/var/lib/goodput-agent"
    """Holds the sequence-number state (`seq.json`) and the spool (`spool/`)."""
    metrics_address: str = "0.0.0.0:9477"
    """host:port for Prometheus /metrics; empty turns the endpoint off."""
    step_address: str = "127.0.0.1:9478"
    """UDP host:port the step reporter (collectors.steps.StepReporter) sends to."""
    collectors: tuple[str, ...] = NODE_SOURCES
    intervals_s: dict[str, float] = field(default_factory=lambda: dict(DEFAULT_INTERVALS_S))
    sys_root: str = "/sys"
    proc_root: str = "/proc"
    lustre_roots: tuple[str, ...] = LUSTRE_ROOTS
    nfs_mounts: tuple[str, ...] = ()
    """Mount points to report; empty: every NFS mount."""
    disk_exclude: str = DEFAULT_EXCLUDE
    pfc_netdevs: dict[str, str] = field(default_factory=dict)
    """RDMA device -> netdev whose PFC counters `ethtool -S` reads (RoCE only; empty: never run ethtool)."""
    job_file: str = ""
    """Path of the JSON-lines job-event file read by the `jobfile` source."""
    spool_max_bytes: int = 256 * 1024 * 1024
    spool_segment_bytes: int = 4 * 1024 * 1024
    spool_fsync: str | int = 100
    """"always", "never", or fsync after every N batches (see agents/spool.py)."""
    send_window: int = 1000
    """Most batches handed to the producer before waiting for their acknowledgements."""
    shutdown_timeout_s: float = 10.0
    """On SIGTERM, how long to keep sending before leaving the rest in the spool."""
    log_format: str = "json"

    @property
    def spool_dir(self) -> Path:
        return Path(self.state_dir) / "spool"

    @property
    def seq_path(self) -> Path:
        return Path(self.state_dir) / "seq.json"

    def interval_s(self, kind: str) -> float:
        return self.intervals_s.get(kind, DEFAULT_INTERVALS_S[kind])


_LISTS = {"collectors", "lustre_roots", "nfs_mounts"}


def parse_agent(
    table: dict[str, Any], where: str = "agent", *, env: dict[str, str] | None = None, node: str | None = None
) -> AgentConfig:
    """Validates an `[agent]` table (unknown keys and wrong types are refused by name)."""
    env = dict(os.environ) if env is None else env
    known = {f.name: f for f in fields(AgentConfig)}
    renamed = {"intervals": "intervals_s"}
    data = {renamed.get(k, k): v for k, v in table.items()}
    unknown = sorted(set(data) - set(known))
    if unknown:
        raise ConfigError(
            f"[{where}]: unknown key(s) {', '.join(unknown)}; known: "
            f"{', '.join(sorted(set(known) - {'intervals_s'} | {'intervals'}))}"
        )
    defaults = AgentConfig()
    kwargs: dict[str, Any] = {}
    for name, value in data.items():
        default = getattr(defaults, name)
        if name in _LISTS:
            if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
                raise ConfigError(f"[{where}].{name}: expected a list of strings, got {value!r}")
            value = tuple(value)
        elif name in ("intervals_s", "pfc_netdevs"):
            if not isinstance(value, dict):
                raise ConfigError(f"[{where}].{name.removesuffix('_s')}: expected a table, got {value!r}")
            value = dict(value)
        elif name == "spool_fsync":
            if not (
                value in ("always", "never")
                or (isinstance(value, int) and not isinstance(value, bool) and value >= 1)
            ):
                raise ConfigError(
                    f"[{where}].spool_fsync: 'always', 'never' or a batch count >= 1, got {value!r}"
                )
        elif isinstance(default, float) and isinstance(value, int) and not isinstance(value, bool):
            value = float(value)
        elif not isinstance(value, type(default)) or isinstance(value, bool) != isinstance(default, bool):
            raise ConfigError(f"[{where}].{name}: expected {type(default).__name__}, got {value!r}")
        kwargs[name] = value
    intervals = dict(DEFAULT_INTERVALS_S)
    for kind, seconds in kwargs.get("intervals_s", {}).items():
        if kind not in KINDS:
            raise ConfigError(f"[{where}.intervals].{kind}: not a signal kind; known: {', '.join(KINDS)}")
        if isinstance(seconds, bool) or not isinstance(seconds, (int, float)) or not 0.05 <= seconds <= 3600:
            raise ConfigError(f"[{where}.intervals].{kind}: seconds between 0.05 and 3600, got {seconds!r}")
        intervals[kind] = float(seconds)
    kwargs["intervals_s"] = intervals
    bad = [c for c in kwargs.get("collectors", ()) if c not in SOURCES]
    if bad:
        raise ConfigError(f"[{where}].collectors: unknown {', '.join(bad)}; known: {', '.join(SOURCES)}")
    if "jobfile" in kwargs.get("collectors", ()) and not kwargs.get("job_file"):
        raise ConfigError(f'[{where}]: the jobfile source needs job_file = "<path of the JSON-lines file>"')
    if kwargs.get("log_format", "json") not in ("json", "text"):
        raise ConfigError(f"[{where}].log_format: 'json' or 'text', got {kwargs['log_format']!r}")
    for key in ("metrics_address", "step_address"):
        if kwargs.get(key):
            parse_address(kwargs[key], f"[{where}].{key}")
    kwargs["node"] = node or env.get("GOODPUT_NODE") or kwargs.get("node") or socket.gethostname()
    return AgentConfig(**kwargs)


def load_agent(path: str | os.PathLike | None, **overrides: Any) -> AgentConfig:
    """The `[agent]` table of the config file at `path` (the shipped example when None)."""
    data, _ = read_toml(path)
    return parse_agent(dict(data.get("agent", {})), **overrides)
