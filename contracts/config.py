"""The goodput configuration file (TOML), parsed into typed, validated objects.

One file describes a cluster for every component: pools and their nodes, GPU types and prices, network
tiers, storage ceilings, the team mapping, analyzer thresholds, and how data travels (transport) and
where it is kept (store). Precedence: built-in defaults < file < environment (GOODPUT_STORE_PATH,
GOODPUT_KAFKA_BOOTSTRAP) < command-line flags. Secrets never live in the file: it names the
environment variables that hold them (`password_env`).

The format is documented in docs/config.md and versioned by `schema_version`.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from contracts.hostlist import expand as expand_nodes

CONFIG_VERSION = 1
POOL_CLASSES = ("core", "shared", "experiment")
EXAMPLE_CONFIG = Path(__file__).with_name("example_config.toml")


class ConfigError(ValueError):
    """The configuration is invalid; the message names the key and what is expected."""


@dataclass(frozen=True)
class GpuType:
    name: str
    price_per_gpu_hour: float
    memory_bytes: int = 80 * 2**30
    has_gpm: bool = True


@dataclass(frozen=True)
class NetworkTier:
    name: str
    link_gbps: float = 400.0
    links_per_node: int = 8
    oversubscription: float = 1.0
    link_layer: str = "InfiniBand"


@dataclass(frozen=True)
class Pool:
    name: str
    pool_class: str
    gpu_type: str
    gpus_per_node: int
    nodes: tuple[str, ...]
    network_tier: str
    storage_ceiling_bytes_per_s: float
    price_per_gpu_hour: float | None = None


@dataclass(frozen=True)
class AnalyzerConfig:
    """Thresholds for the counters-only attribution (docs/goodput-model.md explains each)."""

    window_s: int = 10
    healthy_quantile: float = 0.9
    healthy_cutoff: float = 0.8
    healthy_tolerance: float = 0.05
    storage_saturation: float = 0.85
    psi_some_pct: float = 20.0
    nic_line_rate_fraction: float = 0.9
    xmit_wait_per_s: float = 1.0e6
    ecn_marked_per_s: float = 1000.0
    cnp_per_s: float = 1000.0
    straggler_clock_event_mask: int = 0x8 | 0x20 | 0x40 | 0x80


@dataclass(frozen=True)
class TransportConfig:
    kind: str = "inprocess"
    topic_prefix: str = "goodput"
    kafka: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class StoreConfig:
    kind: str = "chdb"
    path: str = "./goodput-data"
    server: dict[str, Any] = field(default_factory=dict)


def parse_address(text: str, where: str) -> tuple[str, int]:
    """ "host:port", "[v6]:port" or ":port" (every interface) -> (host, port); `where` names the key."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ConfigError(
            f'{where}: expected host:port, got {text!r} (e.g. "127.0.0.1:9479"; "" turns it off)'
        )
    return host.strip("[]") or "0.0.0.0", int(port)


