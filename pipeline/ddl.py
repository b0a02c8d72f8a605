"""The ClickHouse schema, generated from the message contract and applied idempotently.

Raw tables get one column per schema field, so adding a field to `contracts.schema` adds the
column, the docs row and the validation in one edit. Choices that matter for the queries:

- PARTITION BY day: TTL drops whole parts, and every dashboard/analyzer query has a time range.
- ORDER BY (cluster, node, device key, ts): the analyzers read one device's series in time order,
  dashboards filter by node; job events are ordered by job first.
- ReplacingMergeTree on that key plus insert-deduplication tokens: a batch delivered twice is one row
  set (docs/clickhouse.md lists the failure cases each covers).
- Codecs: DoubleDelta for time, ZSTD(1) elsewhere; LowCardinality for names.

The same statements serve one server (chDB or a ClickHouse server: tables under their catalog names)
and a cluster (`cluster_ddl`): there each table becomes a replicated local table `<name>_local`, created
ON CLUSTER, plus a Distributed table under the catalog name, so analyzers, dashboards and alerts keep
their table names (docs/clickhouse-server.md).
"""

from __future__ import annotations

import re

import pyarrow as pa

from contracts import catalog
from contracts.schema import KINDS, Field, Kind
from pipeline.store import Store, quote

RAW_TTL_DAYS = 90
EVENT_TTL_DAYS = 400
OUTPUT_TTL_DAYS = 400
DEAD_LETTER_TTL_DAYS = 30
LIVE_TTL_DAYS = 2
"""goodput_live keeps its provisional rows this long after the live run that wrote them: by then whole runs
have classified their windows."""
RECENT_TTL_DAYS = 2
"""Days the rollups' time-first copies keep (catalog.ROLLUP_RECENT): a live run reads minutes."""
STATE_TTL_DAYS = 30
"""job_state keeps a job's numbers this long after the run that last classified it."""

TABLE_TUNING: dict[str, dict[str, str]] = {
    table: {"merge_selector_base": "2"} for table in (*catalog.ANALYZER_OUTPUTS, catalog.GOODPUT_LIVE)
}
"""Table settings `migrate` gives where the engine knows them (chDB's; not Debian's 18.16 server), to
tables created before them too. The analyzers' outputs: every run replaces its rows by a lightweight DELETE
(a mutation of the table's parts, which the run waits for) right before their INSERT. With the engine's
default (parts merged once 5 of a size are there) the DELETE that meets the fifth part waited 0.3-1.1 s
for the background pool: a live run in five (goodput_live, each minute in the loader service), and a whole
run in five or six, each of its ten-odd tables at once (1,024 GPUs, the last 10 minutes: 3.3 s runs, one
of 9.7 s with 6.5 s of DELETEs). Merged at 2, none did (bench/bench_live_replace.py, docs/performance.md).
These tables take a run's rows at a time, far fewer than the raw tables, so the extra merging costs little."""

_BASE_TYPES = {"int": "Int64", "float": "Float32", "bool": "Bool", "str": "String"}


def column_type(f: Field) -> str:
    if f.type == "int_list":
        return "Array(Int32)"
    base = f.ch_type or _BASE_TYPES[f.type]
    if f.type == "str":
        return "LowCardinality(String)" if f.required else "LowCardinality(Nullable(String))"
    return base if f.required else f"Nullable({base})"


_ARROW_TYPES = {
    "Int64": pa.int64(),
    "Float32": pa.float32(),
    "Float64": pa.float64(),
    "Bool": pa.bool_(),
    "String": pa.string(),
}
TS_ARROW = pa.timestamp("ms", tz="UTC")


def arrow_type(f: Field) -> pa.DataType:
    """The Arrow type the loader builds for a field; it matches `column_type` one to one."""
    if f.name == "ts_ms":
        return TS_ARROW
    if f.type == "int_list":
        return pa.list_(pa.int32())
    return _ARROW_TYPES[f.ch_type or _BASE_TYPES[f.type]]


def column_name(f: Field) -> str:
    """ts_ms travels as epoch milliseconds and is stored as DateTime64(3) named `ts`."""
    return "ts" if f.name == "ts_ms" else f.name


def _order_by(kind: Kind) -> str:
    cols = ["cluster"]
    if kind.key[0] != "job_id":
        cols.append(kind.sender_column)
    for name in kind.key:
        f = kind.field(name)
        cols.append(column_name(f) if f.required else f"ifNull({name}, '')")
    return ", ".join(cols)


APPENDED = "appended Nullable(DateTime64(3, 'UTC')) COMMENT 'broker append time (LogAppendTime), else null'"
"""ingested_batches: when the Kafka broker appended the batch, on topics with LogAppendTime (null
elsewhere); sent - appended bounds the sending node's clock offset from below (docs/loader.md). Added
after schema 1 shipped: `migrate` adds it to older stores."""
CLOCK_OFFSET = (
    "clock_offset_s Float64 DEFAULT 0 COMMENT 'clock offset corrected on its nodes, largest in size (s)'"
)
"""job_summary's clock correction (docs/goodput-model.md, Clock skew): the node clock offset, of those
applied to the job's nodes, largest in magnitude, signed (+ ahead of the scheduler); 0 when none. Added
after schema 1 shipped: `migrate` adds it to older stores."""
STRAGGLER_SOURCE = (
    "source LowCardinality(String) DEFAULT 'steps' "
    "COMMENT 'steps (the ranks'' step events) | sm_activity (GPU busy levels: a job without step events)'"
)
"""straggler_episodes: what found the episode (goodput.sql 10b from step events, 10c from SM activity).
Added after the table shipped: `migrate` adds it to older stores (their episodes all came from steps)."""
BATCH_ROW = "batch_row UInt32 DEFAULT 0 CODEC(ZSTD(1))"
"""The row's position in its batch: with (sender, seq) the order in which a source reported rows, which
orders job events of the same millisecond (docs/messages.md). Added after schema 1 shipped: `migrate`
adds it to older stores (their rows read 0, i.e. ordered by seq alone)."""


