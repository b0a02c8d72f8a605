"""The goodput configuration file (TOML): one typed, strict model of every table and key.

One file describes a cluster for every component: pools and their nodes, GPU types and prices, network
tiers, storage ceilings, the team mapping, analyzer thresholds, how data travels (transport), where it
is kept (store), the demo's simulated cluster and the node agent. Each table is a msgspec Struct below:
its fields are the keys, typed and bounded (`Meta`), each documented by the string under it; a table's
own checks that involve several keys live in its `__post_init__`. docs/config.md is generated from these
classes (pipeline/docgen.py), so the page and the parser cannot disagree.

Reading a file is three explicit steps (`load`): `parse` (strict: an unknown key anywhere is refused by
its full name with the nearest known one suggested, contracts/strict.py), `resolve_paths` (relative
paths in the file are relative to the file's directory, not to wherever the command runs), then
`apply_env` (ENVIRONMENT). Precedence: defaults < file < environment < command-line flags (applied by
the commands). Every table is validated whether or not it is selected: a typo in `[store.server]` is
an error on a chDB setup too.

Secrets never live in the file: it names the environment variables that hold them (`*_env` keys), and
`secret` reads one when a connection is made, so no config object, repr or log line holds a secret.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, ClassVar, Literal, TypeVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import msgspec
from msgspec import Meta, field

from contracts import topology
from contracts.hostlist import expand as expand_nodes
from contracts.strict import ConfigError, build, key_name, resolve_paths, table_name

CONFIG_VERSION: Literal[1] = 1
EXAMPLE_CONFIG = Path(__file__).with_name("example_config.toml")
SOURCES = (
    "nvml", "rdma", "diskstats", "psi", "nfs", "lustre", "steps", "slurm", "volcano", "kueue", "jobfile",
)  # fmt: skip
"""Collectors the agent knows how to build, by the name each reports in goodput_collector_success."""
NODE_SOURCES = ("nvml", "rdma", "diskstats", "psi", "nfs", "lustre", "steps")
"""The default set: what every GPU node has. Job-state sources run on one node per cluster."""

FilePath = Annotated[str, Meta(extra={"path": True})]
"""A filesystem path; relative ones are relative to the config file's directory."""
EnvVar = Annotated[str, Meta(pattern=r"^([A-Za-z_][A-Za-z0-9_]*)?$")]
"""The name of an environment variable that holds a secret (never the secret itself)."""
Seconds = Annotated[float, Meta(gt=0)]
NonNegative = Annotated[float, Meta(ge=0)]
Fraction = Annotated[float, Meta(gt=0, lt=1)]
Count = Annotated[int, Meta(ge=1)]
Milliseconds = Annotated[int, Meta(ge=0)]
Name = Annotated[str, Meta(pattern=r"^[A-Za-z0-9_.-]+$")]
"""Letters, digits, `.`, `_`, `-`: written into SQL literals and Kafka topic names."""


class Table(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A table of the file: its fields are its keys, and nothing else is accepted."""


def parse_address(text: str, where: str) -> tuple[str, int]:
    """ "host:port", "[v6]:port" or ":port" (every interface) -> (host, port); `where` names the key."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise ConfigError(
            f'{where}: expected host:port, got {text!r} (e.g. "127.0.0.1:9479"; "" turns it off)'
        )
    return host.strip("[]") or "0.0.0.0", int(port)


def _check_address(text: str, key: str) -> None:
    """For __post_init__: a bad address as a ValueError starting with its key (contracts/strict.py)."""
    if text:
        parse_address(text, key)


def secret(var: str, named_by: str, env: Mapping[str, str] | None = None) -> str:
    """The secret held by the environment variable `var`, which the config key `named_by` names; read
    at the moment of use, so that it is in no config object. ConfigError when unset or empty."""
    value = (os.environ if env is None else env).get(var) if var else None
    if not value:
        raise ConfigError(
            f"the environment variable {var or '(none)'} (named by {named_by}) is not set or empty"
        )
    return value


# ------------------------------------------------------------------ the cluster


class ClusterConfig(Table, frozen=True):
    """`[cluster]`: which cluster this file describes."""

    name: Name = "goodput"
    """Cluster name; every message's `cluster` must match it, else it is dead-lettered (unknown_cluster)."""
    currency: str = "USD"
    """Currency of every price in the file."""
    control_nodes: tuple[str, ...] = ()
    """Hosts that send job events (the job-state collectors) but hold no GPUs."""


class GpuType(Table, frozen=True):
    """`[gpu_types.<T>]`: one GPU model of the fleet."""

    price_per_gpu_hour: NonNegative
    """Price of one GPU-hour (pools may override it)."""
    memory_bytes: Count = 80 * 2**30
    has_gpm: bool = True
    """Whether the GPUs report GPM metrics; without them utilization is the busy signal."""


class NetworkTier(Table, frozen=True):
    """`[network_tiers.<N>]`: a fabric that pools sit on."""

    link_gbps: Annotated[float, Meta(gt=0)] = 400.0
    links_per_node: Count = 8
    oversubscription: Annotated[float, Meta(ge=1)] = 1.0
    """Spine oversubscription: 2.0 for 2:1."""
    link_layer: Literal["InfiniBand", "Ethernet"] = "InfiniBand"