@dataclass(frozen=True)
class LoaderConfig:
    """`[loader]`: what the validator accepts, and how the Kafka loader service (`goodput ingest`,
    pipeline/loader_service.py) batches, retries and reports. docs/loader.md explains each key."""

    MAX_PAST_DAYS = 90
    """Upper bound of max_past_days: pipeline.ddl.RAW_TTL_DAYS, spelt out so that reading a config does not
    import the store's modules (tests/loader/test_config.py checks they agree). Not annotated: no key."""

    max_batch_rows: int = 100_000
    max_past_days: float = 30.0
    max_future_s: float = 300.0
    max_poll_records: int = 5_000
    """Records one consumer poll may return."""
    flush_records: int = 20_000
    """Load and commit once this many records are pending..."""
    flush_bytes: int = 64 * 2**20
    """...or this many bytes of message values..."""
    flush_interval_s: float = 1.0
    """...or when the oldest pending record has waited this long (the loader's added latency)."""
    retry_backoff_s: float = 0.5
    """First wait after a store or transport failure; doubles per failure up to retry_backoff_max_s."""
    retry_backoff_max_s: float = 30.0
    lag_interval_s: float = 10.0
    """How often the consumer lag is asked of the brokers (for /metrics and the progress bar)."""
    metrics_address: str = "127.0.0.1:9479"
    """host:port of the Prometheus /metrics endpoint; "" turns it off."""
    analyze_every_s: float = 0.0
    """Run the analyzers in the loader process this often (0: never; `--analyze-every` overrides)."""
    analyze_lookback_s: float = 6 * 3600.0
    """How far back each scheduled analyzer run reclassifies (late batches inside it are picked up)."""

    def __post_init__(self) -> None:
        for name in ("max_batch_rows", "max_poll_records", "flush_records", "flush_bytes"):
            if getattr(self, name) < 1:
                raise ConfigError(f"[loader].{name}: must be at least 1, got {getattr(self, name)}")
        for name in ("flush_interval_s", "retry_backoff_s", "lag_interval_s", "analyze_lookback_s"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"[loader].{name}: must be > 0 seconds, got {getattr(self, name)}")
        if not 0 < self.max_past_days <= self.MAX_PAST_DAYS:
            raise ConfigError(
                f"[loader].max_past_days: {self.max_past_days} is not in (0, {self.MAX_PAST_DAYS}]: "
                f"raw tables keep {self.MAX_PAST_DAYS} days, and one insert may touch at most 100 "
                f"day partitions"
            )
        if self.retry_backoff_max_s < self.retry_backoff_s:
            raise ConfigError(
                f"[loader].retry_backoff_max_s ({self.retry_backoff_max_s}) is below "
                f"retry_backoff_s ({self.retry_backoff_s})"
            )
        if self.analyze_every_s < 0:
            raise ConfigError(
                f"[loader].analyze_every_s: must be >= 0 (0 turns it off), got {self.analyze_every_s}"
            )
        self.metrics_endpoint  # noqa: B018 -- validates metrics_address now, not when the service starts

    @property
    def metrics_endpoint(self) -> tuple[str, int] | None:
        """`metrics_address` as (host, port), or None when the endpoint is off."""
        if not self.metrics_address:
            return None
        return parse_address(self.metrics_address, "[loader].metrics_address")


@dataclass(frozen=True)
class Config:
    cluster: str
    currency: str
    control_nodes: tuple[str, ...]
    gpu_types: dict[str, GpuType]
    network_tiers: dict[str, NetworkTier]
    pools: tuple[Pool, ...]
    teams: dict[str, tuple[str, ...]]
    default_team: str
    analyzer: AnalyzerConfig
    transport: TransportConfig
    store: StoreConfig
    loader: LoaderConfig
    simulation: dict[str, Any]
    source: str = "<memory>"

    def node_pool(self) -> dict[str, Pool]:
        return {n: p for p in self.pools for n in p.nodes}

    def known_nodes(self) -> set[str]:
        return set(self.node_pool()) | set(self.control_nodes)

    def price(self, pool: Pool) -> float:
        return (
            pool.price_per_gpu_hour
            if pool.price_per_gpu_hour is not None
            else (self.gpu_types[pool.gpu_type].price_per_gpu_hour)
        )

    def team_of(self, account: str | None) -> str:
        for team, accounts in self.teams.items():
            if account in accounts:
                return team
        return self.default_team


def _take(table: dict, key: str, where: str, kind: type, default: Any = ...) -> Any:
    if key not in table:
        if default is ...:
            raise ConfigError(f"{where}: missing required key {key!r}")
        return default
    value = table[key]
    if kind is float and isinstance(value, int) and not isinstance(value, bool):
        value = float(value)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ConfigError(f"{where}.{key}: expected {kind.__name__}, got {type(value).__name__} {value!r}")
    return value


def _dataclass_from(cls: type[Any], table: dict, where: str) -> Any:
    """Fills a flat dataclass of defaults from a TOML table, rejecting unknown keys (typos)."""
    known = cls.__dataclass_fields__
    unknown = sorted(set(table) - set(known))
    if unknown:
        raise ConfigError(f"[{where}]: unknown key(s) {', '.join(unknown)}; known: {', '.join(known)}")
    defaults = cls()
    kwargs = {k: _take(table, k, where, type(getattr(defaults, k)), getattr(defaults, k)) for k in known}
    return cls(**kwargs)


