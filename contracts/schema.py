"""The message contract: every signal kind and every field, declared once.

Everything that names a field reads this table: the collectors (which fill rows), the agent (which
batches rows into envelopes and exports Prometheus metrics named here), the loader (which validates
against it), the ClickHouse DDL (one column per field), `docs/messages.md` (generated from it, and
checked by a test) and the dashboards and alerts (through `contracts.catalog`).

Why columnar rows: a batch carries `columns` — one JSON array per field, all of one length — instead
of a list of objects. Field names are written once per batch rather than once per row, decoding is a
few large array conversions instead of millions of small dicts, and ClickHouse reads the same shape
natively (format JSONColumns). A field a node cannot measure (NVML NOT_SUPPORTED, a counter file that
reads `N/A`) is left out of the batch, or is `null` in the rows that lack it: absent, never zero.

Versioning: `SCHEMA_VERSION` grows when a field is removed, renamed or changes meaning. Adding an
optional field does not change the version; consumers ignore what they do not know only within the
same major version, so the loader dead-letters unknown fields rather than guessing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, TypedDict

SCHEMA_VERSION = 1

FieldType = Literal["int", "float", "str", "bool", "int_list"]


@dataclass(frozen=True, slots=True)
class Field:
    """One column of one signal kind.

    `metric`/`metric_type` name the Prometheus series an agent exports for a numeric field (None when
    the field is an identifier or label, or is exported otherwise: contracts.catalog
    AGENT_DERIVED_METRICS). `min`/`max` bound valid values; the loader dead-letters a batch with a value
    outside them (a negative rate, a utilisation of 250 %).

    The message carries what a consumer of one batch can use (a rate over the tick, a percent); the
    Prometheus series follow node_exporter and dcgm-exporter instead: counters as `_total` in base
    units, ratios 0-1 (`metric_scale` 0.01). `counts` says how the agent keeps a counter's total.
    """

    name: str
    type: FieldType
    unit: str
    help: str
    required: bool = False
    min: float | None = None
    max: float | None = None
    metric: str | None = None
    metric_type: Literal["gauge", "counter"] | None = None
    enum: tuple[str, ...] | None = None
    metric_scale: float = 1.0
    """Multiplier from the field's unit to the metric's base unit (MHz -> Hz is 1e6)."""
    ch_type: str | None = None
    """ClickHouse column type when the default for `type` would lose precision (Float32 for a float)."""
    label: str | None = None
    """Prometheus label name this identifier field becomes on the kind's metrics (dcgm-exporter's
    `gpu`/`UUID`/`modelName`, node_exporter's `device`/`port`); None: not a label."""
    counts: Literal["rate", "cumulative"] | None = None
    """For a counter: "rate" — the field is a per-second rate over the tick (a collector's counter
    advance, wraps and resets already corrected by collectors.counters), so the agent adds value x
    metric_scale x the tick's seconds to the total; "cumulative" — the field is the device's own
    counter, which the agent keeps monotonic across resets (a driver reload). Either way the exported
    total never decreases while the agent runs."""
    metric_help: str | None = None
    """HELP of the series where the field's own `help` describes the message value, not the series."""

    def __post_init__(self) -> None:
        counter = self.metric_type == "counter"
        if self.metric and counter != self.metric.endswith("_total"):
            raise ValueError(f"{self.name}: {self.metric!r} must end in _total exactly when it is a counter")
        if counter != (self.counts is not None):
            raise ValueError(f"{self.name}: a counter says how it counts (counts=), a gauge does not")


@dataclass(frozen=True, slots=True)
class Kind:
    """A signal kind: one Kafka topic, one raw ClickHouse table, one row shape."""

    name: str
    help: str
    fields: tuple[Field, ...]
    key: tuple[str, ...]
    """Columns (after cluster and the sender) that identify one sample; duplicates on it are one row."""
    sender_column: str = "node"
    """Raw-table column that keeps the envelope's `node`. Job events name their own `node` (where GPUs
    were allocated), so there the sending host is kept as `sender`."""

    def field(self, name: str) -> Field:
        for f in self.fields:
            if f.name == name:
                return f
        raise KeyError(f"kind {self.name!r} has no field {name!r}")

    @property
    def required(self) -> tuple[str, ...]:
        return tuple(f.name for f in self.fields if f.required)