class Pool(Table, frozen=True, kw_only=True):
    """`[[pools]]`: a set of identical nodes with one price and one fabric."""

    name: Name
    pool_class: Literal["core", "shared", "experiment"] = field(name="class")
    """What the pool is for; the reports group by it."""
    gpu_type: str
    """A key of `[gpu_types]`."""
    gpus_per_node: Count = 8
    nodes: tuple[str, ...]
    """Slurm-style host lists (`gpu-[001-016]`); a node may be in one pool only."""
    network_tier: str
    """A key of `[network_tiers]`."""
    storage_ceiling_bytes_per_s: Annotated[float, Meta(gt=0)]
    """The pool's share of the storage bandwidth; beyond it the analyzer calls storage saturated."""
    price_per_gpu_hour: NonNegative | None = None
    """Overrides the GPU type's price (an older, depreciated fleet)."""

    def __post_init__(self) -> None:
        try:
            hosts = tuple(n for spec in self.nodes for n in expand_nodes(spec))
        except ValueError as e:
            raise ValueError(f"nodes: {e}") from None
        msgspec.structs.force_setattr(self, "nodes", hosts)


class TeamsConfig(Table, frozen=True):
    """`[teams]`: `<team> = [accounts]` maps scheduler accounts and Kubernetes namespaces to teams."""

    _rest: ClassVar[str] = "accounts"
    accounts: dict[str, tuple[str, ...]] = {}
    """Every key of the table other than default_team: a team and its accounts."""
    default_team: Name = "unassigned"
    """The team of an account no team lists."""


class SwitchConfig(Table, frozen=True):
    """`[topology.switches.<name>]`: one switch of the network tree, as a Slurm topology.conf line."""

    nodes: tuple[str, ...] = ()
    """Host lists of the nodes cabled to it (a leaf switch)."""
    switches: tuple[str, ...] = ()
    """Host lists of its child switches (a spine or core switch)."""


class TopologyConfig(Table, frozen=True):
    """`[topology]`: the network tree (leaf / spine switches) and racks, for each job's placement
    (`job_placement`, docs/goodput-model.md, Topology). Empty: every node is unmapped, and a job's
    placement counts its nodes only."""

    slurm_topology_conf: FilePath = ""
    """A Slurm topology.conf (tree plugin: `SwitchName=leaf1 Nodes=node[01-08]`,
    `SwitchName=spine Switches=leaf[1-4]`), read at each analysis; switches below add to it."""
    switches: dict[str, SwitchConfig] = {}
    """The tree written here instead of (or beside) the file: `[topology.switches.leaf1] nodes = [...]`."""
    racks: dict[str, tuple[str, ...]] = {}
    """`<rack> = [host lists]`: the rack of each node (a node in one rack only)."""

    def __post_init__(self) -> None:
        topology.build(self._inline())
        seen: dict[str, str] = {}
        for rack, specs in self.racks.items():
            try:
                hosts = [n for spec in specs for n in expand_nodes(spec)]
            except ValueError as e:
                raise ValueError(f"racks.{rack}: {e}") from None
            for n in hosts:
                if seen.setdefault(n, rack) != rack:
                    raise ValueError(f"racks.{rack}: node {n!r} is already in rack {seen[n]!r}")

    def _inline(self) -> list[topology.Switch]:
        return topology.from_config({k: (v.nodes, v.switches) for k, v in self.switches.items()})

    def placements(self) -> dict[str, topology.Placement]:
        """Node -> leaf and path to the root, from the Slurm file (read now) and the inline switches;
        ConfigError naming the file and line (or key) when the tree is invalid, so the commands print
        it as one line."""
        if not self.slurm_topology_conf:
            return topology.build(self._inline())
        path = Path(self.slurm_topology_conf)
        try:
            text = path.read_text()
        except OSError as e:
            raise ConfigError(f"[topology].slurm_topology_conf: cannot read {path}: {e.strerror}") from None
        try:
            return topology.build([*topology.parse_slurm(text, str(path)), *self._inline()])
        except ValueError as e:
            raise ConfigError(f"{e} (from [topology].slurm_topology_conf)") from None

    def rack_of(self) -> dict[str, str]:
        return {n: rack for rack, specs in self.racks.items() for spec in specs for n in expand_nodes(spec)}


# ------------------------------------------------------------------ analysis and loading


EXACT_KEYS = (
    "healthy_cutoff",
    "healthy_tolerance",
    "evidence_floor",
    "evidence_rise",
    "stalled_second_fraction",
    "noise_z",
    "straggler_min_slowdown",
    "straggler_persistent_fraction",
)
"""The [analyzer] thresholds the analyzers compare exactly (AnalyzerConfig.ppm)."""


