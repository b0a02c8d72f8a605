"""Every name other components rely on, declared once: tables, categories, metric names.

Dashboards and alerts import these names from here (never spell a table or metric themselves), so a
rename is one edit and a test catches any consumer that drifts.
"""

from __future__ import annotations

from contracts.schema import KINDS

SCHEMA_VERSION_DDL = 4
"""Version of the ClickHouse schema (docs/clickhouse.md); recorded in `schema_migrations`."""

RAW_TABLES: dict[str, str] = {kind: f"raw_{kind}" for kind in KINDS}
DEAD_LETTERS = "dead_letters"
INGESTED_BATCHES = "ingested_batches"
SCHEMA_MIGRATIONS = "schema_migrations"

ROLLUP_WINDOW_S = 10
"""Seconds per row of the insert-time rollups of the per-second kinds: the analyzers read them instead of
the raw rows where their window is a multiple of this (pipeline/ddl.py, docs/performance.md)."""
ROLLUP_TABLES: dict[str, str] = {
    kind: f"{kind}_rollup_{ROLLUP_WINDOW_S}s" for kind in ("gpu", "nic", "storage")
}
ROLLUP_RECENT: dict[str, str] = {kind: f"{kind}_rollup_recent_{ROLLUP_WINDOW_S}s" for kind in ROLLUP_TABLES}
"""Each rollup's rows of the last days again, sorted time-first: what a live run reads its minutes from. In
a rollup (sorted by node, device, window) every granule holds some device's last minutes, so reading them
costs the whole day's columns (docs/performance.md "Live runs")."""

DIM_NODES = "dim_nodes"
DIM_ACCOUNTS = "dim_accounts"
DIM_POOLS = "dim_pools"
DIM_TOPOLOGY = "dim_topology"

GOODPUT_WINDOWS = "goodput_windows"
JOB_SUMMARY = "job_summary"
TEAM_DAY = "team_day"
SCHEDULING_DELAY = "scheduling_delay"
FAULTS = "faults"
FAULT_REPEATS = "fault_repeats"
STRAGGLER_EPISODES = "straggler_episodes"
GOODPUT_LIVE = "goodput_live"
"""goodput_windows' columns for the last minutes only, from a live run (pipeline/analyzers/run.py `run_live`):
provisional, each job classified with the numbers its last whole run kept in JOB_STATE."""
JOB_STATE = "job_state"
"""Per job, the numbers a whole analyzer run found that a live run cannot find in minutes of data: b* and
the noise, the real starts of coarse `running` attempts, the evidence baselines, its nodes' clock offsets."""

# fleet views (pipeline/analyzers/fleet.sql, docs/goodput-model.md "Scheduling and capacity", "Topology")
QUEUE_DELAY_DAY = "queue_delay_day"
POOL_CAPACITY = "pool_capacity"
POOL_FRAGMENTATION = "pool_fragmentation"
POOL_HOLDS = "pool_holds"
POOL_TEAM_DAY = "pool_team_day"
IDLE_ALLOCATIONS = "idle_allocations"
JOB_PLACEMENT = "job_placement"

ANALYZER_OUTPUTS = (
    GOODPUT_WINDOWS,
    JOB_SUMMARY,
    TEAM_DAY,
    SCHEDULING_DELAY,
    FAULTS,
    FAULT_REPEATS,
    STRAGGLER_EPISODES,
    QUEUE_DELAY_DAY,
    POOL_CAPACITY,
    POOL_FRAGMENTATION,
    POOL_HOLDS,
    POOL_TEAM_DAY,
    IDLE_ALLOCATIONS,
    JOB_PLACEMENT,
    JOB_STATE,
)
"""What a whole analyzer run writes, each replaced (a DELETE, then an INSERT) for the jobs or ranges it
covers; a live run writes GOODPUT_LIVE the same way."""

CATEGORIES = (
    "productive",
    "data_stall",
    "comm_stall",
    "gang_wait",
    "retry_waste",
    "startup",
    "checkpoint",
    "idle",
)
"""The goodput categories (docs/goodput-model.md). Stable: reports, dashboards and alerts key on them."""

WASTE_CATEGORIES = tuple(c for c in CATEGORIES if c != "productive")