TS = Field("ts_ms", "int", "ms", "Sample or event time, Unix epoch milliseconds (UTC).", required=True, min=0)


class _Percent(TypedDict):
    unit: str
    min: float
    max: float


class _Rate(TypedDict):
    min: float


PCT = _Percent(unit="%", min=0.0, max=100.0)
RATE = _Rate(min=0.0)

GPU = Kind(
    "gpu",
    "One row per GPU per collection tick (NVML). Rates are over the tick since the previous sample.",
    (
        TS,
        Field(
            "gpu", "int", "index", "NVML device index on the node.", required=True, min=0, max=63, label="gpu"
        ),
        Field("uuid", "str", "", "GPU UUID (GPU-xxxxxxxx-...).", required=True, label="UUID"),
        Field("model", "str", "", "Product name, e.g. 'NVIDIA H100 80GB HBM3'.", label="modelName"),
        Field("pci_bus_id", "str", "", "PCI bus id, e.g. '00000000:18:00.0'.", label="pci_bus_id"),
        Field(
            "job_id",
            "str",
            "",
            "Job whose process uses the GPU (cgroup / SLURM_JOB_ID / pod UID).",
            label="hpc_job",
        ),
        Field(
            "util_gpu_pct",
            "float",
            help="Time a kernel was running (coarse: any kernel counts).",
            metric="goodput_gpu_utilization_ratio",
            metric_type="gauge",
            metric_scale=0.01,
            **PCT,
        ),
        Field(
            "util_mem_pct",
            "float",
            help="Time device memory was being read or written.",
            metric="goodput_gpu_memory_utilization_ratio",
            metric_type="gauge",
            metric_scale=0.01,
            **PCT,
        ),
        Field(
            "sm_active_pct",
            "float",
            help="GPM SM activity: share of SMs with a warp resident (MFU proxy).",
            metric="goodput_gpu_sm_active_ratio",
            metric_type="gauge",
            metric_scale=0.01,
            **PCT,
        ),
        Field(
            "sm_occupancy_pct",
            "float",
            help="GPM SM occupancy: resident warps / max warps.",
            metric="goodput_gpu_sm_occupancy_ratio",
            metric_type="gauge",
            metric_scale=0.01,
            **PCT,
        ),
        Field(
            "tensor_active_pct",
            "float",
            help="GPM tensor-core activity (any tensor pipe).",
            metric="goodput_gpu_tensor_active_ratio",
            metric_type="gauge",
            metric_scale=0.01,
            **PCT,
        ),
        Field(
            "dram_active_pct",
            "float",
            help="GPM DRAM bandwidth utilisation.",
            metric="goodput_gpu_dram_active_ratio",
            metric_type="gauge",
            metric_scale=0.01,
            **PCT,
        ),
        Field(
            "mem_used_bytes",
            "int",
            "bytes",
            "Device memory in use.",
            min=0,
            metric="goodput_gpu_memory_used_bytes",
            metric_type="gauge",
        ),
        Field(
            "mem_total_bytes",
            "int",
            "bytes",
            "Device memory total.",
            min=0,
            metric="goodput_gpu_memory_total_bytes",
            metric_type="gauge",
        ),
        Field(
            "power_w",
            "float",
            "W",
            "Power draw (NVML reports mW).",
            min=0.0,
            max=5000.0,
            metric="goodput_gpu_power_watts",
            metric_type="gauge",
        ),
        Field(
            "energy_j",
            "float",
            "J",
            "Energy since driver load (monotonic; resets on driver reload).",
            min=0.0,
            metric="goodput_gpu_energy_joules_total",
            metric_type="counter",
            counts="cumulative",
            metric_help="Energy consumed; kept monotonic by the agent across driver reloads.",
            ch_type="Float64",
        ),
        Field(
            "temp_c",
            "float",
            "°C",
            "GPU core temperature.",
            min=-40.0,
            max=150.0,
            metric="goodput_gpu_temperature_celsius",
            metric_type="gauge",
        ),
        Field(
            "sm_clock_mhz",
            "float",
            "MHz",
            "SM clock.",
            min=0.0,
            metric="goodput_gpu_sm_clock_hertz",
            metric_type="gauge",
            metric_scale=1e6,
        ),
        Field(
            "mem_clock_mhz",
            "float",
            "MHz",
            "Memory clock.",
            min=0.0,
            metric="goodput_gpu_memory_clock_hertz",
            metric_type="gauge",
            metric_scale=1e6,
        ),
        Field(
            "throttle_reasons",
            "int",
            "bitmask",
            "nvmlDeviceGetCurrentClocksEventReasons (0x8 HW slowdown, 0x20/0x40 thermal, 0x4 power cap).",
            min=0,
        ),
        Field(
            "ecc_sbe_total",
            "int",
            "count",
            "Corrected (single-bit) ECC errors, volatile.",
            min=0,
            counts="cumulative",
            metric="goodput_gpu_ecc_corrected_errors_total",
            metric_type="counter",
        ),
        Field(
            "ecc_dbe_total",
            "int",
            "count",
            "Uncorrected (double-bit) ECC errors, volatile.",
            min=0,
            counts="cumulative",
            metric="goodput_gpu_ecc_uncorrected_errors_total",
            metric_type="counter",
        ),
        Field(
            "remapped_rows",
            "int",
            "count",
            "Rows remapped for uncorrectable errors.",
            min=0,
            metric="goodput_gpu_remapped_rows",
            metric_type="gauge",
        ),
        Field(
            "pcie_tx_bytes_per_s",
            "float",
            "bytes/s",
            "PCIe transmit throughput (NVML samples it over 20 ms; no counter exists, so it stays a gauge).",
            metric="goodput_gpu_pcie_transmit_bytes_per_second",
            metric_type="gauge",
            **RATE,
        ),
        Field(
            "pcie_rx_bytes_per_s",
            "float",
            "bytes/s",
            "PCIe receive throughput (sampled by NVML like the transmit one: a gauge).",
            metric="goodput_gpu_pcie_receive_bytes_per_second",
            metric_type="gauge",
            **RATE,
        ),
        Field(
            "nvlink_tx_bytes_per_s",
            "float",
            "bytes/s",
            "NVLink transmit throughput, all links.",
            metric="goodput_gpu_nvlink_transmit_bytes_total",
            metric_type="counter",
            counts="rate",
            **RATE,
        ),
        Field(
            "nvlink_rx_bytes_per_s",
            "float",
            "bytes/s",
            "NVLink receive throughput, all links.",
            metric="goodput_gpu_nvlink_receive_bytes_total",
            metric_type="counter",
            counts="rate",
            **RATE,
        ),
        Field(
            "nvlink_errors_per_s",
            "float",
            "1/s",
            "NVLink CRC/replay/recovery errors, all links.",
            metric="goodput_gpu_nvlink_errors_total",
            metric_type="counter",
            counts="rate",
            **RATE,
        ),
        Field(
            "xid",
            "int",
            "code",
            "Last XID critical error seen during the tick (absent: none).",
            min=0,
        ),
        Field("lost", "bool", "", "True when NVML reported GPU_IS_LOST for this GPU this tick."),
    ),
    key=("gpu", "ts_ms"),
)