class AnalyzerConfig(Table, frozen=True):
    """`[analyzer]`: thresholds of the counters-only attribution (docs/goodput-model.md explains each)."""

    window_s: Count = 10
    """Width of the analysis windows, seconds."""
    healthy_quantile: Fraction = 0.9
    """First-pass percentile of a job's running seconds."""
    healthy_cutoff: Annotated[float, Meta(gt=0, le=1)] = 0.8
    """Seconds at or above cutoff x that percentile count as healthy; b* is the middle of their shortest
    half."""
    healthy_tolerance: Annotated[float, Meta(ge=0, lt=1)] = 0.05
    """A window this close to the healthy level (1 - b/b* below it) is wholly productive; one exactly at
    it is not. At most 6 decimals, as healthy_cutoff, stalled_second_fraction, noise_z, evidence_floor,
    evidence_rise, straggler_min_slowdown and straggler_persistent_fraction: the analyzers compare at them
    exactly."""
    stalled_second_fraction: Annotated[float, Meta(ge=0, lt=1)] = 0.1
    """A running second below this fraction of the healthy level did no work: wholly lost, not credited
    with its residual activity (a GPU waiting on data or a collective still shows a few % SM)."""
    noise_z: Annotated[float, Meta(ge=0, le=1000)] = 3.0
    """How many standard deviations of a job's SM sample noise a loss must exceed: a second below
    noise_z x sigma counts as dead, and a window's shortfall under the noise of its mean is no loss."""
    clock_offset_s: Annotated[float, Meta(gt=0)] = 2.0
    """A node's clock offset (estimated per job from where its job-tagged GPU samples fall against the
    scheduler's allocation) at least this large is corrected before classification; smaller ones are
    within sampling jitter and left alone (docs/goodput-model.md, Clock skew)."""
    storage_saturation: Annotated[float, Meta(gt=0, le=1)] = 0.85
    """Fraction of the pool's storage ceiling that counts as saturated."""
    storage_reader_fraction: Annotated[float, Meta(ge=0, le=1)] = 0.5
    """A node counts among the readers of its pool's storage (so the pool at its ceiling is its evidence)
    where it reads at least this fraction of the pool's mean read rate per node: a job starved by a hog
    reads less than the hog, but far more than a job that hardly reads."""
    coarse_running_sources: tuple[Name, ...] = ("slurm", "volcano", "kueue")
    """Job-event sources whose `running` means "containers started", not "first training step": the
    analyzers find the real start from step events or the jump in SM activity."""
    psi_some_pct: Annotated[float, Meta(ge=0, le=100)] = 20.0
    nic_line_rate_fraction: Annotated[float, Meta(gt=0, le=1)] = 0.9
    xmit_wait_per_s: NonNegative = 1.0e6
    ecn_marked_per_s: NonNegative = 1000.0
    cnp_per_s: NonNegative = 1000.0
    evidence_floor: Annotated[float, Meta(gt=0, le=1)] = 0.5
    """A stall's evidence under its threshold still counts where it is at least this fraction of the
    threshold and has risen `evidence_rise` x over the node's level while the job was healthy."""
    evidence_rise: Annotated[float, Meta(ge=1, le=1000)] = 3.0
    """How far a signal under its threshold must rise over its healthy level to count as evidence."""
    evidence_baseline_windows: Count = 6
    """Healthy windows a (job, node) needs before its healthy evidence level is trusted; fewer, and only
    the thresholds count."""
    evidence_split: Literal["strength", "even"] = "strength"
    """Where a stall has both storage and fabric evidence: split it by the strength of each (signal over
    threshold), or half each."""
    step_wait_min: Annotated[float, Meta(ge=0, le=1)] = 0.01
    """Where a job's ranks report step events and waited at least this share of their step time (beyond
    their usual) in a window, the steps decide that window's lost share and its data/comm split."""
    straggler_min_slowdown: Annotated[float, Meta(gt=0, lt=1)] = 0.03
    """A rank whose median compute time per step is at least this much over its gang's median, window after
    window, straggles: a synchronous gang waits for it at every collective."""
    straggler_min_steps: Count = 30
    """Steps a straggler episode needs (consecutive windows of the same slowest rank): one noisy step, or
    a few, are not a straggler."""
    straggler_min_windows: Count = 6
    """Windows a straggler episode found from SM activity (a job without step events) needs: the busiest
    GPU of one noisy window, or a few, is not a straggler."""
    straggler_persistent_fraction: Fraction = 0.5
    """An episode covering at least this share of the job's windows with step events (from SM activity: of
    its running windows) is persistent."""
    straggler_score: Fraction = 0.75
    """Below this score (gang median / rank median compute) a straggler is gross (nvidia-resiliency-ext's
    default threshold); milder ones are still found and costed."""
    straggler_clock_event_mask: Annotated[int, Meta(ge=0)] = 0x8 | 0x20 | 0x40 | 0x80
    """NVML clock event reasons that mark a GPU as a straggler."""
    fault_evidence_s: Seconds = 60.0
    """A failure is located on a GPU, node or NIC by telemetry this close to it (an XID or a lost GPU, a
    port not ACTIVE): samples within this many seconds either side of the `failed` event."""
    repeat_window_s: Seconds = 7 * 86400.0
    """A node or GPU that fails again within this many seconds of its previous failure is a repeat
    offender (`fault_repeats`)."""
    capacity_bucket_s: Count = 3600
    """Width of the time buckets of `pool_capacity` (allocated vs unallocated capacity per pool), seconds;
    a multiple of window_s, so every window lies in one bucket."""
    idle_reclaim_after_s: Seconds = 1800.0
    """A GPU held this long (or longer) without activity is a reclaim candidate (`idle_allocations`); at
    least window_s + 1 s."""
    idle_busy_pct: Annotated[float, Meta(ge=0, le=100)] = 1.0
    """A second at or below this SM activity (utilization where GPM is absent) is a second without
    activity, for idle_reclaim_after_s."""

    def ppm(self, key: str) -> int:
        """An EXACT_KEYS threshold in millionths: the analyzers decide at it in integers, as a level met
        exactly (common on the samples' 0.01 % grid) must fall on the rule's side, not the rounding's."""
        return round(getattr(self, key) * 1_000_000)

    def __post_init__(self) -> None:
        for key in EXACT_KEYS:
            if round(getattr(self, key), 6) != getattr(self, key):
                raise ValueError(
                    f"{key}: {getattr(self, key)!r} has more than 6 decimals; the analyzers "
                    "compare at it exactly, in millionths"
                )
        if self.capacity_bucket_s % self.window_s:
            raise ValueError(
                f"capacity_bucket_s: {self.capacity_bucket_s} is not a multiple of window_s ({self.window_s})"
            )
        if self.idle_reclaim_after_s < self.window_s + 1:
            raise ValueError(
                f"idle_reclaim_after_s: {self.idle_reclaim_after_s} is under window_s + 1 s "
                f"({self.window_s + 1:g}); the idle allocations are found between windows with activity"
            )