def parse(data: dict[str, Any], source: str = "<memory>") -> Config:
    version = data.get("schema_version", CONFIG_VERSION)
    if version != CONFIG_VERSION:
        raise ConfigError(
            f"{source}: schema_version {version} is not supported (this goodput reads "
            f"{CONFIG_VERSION}); see docs/config.md for the changes"
        )
    cluster = data.get("cluster", {})
    gpu_types = {
        name: GpuType(
            name,
            _take(t, "price_per_gpu_hour", f"gpu_types.{name}", float),
            _take(t, "memory_bytes", f"gpu_types.{name}", int, 80 * 2**30),
            _take(t, "has_gpm", f"gpu_types.{name}", bool, True),
        )
        for name, t in data.get("gpu_types", {}).items()
    }
    tiers = {
        name: NetworkTier(
            name,
            _take(t, "link_gbps", f"network_tiers.{name}", float, 400.0),
            _take(t, "links_per_node", f"network_tiers.{name}", int, 8),
            _take(t, "oversubscription", f"network_tiers.{name}", float, 1.0),
            _take(t, "link_layer", f"network_tiers.{name}", str, "InfiniBand"),
        )
        for name, t in data.get("network_tiers", {}).items()
    }
    pools = []
    seen_nodes: dict[str, str] = {}
    for i, p in enumerate(data.get("pools", [])):
        where = f"pools[{i}]"
        name = _take(p, "name", where, str)
        klass = _take(p, "class", where, str)
        if klass not in POOL_CLASSES:
            raise ConfigError(f"{where}.class: {klass!r} is not one of {', '.join(POOL_CLASSES)}")
        gtype = _take(p, "gpu_type", where, str)
        if gtype not in gpu_types:
            raise ConfigError(f"{where}.gpu_type: {gtype!r} is not declared under [gpu_types]")
        tier = _take(p, "network_tier", where, str)
        if tier not in tiers:
            raise ConfigError(f"{where}.network_tier: {tier!r} is not declared under [network_tiers]")
        nodes = tuple(n for spec in _take(p, "nodes", where, list) for n in expand_nodes(spec))
        for n in nodes:
            if n in seen_nodes:
                raise ConfigError(f"{where}: node {n!r} is already in pool {seen_nodes[n]!r}")
            seen_nodes[n] = name
        price = p.get("price_per_gpu_hour")
        pools.append(
            Pool(
                name,
                klass,
                gtype,
                _take(p, "gpus_per_node", where, int, 8),
                nodes,
                tier,
                _take(p, "storage_ceiling_bytes_per_s", where, float),
                float(price) if price is not None else None,
            )
        )
    teams_table = dict(data.get("teams", {}))
    default_team = teams_table.pop("default_team", "unassigned")
    teams = {team: tuple(accts) for team, accts in teams_table.items()}
    transport = data.get("transport", {})
    store = data.get("store", {})
    env_store = os.environ.get("GOODPUT_STORE_PATH")
    env_kafka = os.environ.get("GOODPUT_KAFKA_BOOTSTRAP")
    kafka = dict(transport.get("kafka", {}))
    if env_kafka:
        kafka["bootstrap"] = env_kafka
    cfg = Config(
        cluster=_take(cluster, "name", "cluster", str, "goodput"),
        currency=_take(cluster, "currency", "cluster", str, "USD"),
        control_nodes=tuple(_take(cluster, "control_nodes", "cluster", list, [])),
        gpu_types=gpu_types,
        network_tiers=tiers,
        pools=tuple(pools),
        teams=teams,
        default_team=default_team,
        analyzer=_dataclass_from(AnalyzerConfig, data.get("analyzer", {}), "analyzer"),
        transport=TransportConfig(
            _take(transport, "kind", "transport", str, "inprocess"),
            _take(transport, "topic_prefix", "transport", str, "goodput"),
            kafka,
        ),
        store=StoreConfig(
            _take(store, "kind", "store", str, "chdb"),
            env_store or _take(store, "path", "store", str, "./goodput-data"),
            dict(store.get("server", {})),
        ),
        loader=_dataclass_from(LoaderConfig, data.get("loader", {}), "loader"),
        simulation=dict(data.get("simulation", {})),
        source=source,
    )
    if cfg.transport.kind not in ("inprocess", "kafka"):
        raise ConfigError(f"[transport].kind: {cfg.transport.kind!r} is not 'inprocess' or 'kafka'")
    if cfg.store.kind not in ("chdb", "server"):
        raise ConfigError(f"[store].kind: {cfg.store.kind!r} is not 'chdb' or 'server'")
    return cfg


def read_toml(path: str | os.PathLike | None) -> tuple[dict[str, Any], Path]:
    """The parsed file at `path` (default: the shipped example) and its path; a missing or invalid
    file is a ConfigError naming it. Every component reads its tables through this."""
    p = Path(path) if path else EXAMPLE_CONFIG
    try:
        return tomllib.loads(p.read_text()), p
    except FileNotFoundError:
        raise ConfigError(f"config file {p} does not exist; start from {EXAMPLE_CONFIG}") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"config file {p} is not valid TOML: {e}") from None


def load(path: str | os.PathLike | None = None) -> Config:
    """Reads a config file (default: the example config shipped with goodput)."""
    data, p = read_toml(path)
    return parse(data, str(p))
