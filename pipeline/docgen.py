"""Writes docs/config.md, docs/messages.md, docs/clickhouse.md and docs/metrics.md from the declarations,
so the docs cannot drift.

`python -m pipeline.docgen` rewrites them; tests/skeleton/test_contract.py fails when they are stale.
"""

from __future__ import annotations

import json
from pathlib import Path

from contracts import catalog, columnar
from contracts.schema import ENVELOPE_FIELDS, JOB_EVENTS, KINDS, SCHEMA_VERSION, topic_for
from pipeline.configdoc import config_md
from pipeline.ddl import TABLE_TUNING, all_ddl, column_type

DOCS = Path(__file__).resolve().parent.parent / "docs"

EXAMPLE_ROWS = {
    "gpu": [
        {
            "ts_ms": 1796200000000,
            "gpu": 0,
            "uuid": "GPU-5f2c0c1e-8a4b-4f0e-9d1c-2b7a6e3f9a10",
            "model": "NVIDIA H100 80GB HBM3",
            "pci_bus_id": "00000000:18:00.0",
            "job_id": "812345",
            "util_gpu_pct": 100.0,
            "util_mem_pct": 41.0,
            "sm_active_pct": 87.5,
            "sm_occupancy_pct": 40.1,
            "tensor_active_pct": 48.0,
            "dram_active_pct": 30.2,
            "mem_used_bytes": 68719476736,
            "mem_total_bytes": 85899345920,
            "power_w": 612.4,
            "energy_j": 3866201.5,
            "temp_c": 67.0,
            "sm_clock_mhz": 1980.0,
            "mem_clock_mhz": 2619.0,
            "throttle_reasons": 0,
            "ecc_sbe_total": 0,
            "ecc_dbe_total": 0,
            "remapped_rows": 0,
            "pcie_tx_bytes_per_s": 8.7e8,
            "pcie_rx_bytes_per_s": 1.2e9,
            "nvlink_tx_bytes_per_s": 1.6e11,
            "nvlink_rx_bytes_per_s": 1.6e11,
            "nvlink_errors_per_s": 0.0,
        },
        {
            "ts_ms": 1796200000000,
            "gpu": 1,
            "uuid": "GPU-0b9d7e43-1c55-4a8e-b7f2-6d1e0c4a2f33",
            "model": "NVIDIA H100 80GB HBM3",
            "job_id": "812345",
            "util_gpu_pct": 100.0,
            "sm_active_pct": None,
            "power_w": 598.0,
            "xid": 79,
        },
    ],
    "nic": [
        {
            "ts_ms": 1796200000000,
            "device": "mlx5_0",
            "port": 1,
            "link_layer": "Ethernet",
            "state": "ACTIVE",
            "rate_gbps": 200.0,
            "tx_bytes_per_s": 1.9e10,
            "rx_bytes_per_s": 1.9e10,
            "tx_packets_per_s": 4.6e6,
            "rx_packets_per_s": 4.6e6,
            "xmit_wait_per_s": 2.1e6,
            "ecn_marked_per_s": 8200.0,
            "cnp_sent_per_s": 4100.0,
            "cnp_handled_per_s": 3900.0,
            "pfc_pause_rx_per_s": 120.0,
            "pfc_pause_us_per_s": 5400.0,
            "symbol_errors_per_s": 0.0,
            "rcv_errors_per_s": 0.0,
            "link_downed_per_s": 0.0,
        }
    ],
    "storage": [
        {
            "ts_ms": 1796200000000,
            "source": "nfs",
            "device": "/mnt/datasets",
            "read_bytes_per_s": 2.4e9,
            "read_ops_per_s": 2290.0,
            "read_latency_ms": 12.5,
        },
        {"ts_ms": 1796200000000, "source": "psi", "device": "io", "psi_some_pct": 31.0, "psi_full_pct": 12.0},
    ],
    "job": [
        {
            "ts_ms": 1796199990000,
            "job_id": "812345",
            "event": "allocated",
            "attempt": 1,
            "account": "llm",
            "queue": "core",
            "priority": 2,
            "gpus_requested": 16,
            "node": "gpu-core-001",
            "gpu_indices": [0, 1, 2, 3, 4, 5, 6, 7],
            "source": "slurm",
        },
        {
            "ts_ms": 1796200000000,
            "job_id": "812345",
            "event": "failed",
            "attempt": 1,
            "reason": "xid:79",
            "exit_code": 1,
            "gpu_indices": [],
            "source": "slurm",
        },
    ],
    "step": [
        {
            "ts_ms": 1796200000000,
            "job_id": "812345",
            "rank": 0,
            "step": 1200,
            "attempt": 1,
            "gpu": 0,
            "duration_ms": 1040.0,
            "data_ms": 210.0,
            "compute_ms": 760.0,
            "comm_ms": 70.0,
            "checkpoint_ms": 0.0,
        }
    ],
}