FAULT_KINDS = (
    "xid_hw",
    "xid_app",
    "xid_other",
    "nccl_timeout",
    "oom",
    "node_lost",
    "preemption",
    "exit_code",
    "timeout",
    "user",
    "other",
)
"""`faults.kind`: what ended an attempt, from the `failed`/`preempted` event's reason (docs/summary.md).
Stable: reports and alerts key on them."""

FAULT_OWNERS = ("job", "scheduler")
"""`faults.owner`: who bears a fault's cost. A preemption is the scheduler's decision, not a failure of
the job; everything else ended the job's attempt ("job", whether the cause was hardware or code)."""

XID_CLASSES: dict[str, tuple[int, ...]] = {
    "xid_hw": (48, 61, 62, 63, 64, 74, 79, 92, 94, 95, 119, 120, 140),
    "xid_app": (13, 31, 43, 45),
}
"""NVIDIA XID codes by class, after the resolution buckets of NVIDIA's Xid catalog
(https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html): `xid_hw` are hardware faults
whose remedy is a GPU reset, node drain or service (ECC double-bit errors and row remapping 48/63/64/
92/94/95/140, NVLink 74, fallen off the bus 79, GSP and micro-controller errors 61/62/119/120);
`xid_app` are errors the catalog sends back to the application (RESTART_APP: graphics engine exception
13, MMU fault 31, stopped processing 43, preemptive cleanup 45). Other codes are `xid_other`."""


METRICS_VERSION = 2
"""Version of the Prometheus series (docs/metrics.md): grows when a series is renamed or removed or
changes meaning. 2: rates became counters, percents ratios (METRIC_RENAMES)."""


def agent_metrics() -> dict[str, tuple[str | None, str]]:
    """Prometheus series the agent exports from sample fields: name -> (type, help)."""
    return {
        f.metric: (f.metric_type, f.metric_help or f.help)
        for kind in KINDS.values()
        for f in kind.fields
        if f.metric
    }


CLOCK_EVENT_REASONS: dict[int, str] = {
    0x1: "gpu_idle",
    0x2: "applications_clocks_setting",
    0x4: "sw_power_cap",
    0x8: "hw_slowdown",
    0x10: "sync_boost",
    0x20: "sw_thermal_slowdown",
    0x40: "hw_thermal_slowdown",
    0x80: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
}
"""Bits of nvmlDeviceGetCurrentClocksEventReasons (the `throttle_reasons` field) by the name the
`reason` label of goodput_gpu_clock_event_active gives them (NVML's nvmlClocksEventReason* constants,
snake_case). Bits NVML adds later are not exported until named here."""


AGENT_SELF_METRICS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "goodput_collector_success": (
        "gauge",
        "1 if the collector's last run succeeded, else 0.",
        ("collector",),
    ),
    "goodput_collector_duration_seconds": ("gauge", "Time the collector's last run took.", ("collector",)),
    "goodput_collector_rows": ("gauge", "Rows the collector's last run returned.", ("collector",)),
    "goodput_agent_batches_sent_total": (
        "counter",
        "Batches Kafka acknowledged (direct or replayed).",
        ("kind",),
    ),
    "goodput_agent_send_errors_total": (
        "counter",
        "Batches the agent failed to hand to Kafka (then spooled).",
        ("kind",),
    ),
    "goodput_agent_spool_bytes": ("gauge", "Bytes the on-disk spool takes.", ()),
    "goodput_agent_spool_batches": ("gauge", "Batches waiting in the on-disk spool.", ()),
    "goodput_agent_spool_dropped_batches_total": (
        "counter",
        "Batches dropped because the spool was full.",
        (),
    ),
    "goodput_agent_spool_replayed_batches_total": (
        "counter",
        "Spooled batches Kafka later acknowledged.",
        (),
    ),
    "goodput_agent_last_send_timestamp_seconds": ("gauge", "When Kafka last acknowledged a batch.", ()),
    "goodput_agent_step_events_rejected_total": ("counter", "Step datagrams that failed validation.", ()),
    "goodput_agent_build_info": ("gauge", "Always 1; the agent's software version as a label.", ("version",)),
}
"""The agent's own health: name -> (type, help, label names). Counters end in `_total` here, as
exposed (prometheus_client appends the suffix itself, so the agent strips it when declaring)."""