NIC = Kind(
    "nic",
    "One row per RDMA port per tick (/sys/class/infiniband counters and hw_counters, ethtool PFC).",
    (
        TS,
        Field("device", "str", "", "RDMA device, e.g. mlx5_0.", required=True, label="device"),
        Field("port", "int", "", "Port number (1-based).", required=True, min=0, max=255, label="port"),
        Field("link_layer", "str", "", "InfiniBand or Ethernet (RoCE).", enum=("InfiniBand", "Ethernet")),
        Field("state", "str", "", "Port state, e.g. ACTIVE, DOWN."),
        Field(
            "rate_gbps",
            "float",
            "Gb/s",
            "Link rate.",
            min=0.0,
            metric="goodput_nic_link_speed_bytes",
            metric_type="gauge",
            metric_scale=1e9 / 8,
            metric_help="Link speed in bytes per second (node_exporter's node_network_speed_bytes).",
        ),
        Field(
            "tx_bytes_per_s",
            "float",
            "bytes/s",
            "Transmitted data (port_xmit_data x 4).",
            metric="goodput_nic_transmit_bytes_total",
            metric_type="counter",
            counts="rate",
            **RATE,
        ),
        Field(
            "rx_bytes_per_s",
            "float",
            "bytes/s",
            "Received data (port_rcv_data x 4).",
            metric="goodput_nic_receive_bytes_total",
            metric_type="counter",
            counts="rate",
            **RATE,
        ),
        Field(
            "tx_packets_per_s",
            "float",
            "1/s",
            "Transmitted packets.",
            metric="goodput_nic_transmit_packets_total",
            metric_type="counter",
            counts="rate",
            **RATE,
        ),
        Field(
            "rx_packets_per_s",
            "float",
            "1/s",
            "Received packets.",
            metric="goodput_nic_receive_packets_total",
            metric_type="counter",
            counts="rate",
            **RATE,
        ),
        Field(
            "xmit_wait_per_s",
            "float",
            "ticks/s",
            "port_xmit_wait: ticks with data queued but no credit.",
            metric="goodput_nic_transmit_wait_ticks_total",
            metric_type="counter",
            counts="rate",
            **RATE,
        ),
        Field(
            "ecn_marked_per_s",
            "float",
            "1/s",
            "np_ecn_marked_roce_packets: ECN-marked packets received.",
            metric="goodput_nic_ecn_marked_packets_total",
            metric_type="counter",
            counts="rate",
            **RATE,
        ),
        Field(
            "cnp_sent_per_s",
            "float",
            "1/s",
            "np_cnp_sent: congestion notifications sent.",
            metric="goodput_nic_cnp_sent_total",
            metric_type="counter",
            counts="rate",
            **RATE,
        ),
        Field(
            "cnp_handled_per_s",
            "float",
            "1/s",
            "rp_cnp_handled: congestion notifications acted on.",
            metric="goodput_nic_cnp_handled_total",
            metric_type="counter",
            counts="rate",
            **RATE,
        ),
        Field(
            "pfc_pause_rx_per_s",
            "float",
            "1/s",
            "PFC pause frames received, all priorities.",
            metric="goodput_nic_pfc_pause_received_total",
            metric_type="counter",
            counts="rate",
            **RATE,
        ),
        Field(
            "pfc_pause_us_per_s",
            "float",
            "µs/s",
            "PFC pause duration received, all priorities.",
            metric="goodput_nic_pfc_pause_duration_seconds_total",
            metric_type="counter",
            counts="rate",
            metric_scale=1e-6,
            **RATE,
        ),
        Field(
            "symbol_errors_per_s",
            "float",
            "1/s",
            "symbol_error.",
            metric="goodput_nic_symbol_errors_total",
            metric_type="counter",
            counts="rate",
            **RATE,
        ),
        Field(
            "rcv_errors_per_s",
            "float",
            "1/s",
            "port_rcv_errors.",
            metric="goodput_nic_receive_errors_total",
            metric_type="counter",
            counts="rate",
            **RATE,
        ),
        Field(
            "xmit_discards_per_s",
            "float",
            "1/s",
            "port_xmit_discards.",
            metric="goodput_nic_transmit_discards_total",
            metric_type="counter",
            counts="rate",
            **RATE,
        ),
        Field(
            "link_downed_per_s",
            "float",
            "1/s",
            "link_downed: link went down.",
            metric="goodput_nic_link_downed_total",
            metric_type="counter",
            counts="rate",
            **RATE,
        ),
        Field(
            "out_of_sequence_per_s",
            "float",
            "1/s",
            "mlx5 out_of_sequence.",
            metric="goodput_nic_out_of_sequence_total",
            metric_type="counter",
            counts="rate",
            **RATE,
        ),
        Field(
            "seq_errors_per_s",
            "float",
            "1/s",
            "mlx5 packet_seq_err.",
            metric="goodput_nic_packet_sequence_errors_total",
            metric_type="counter",
            counts="rate",
            **RATE,
        ),
        Field(
            "ack_timeouts_per_s",
            "float",
            "1/s",
            "mlx5 local_ack_timeout_err.",
            metric="goodput_nic_ack_timeouts_total",
            metric_type="counter",
            counts="rate",
            **RATE,
        ),
        Field(
            "retries_exceeded_per_s",
            "float",
            "1/s",
            "mlx5 req_transport_retries_exceeded.",
            metric="goodput_nic_retries_exceeded_total",
            metric_type="counter",
            counts="rate",
            **RATE,
        ),
    ),
    key=("device", "port", "ts_ms"),
)