class ReportMailConfig(Table, frozen=True):
    """`[report.mail]`: where `goodput report --send` mails each team its page."""

    smtp_host: str = ""
    """SMTP server; empty: no mail is sent."""
    smtp_port: Annotated[int, Meta(ge=1, le=65535)] = 25
    starttls: bool = False
    """Upgrade the connection with STARTTLS before logging in."""
    username: str = ""
    """Log in as this user (empty: no login)."""
    password_env: str = ""
    """Environment variable holding the SMTP password (never the file)."""
    sender: str = "goodput@localhost"
    recipients: dict[str, tuple[str, ...]] = {}
    """`<team> = ["lead@example.com", ...]`; the key `cluster` gets the cluster page."""


class ReportConfig(Table, frozen=True):
    """`[report]`: the daily efficiency report (`goodput report`, docs/report.md)."""

    timezone: str = "UTC"
    """IANA time zone of the report's readers (`Asia/Shanghai`): the report's day runs from their midnight
    to the next, not UTC's."""
    target_goodput_pct: Annotated[float, Meta(ge=0, le=100)] = 70.0
    """Goodput a team is held to where `targets` does not name it."""
    targets: dict[str, Annotated[float, Meta(ge=0, le=100)]] = {}
    """`<team> = <goodput %>`: a team's own target."""
    top_jobs: Count = 5
    """Jobs listed per team under "top jobs by waste"."""
    webhook_url: str = ""
    """Chat webhook `goodput report --send` posts each page's Markdown to (JSON `{"text": ...}`); empty:
    none."""
    mail: ReportMailConfig = ReportMailConfig()

    def __post_init__(self) -> None:
        try:
            ZoneInfo(self.timezone)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(
                f'timezone: {self.timezone!r} is no IANA time zone (e.g. "UTC", "Asia/Shanghai")'
            ) from None

    def target(self, team: str) -> float:
        return self.targets.get(team, self.target_goodput_pct)


_MAX_PAST_DAYS = 90


class LoaderConfig(Table, frozen=True):
    """`[loader]`: what the validator accepts, and how the Kafka loader service (`goodput ingest`,
    pipeline/loader_service.py) batches, retries and reports. docs/loader.md explains each key."""

    MAX_PAST_DAYS: ClassVar[int] = _MAX_PAST_DAYS
    """Upper bound of max_past_days: pipeline.ddl.RAW_TTL_DAYS, spelt out so that reading a config does not
    import the store's modules (tests/loader/test_config.py checks they agree)."""

    max_batch_rows: Count = 100_000
    max_past_days: Annotated[float, Meta(gt=0, le=_MAX_PAST_DAYS)] = 30.0
    """Oldest row accepted; raw tables keep 90 days, and one insert may touch at most 100 day partitions."""
    max_future_s: NonNegative = 300.0
    max_poll_records: Count = 5_000
    """Records one consumer poll may return."""
    flush_records: Count = 20_000
    """Load and commit once this many records are pending..."""
    flush_bytes: Count = 64 * 2**20
    """...or this many bytes of message values..."""
    flush_interval_s: Seconds = 1.0
    """...or when the oldest pending record has waited this long (the loader's added latency)."""
    retry_backoff_s: Seconds = 0.5
    """First wait after a store or transport failure; doubles per failure up to retry_backoff_max_s."""
    retry_backoff_max_s: Seconds = 30.0
    lag_interval_s: Seconds = 10.0
    """How often the consumer lag is asked of the brokers (for /metrics and the progress bar)."""
    metrics_address: str = "0.0.0.0:9479"
    """host:port of the Prometheus /metrics endpoint (every interface: the Prometheus that scrapes it is
    on another host; name one address to narrow it, docs/security.md); "" turns it off."""
    analyze_every_s: NonNegative = 0.0
    """Run the analyzers in the loader process this often (0: never; `--analyze-every` overrides)."""
    analyze_lookback_s: Seconds = 6 * 3600.0
    """How far back each scheduled analyzer run reclassifies (late batches inside it are picked up)."""
    live_every_s: NonNegative = 0.0
    """Between the scheduled runs, a live run this often (0: never): only the data's last `live_window_s`,
    each job with the numbers its last whole run kept, into goodput_live (provisional rows, see
    docs/goodput-model.md "Live runs"; 2 s for 10 minutes of 1,024 GPUs). Needs analyze_every_s."""
    live_window_s: Seconds = 600.0
    """The span each live run classifies, back from the end of the data."""
    compact_after_s: NonNegative = 3600.0
    """After each scheduled analyzer run, merge every day partition of the rollup tables that closed at
    least this long ago (UTC) into one part, so that later reads of that day skip the read-time merge
    (pipeline/compaction.py); 0: never. `goodput compact` does the same by hand."""

    def __post_init__(self) -> None:
        if self.live_every_s and not self.analyze_every_s:
            raise ValueError(
                f"live_every_s ({self.live_every_s}) needs analyze_every_s > 0: a live run takes each "
                "job's numbers from the last whole run"
            )
        if self.retry_backoff_max_s < self.retry_backoff_s:
            raise ValueError(
                f"retry_backoff_max_s ({self.retry_backoff_max_s}) is below "
                f"retry_backoff_s ({self.retry_backoff_s})"
            )
        _check_address(self.metrics_address, "metrics_address")

    @property
    def metrics_endpoint(self) -> tuple[str, int] | None:
        """`metrics_address` as (host, port), or None when the endpoint is off."""
        if not self.metrics_address:
            return None
        return parse_address(self.metrics_address, "[loader].metrics_address")