AGENT_DERIVED_METRICS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "goodput_gpu_xid_errors_total": (
        "counter",
        "Agent ticks in which the GPU reported this XID code (the field xid is the tick's last XID, so "
        "repeats of one code within a tick count once); since the agent started.",
        ("gpu", "UUID", "Hostname", "xid"),
    ),
    "goodput_gpu_lost": (
        "gauge",
        "1 if NVML reported the GPU lost (GPU_IS_LOST, 'fallen off the bus') in the latest tick, else 0.",
        ("gpu", "UUID", "Hostname"),
    ),
    "goodput_nic_port_active": (
        "gauge",
        "1 if the RDMA port's state is ACTIVE, else 0 (DOWN, INIT, ARMED, POLLING): link down is alertable.",
        ("device", "port"),
    ),
    "goodput_gpu_clock_event_active": (
        "gauge",
        "1 if this reason (CLOCK_EVENT_REASONS) holds the GPU's clocks down in the latest tick, else 0: "
        "one series per reason instead of NVML's bitmask.",
        ("gpu", "UUID", "Hostname", "reason"),
    ),
    "goodput_nic_info": (
        "gauge",
        "Always 1; the RDMA port's link layer (InfiniBand or Ethernet for RoCE) as a label, to join on.",
        ("device", "port", "link_layer"),
    ),
}
"""Series the agent derives from sample fields that are no number (the XID code, lost, the port state,
the clock event bitmask, the link layer): name -> (type, help, label names). A scrape between two XIDs
would miss a one-tick gauge of the last XID; the counter does not."""


METRIC_RENAMES: tuple[tuple[str, str, str], ...] = (
    *(
        (f"goodput_gpu_{old}_percent", f"goodput_gpu_{old}_ratio", "0-1 instead of 0-100")
        for old in (
            "utilization",
            "memory_utilization",
            "sm_active",
            "sm_occupancy",
            "tensor_active",
            "dram_active",
        )
    ),
    *(
        (f"goodput_{old}_per_second", f"goodput_{old}_total", "counter; rate() gives the old gauge")
        for old in (
            "gpu_nvlink_transmit_bytes",
            "gpu_nvlink_receive_bytes",
            "gpu_nvlink_errors",
            "nic_transmit_bytes",
            "nic_receive_bytes",
            "nic_transmit_packets",
            "nic_receive_packets",
            "nic_transmit_wait_ticks",
            "nic_ecn_marked_packets",
            "nic_cnp_sent",
            "nic_cnp_handled",
            "nic_pfc_pause_received",
            "nic_symbol_errors",
            "nic_receive_errors",
            "nic_transmit_discards",
            "nic_link_downed",
            "nic_out_of_sequence",
            "nic_packet_sequence_errors",
            "nic_ack_timeouts",
            "nic_retries_exceeded",
            "storage_read_bytes",
            "storage_write_bytes",
            "storage_read_ops",
            "storage_write_ops",
        )
    ),
    (
        "goodput_nic_pfc_pause_duration_microseconds_per_second",
        "goodput_nic_pfc_pause_duration_seconds_total",
        "counter in seconds; rate() is the share of time paused (0-1)",
    ),
    (
        "goodput_storage_busy_percent",
        "goodput_storage_io_time_seconds_total",
        "counter; rate() is the busy ratio (0-1)",
    ),
    (
        "goodput_storage_pressure_some_percent",
        "goodput_storage_pressure_some_seconds_total",
        "counter; rate() is the stalled ratio (0-1)",
    ),
    (
        "goodput_storage_pressure_full_percent",
        "goodput_storage_pressure_full_seconds_total",
        "counter; rate() is the stalled ratio (0-1)",
    ),
    (
        "goodput_nic_link_rate_bits_per_second",
        "goodput_nic_link_speed_bytes",
        "bytes per second, the base unit, as node_exporter's node_network_speed_bytes",
    ),
    (
        "goodput_gpu_clock_event_reasons",
        "goodput_gpu_clock_event_active",
        "one 0/1 series per `reason` label instead of the bitmask",
    ),
    (
        "goodput_gpu_last_xid",
        "goodput_gpu_xid_errors_total",
        "a counter per `xid` code label; the one-tick gauge was missed between scrapes",
    ),
)
"""Metrics version 1 -> 2 (METRICS_VERSION): old series, its replacement, what changed. The Kafka
message fields did not change (contracts/schema.py SCHEMA_VERSION); only the Prometheus series did."""