def raw_table_ddl(kind: Kind) -> str:
    cols = [
        "cluster LowCardinality(String)",
        f"{kind.sender_column} LowCardinality(String)",
    ]
    for f in kind.fields:
        if f.name == "ts_ms":
            cols.append("ts DateTime64(3, 'UTC') CODEC(DoubleDelta, ZSTD(1))")
        else:
            cols.append(f"{f.name} {column_type(f)} CODEC(ZSTD(1))")
    cols += ["seq UInt64 CODEC(ZSTD(1))", BATCH_ROW, "ingested_at DateTime DEFAULT now() CODEC(ZSTD(1))"]
    ttl = EVENT_TTL_DAYS if kind.name in ("job", "step") else RAW_TTL_DAYS
    body = ",\n    ".join(cols)
    return (
        f"CREATE TABLE IF NOT EXISTS {catalog.RAW_TABLES[kind.name]} (\n    {body}\n)\n"
        f"ENGINE = ReplacingMergeTree\nPARTITION BY toDate(ts)\nORDER BY ({_order_by(kind)})\n"
        f"TTL toDateTime(ts) + INTERVAL {ttl} DAY\n"
        f"SETTINGS non_replicated_deduplication_window = 10000, allow_nullable_key = 0"
    )


R_MS = catalog.ROLLUP_WINDOW_S * 1000
_T = "(toUnixTimestamp64Milli(ts) - 1)"
"""A sample with ts T describes the second (T - 1 s, T]: filed at T - 1 ms, as the analyzers do."""
ROLLUP_KEY = {"gpu": "gpu", "nic": "device, port", "storage": "source, device"}
"""Per kind: what a rollup row sums over within a node and window (the GPU rollup also per job tag)."""
CNP = "greatest(ifNull(cnp_handled_per_s, 0), ifNull(cnp_sent_per_s, 0))"
LINE = "tx_bytes_per_s / greatest(1.0, rate_gbps * 1e9 / 8)"
"""A port's congestion notifications (sent or handled, whichever is larger) and its transmit rate as a
fraction of its line rate, per sample (goodput.sql 9)."""


def _milli(expr: str, scale: str = "1000") -> str:
    """A rate summed as an integer (its value x scale, rounded): sums in any order are the same, so the
    rollup, however its parts merged, and the raw rows give the analyzers the same numbers."""
    return f"toInt64(round(assumeNotNull({expr}) * {scale}))"


ROLLUP_COLUMNS: dict[str, list[tuple[str, str, str]]] = {
    "gpu": [
        ("job_id", "LowCardinality(String)", "ifNull(job_id, '')"),
        ("n", "SimpleAggregateFunction(sum, UInt64)", "countIf(bm IS NOT NULL)"),
        ("bsum", "SimpleAggregateFunction(sum, Int64)", "sumIf(assumeNotNull(bm), bm IS NOT NULL)"),
        (
            "thr",
            "SimpleAggregateFunction(groupBitOr, Int64)",
            "groupBitOrIf(ifNull(throttle_reasons, 0), bm IS NOT NULL)",
        ),
        (
            "samples",
            "SimpleAggregateFunction(groupArrayArray, Array(Tuple(UInt32, Int64, Int64)))",
            "arraySort(groupArrayIf((toUInt32({t} % {w}), assumeNotNull(bm), ifNull(throttle_reasons, 0)), "
            "bm IS NOT NULL))",
        ),
        ("first_ms", "SimpleAggregateFunction(min, Int64)", "min(toUnixTimestamp64Milli(ts))"),
        ("last_ms", "SimpleAggregateFunction(max, Int64)", "max(toUnixTimestamp64Milli(ts))"),
    ],
    "nic": [
        (
            "xmit_wait_milli",
            "SimpleAggregateFunction(sum, Int64)",
            f"sumIf({_milli('xmit_wait_per_s')}, xmit_wait_per_s IS NOT NULL)",
        ),
        ("xmit_wait_n", "SimpleAggregateFunction(sum, UInt64)", "countIf(xmit_wait_per_s IS NOT NULL)"),
        (
            "ecn_milli",
            "SimpleAggregateFunction(sum, Int64)",
            f"sumIf({_milli('ecn_marked_per_s')}, ecn_marked_per_s IS NOT NULL)",
        ),
        ("ecn_n", "SimpleAggregateFunction(sum, UInt64)", "countIf(ecn_marked_per_s IS NOT NULL)"),
        ("cnp_milli", "SimpleAggregateFunction(sum, Int64)", f"sum({_milli(CNP)})"),
        (
            "line_micro",
            "SimpleAggregateFunction(sum, Int64)",
            f"sumIf({_milli(LINE, '1e6')}, {LINE} IS NOT NULL)",
        ),
        ("line_n", "SimpleAggregateFunction(sum, UInt64)", f"countIf({LINE} IS NOT NULL)"),
    ],
    "storage": [
        (
            "read_sum",
            "SimpleAggregateFunction(sum, Int64)",
            f"sumIf({_milli('read_bytes_per_s', '1')}, read_bytes_per_s IS NOT NULL)",
        ),
        ("psi_max", "SimpleAggregateFunction(max, Nullable(Float32))", "max(psi_some_pct)"),
        (
            "times",
            "SimpleAggregateFunction(groupUniqArrayArray, Array(UInt32))",
            "arraySort(groupUniqArray(toUInt32({t} % {w})))",
        ),
    ],
}
"""Per kind: (column, type, expression over the raw rows) of the rollup beyond its key and the duplicate
check. What each analyzer step reads (pipeline/analyzers/goodput.sql 7 and 9), summed per window at
insert time; `samples` keeps each GPU sample's (ms into the window, milli-% busy, throttle reasons), for the
windows a phase boundary cuts and the exact quantiles of the busy levels; `times` the distinct sample times
(ms into the window) of a storage source, which count a node's NFS/Lustre samples across its mounts."""