STORAGE = Kind(
    "storage",
    "One row per block device, network mount or pressure source per tick. `source` says which fields "
    "apply: disk (/proc/diskstats), nfs (mountstats), lustre (llite/osc stats), psi (/proc/pressure/io).",
    (
        TS,
        Field(
            "source",
            "str",
            "",
            "disk | nfs | lustre | psi.",
            required=True,
            enum=("disk", "nfs", "lustre", "psi"),
            label="source",
        ),
        Field(
            "device",
            "str",
            "",
            "Device name, mount point or Lustre fs; 'io' for psi.",
            required=True,
            label="device",
        ),
        Field(
            "read_bytes_per_s",
            "float",
            "bytes/s",
            "Bytes read.",
            metric="goodput_storage_read_bytes_total",
            metric_type="counter",
            counts="rate",
            **RATE,
        ),
        Field(
            "write_bytes_per_s",
            "float",
            "bytes/s",
            "Bytes written.",
            metric="goodput_storage_write_bytes_total",
            metric_type="counter",
            counts="rate",
            **RATE,
        ),
        Field(
            "read_ops_per_s",
            "float",
            "1/s",
            "Read operations completed.",
            metric="goodput_storage_read_ops_total",
            metric_type="counter",
            counts="rate",
            **RATE,
        ),
        Field(
            "write_ops_per_s",
            "float",
            "1/s",
            "Write operations completed.",
            metric="goodput_storage_write_ops_total",
            metric_type="counter",
            counts="rate",
            **RATE,
        ),
        Field(
            "read_latency_ms",
            "float",
            "ms",
            "Mean time per read op over the tick (disk await, NFS rtt).",
            metric="goodput_storage_read_latency_seconds",
            metric_type="gauge",
            metric_scale=1e-3,
            **RATE,
        ),
        Field(
            "busy_pct",
            "float",
            help="Time the device had I/O in flight (diskstats io_ticks).",
            metric="goodput_storage_io_time_seconds_total",
            metric_type="counter",
            counts="rate",
            metric_scale=0.01,
            metric_help="Seconds the device had I/O in flight (diskstats io_ticks); rate(): the busy ratio.",
            **PCT,
        ),
        Field(
            "psi_some_pct",
            "float",
            help="Share of the tick some task stalled on I/O (from PSI total).",
            metric="goodput_storage_pressure_some_seconds_total",
            metric_type="counter",
            counts="rate",
            metric_scale=0.01,
            metric_help="Seconds in which some task stalled on I/O (PSI io some); rate() is the ratio.",
            **PCT,
        ),
        Field(
            "psi_full_pct",
            "float",
            help="Share of the tick all non-idle tasks stalled on I/O.",
            metric="goodput_storage_pressure_full_seconds_total",
            metric_type="counter",
            counts="rate",
            metric_scale=0.01,
            metric_help="Seconds in which all non-idle tasks stalled on I/O (PSI io full); rate(): ratio.",
            **PCT,
        ),
    ),
    key=("source", "device", "ts_ms"),
)