def example_envelope(kind: str) -> dict:
    rows = EXAMPLE_ROWS[kind]
    names = list(dict.fromkeys(k for r in rows for k in r))
    return {
        "schema_version": SCHEMA_VERSION,
        "kind": kind,
        "cluster": "demo-east",
        "node": "sched-01" if kind == "job" else "gpu-core-001",
        "seq": 41,
        "sent_ms": 1796200000950,
        "agent": "goodput-agent/0.1.0",
        "columns": {n: [r.get(n) for r in rows] for n in names},
    }


def messages_md() -> str:
    out = [
        f"""# Kafka message schema, versions {SCHEMA_VERSION} (JSON) and {columnar.VERSION} (columnar binary)

Generated from `contracts/schema.py` and `contracts/columnar.py` by `python -m pipeline.docgen`; do not
edit by hand.

Agents publish one **envelope** per batch to the topic of its signal kind, key = the node name, value =
UTF-8 JSON (version {SCHEMA_VERSION}) or the same envelope as columnar binary buffers (version
{columnar.VERSION}, below; `[agent] message_version`). The loader reads both, also mixed in one topic.
A batch carries its rows **column-wise**: `columns` maps each field to an array, all arrays
of one length. A field a node cannot measure is left out of `columns`, or is `null` in the rows that
lack it: absent, never zero. Non-finite numbers are not JSON; send `null`.

Delivery is at least once. `(cluster, node, kind, seq)` identifies a batch: the loader stores a repeated
seq once and dead-letters the copy (`duplicate_seq`). `seq` starts at 0 per (node, kind) and survives
agent restarts; a gap means loss upstream.

Compatibility: within one `schema_version`, fields may be added (optional) but never removed, renamed or
re-typed. The loader dead-letters fields it does not know (`unknown_field`), so upgrade loaders first.
The envelope has exactly the keys below (`agent` may be left out): any other key is `unknown_field` too,
since a key the loader ignored could be one a newer sender meant to matter. A key written twice in one
object is `repeated_key` (JSON parsers keep one of the two values silently), and a message starting
with a byte order mark is `not_json` (RFC 8259: senders must not add one).

## Topics
| kind | topic | rows |
|---|---|---|"""
    ]
    for k in KINDS.values():
        out.append(f"| {k.name} | `{topic_for(k.name)}` | {k.help} |")
    out += ["", "## Envelope", "| field | type | meaning |", "|---|---|---|"]
    out += [f"| `{n}` | {t} | {h} |" for n, t, h in ENVELOPE_FIELDS]
    out += [
        "",
        f"## Version {columnar.VERSION}: the columnar binary envelope",
        "",
        "The same envelope and fields, each column as the buffers Arrow holds in memory: a loader wraps "
        "them as arrays without a Python object per value (docs/loader.md: 2.8x cheaper to decode "
        "than JSON). Each kind's table below gives every field's wire type.",
        "",
        "```",
        columnar.LAYOUT.rstrip(),
        "```",
        "",
        "**Messages files** (`goodput simulate --out`, `goodput ingest --from`, `goodput dead-letters "
        "--export`) hold one message per line: a JSON envelope as it is (a line break inside it written as "
        "a space), a columnar one as `GPC2:` and the message in base64.",
    ]
    for k in KINDS.values():
        labels = [f"`{f.label}` ({f.name})" for f in k.fields if f.label]
        out += ["", f"## Kind `{k.name}`", "", k.help, ""]
        if labels:
            out += [
                "Prometheus labels on this kind's metrics (agent `/metrics`): " + ", ".join(labels) + ".",
                "",
            ]
        out += [
            "| field | type | v2 wire type | unit | required | range | ClickHouse | Prometheus metric "
            "| meaning |",
            "|---|---|---|---|---|---|---|---|---|",
        ]
        for f in k.fields:
            rng = (
                ""
                if f.min is None and f.max is None
                else f"[{'' if f.min is None else f.min}, {'' if f.max is None else f.max}]"
            )
            if f.enum:
                rng = " \\| ".join(f.enum)
            metric = (
                f"`{f.metric}`" + (f" (x{f.metric_scale:g})" if f.metric_scale != 1 else "")
                if f.metric
                else ""
            )
            out.append(
                f"| `{f.name}` | {f.type} | {columnar.wire_type(f)} | {f.unit} | "
                f"{'yes' if f.required else ''} | {rng} | "
                f"{column_type(f)} | {metric} | {f.help} |"
            )
        if k.name == "job":
            out += [
                "",
                "Events: " + ", ".join(f"`{e}`" for e in JOB_EVENTS) + ". `restarted` opens attempt n+1.",
                "",
                "- `allocated`/`released`: one row per node, naming the node and, in `gpu_indices`, its "
                "GPUs. An `allocated` without `gpu_indices` is an **allocation without placement**: the "
                "scheduler gave the job that node but did not say which GPUs (a Slurm job that started and "
                "ended between two polls; Kubernetes device-plugin GPUs, whose indices the API server does "
                "not know). It still counts: its GPUs are the job's `gpus_requested` spread evenly over the "
                "nodes allocated to the attempt. When the indices become known later, `allocated` is sent "
                "again with the same key (job_id, ts_ms, event, attempt, node) and the store keeps the later "
                "row.",
                "- `gang_complete`: every member of the gang is allocated; the gang wait ends.",
                "- `running`: the scheduler reports the attempt's processes started (Slurm RUNNING, Kueue "
                "PodsReady, Volcano running >= minMember). It is coarse and says nothing of training: the "
                "first training step of the attempt is its first `step` event. Schedulers that report both "
                "at one edge send `gang_complete` and `running` together, with the same time.",
                "",
                "Order of events with the same timestamp: the order in which their source reported them, "
                "i.e. by the sender's batch `seq`, then by row position within the batch (stored as "
                "`batch_row`); events of different senders in the same millisecond are ordered by sender "
                "name. A collector therefore lists simultaneous events in the order they happened (e.g. "
                "`failed`, `restarted`, `running` for a resume that starts at once); the analyzers never "
                "reorder them by event type.",
            ]
        out += ["", "Example:", "", "```json", json.dumps(example_envelope(k.name), indent=1), "```"]
    out += [
        "",
        "## Dead-letter reasons",
        "",
        "not_json, non_finite, bad_envelope, unknown_version, unknown_kind, kind_mismatch, unknown_cluster, "
        "unknown_node (the sender, or the `node` of an `allocated`/`released` event, is in no pool of the "
        "config), unknown_field, ragged_columns, empty_batch, oversize_message, oversize_batch, "
        "missing_field, bad_type, out_of_range (includes timestamps outside [now - max_past_days, now + "
        "max_future_s] and values outside a field's range or enum), bad_gpu_indices (an "
        "`allocated`/`released` naming a GPU twice, a negative index, or one beyond the node's "
        "`gpus_per_node`; without `[[pools]]`, beyond 63), repeated_key (also a column listed twice in a "
        "columnar header), duplicate_seq, bad_buffers (a columnar message whose buffers run past its end, "
        "leave bytes after the last one, or hold offsets out of order or strings that are not UTF-8).",
        "",
    ]
    return "\n".join(out)