LOADER_METRICS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "goodput_loader_consumer_lag_records": (
        "gauge",
        "Records after the group's committed offset, per partition this loader owns.",
        ("topic", "partition"),
    ),
    "goodput_loader_assigned_partitions": (
        "gauge",
        "Partitions of the topic this loader owns in its group.",
        ("topic",),
    ),
    "goodput_loader_records_consumed_total": ("counter", "Kafka records handed to the loader.", ("topic",)),
    "goodput_loader_rows_loaded_total": (
        "counter",
        "Rows stored in the raw tables; rate() is rows/s.",
        ("kind",),
    ),
    "goodput_loader_batches_loaded_total": ("counter", "Agent batches (envelopes) stored.", ("kind",)),
    "goodput_loader_dead_letters_total": ("counter", "Records written to dead_letters.", ("reason",)),
    "goodput_loader_redelivered_records_total": (
        "counter",
        "Records Kafka delivered again after they were stored (restart, rebalance); skipped.",
        (),
    ),
    "goodput_loader_batches_committed_total": ("counter", "Loads whose offsets were committed to Kafka.", ()),
    "goodput_loader_commit_failures_total": (
        "counter",
        "Offset commits Kafka refused; those records come again.",
        (),
    ),
    "goodput_loader_last_commit_timestamp_seconds": ("gauge", "When offsets were last committed.", ()),
    "goodput_loader_store_errors_total": (
        "counter",
        "Store failures (retried; nothing committed meanwhile).",
        ("operation",),
    ),
    "goodput_loader_transport_errors_total": ("counter", "Kafka failures (retried).", ("operation",)),
    "goodput_loader_load_duration_seconds": (
        "histogram",
        "Time one load took, by phase: decode (parse, dedup, validate) and insert (store).",
        ("phase",),
    ),
    "goodput_loader_analyzer_last_success_timestamp_seconds": (
        "gauge",
        "When the embedded analyzers last finished.",
        (),
    ),
    "goodput_loader_live_analysis_last_success_timestamp_seconds": (
        "gauge",
        "When the embedded live analysis (the last minutes, into goodput_live) last finished.",
        (),
    ),
    "goodput_loader_compacted_partitions_total": (
        "counter",
        "Closed day partitions of a rollup table merged into one part after a scheduled analyzer run "
        "([loader] compact_after_s).",
        ("table",),
    ),
    "goodput_loader_node_clock_offset_seconds": (
        "gauge",
        "A node's clock offset (+ ahead) estimated from its batches' sent_ms against the Kafka broker's "
        "append time: the largest sent - appended over the last 10 minutes, a lower bound tight for the "
        "fastest batch. Only nodes that sent batches with an append time in that span (LogAppendTime "
        "topics): one series per sending node.",
        ("node",),
    ),
}
"""The loader service's own health (pipeline/loader_service.py): name -> (type, help, label names), as
exposed; dashboards and alerts read these names from here. Counters end in `_total` as exposed."""