class ExporterConfig(Table, frozen=True):
    """`[exporter]`: the goodput exporter's Prometheus series of recent analyzer results (docs/alerts.md):
    what it covers and how many jobs get their own series, so that the cardinality is fixed here."""

    metrics_address: str = "0.0.0.0:9480"
    """host:port of `goodput exporter`'s /metrics (every interface: the Prometheus that scrapes it is on
    another host); "" turns it off. The loader service serves the same series on its own endpoint."""
    lookback_s: Seconds = 3600.0
    """The series cover this span, ending at the latest analysed window."""
    top_jobs: Annotated[int, Meta(ge=0)] = 20
    """Jobs with the most waste in the lookback that get job_id series..."""
    max_jobs: Count = 200
    """...then jobs running in the latest window, up to this many job_id series in all."""
    refresh_s: Seconds = 60.0
    """`goodput exporter`: how often the store is read again."""

    def __post_init__(self) -> None:
        if self.top_jobs > self.max_jobs:
            raise ValueError(f"top_jobs: {self.top_jobs} is above max_jobs ({self.max_jobs})")
        _check_address(self.metrics_address, "metrics_address")


# ------------------------------------------------------------------ transport and store


class KafkaConfig(Table, frozen=True):
    """`[transport.kafka]`: where the brokers are, how to authenticate, producer and consumer tuning
    (transport/kafka.py and docs/kafka.md say why each default)."""

    _secret_keys: ClassVar[dict[str, str]] = {
        "password": "sasl_password_env",
        "sasl_password": "sasl_password_env",
        "sasl_plain_password": "sasl_password_env",
        "ssl_password": "ssl_password_env",
        "username": "sasl_username_env",
        "sasl_username": "sasl_username_env",
        "sasl_plain_username": "sasl_username_env",
    }

    bootstrap: str = ""
    """Comma-separated host:port of the brokers; needed when `[transport] kind = "kafka"`."""
    security_protocol: Literal["PLAINTEXT", "SSL", "SASL_SSL"] = "PLAINTEXT"
    """SASL_PLAINTEXT is left out on purpose: with PLAIN it sends the password in clear text."""
    sasl_mechanism: Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"] | None = None
    sasl_username_env: EnvVar = ""
    sasl_password_env: EnvVar = ""
    ssl_cafile: FilePath = ""
    """PEM file of the CA that signed the brokers' certificates; "": the system's CAs."""
    ssl_certfile: FilePath = ""
    ssl_keyfile: FilePath = ""
    ssl_password_env: EnvVar = ""
    ssl_check_hostname: bool = True
    client_id: str = "goodput"
    group_id: str = "goodput-loader"
    compression: Literal["zstd", "lz4"] = "zstd"
    linger_ms: Milliseconds = 50
    batch_size: Count = 256 * 1024
    max_in_flight: int = 5
    """Requests in flight per connection, 1..5: more turns the idempotent producer off."""
    delivery_timeout_ms: Milliseconds = 120_000
    request_timeout_ms: Milliseconds = 30_000
    bootstrap_timeout_ms: Milliseconds = 30_000
    """How long making a client waits for the first broker answer before raising TransportError."""
    retry_backoff_ms: Milliseconds = 200
    reconnect_backoff_max_ms: Milliseconds = 5_000
    """Cap of the (jittered, exponential) reconnect backoff: kafka-python's 30 s default would leave
    agents idle up to half a minute after the brokers are back."""
    max_block_ms: Milliseconds = 10_000
    max_pending_bytes: Count = 64 * 1024 * 1024
    """Bytes of values not yet acknowledged; past that a send is refused instead of growing memory."""
    session_timeout_ms: Milliseconds = 10_000
    """Consumer group: how long a loader that stopped heartbeating keeps its partitions."""
    heartbeat_interval_ms: Milliseconds = 3_000
    max_poll_interval_ms: Milliseconds = 300_000
    """Consumer group: longest gap between polls before the member's partitions are reassigned."""

    def __post_init__(self) -> None:
        if self.security_protocol == "SASL_SSL":
            if self.sasl_mechanism is None:
                raise ValueError("sasl_mechanism: SASL_SSL needs one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512")
            if not (self.sasl_username_env and self.sasl_password_env):
                raise ValueError(
                    "sasl_username_env: SASL_SSL needs sasl_username_env and sasl_password_env "
                    "(names of environment variables holding the credentials)"
                )
        elif self.sasl_mechanism is not None:
            raise ValueError(
                f"sasl_mechanism is set but security_protocol is {self.security_protocol}; use SASL_SSL"
            )
        if not 1 <= self.max_in_flight <= 5:
            raise ValueError("max_in_flight must be 1..5: more turns the idempotent producer off")
        if self.delivery_timeout_ms < self.request_timeout_ms + self.linger_ms:
            raise ValueError("delivery_timeout_ms must be >= request_timeout_ms + linger_ms")
        if not 3 * self.heartbeat_interval_ms <= self.session_timeout_ms:
            raise ValueError("heartbeat_interval_ms must be at most a third of session_timeout_ms")