def rollup_table_ddl(kind: str, recent: bool = False) -> str:
    """`kind`'s rollup table; `recent`: its time-first copy (catalog.ROLLUP_RECENT), the same columns
    sorted by window first, kept RECENT_TTL_DAYS, whole day parts dropped as they expire."""
    cols = [
        "cluster LowCardinality(String)",
        "node LowCardinality(String)",
        *(f"{c} {column_type(KINDS[kind].field(c))}" for c in ROLLUP_KEY[kind].split(", ")),
        "window_start DateTime('UTC') CODEC(DoubleDelta, ZSTD(1))",
        *(f"{c} {t}" for c, t, _ in ROLLUP_COLUMNS[kind] if c == "job_id"),
        "rows SimpleAggregateFunction(sum, UInt64)",
        "seconds SimpleAggregateFunction(groupBitOr, UInt64)",
        *(f"{c} {t}" for c, t, _ in ROLLUP_COLUMNS[kind] if c != "job_id"),
    ]
    # in the order rollup_select gives them, as `backfill_rollup` inserts by position
    key = f"cluster, node, {ROLLUP_KEY[kind]}, window_start" + (", job_id" if kind == "gpu" else "")
    name, ttl, drop = catalog.ROLLUP_TABLES[kind], RAW_TTL_DAYS, ""
    if recent:
        key = f"cluster, window_start, node, {ROLLUP_KEY[kind]}" + (", job_id" if kind == "gpu" else "")
        name, ttl, drop = catalog.ROLLUP_RECENT[kind], RECENT_TTL_DAYS, ", ttl_only_drop_parts = 1"
    body = ",\n    ".join(cols)
    return (
        f"CREATE TABLE IF NOT EXISTS {name} (\n    {body}\n)\n"
        f"ENGINE = AggregatingMergeTree\nPARTITION BY toDate(window_start)\nORDER BY ({key})\n"
        f"TTL window_start + INTERVAL {ttl} DAY\n"
        f"SETTINGS non_replicated_deduplication_window = 10000{drop}"
    )


def rollup_select(kind: str, source: str, window_ms: int = R_MS) -> str:
    """The rollup rows of the raw rows of `source`, per window of `window_ms`: what the materialized view
    inserts per block, what `migrate` backfills from raw rows stored before the view existed, and what
    the analyzers compute from the raw rows of the nodes they cannot read from the rollup."""
    group = ["cluster", "node", ROLLUP_KEY[kind], "window_start"] + (["job_id"] if kind == "gpu" else [])
    exprs = [f"{e.format(t=_T, w=window_ms)} AS {c}" for c, _, e in ROLLUP_COLUMNS[kind] if c != "job_id"]
    job = ["ifNull(job_id, '') AS job_id"] if kind == "gpu" else []
    window = f"toDateTime(intDiv({_T}, {window_ms}) * {window_ms // 1000}, 'UTC') AS window_start"
    seconds = f"groupBitOr(bitShiftLeft(toUInt64(1), toUInt8(intDiv({_T} % {window_ms}, 1000)))) AS seconds"
    select = ", ".join(job + ["count() AS rows", seconds] + exprs)
    with_bm = (
        "WITH toInt64(round(coalesce(sm_active_pct, util_gpu_pct) * 1000)) AS bm\n" if kind == "gpu" else ""
    )
    return (
        f"{with_bm}SELECT cluster, node, {ROLLUP_KEY[kind]}, {window}, {select}\n"
        f"FROM {source}\nGROUP BY {', '.join(group)}"
    )


def rollup_view_ddl(kind: str, suffix: str = "", on: str = "") -> str:
    """The materialized view feeding `kind`'s rollup from its raw table at insert time (on a cluster, the
    local tables of each shard: a node's raw rows and rollup rows live on one shard)."""
    rollup = catalog.ROLLUP_TABLES[kind]
    return (
        f"CREATE MATERIALIZED VIEW IF NOT EXISTS {rollup}_mv{suffix}{on} TO {rollup}{suffix} AS\n"
        + rollup_select(kind, catalog.RAW_TABLES[kind] + suffix)
    )


def _category_columns(prefix: str) -> str:
    return ",\n    ".join(f"{prefix}{c} Float64" for c in catalog.CATEGORIES)


_WINDOW_COLUMNS = """
    cluster LowCardinality(String),
    job_id String,
    window_start DateTime('UTC') CODEC(DoubleDelta, ZSTD(1)),
    window_s UInt16,
    team LowCardinality(String),
    pool LowCardinality(String),
    account LowCardinality(String),
    category LowCardinality(String),
    gpu_seconds Float64,
    cost Float64,
    evidence String COMMENT 'why: the failure, the saturated pool, the straggler node',
    computed_at DateTime DEFAULT now()"""
"""goodput_windows' columns, which goodput_live shares: a live run writes the same rows (run.py)."""