GOODPUT_METRICS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "goodput_analysed_until_timestamp_seconds": (
        "gauge",
        'End of the latest analysed window in the store ("data analysed up to"); the other '
        "goodput_ series cover the lookback before it.",
        (),
    ),
    "goodput_exporter_lookback_seconds": (
        "gauge",
        "Span the goodput_ series cover, ending at goodput_analysed_until_timestamp_seconds.",
        (),
    ),
    "goodput_exporter_refresh_timestamp_seconds": (
        "gauge",
        "When the series were last read from the store.",
        (),
    ),
    "goodput_exporter_refresh_errors_total": (
        "counter",
        "Reads of the store that failed (the previous values stay served).",
        (),
    ),
    "goodput_gpu_seconds": (
        "gauge",
        "GPU-seconds allocated in the lookback by goodput category (productive and every waste category).",
        ("pool", "team", "category"),
    ),
    "goodput_job_gpu_seconds": (
        "gauge",
        "A job's GPU-seconds in the lookback by category; only the exported jobs (the top jobs by waste, "
        "then running jobs, up to [exporter].max_jobs).",
        ("job_id", "pool", "team", "category"),
    ),
    "goodput_job_last_window_ratio": (
        "gauge",
        "Share (0-1) of an exported job's GPU-seconds in its latest analysed window, by category "
        "(a job in startup or checkpoint shows it here).",
        ("job_id", "pool", "team", "category"),
    ),
    "goodput_exporter_jobs": (
        "gauge",
        "Jobs with GPU time in the lookback: exported (a job_id series) or not (over max_jobs).",
        ("exported",),
    ),
    "goodput_straggler_windows": (
        "gauge",
        "Analysed windows in the lookback whose comm stall names a straggler GPU on this node.",
        ("node",),
    ),
    "goodput_queue_wait_p90_seconds": (
        "gauge",
        "90th percentile (nearest rank) of submitted -> first GPU of jobs first allocated in the lookback.",
        ("pool",),
    ),
    "goodput_queued_jobs": (
        "gauge",
        "Jobs submitted and not yet allocated a GPU at the end of the lookback.",
        ("pool",),
    ),
    "goodput_gang_wait_max_seconds": (
        "gauge",
        "Longest first GPU -> gang complete of the pool's jobs allocated in the lookback (still waiting: "
        "up to the end of the lookback).",
        ("pool",),
    ),
    "goodput_faults": (
        "gauge",
        "Faults (failed or preempted attempts) in the lookback by kind (FAULT_KINDS).",
        ("kind",),
    ),
    "goodput_live_until_timestamp_seconds": (
        "gauge",
        "End of the latest window a live run classified (goodput_live); absent before the first.",
        (),
    ),
    "goodput_live_gpu_seconds": (
        "gauge",
        "GPU-seconds by category in the live runs' last [loader].live_window_s, up to "
        "goodput_live_until_timestamp_seconds: the last minutes, provisional (docs/goodput-model.md, "
        "Live runs).",
        ("pool", "team", "category"),
    ),
}
"""The goodput exporter (pipeline/goodput_exporter.py; served by the loader service after its embedded
analyzers run, and by `goodput exporter --config`): name -> (type, help, label names). Recent analyzer
results, so gauges over a lookback. Cardinality is bounded by configuration, never by the data:
pool x team x category, max_jobs x category for the job series, nodes for stragglers, pools, kinds."""


EXTERNAL_METRICS: dict[str, str] = {
    "up": "Prometheus: 1 if the last scrape of the target succeeded.",
    "kafka_brokers": "kafka_exporter (danielqsj/kafka_exporter): brokers in the cluster.",
    "kafka_consumergroup_lag": "kafka_exporter: records behind, per consumergroup, topic, partition.",
    "ClickHouseAsyncMetrics_FilesystemMainPathAvailableBytes": "ClickHouse: free bytes of the data path.",
    "ClickHouseAsyncMetrics_FilesystemMainPathTotalBytes": "ClickHouse: size of the data path's volume.",
    "ClickHouseAsyncMetrics_MaxPartCountForPartition": "ClickHouse: most active parts in a partition.",
    "prometheus_rule_evaluation_failures_total": "Prometheus: rule evaluations that failed.",
    "prometheus_notifications_errors_total": "Prometheus: errors sending alerts to Alertmanager.",
    "prometheus_notifications_alertmanagers_discovered": "Prometheus: Alertmanagers it sends to.",
    "prometheus_config_last_reload_successful": "Prometheus: 1 if the last config reload succeeded.",
    "alertmanager_notifications_failed_total": "Alertmanager: notifications that failed, per integration.",
    "alertmanager_config_last_reload_successful": "Alertmanager: 1 if the last config reload succeeded.",
}
"""Series of other exporters the alert rules read (alerts/rules.py): the pipeline's own parts (Kafka,
ClickHouse, Prometheus, Alertmanager). Declared here like goodput's own, so that a rule cannot name a
series nobody declared; the exporters' own docs define them."""