JOB_EVENTS = (
    "submitted",
    "allocated",
    "released",
    "gang_complete",
    "running",
    "checkpoint_saved",
    "failed",
    "restarted",
    "completed",
    "cancelled",
    "preempted",
)

JOB = Kind(
    "job",
    "Job lifecycle events from the scheduler (Slurm, Volcano, Kueue, a JSON-lines file, the simulator). "
    "Emitted by the agent that runs the job-state collector, usually one per cluster.",
    (
        TS,
        Field(
            "job_id", "str", "", "Scheduler job id (Slurm job id, Kubernetes namespace/name).", required=True
        ),
        Field(
            "event",
            "str",
            "",
            "Lifecycle event; see docs/messages.md for the meaning of each.",
            required=True,
            enum=JOB_EVENTS,
        ),
        Field(
            "attempt", "int", "", "1 for the first run; +1 on every restart or requeue.", required=True, min=1
        ),
        Field("account", "str", "", "Scheduler account or Kubernetes namespace; mapped to a team by config."),
        Field("user", "str", "", "Submitting user."),
        Field("queue", "str", "", "Slurm partition or Kueue LocalQueue / Volcano queue."),
        Field("priority", "int", "", "Scheduler priority (higher runs first).", min=0),
        Field("gpus_requested", "int", "GPUs", "GPUs the whole job asked for (the gang size).", min=0),
        Field("node", "str", "", "allocated/released: the node the GPUs are on."),
        Field(
            "gpu_indices",
            "int_list",
            "",
            "allocated/released: NVML indices of the GPUs on `node`; absent when the scheduler did not say "
            "which (allocation without placement).",
        ),
        Field(
            "step",
            "int",
            "",
            "checkpoint_saved: the training step saved; running: the step resumed from.",
            min=0,
        ),
        Field(
            "duration_ms", "int", "ms", "checkpoint_saved: how long training was blocked saving it.", min=0
        ),
        Field(
            "reason",
            "str",
            "",
            "failed/preempted/cancelled: xid:<code>, nccl_timeout, node_lost, oom, "
            "exit_code:<n>, timeout, preempted, user.",
        ),
        Field("exit_code", "int", "", "Process exit status where known."),
        Field("source", "str", "", "slurm | volcano | kueue | file | sim."),
    ),
    key=("job_id", "ts_ms", "event", "attempt", "node"),
    sender_column="sender",
)