FIXED_TABLES = {
    catalog.SCHEMA_MIGRATIONS: """
CREATE TABLE IF NOT EXISTS schema_migrations (
    version UInt32, description String, applied_at DateTime DEFAULT now()
) ENGINE = ReplacingMergeTree ORDER BY version""",
    catalog.DEAD_LETTERS: f"""
CREATE TABLE IF NOT EXISTS dead_letters (
    received_at DateTime64(3, 'UTC') CODEC(DoubleDelta, ZSTD(1)),
    source LowCardinality(String) COMMENT 'Kafka topic or input file',
    partition Int32,
    offset Int64 COMMENT 'Kafka offset, or line number for files',
    cluster LowCardinality(String),
    node String,
    kind LowCardinality(String),
    reason LowCardinality(String) COMMENT 'machine-readable reason, e.g. bad_type, duplicate_seq',
    detail String COMMENT 'human-readable explanation naming the field',
    raw String CODEC(ZSTD(3))
) ENGINE = MergeTree PARTITION BY toDate(received_at) ORDER BY (reason, received_at)
TTL toDateTime(received_at) + INTERVAL {DEAD_LETTER_TTL_DAYS} DAY""",
    catalog.INGESTED_BATCHES: f"""
CREATE TABLE IF NOT EXISTS ingested_batches (
    cluster LowCardinality(String), node LowCardinality(String), kind LowCardinality(String),
    seq UInt64, rows UInt32, source LowCardinality(String), partition Int32, offset Int64,
    sent DateTime64(3, 'UTC'), {APPENDED}, ingested_at DateTime DEFAULT now()
) ENGINE = ReplacingMergeTree PARTITION BY toYYYYMM(sent) ORDER BY (cluster, kind, node, seq)
TTL toDateTime(sent) + INTERVAL {RAW_TTL_DAYS} DAY""",
    catalog.DIM_NODES: """
CREATE TABLE IF NOT EXISTS dim_nodes (
    node String, pool LowCardinality(String), pool_class LowCardinality(String),
    gpu_type LowCardinality(String), gpus_per_node UInt16, price_per_gpu_hour Float64,
    network_tier LowCardinality(String), link_gbps Float64, links_per_node UInt16
) ENGINE = MergeTree ORDER BY node""",
    catalog.DIM_POOLS: """
CREATE TABLE IF NOT EXISTS dim_pools (
    pool String, pool_class LowCardinality(String), nodes UInt32, gpus UInt32,
    storage_ceiling_bytes_per_s Float64, oversubscription Float64
) ENGINE = MergeTree ORDER BY pool""",
    catalog.DIM_TOPOLOGY: """
CREATE TABLE IF NOT EXISTS dim_topology (
    node String, leaf LowCardinality(String) COMMENT 'the switch the node is cabled to',
    spine LowCardinality(String) COMMENT 'the top of its tree (the leaf itself in a one-switch tree)',
    path Array(String) COMMENT 'switches from the leaf up to the top',
    rack LowCardinality(String) COMMENT 'from [topology.racks]; empty when not given'
) ENGINE = MergeTree ORDER BY node""",
    catalog.DIM_ACCOUNTS: """
CREATE TABLE IF NOT EXISTS dim_accounts (account String, team LowCardinality(String))
ENGINE = MergeTree ORDER BY account""",
    catalog.GOODPUT_WINDOWS: f"""
CREATE TABLE IF NOT EXISTS goodput_windows ({_WINDOW_COLUMNS}
) ENGINE = MergeTree PARTITION BY toYYYYMM(window_start) ORDER BY (cluster, job_id, window_start, category)
TTL window_start + INTERVAL {OUTPUT_TTL_DAYS} DAY""",
    catalog.GOODPUT_LIVE: f"""
CREATE TABLE IF NOT EXISTS goodput_live ({_WINDOW_COLUMNS}
) ENGINE = MergeTree PARTITION BY toYYYYMMDD(window_start) ORDER BY (cluster, window_start, job_id, category)
TTL computed_at + INTERVAL {LIVE_TTL_DAYS} DAY""",
    catalog.JOB_STATE: f"""
CREATE TABLE IF NOT EXISTS job_state (
    cluster LowCardinality(String),
    job_id String,
    healthy_half_keys Int64 COMMENT 'b* in 0.005 % steps; 0: the run saw no running samples of the job',
    noise_half_keys Int64 COMMENT 'the sample noise sigma in 0.005 % steps',
    starts Array(Tuple(attempt Int64, real_ms Int64)) COMMENT 'real starts of attempts with a coarse running',
    baselines Array(Tuple(node String, data_ppm Int64, comm_ppm Int64))
        COMMENT 'evidence levels while healthy, in millionths of their thresholds',
    clock_offsets Array(Tuple(node String, offset_ms Int64)) COMMENT 'its nodes'' clock offsets (not 0)',
    computed_at DateTime DEFAULT now()
) ENGINE = MergeTree ORDER BY (cluster, job_id)
TTL computed_at + INTERVAL {STATE_TTL_DAYS} DAY""",
    catalog.JOB_SUMMARY: f"""
CREATE TABLE IF NOT EXISTS job_summary (
    cluster LowCardinality(String),
    job_id String,
    account LowCardinality(String),
    team LowCardinality(String),
    pool LowCardinality(String),
    gpus UInt32,
    attempts UInt16,
    first_allocated DateTime('UTC'),
    last_seen DateTime('UTC'),
    allocated_gpu_seconds Float64,
    {_category_columns("s_")},
    cost Float64,
    waste_cost Float64,
    goodput_pct Float64,
    sm_active_pct Float64 COMMENT 'mean busy level while running: the MFU proxy beside goodput',
    healthy_busy_pct Float64 COMMENT 'the job''s own healthy level b*',
    {CLOCK_OFFSET},
    computed_at DateTime DEFAULT now()
) ENGINE = MergeTree ORDER BY (cluster, job_id)""",
    catalog.TEAM_DAY: f"""
CREATE TABLE IF NOT EXISTS team_day (
    cluster LowCardinality(String), day Date, team LowCardinality(String), pool LowCardinality(String),
    category LowCardinality(String), gpu_hours Float64, cost Float64, computed_at DateTime DEFAULT now()
) ENGINE = MergeTree PARTITION BY toYYYYMM(day) ORDER BY (cluster, day, team, pool, category)
TTL day + INTERVAL {OUTPUT_TTL_DAYS} DAY""",
    catalog.SCHEDULING_DELAY: """
CREATE TABLE IF NOT EXISTS scheduling_delay (
    cluster LowCardinality(String), job_id String, team LowCardinality(String),
    pool LowCardinality(String), queue LowCardinality(String), priority Int64, gpus_requested Int64,
    submitted DateTime64(3, 'UTC'), first_allocated Nullable(DateTime64(3, 'UTC')),
    gang_complete Nullable(DateTime64(3, 'UTC')),
    queue_wait_s Nullable(Float64) COMMENT 'submitted -> first GPU allocated (not GPU time)',
    gang_wait_s Nullable(Float64) COMMENT 'first GPU allocated -> gang complete (GPU time held)',
    computed_at DateTime DEFAULT now()
) ENGINE = MergeTree ORDER BY (cluster, job_id)""",
    catalog.FAULTS: f"""
CREATE TABLE IF NOT EXISTS faults (
    cluster LowCardinality(String), job_id String, attempt UInt16,
    ts DateTime64(3, 'UTC') COMMENT 'the failed or preempted event',
    event LowCardinality(String) COMMENT 'failed | preempted',
    kind LowCardinality(String) COMMENT 'catalog.FAULT_KINDS: xid_hw, nccl_timeout, preemption, ...',
    owner LowCardinality(String) COMMENT 'job (a failure) | scheduler (a preemption)',
    reason String COMMENT 'as the scheduler reported it',
    xid Nullable(UInt32), exit_code Nullable(Int64),
    node String COMMENT 'where it happened; empty when nothing says',
    gpu Nullable(Int32), nic String COMMENT 'device:port of a port not ACTIVE, else empty',
    located_by LowCardinality(String) COMMENT 'event | xid | gpu_lost | nic_down | released | empty',
    lost_gpu_seconds Float64 COMMENT 'retry_waste: progress lost since the last checkpoint',
    restart_gpu_seconds Float64 COMMENT 'retry_waste: from the failure to the next attempt running',
    held_gpu_seconds Float64 COMMENT 'idle: GPUs held after a failure with no restart',
    gpu_seconds Float64 COMMENT 'lost + restart: the retry_waste this fault caused',
    cost Float64 COMMENT 'of lost + restart + held',
    computed_at DateTime DEFAULT now()
) ENGINE = MergeTree PARTITION BY toYYYYMM(ts) ORDER BY (cluster, job_id, ts)
TTL toDateTime(ts) + INTERVAL {OUTPUT_TTL_DAYS} DAY""",
    catalog.FAULT_REPEATS: """
CREATE TABLE IF NOT EXISTS fault_repeats (
    cluster LowCardinality(String),
    scope LowCardinality(String) COMMENT 'node | gpu',
    node String, gpu Nullable(Int32) COMMENT 'scope gpu: the GPU index; scope node: null',
    failures UInt32 COMMENT 'its failures (owner job) in faults',
    repeats UInt32 COMMENT 'failures within window_s of its previous failure',
    max_in_window UInt32 COMMENT 'the most failures inside one window_s',
    first_failure DateTime64(3, 'UTC'), last_failure DateTime64(3, 'UTC'),
    window_s Float64 COMMENT '[analyzer].repeat_window_s of the run',
    gpu_seconds Float64 COMMENT 'retry_waste its failures caused',
    kinds Array(String) COMMENT 'distinct fault kinds, sorted',
    jobs Array(String) COMMENT 'distinct jobs, sorted',
    computed_at DateTime DEFAULT now()
) ENGINE = MergeTree ORDER BY (cluster, scope, node)""",
    catalog.QUEUE_DELAY_DAY: f"""
CREATE TABLE IF NOT EXISTS queue_delay_day (
    cluster LowCardinality(String), day Date COMMENT 'day the jobs were submitted (UTC)',
    by LowCardinality(String) COMMENT 'all, pool, team or priority: what key groups by',
    key String COMMENT 'the pool, team or priority (as text); empty for all',
    jobs UInt32 COMMENT 'jobs submitted that day that got a first GPU',
    waiting UInt32 COMMENT 'jobs submitted that day with no GPU yet (or never: cancelled in the queue)',
    p50_s Nullable(Float64), p90_s Nullable(Float64),
    p99_s Nullable(Float64) COMMENT 'queue_wait_s, nearest rank: the ceil(q n)-th smallest; null if no jobs',
    max_s Nullable(Float64), computed_at DateTime DEFAULT now()
) ENGINE = MergeTree PARTITION BY toYYYYMM(day) ORDER BY (cluster, day, by, key)
TTL day + INTERVAL {OUTPUT_TTL_DAYS} DAY""",
    catalog.POOL_CAPACITY: f"""
CREATE TABLE IF NOT EXISTS pool_capacity (
    cluster LowCardinality(String), bucket_start DateTime('UTC'), bucket_s UInt32,
    pool LowCardinality(String), pool_class LowCardinality(String), gpus UInt32,
    capacity_gpu_s Float64 COMMENT 'gpus x the seconds of the bucket up to the end of the data',
    allocated_gpu_s Float64 COMMENT 'goodput_windows of the pool in the bucket, all categories',
    unallocated_gpu_s Float64 COMMENT 'capacity - allocated, exactly (micro-seconds); < 0: config too small',
    allocated_pct Float64, computed_at DateTime DEFAULT now()
) ENGINE = MergeTree PARTITION BY toYYYYMM(bucket_start) ORDER BY (cluster, bucket_start, pool)
TTL bucket_start + INTERVAL {OUTPUT_TTL_DAYS} DAY""",
    catalog.POOL_FRAGMENTATION: f"""
CREATE TABLE IF NOT EXISTS pool_fragmentation (
    cluster LowCardinality(String), window_start DateTime('UTC') COMMENT 'the instant sampled',
    window_s UInt16, pool LowCardinality(String),
    free_gpus UInt32 COMMENT 'GPUs of the pool allocated to no job at that instant',
    free_nodes UInt32 COMMENT 'nodes with every GPU free',
    max_free_on_node UInt32,
    pending_jobs UInt32 COMMENT 'jobs submitted and not yet allocated, headed for this pool',
    smallest_pending_gpus UInt32 COMMENT 'the smallest of their requests',
    stranded_gpus UInt32 COMMENT 'free GPUs no pending gang can use: all when the smallest does not fit',
    fragmented Bool COMMENT 'stranded though free_gpus >= the smallest request: scattered',
    computed_at DateTime DEFAULT now()
) ENGINE = MergeTree PARTITION BY toYYYYMM(window_start) ORDER BY (cluster, window_start, pool)
TTL window_start + INTERVAL {OUTPUT_TTL_DAYS} DAY""",
    catalog.POOL_HOLDS: f"""
CREATE TABLE IF NOT EXISTS pool_holds (
    cluster LowCardinality(String), job_id String, team LowCardinality(String),
    pool LowCardinality(String), pool_class LowCardinality(String),
    held_from DateTime64(3, 'UTC') COMMENT 'first GPU of the pool allocated to the job',
    held_to DateTime64(3, 'UTC') COMMENT 'last GPU of the pool released (or the end of the data)',
    hold_s Float64 COMMENT 'held_to - held_from',
    gpus UInt32 COMMENT 'distinct GPUs of the pool the job held',
    gpu_hours Float64 COMMENT 'allocated GPU-time on the pool',
    computed_at DateTime DEFAULT now()
) ENGINE = MergeTree PARTITION BY toYYYYMM(held_from) ORDER BY (cluster, job_id, pool)
TTL toDateTime(held_from) + INTERVAL {OUTPUT_TTL_DAYS} DAY""",
    catalog.POOL_TEAM_DAY: f"""
CREATE TABLE IF NOT EXISTS pool_team_day (
    cluster LowCardinality(String), day Date, pool LowCardinality(String), pool_class LowCardinality(String),
    team LowCardinality(String), gpu_hours Float64 COMMENT 'allocated GPU-hours that day (goodput_windows)',
    goodput_pct Float64 COMMENT 'productive share of gpu_hours',
    jobs UInt32 COMMENT 'jobs holding GPUs of the pool that day',
    longest_hold_s Float64 COMMENT 'the longest pool_holds.hold_s among them (whole hold, not the day part)',
    longest_hold_job String, computed_at DateTime DEFAULT now()
) ENGINE = MergeTree PARTITION BY toYYYYMM(day) ORDER BY (cluster, day, pool, team)
TTL day + INTERVAL {OUTPUT_TTL_DAYS} DAY""",
    catalog.IDLE_ALLOCATIONS: f"""
CREATE TABLE IF NOT EXISTS idle_allocations (
    cluster LowCardinality(String), job_id String, team LowCardinality(String), pool LowCardinality(String),
    node String, gpu Int32,
    idle_from DateTime64(3, 'UTC'), idle_to DateTime64(3, 'UTC'),
    idle_s Float64 COMMENT 'held without activity, >= [analyzer].idle_reclaim_after_s',
    reclaimable_s Float64 COMMENT 'idle_s - idle_reclaim_after_s: what reclaiming at the threshold frees',
    gpu_hours Float64 COMMENT 'idle_s / 3600',
    computed_at DateTime DEFAULT now()
) ENGINE = MergeTree PARTITION BY toYYYYMM(idle_from) ORDER BY (cluster, job_id, node, gpu, idle_from)
TTL toDateTime(idle_from) + INTERVAL {OUTPUT_TTL_DAYS} DAY""",
    catalog.STRAGGLER_EPISODES: f"""
CREATE TABLE IF NOT EXISTS straggler_episodes (
    cluster LowCardinality(String), job_id String,
    {STRAGGLER_SOURCE},
    rank Int64 COMMENT 'the straggling rank; -1 when found from SM activity', node String,
    gpu Int32 COMMENT 'the rank''s GPU index; -1 when its step events name none, or a whole node straggled',
    start DateTime('UTC') COMMENT 'first window of the episode',
    end DateTime('UTC') COMMENT 'end of its last window',
    kind LowCardinality(String) COMMENT 'persistent (>= straggler_persistent_fraction) | transient',
    steps UInt64 COMMENT 'the rank''s steps in the episode (0 from SM activity)',
    slowdown_pct Float64 COMMENT '100 (median compute / gang median compute - 1); SM: of the busy levels',
    score Float64 COMMENT 'gang median / rank median compute (nvidia-resiliency-ext): 1 healthy',
    gross Bool COMMENT 'score below [analyzer].straggler_score',
    cost_gpu_seconds Float64 COMMENT 'the rest of the gang''s comm_stall attributed to it',
    computed_at DateTime DEFAULT now()
) ENGINE = MergeTree PARTITION BY toYYYYMM(start) ORDER BY (cluster, job_id, rank, start)
TTL start + INTERVAL {OUTPUT_TTL_DAYS} DAY""",
    catalog.JOB_PLACEMENT: """
CREATE TABLE IF NOT EXISTS job_placement (
    cluster LowCardinality(String), job_id String, team LowCardinality(String), pool LowCardinality(String),
    nodes UInt32 COMMENT 'distinct nodes the job held (all attempts)',
    leaves UInt32 COMMENT 'distinct leaf switches of those nodes',
    racks UInt32 COMMENT 'distinct racks (0 without [topology.racks])',
    crosses_spine Bool COMMENT 'leaves > 1: its collectives cross a switch above the leaves',
    top_switch String COMMENT 'lowest switch above all its nodes; empty when unmapped or in separate trees',
    unmapped_nodes UInt32 COMMENT 'nodes the topology does not name',
    allocated_gpu_s Float64, comm_stall_gpu_s Float64,
    comm_stall_pct Float64 COMMENT '100 comm_stall / allocated, from goodput_windows',
    computed_at DateTime DEFAULT now()
) ENGINE = MergeTree ORDER BY (cluster, job_id)""",
}