def clickhouse_md() -> str:
    live_tuning = ", ".join(f"{k} = {v}" for k, v in TABLE_TUNING[catalog.GOODPUT_LIVE].items())
    out = [
        f"""# ClickHouse schema, version {catalog.SCHEMA_VERSION_DDL}

Generated from `pipeline/ddl.py` by `python -m pipeline.docgen`; do not edit by hand. `goodput` applies it
idempotently at every start (`CREATE TABLE IF NOT EXISTS`) and records the version in `schema_migrations`.
Requires ClickHouse >= 23.8 (DateTime64, TTL, codecs, window functions); chDB 3+ embeds 25.x/26.x.

## Duplicates: what makes them invisible
1. The loader keeps, per (cluster, node, kind), which batch `seq` numbers are stored (`ingested_batches`,
   reloaded at start) and dead-letters a repeat (`duplicate_seq`): covers agent re-sends after a timeout and
   Kafka redelivery after a loader restart.
2. Every insert carries `insert_deduplication_token` = hash of the batches it holds, and raw tables set
   `non_replicated_deduplication_window`: covers a loader killed after the insert and before it recorded the
   batches or committed offsets (the replay forms the same insert, which ClickHouse drops).
3. Raw tables are ReplacingMergeTree on (cluster, node, device key, ts): any duplicate that still slipped
   through (two loaders racing on one batch) collapses at merge; `FINAL` shows the merged view at once.
   Both stores insert with `optimize_on_insert = 0` (where the server knows the setting), so a duplicate
   inside one inserted block waits for a merge too, like one across blocks, instead of being collapsed
   while the block is written: that collapse was most of the engine's work on a raw insert
   (docs/performance.md, "Ingest").

## Rollups (version 2)
`gpu_rollup_10s`, `nic_rollup_10s` and `storage_rollup_10s` hold what the analyzers read of the per-second
kinds, summed per 10 s window at insert time by a materialized view on each raw table (`<rollup>_mv`;
on a cluster, one per shard over its local tables). A sample with ts T describes the second (T - 1 s, T] and
is filed at T - 1 ms. Rates are summed as integers (milli-units), so any merge order gives the same sums.
The GPU rollup keeps each sample (ms into the window, milli-% busy, throttle reasons) for the windows a job's
phase boundary cuts. The raw rows stay, for drill-down and for the nodes the rollups cannot serve.

How the three duplicate guards carry over: (1) a batch the loader refuses never reaches the view; (2) every
insert sets `deduplicate_blocks_in_dependent_materialized_views`, and the rollups have their own
`non_replicated_deduplication_window`, so a replayed insert is dropped in the rollup as in the raw table;
(3) what slips through is counted twice in a rollup, where it shows: `rows` above the number of distinct
seconds in `seconds` (one bit per second of the window). For a node with such a window in its span, and
for a node whose clock offset is corrected, the analyzers read the raw rows (`FINAL`) instead, with the
same sums (`pipeline.ddl.rollup_select`); also every node where the analyzer window is no multiple of 10 s.
`migrate` fills the rollups of a store from before version 2 from its raw rows, and records version 2
only when that is done.

## Live runs (version 3)
`goodput_live` has `goodput_windows`' columns and holds a live run's rows (`goodput analyze --live
SECONDS`, `[loader].live_every_s`): the windows of the data's last minutes, classified with each job's
numbers from its last whole run, which that run keeps in `job_state` (b* and the noise in half keys of
0.005 %, the real starts of coarse `running` attempts, the evidence baselines in millionths of their
thresholds, the clock offsets of its nodes; integers, as the analyzers compare them). The rows are
provisional: each live run replaces its windows, whole runs never write there and `goodput_windows` stays
the record; they expire 2 days after the run that wrote them. Reading "now": `goodput_live`'s latest
windows (docs/goodput-model.md, "Live runs"; the exporter's `goodput_live_gpu_seconds`, the cluster
dashboard's live panel). Both tables are new in version 3; nothing existing changed, so `migrate` only
creates them. Where the engine knows the setting, `migrate` also gives `goodput_live` and every
table the analyzers replace rows of `{live_tuning}` (`pipeline.ddl.TABLE_TUNING`), on a store created
before too; a server that does not know it keeps its defaults. Each run replaces its rows by a
lightweight DELETE, a mutation it waits for; with the parts merged at the default 5, the DELETE that met
the fifth part waited 0.3-1.1 s, one run in five (bench/bench_live_replace.py, docs/performance.md).

## The rollups' last days, time-first (version 4)
`gpu_rollup_recent_10s`, `nic_rollup_recent_10s` and `storage_rollup_recent_10s` hold their rollup's rows
of the last 2 days again, sorted by window first (`cluster, window_start, node, <device>`), each filled by a
materialized view on its rollup (`<copy>_mv`: it copies the rows the rollup's view inserts, no second
aggregation; on a cluster one per shard, over the local tables, sharded by node as the rollups). Why: a
rollup sorted by node and device holds some device's last minutes in every granule, so a live run reading
the last 10 minutes read the whole day's columns (10,240 GPUs: the GPU samples 0.6 s for a 1 h store, 3.1 s
for a 4 h one; docs/performance.md "Live runs"). A live run reads the copies when they cover its minutes
(version 4 recorded, so the last days were copied, and minutes within the 2 days they keep;
`pipeline.analyzers.run.copies_from`, `recent_covers`), the rollups themselves otherwise: the same rows
either way. A batch that a migration copies twice (inserted while it copies) shows in a copy as more rows
than seconds, the duplicate check the analyzers already run, which reads that node's raw rows. Whole runs
read the rollups, except the NIC rollup's windows its copy holds, which every run reads `FINAL` from the
copy (`pipeline.analyzers.run.nic_rollup_rows`): a rollup's parts each span every port and so all meet in
the merge `FINAL` does, while the copy's parts meet only where their minutes do (the bench day's NIC read
0.9-1.1 s against 1.7-2.0 s). The copies make an insert 1.1-1.5x as long (bench/bench_ingest.py) and store the
rollups' bytes again for 2 days. `migrate` creates them and copies the rollups' last 2 days into them
(`pipeline.ddl.backfill_recent`), recording version 4 when that is done; nothing existing changed.

## Tables
"""
    ]
    for ddl in all_ddl():
        name = ddl.split("EXISTS ", 1)[1].split(" ", 1)[0]
        out += [f"### `{name}`", "", "```sql", ddl, "```", ""]
    return "\n".join(out)