class TransportConfig(Table, frozen=True):
    """`[transport]`: how messages travel from the agents to the loader."""

    kind: Literal["inprocess", "kafka"] = "inprocess"
    topic_prefix: Name = "goodput"
    """Topics are `<prefix>.<kind>`."""
    kafka: KafkaConfig = KafkaConfig()


DEFAULT_PORT = 9000
DEFAULT_SECURE_PORT = 9440
DEFAULT_HTTP_PORT = 8123
DEFAULT_HTTPS_PORT = 8443


class StoreServerConfig(Table, frozen=True):
    """`[store.server]`: a ClickHouse server over the native protocol, inserts over HTTP
    (docs/clickhouse-server.md)."""

    _secret_keys: ClassVar[dict[str, str]] = {"password": "password_env"}

    host: str = "localhost"
    port: Annotated[int, Meta(ge=0, le=65535)] = 0
    """0: 9000, or 9440 when `secure`."""
    http_port: Annotated[int, Meta(ge=0, le=65535)] = 0
    """The server's HTTP port, which inserts use (pipeline/http_insert.py); 0: 8123, or 8443 when `secure`."""
    database: Annotated[str, Meta(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")] = "default"
    """A plain identifier: it is written into the DDL unquoted."""
    user: str = "default"
    password_env: EnvVar = ""
    """Name of the environment variable holding the password; "": connect without a password."""
    secure: bool = False
    ca_certs: FilePath = ""
    """PEM file of the CA that signed the server's certificate; "": the system's CAs."""
    verify: bool = True
    compression: Literal["lz4", "lz4hc", "none"] = "lz4"
    connect_timeout_s: Seconds = 10.0
    send_receive_timeout_s: Seconds = 300.0
    retries: Annotated[int, Meta(ge=0)] = 5
    cluster: Annotated[str, Meta(pattern=r"^([A-Za-z_][A-Za-z0-9_]*)?$")] = ""
    """Cluster name from the servers' <remote_servers>: the schema is created ON CLUSTER with
    replicated local tables and Distributed tables (pipeline.ddl.cluster_ddl); "": one server."""

    @property
    def effective_port(self) -> int:
        return self.port or (DEFAULT_SECURE_PORT if self.secure else DEFAULT_PORT)

    @property
    def effective_http_port(self) -> int:
        return self.http_port or (DEFAULT_HTTPS_PORT if self.secure else DEFAULT_HTTP_PORT)

    @property
    def address(self) -> str:
        return f"{self.host}:{self.effective_port}"

    def password(self, env: Mapping[str, str] | None = None) -> str:
        """Read now from the variable `password_env` names; "" when it names none."""
        return secret(self.password_env, "[store.server].password_env", env) if self.password_env else ""


class StoreConfig(Table, frozen=True):
    """`[store]`: where the data is kept."""

    kind: Literal["chdb", "server"] = "chdb"
    """`chdb` (embedded, a directory) or `server` (`[store.server]`)."""
    path: FilePath = "./goodput-data"
    """The chDB data directory."""
    server: StoreServerConfig = StoreServerConfig()


# ------------------------------------------------------------------ the demo's simulated cluster


class SimulationConfig(Table, frozen=True):
    """`[simulation]`: knobs of the simulated cluster behind `goodput demo` (ignored by the agent and the
    pipeline). goodput.sim.cluster.SimConfig takes its defaults from here."""

    accounts: Annotated[tuple[str, ...], Meta(min_length=1)] = ("llm", "cv", "asr", "research")
    failures_per_node_hour: NonNegative = 0.01
    partial_allocation_probability: Annotated[float, Meta(ge=0, le=1)] = 0.3
    storage_demand_scale: NonNegative = 1.0
    network_demand_scale: NonNegative = 1.0
    stragglers_per_hour: NonNegative = 2.0


# ------------------------------------------------------------------ the node agent

IntervalSeconds = Annotated[float, Meta(ge=0.05, le=3600)]
DISK_EXCLUDE = r"^(z?ram|loop|fd|(h|s|v|xv)d[a-z]|nvme\d+n\d+p|mmcblk\d+p)\d+$"
"""collectors.diskstats.DEFAULT_EXCLUDE, spelt out so that the model imports no collector (a test
checks they agree)."""
LUSTRE_ROOTS = ("/proc/fs/lustre", "/sys/kernel/debug/lustre", "/sys/fs/lustre")
"""collectors.lustre.DEFAULT_ROOTS, spelt out likewise."""


class AgentIntervals(Table, frozen=True):
    """`[agent.intervals]`: seconds between two collections of each signal kind."""

    gpu: IntervalSeconds = 1.0
    nic: IntervalSeconds = 1.0
    storage: IntervalSeconds = 1.0
    job: IntervalSeconds = 5.0
    step: IntervalSeconds = 1.0


class AgentConfig(Table, frozen=True):
    """`[agent]`: what one node agent collects, how often, where it keeps its state and where it serves
    /metrics (docs/agent.md). Filesystem roots are keys so that a container can mount the host's /sys
    and /proc elsewhere (the DaemonSet mounts them at /host/...), and so tests point the real collectors
    at fixture trees."""

    node: str = ""
    """Name the agent reports as (envelope `node`, Kafka key); must match the config's pool nodes.
    Precedence: `--node` > GOODPUT_NODE > this key > the host name."""
    state_dir: FilePath = "/var/lib/goodput-agent"
    """Holds the sequence-number state (`seq.json`) and the spool (`spool/`)."""
    metrics_address: str = "0.0.0.0:9477"
    """host:port for Prometheus /metrics; empty turns the endpoint off."""
    step_address: str = "127.0.0.1:9478"
    """UDP host:port the step reporter (collectors.steps.StepReporter) sends to."""
    collectors: tuple[Literal[SOURCES], ...] = NODE_SOURCES  # type: ignore[valid-type]
    """Sources to run; the job-state ones (slurm, volcano, kueue, jobfile) on one node per cluster."""
    intervals: AgentIntervals = AgentIntervals()
    sys_root: FilePath = "/sys"
    proc_root: FilePath = "/proc"
    lustre_roots: tuple[FilePath, ...] = LUSTRE_ROOTS
    nfs_mounts: tuple[str, ...] = ()
    """Mount points to report; empty: every NFS mount."""
    disk_exclude: str = DISK_EXCLUDE
    """Regular expression of block devices not reported (partitions, loop and RAM devices)."""
    pfc_netdevs: dict[str, str] = {}
    """`[agent.pfc_netdevs]`: RDMA device -> netdev whose PFC counters `ethtool -S` reads (RoCE only;
    empty: never run ethtool)."""
    job_file: FilePath = ""
    """Path of the JSON-lines job-event file read by the `jobfile` source."""
    spool_max_bytes: Count = 256 * 1024 * 1024
    spool_segment_bytes: Count = 4 * 1024 * 1024
    spool_fsync: Literal["always", "never"] | Count = 100
    """"always", "never", or fsync after every N batches (see agents/spool.py)."""
    send_window: Count = 1000
    """Most batches handed to the producer before waiting for their acknowledgements."""
    shutdown_timeout_s: NonNegative = 10.0
    """On SIGTERM, how long to keep sending before leaving the rest in the spool."""
    log_format: Literal["json", "text"] = "json"
    message_version: Literal[1, 2] = 1
    """Message schema version the agent sends (docs/messages.md): 1, JSON envelopes; 2, the columnar
    binary ones, the same fields about 3x cheaper for the loader to decode (docs/loader.md). Upgrade
    the loaders first: a loader without version 2 dead-letters such messages (`not_json`)."""

    def __post_init__(self) -> None:
        if "jobfile" in self.collectors and not self.job_file:
            raise ValueError('job_file: the jobfile source needs job_file = "<path of the JSON-lines file>"')
        _check_address(self.metrics_address, "metrics_address")
        _check_address(self.step_address, "step_address")
        try:
            re.compile(self.disk_exclude)
        except re.error as e:
            raise ValueError(f"disk_exclude: not a regular expression ({e})") from None

    @property
    def spool_dir(self) -> Path:
        return Path(self.state_dir) / "spool"

    @property
    def seq_path(self) -> Path:
        return Path(self.state_dir) / "seq.json"

    def interval_s(self, kind: str) -> float:
        return getattr(self.intervals, kind)


# ------------------------------------------------------------------ the file


class Config(Table, frozen=True):
    """The file's own keys; its tables follow. (`source`, no key of the file, names where the file came
    from in error messages.)"""

    _derived: ClassVar[tuple[str, ...]] = ("source",)

    schema_version: Literal[1] = CONFIG_VERSION
    """1. A file of another version is refused with a pointer to this page."""
    cluster: ClusterConfig = ClusterConfig()
    gpu_types: dict[str, GpuType] = {}
    network_tiers: dict[str, NetworkTier] = {}
    pools: tuple[Pool, ...] = ()
    teams: TeamsConfig = TeamsConfig()
    analyzer: AnalyzerConfig = AnalyzerConfig()
    report: ReportConfig = ReportConfig()
    topology: TopologyConfig = TopologyConfig()
    loader: LoaderConfig = LoaderConfig()
    exporter: ExporterConfig = ExporterConfig()
    transport: TransportConfig = TransportConfig()
    store: StoreConfig = StoreConfig()
    simulation: SimulationConfig = SimulationConfig()
    agent: AgentConfig = AgentConfig()
    source: str = "<memory>"

    def __post_init__(self) -> None:
        seen_nodes: dict[str, str] = {}
        for i, pool in enumerate(self.pools):
            where = table_name(("pools", i))
            if pool.gpu_type not in self.gpu_types:
                raise ValueError(f"{where}.gpu_type: {pool.gpu_type!r} is not declared under [gpu_types]")
            if pool.network_tier not in self.network_tiers:
                raise ValueError(
                    f"{where}.network_tier: {pool.network_tier!r} is not declared under [network_tiers]"
                )
            for n in pool.nodes:
                if n in seen_nodes:
                    raise ValueError(f"{where}.nodes: node {n!r} is already in pool {seen_nodes[n]!r}")
                seen_nodes[n] = pool.name

    def node_pool(self) -> dict[str, Pool]:
        return {n: p for p in self.pools for n in p.nodes}

    def known_nodes(self) -> set[str]:
        return set(self.node_pool()) | set(self.cluster.control_nodes)

    def price(self, pool: Pool) -> float:
        if pool.price_per_gpu_hour is not None:
            return pool.price_per_gpu_hour
        return self.gpu_types[pool.gpu_type].price_per_gpu_hour

    def team_of(self, account: str | None) -> str:
        for team, accounts in self.teams.accounts.items():
            if account in accounts:
                return team
        return self.teams.default_team


ENVIRONMENT = {
    "GOODPUT_STORE_PATH": ("store", "path"),
    "GOODPUT_KAFKA_BOOTSTRAP": ("transport", "kafka", "bootstrap"),
    "GOODPUT_NODE": ("agent", "node"),
    "GOODPUT_METRICS_ADDRESS": ("agent", "metrics_address"),
    "GOODPUT_LOADER_METRICS_ADDRESS": ("loader", "metrics_address"),
    "GOODPUT_EXPORTER_METRICS_ADDRESS": ("exporter", "metrics_address"),
}
"""Environment variables that override a key of the file (a non-empty value wins; `apply_env`). The
DaemonSet sets GOODPUT_NODE from the downward API's spec.nodeName, and GOODPUT_METRICS_ADDRESS to the
node's own IP, so that /metrics is not served on every interface of the host."""


def parse(data: dict, source: str = "<memory>") -> Config:
    """The Config of a parsed TOML document; ConfigError naming `source` and the key when invalid.
    Paths stay as written and the environment is not read (`load` does both, in that order)."""
    version = data.get("schema_version", CONFIG_VERSION)
    if version != CONFIG_VERSION:
        raise ConfigError(
            f"{source}: schema_version {version!r} is not supported (this goodput reads "
            f"{CONFIG_VERSION}); see docs/config.md for the changes"
        )
    try:
        return msgspec.structs.replace(build(Config, data), source=source)
    except ConfigError as e:
        raise ConfigError(f"{source}: {e}") from None


def apply_env(cfg: Config, env: Mapping[str, str] | None = None) -> Config:
    """`cfg` with the keys ENVIRONMENT names replaced by the variables set (non-empty) in `env`
    (default: os.environ). Values are taken as given: a relative GOODPUT_STORE_PATH is relative to
    the working directory, like a command-line flag."""
    env = os.environ if env is None else env
    for var, (*tables, key) in ENVIRONMENT.items():
        if env.get(var):
            try:
                cfg = _replace_at(cfg, tables, key, env[var])
            except ValueError as e:  # the table's own check (__post_init__) refused the value
                raise ConfigError(
                    f"environment variable {var} (overrides {key_name(tuple(tables), key)}): {e}"
                ) from None
    return cfg


_S = TypeVar("_S", bound=msgspec.Struct)


def _replace_at(obj: _S, tables: list[str], key: str, value: str) -> _S:
    if not tables:
        return msgspec.structs.replace(obj, **{key: value})
    inner = _replace_at(getattr(obj, tables[0]), tables[1:], key, value)
    return msgspec.structs.replace(obj, **{tables[0]: inner})


def read_toml(path: str | os.PathLike | None) -> tuple[dict, Path]:
    """The parsed file at `path` (default: the shipped example) and its path; a missing or invalid
    file is a ConfigError naming it."""
    p = Path(path) if path else EXAMPLE_CONFIG
    try:
        return tomllib.loads(p.read_text()), p
    except FileNotFoundError:
        raise ConfigError(f"config file {p} does not exist; start from {EXAMPLE_CONFIG}") from None
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"config file {p} is not valid TOML: {e}") from None


def load(path: str | os.PathLike | None = None, env: Mapping[str, str] | None = None) -> Config:
    """Reads a config file: parse, relative paths resolved against the file's directory, then the
    environment. Without `path` the shipped example stands in for a file in the working directory."""
    data, p = read_toml(path)
    cfg = parse(data, str(p))
    cfg = resolve_paths(cfg, p.resolve().parent if path else Path.cwd())
    return apply_env(cfg, env)