def all_ddl() -> list[str]:
    return (
        [raw_table_ddl(k) for k in KINDS.values()]
        + [rollup_table_ddl(k) for k in catalog.ROLLUP_TABLES]
        + [rollup_table_ddl(k, recent=True) for k in catalog.ROLLUP_TABLES]
        + [s.strip() for s in FIXED_TABLES.values()]
    )


MIN_SERVER_VERSION = (23, 8)
"""Oldest ClickHouse server the schema and analyzers run on (chDB always embeds a newer engine)."""
FULL_SCHEMA_NEEDS = (
    "the goodput schema (DateTime64, Bool, column CODECs, TTL, "
    "non_replicated_deduplication_window, insert_deduplication_token) and its analyzers "
    "(window functions, lightweight DELETE, CREATE OR REPLACE)"
)

REPLICA_PATH = "/clickhouse/tables/{shard}/{database}/{table}"
"""Keeper path of each replicated local table; {shard}, {database} and {table} are server macros
(shard from each server's <macros>, the other two filled in by ClickHouse itself)."""
LOCAL_SUFFIX = "_local"

SHARD_KEYS: dict[str, str] = {
    **{
        catalog.RAW_TABLES[k.name]: f"cityHash64({'job_id' if k.key[0] == 'job_id' else k.sender_column})"
        for k in KINDS.values()
    },
    **{catalog.ROLLUP_TABLES[k]: "cityHash64(node)" for k in catalog.ROLLUP_TABLES},
    **{catalog.ROLLUP_RECENT[k]: "cityHash64(node)" for k in catalog.ROLLUP_TABLES},
    catalog.SCHEMA_MIGRATIONS: "version",
    catalog.DEAD_LETTERS: "cityHash64(source, partition, offset)",
    catalog.INGESTED_BATCHES: "cityHash64(node)",
    catalog.DIM_NODES: "cityHash64(node)",
    catalog.DIM_POOLS: "cityHash64(pool)",
    catalog.DIM_ACCOUNTS: "cityHash64(account)",
    catalog.GOODPUT_WINDOWS: "cityHash64(job_id)",
    catalog.GOODPUT_LIVE: "cityHash64(job_id)",
    catalog.JOB_STATE: "cityHash64(job_id)",
    catalog.JOB_SUMMARY: "cityHash64(job_id)",
    catalog.TEAM_DAY: "cityHash64(team)",
    catalog.SCHEDULING_DELAY: "cityHash64(job_id)",
    catalog.FAULTS: "cityHash64(job_id)",
    catalog.FAULT_REPEATS: "cityHash64(node)",
    catalog.DIM_TOPOLOGY: "cityHash64(node)",
    catalog.QUEUE_DELAY_DAY: "cityHash64(key)",
    catalog.POOL_CAPACITY: "cityHash64(pool)",
    catalog.POOL_FRAGMENTATION: "cityHash64(pool)",
    catalog.POOL_HOLDS: "cityHash64(job_id)",
    catalog.POOL_TEAM_DAY: "cityHash64(team)",
    catalog.IDLE_ALLOCATIONS: "cityHash64(job_id)",
    catalog.JOB_PLACEMENT: "cityHash64(job_id)",
    catalog.STRAGGLER_EPISODES: "cityHash64(job_id)",
}
"""How Distributed tables spread rows over shards. Deterministic, never rand(): a retried insert splits
the same way, so each shard sees the same block again and drops it by its deduplication token. Raw
tables are sharded by a leading ORDER BY column (node, or job_id for job and step events), so the
duplicates ReplacingMergeTree collapses always meet on one shard; rollups by node, as their raw tables,
so each shard's materialized view fills its own shard's rollup."""