STEP = Kind(
    "step",
    "Training-step events from the in-process reporter, forwarded by the local agent. Phase durations "
    "need not sum to the step: the remainder is unattributed time inside the step.",
    (
        TS,
        Field("job_id", "str", "", "Job id as the scheduler knows it.", required=True),
        Field("rank", "int", "", "Global rank of the reporting process.", required=True, min=0),
        Field("step", "int", "", "Training step number.", required=True, min=0),
        Field("attempt", "int", "", "Attempt (restart count + 1) as seen by the process.", min=1),
        Field("gpu", "int", "index", "Local GPU index the rank drives.", min=0),
        Field("duration_ms", "float", "ms", "Step wall time, start to end.", required=True, min=0.0),
        Field("data_ms", "float", "ms", "Waiting for the next input batch.", min=0.0),
        Field("compute_ms", "float", "ms", "Forward + backward + optimizer compute.", min=0.0),
        Field("comm_ms", "float", "ms", "Exposed (not overlapped) collective communication.", min=0.0),
        Field("checkpoint_ms", "float", "ms", "Blocked saving a checkpoint during this step.", min=0.0),
    ),
    key=("job_id", "rank", "step", "ts_ms"),
)

KINDS: dict[str, Kind] = {k.name: k for k in (GPU, NIC, STORAGE, JOB, STEP)}

ENVELOPE_FIELDS: tuple[tuple[str, str, str], ...] = (
    (
        "schema_version",
        "int",
        f"Message schema version: {SCHEMA_VERSION} in a JSON envelope, 2 in a columnar one's header (below).",
    ),
    ("kind", "str", "One of: " + ", ".join(KINDS) + "."),
    ("cluster", "str", "Cluster name from the agent's configuration."),
    ("node", "str", "Host name of the sending agent."),
    (
        "seq",
        "int",
        "Per-(cluster, node, kind) batch sequence number: starts at 0, +1 per batch, survives "
        "agent restarts, below 2^63. A repeated seq is a duplicate; a gap is loss upstream.",
    ),
    (
        "sent_ms",
        "int",
        "When the agent sent (or first tried to send) the batch, Unix epoch ms, by the node's clock; "
        "against the Kafka broker's append time it gives the node's clock offset (docs/loader.md).",
    ),
    (
        "agent",
        "str",
        "Optional: sender software and version, e.g. 'goodput-agent/0.1.0' or 'goodput-sim/0.1.0'.",
    ),
    ("columns", "object", "Field name -> array of values, all arrays of one length (the batch's rows)."),
)


def topic_for(kind: str, prefix: str = "goodput") -> str:
    """Kafka topic carrying one signal kind: `<prefix>.<kind>`, e.g. goodput.gpu."""
    if kind not in KINDS:
        raise KeyError(f"unknown signal kind {kind!r}; known: {', '.join(KINDS)}")
    return f"{prefix}.{kind}"