def _self_metrics_table(metrics: dict[str, tuple[str, str, tuple[str, ...]]]) -> list[str]:
    out = ["| metric | type | labels | meaning |", "|---|---|---|---|"]
    for name, (mtype, help_text, labels) in metrics.items():
        out.append(f"| `{name}` | {mtype} | {', '.join(f'`{label}`' for label in labels)} | {help_text} |")
    return out


def metrics_md() -> str:
    """Every Prometheus series goodput exports, from the declarations (schema fields and catalog)."""
    out = [
        f"""# Prometheus metrics, version {catalog.METRICS_VERSION}

Generated from `contracts/schema.py` and `contracts/catalog.py` by `python -m pipeline.docgen`; do not
edit by hand. Names follow the Prometheus conventions, as node_exporter and dcgm-exporter do: base
units (bytes, seconds, hertz, joules), cumulative counters ending in `_total` (take `rate()` or
`increase()` of them; the agent keeps each total monotonic across the device counter's wraps and
resets, agents/totals.py), ratios 0-1 (`_ratio`), `_info` series (always 1) carrying identity labels,
and the `goodput_` prefix. Label names follow dcgm-exporter for GPUs (`gpu`, `UUID`, `modelName`,
`pci_bus_id`, `Hostname`, `hpc_job`; `promtool check metrics` flags `modelName` as camelCase, kept for
existing dcgm dashboards) and node_exporter for devices (`device`, `port`). A series is absent, never 0,
when the node cannot measure it; it disappears when its collector fails (then
`goodput_collector_success{{collector=...}}` is 0). Renaming or removing a series is a breaking change
and raises this version; the message fields (docs/messages.md, version {SCHEMA_VERSION}) are separate.

## Renamed in version {catalog.METRICS_VERSION}

Version 2 turned the agent's per-second gauges into counters and its percents into ratios; the Kafka
messages did not change. A query on a former rate reads `rate(new[5m])`, on a former percent gauge
`100 * new`, and on a former percent of time (storage busy, pressure) `100 * rate(new[5m])`.

| old (version 1) | new (version 2) | what changed |
|---|---|---|
"""
        + "\n".join(f"| `{old}` | `{new}` | {why} |" for old, new, why in catalog.METRIC_RENAMES)
        + "\n\n## Agent: samples (`goodput agent`, default port 9477)\n"
    ]
    for k in KINDS.values():
        metric_fields = [f for f in k.fields if f.metric]
        if not metric_fields:
            continue
        labels = [f"`{f.label}`" for f in k.fields if f.label] + (["`Hostname`"] if k.name == "gpu" else [])
        out += [
            f"### {k.name}",
            "",
            f"Labels: {', '.join(labels)}.",
            "",
            "| metric | type | from field | meaning |",
            "|---|---|---|---|",
        ]
        for f in metric_fields:
            scale = f" (x{f.metric_scale:g})" if f.metric_scale != 1 else ""
            how = {"rate": ", summed over ticks", "cumulative": ", kept monotonic", None: ""}[f.counts]
            out.append(
                f"| `{f.metric}` | {f.metric_type} | `{f.name}`{scale}{how} | {f.metric_help or f.help} |"
            )
        out.append("")
    out += ["## Agent: derived from fields that are no number", ""]
    out += _self_metrics_table(catalog.AGENT_DERIVED_METRICS) + [""]
    out += ["## Agent: its own health", ""] + _self_metrics_table(catalog.AGENT_SELF_METRICS)
    out += ["", "## Loader (`goodput ingest --config`, default port 9479)", ""]
    out += _self_metrics_table(catalog.LOADER_METRICS) + [""]
    out += [
        "## Goodput exporter (the loader service with `--analyze-every`, or `goodput exporter --config`, "
        "default port 9480)",
        "",
        "Recent analyzer results over `[exporter].lookback_s`, ending at the latest analysed window; "
        "cardinality and alert rules in docs/alerts.md.",
        "",
    ]
    out += _self_metrics_table(catalog.GOODPUT_METRICS) + [""]
    out += ["## Other exporters' series the alert rules read (docs/alerts.md)", "", "| metric | meaning |"]
    out += ["|---|---|"] + [f"| `{n}` | {h} |" for n, h in catalog.EXTERNAL_METRICS.items()] + [""]
    return "\n".join(out)


def write() -> None:
    (DOCS / "config.md").write_text(config_md())
    (DOCS / "messages.md").write_text(messages_md())
    (DOCS / "clickhouse.md").write_text(clickhouse_md())
    (DOCS / "metrics.md").write_text(metrics_md())


if __name__ == "__main__":
    write()