_ENGINE = re.compile(r"ENGINE = (ReplacingMergeTree|AggregatingMergeTree|MergeTree)\b")


def table_name(statement: str) -> str:
    return statement.split("EXISTS ", 1)[1].split(" ", 1)[0]


def cluster_ddl(cluster: str, database: str) -> list[str]:
    """The schema for a sharded cluster: per table a replicated local table `<name>_local`
    (Replicated*MergeTree, Keeper paths from the server macros) and a Distributed table `<name>` over it,
    each created ON CLUSTER so one statement creates the table on every host."""
    on = f" ON CLUSTER {cluster}"
    out = []
    for statement in all_ddl():
        name = table_name(statement)
        if name not in SHARD_KEYS:
            raise KeyError(f"table {name} has no shard key: add it to pipeline.ddl.SHARD_KEYS")
        local = name + LOCAL_SUFFIX
        head = f"CREATE TABLE IF NOT EXISTS {name} "
        if not statement.startswith(head):
            raise ValueError(f"cannot render {name} for a cluster: its DDL does not start with {head!r}")
        local_ddl = f"CREATE TABLE IF NOT EXISTS {local}{on} " + statement[len(head) :]
        local_ddl, n = _ENGINE.subn(
            lambda m: f"ENGINE = Replicated{m[1]}('{REPLICA_PATH}', '{{replica}}')", local_ddl
        )
        if n != 1:
            raise ValueError(f"cannot render {name} for a cluster: expected one MergeTree engine, found {n}")
        # Replicated tables deduplicate inserts natively, over this many recent blocks.
        local_ddl = local_ddl.replace(
            "non_replicated_deduplication_window", "replicated_deduplication_window"
        )
        out.append(local_ddl)
        out.append(
            f"CREATE TABLE IF NOT EXISTS {name}{on} AS {database}.{local}\n"
            f"ENGINE = Distributed({cluster}, {database}, {local}, {SHARD_KEYS[name]})"
        )
    return out


def delete_target(store: Store, name: str) -> str | None:
    """What a statement that deletes rows of table `name` (DELETE, TRUNCATE) must name on `store`.

    None on one server: the catalog table itself, so those statements stay as they are. On the cluster
    layout (a store with a `cluster`, as `migrate` reads it) `<name>_local ON CLUSTER <cluster>`: the
    Distributed table under the catalog name refuses DELETE, and its TRUNCATE empties nothing on the
    shards; reads and inserts keep the catalog name."""
    cluster = getattr(store, "cluster", None)
    if cluster is None:
        return None
    return f"{name}{LOCAL_SUFFIX} ON CLUSTER {cluster}"


def added_columns(cluster: str | None = None, on_cluster: bool = True) -> list[str]:
    """Columns added to tables after schema 1 shipped, for stores created before (no-ops elsewhere): on the
    cluster layout to the local tables and the Distributed tables over them."""
    on = f" ON CLUSTER {cluster}" if cluster is not None and on_cluster else ""
    out = []
    for name in catalog.RAW_TABLES.values():
        for target in [name] if cluster is None else [f"{name}{LOCAL_SUFFIX}", name]:
            out.append(f"ALTER TABLE {target}{on} ADD COLUMN IF NOT EXISTS {BATCH_ROW} AFTER seq")
    for name, column, after in (
        (catalog.JOB_SUMMARY, CLOCK_OFFSET, "healthy_busy_pct"),
        (catalog.INGESTED_BATCHES, APPENDED, "sent"),
        (catalog.STRAGGLER_EPISODES, STRAGGLER_SOURCE, "job_id"),
    ):
        for target in [name] if cluster is None else [f"{name}{LOCAL_SUFFIX}", name]:
            out.append(f"ALTER TABLE {target}{on} ADD COLUMN IF NOT EXISTS {column} AFTER {after}")
    return out


def backfill_rollup(store: Store, kind: str) -> None:
    """Rolls up the raw rows stored before `kind`'s materialized view existed. Run after the view is
    created: a batch inserted in between is rolled up twice, which the rollup's duplicate check
    (rows > seconds) shows, and the analyzers read that node's raw rows instead; the other order would
    lose the batch silently."""
    store.execute(
        f"INSERT INTO {catalog.ROLLUP_TABLES[kind]} {rollup_select(kind, catalog.RAW_TABLES[kind])}"
    )


MIGRATIONS = {
    1: "initial schema: raw tables, dead letters, outputs",
    2: "insert-time rollups of the gpu, nic and storage rows, per 10 s (materialized views)",
    3: "live runs: goodput_live (provisional windows of the last minutes) and job_state (what they carry)",
    4: "<kind>_rollup_recent_10s: the last days of the rollups sorted time-first, for live runs",
}
"""Schema versions and what each added, as recorded in schema_migrations (docs/clickhouse.md)."""


def rollup_views(cluster: str | None = None) -> list[str]:
    """The rollups' materialized views: on one server over the catalog tables; on a cluster over each
    shard's local tables, created ON CLUSTER. Then one per rollup copying its rows, as its view inserts
    them, into its time-first copy (catalog.ROLLUP_RECENT: a view on a view's target, no second
    aggregation)."""
    suffix, on = ("", "") if cluster is None else (LOCAL_SUFFIX, f" ON CLUSTER {cluster}")
    return [rollup_view_ddl(kind, suffix, on) for kind in catalog.ROLLUP_TABLES] + [
        f"CREATE MATERIALIZED VIEW IF NOT EXISTS {recent}_mv{suffix}{on} TO {recent}{suffix} AS\n"
        f"SELECT * FROM {catalog.ROLLUP_TABLES[kind]}{suffix}"
        for kind, recent in catalog.ROLLUP_RECENT.items()
    ]


def backfill_recent(store: Store) -> None:
    """Copies each rollup's last RECENT_TTL_DAYS into its time-first copy (catalog.ROLLUP_RECENT), for a
    store from before version 4. A batch inserted while this runs may reach a copy twice, which the
    analyzers' duplicate check finds there as it finds a batch stored twice (analyzers.run copies_from).
    Emptied first, so a migration cut short and run again copies once."""
    for kind, recent in catalog.ROLLUP_RECENT.items():
        store.execute(f"TRUNCATE TABLE {delete_target(store, recent) or recent}")
        store.execute(
            f"INSERT INTO {recent} SELECT * FROM {catalog.ROLLUP_TABLES[kind]} "
            f"WHERE window_start >= now() - INTERVAL {RECENT_TTL_DAYS} DAY"
        )


def migrate(store: Store) -> int:
    """Creates every table that is missing and records the schema version. Safe to run repeatedly.

    A server store (pipeline.server_store.ServerStore) first proves the server is new enough
    (`require_version`) and, when configured with a cluster, gets the replicated and Distributed layout
    of `cluster_ddl`; the embedded chDB store has neither attribute and gets `all_ddl()`. A store from
    before version 2 gets its rollups filled from the raw rows it holds (`backfill_rollup`); version 2 is
    recorded only once that is done, so a migration cut short starts the rollups over. A store from
    version 2 or 3 gets the rollups' last days copied into their time-first copies (`backfill_recent`)."""
    require_version = getattr(store, "require_version", None)
    if require_version is not None:
        require_version(MIN_SERVER_VERSION, FULL_SCHEMA_NEEDS)
    cluster = getattr(store, "cluster", None)
    statements = all_ddl() if cluster is None else cluster_ddl(cluster, getattr(store, "database", "default"))
    for statement in statements + added_columns(cluster):
        store.execute(statement)
    applied = set(
        store.query_arrow(f"SELECT DISTINCT version FROM {catalog.SCHEMA_MIGRATIONS}")
        .column("version")
        .to_pylist()
    )
    rolled_up = 2 in applied
    if not rolled_up:  # the time-first copies are filled by their views as the rollups are backfilled
        for rollup in (*catalog.ROLLUP_TABLES.values(), *catalog.ROLLUP_RECENT.values()):
            store.execute(f"TRUNCATE TABLE {delete_target(store, rollup) or rollup}")
    for statement in rollup_views(cluster):
        store.execute(statement)
    if not rolled_up:
        for kind in catalog.ROLLUP_TABLES:
            backfill_rollup(store, kind)
    elif 4 not in applied:
        backfill_recent(store)
    for version, description in MIGRATIONS.items():
        if version not in applied:
            store.execute(
                f"INSERT INTO {catalog.SCHEMA_MIGRATIONS} (version, description) "
                f"VALUES ({version}, '{description}')"
            )
    tune_tables(store)
    return catalog.SCHEMA_VERSION_DDL


def tune_tables(store: Store) -> None:
    """Gives each table of TABLE_TUNING the settings its engine knows and it does not have yet (on the
    cluster layout its local tables, ON CLUSTER); a setting the engine does not know is left out."""
    names = sorted({name for settings in TABLE_TUNING.values() for name in settings})
    known = set(
        store.query_arrow(
            f"SELECT name FROM system.merge_tree_settings WHERE name IN ({', '.join(map(quote, names))})"
        )
        .column("name")
        .to_pylist()
    )
    cluster = getattr(store, "cluster", None)
    targets = {table: table if cluster is None else f"{table}{LOCAL_SUFFIX}" for table in TABLE_TUNING}
    engines = store.query_arrow(
        "SELECT name, engine_full FROM system.tables WHERE database = currentDatabase() "
        f"AND name IN ({', '.join(map(quote, targets.values()))})"
    ).to_pylist()
    engine = {row["name"]: row["engine_full"] for row in engines}
    on = f" ON CLUSTER {cluster}" if cluster is not None else ""
    for table, settings in TABLE_TUNING.items():
        target = targets[table]
        missing = [
            f"{k} = {v}"
            for k, v in settings.items()
            if k in known and f"{k} = {v}" not in engine.get(target, "")
        ]
        if missing:
            store.execute(f"ALTER TABLE {target}{on} MODIFY SETTING {', '.join(missing)}")
