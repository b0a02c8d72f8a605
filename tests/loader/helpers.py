"""Shared by the loader-service tests: a config for a small cluster, real agent-shaped envelopes of
every kind, a producer, the loader as an in-process thread or as a `goodput ingest` subprocess, and
/metrics parsed with prometheus_client's own parser."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
import urllib.request
import uuid
from collections import Counter
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from contracts import config as config_mod
from contracts.envelope import encode_batch, message_line
from contracts.schema import KINDS, topic_for
from pipeline.loader_service import LoaderService
from tests.fixtures.ports import free_ports
from transport.kafka import KafkaProducerTransport, KafkaSettings, ensure_topics

ROOT = Path(__file__).resolve().parents[2]
GOODPUT = str(ROOT / ".venv" / "bin" / "goodput")
CLUSTER = "loadtest"
NODES = tuple(f"gpu-{i:03d}" for i in range(1, 17))
SCHEDULER = "sched-01"
MAX_BATCH_ROWS = 500


def _toml_lines(table: dict) -> str:
    return "\n".join(f'{k} = "{v}"' if isinstance(v, str) else f"{k} = {v!r}" for k, v in table.items())


def write_config(
    path: Path, bootstrap: str, prefix: str, store: Path, kafka: dict | None = None, **loader
) -> Path:
    """A goodput config for a 16-node cluster reading Kafka topics `<prefix>.<kind>`; `loader` and
    `kafka` add to or override its [loader] and [transport.kafka] keys."""
    settings = {
        "max_batch_rows": MAX_BATCH_ROWS,
        "flush_interval_s": 0.3,
        "lag_interval_s": 0.5,
        "retry_backoff_s": 0.2,
        "retry_backoff_max_s": 1.0,
        "metrics_address": "",
        **loader,
    }
    kafka_settings = {"bootstrap": bootstrap, "group_id": f"loader-{prefix}", **(kafka or {})}
    path.write_text(f"""schema_version = 1
[cluster]
name = "{CLUSTER}"
control_nodes = ["{SCHEDULER}"]
[gpu_types.H100]
price_per_gpu_hour = 2.5
[network_tiers.ib]
link_gbps = 400.0
[[pools]]
name = "core"
class = "core"
gpu_type = "H100"
nodes = ["gpu-[001-016]"]
network_tier = "ib"
storage_ceiling_bytes_per_s = 1e10
[loader]
{_toml_lines(settings)}
[transport]
kind = "kafka"
topic_prefix = "{prefix}"
[transport.kafka]
{_toml_lines(kafka_settings)}
[store]
path = "{store}"
""")
    return path


def two_loader_configs(tmp_path: Path, bootstrap: str, prefix: str, **loader) -> tuple[list[Path], list[int]]:
    """Configs for two loaders of one consumer group (their own stores and metrics ports), and the ports."""
    ports = free_ports(2)
    configs = [
        write_config(
            tmp_path / f"loader{i}.toml",
            bootstrap,
            prefix,
            tmp_path / f"store{i}",
            metrics_address=f"127.0.0.1:{ports[i]}",
            **loader,
        )
        for i in range(2)
    ]
    return configs, ports


def columns(kind: str, rows: int, seq: int, node: str = NODES[0]) -> dict[str, list]:
    """Valid columns of `kind`, `rows` long, with recent timestamps (the validator's window is 30 days).
    Step rows are keyed by (job, rank, step, ts) without the node, so each node gets its own ranks."""
    now = int(time.time() * 1000) - 60_000
    ts = [now + seq * 1000 + r for r in range(rows)]
    if kind == "gpu":
        return {
            "ts_ms": ts,
            "gpu": [r % 8 for r in range(rows)],
            "uuid": [f"GPU-{r % 8}" for r in range(rows)],
            "util_gpu_pct": [50.0 + r % 50 for r in range(rows)],
            "power_w": [400.5] * rows,
            "pcie_tx_bytes_per_s": [1e9] * rows,
            "mem_used_bytes": [2**34] * rows,
            "lost": [False] * rows,
        }
    if kind == "nic":
        return {
            "ts_ms": ts,
            "device": ["mlx5_0"] * rows,
            "port": [1 + r for r in range(rows)],
            "link_layer": ["InfiniBand"] * rows,
            "tx_bytes_per_s": [2e10] * rows,
        }
    if kind == "storage":
        return {
            "ts_ms": ts,
            "source": ["nfs"] * rows,
            "device": [f"/mnt/d{r}" for r in range(rows)],
            "read_bytes_per_s": [1e9] * rows,
            "busy_pct": [20.0] * rows,
        }
    if kind == "job":
        return {
            "ts_ms": ts,
            "job_id": [f"job-{seq}"] * rows,
            "event": ["allocated"] * rows,
            "attempt": [1] * rows,
            "node": [NODES[r % len(NODES)] for r in range(rows)],
            "gpu_indices": [[0, 1, 2, 3]] * rows,
        }
    if kind == "step":
        first_rank = NODES.index(node) * rows if node in NODES else 0
        return {
            "ts_ms": ts,
            "job_id": ["job-1"] * rows,
            "rank": [first_rank + r for r in range(rows)],
            "step": [seq] * rows,
            "duration_ms": [1000.0] * rows,
            "data_ms": [10.0] * rows,
        }
    raise KeyError(kind)


def batch(
    kind: str, node: str, seq: int, rows: int = 8, *, cluster: str = CLUSTER, version: int = 1, **over
) -> bytes:
    return encode_batch(
        version=version,
        kind=kind,
        cluster=cluster,
        node=node,
        seq=seq,
        sent_ms=int(time.time() * 1000),
        columns={**columns(kind, rows, seq, node), **over},
        agent="goodput-test/0",
    )


def ingest_old_day_in_parts(config: Path, cwd: Path, parts: int = 2) -> str:
    """Loads `parts` GPU batches of a day two days back with `goodput ingest --from`, one file each (one
    part each in the day's partitions; versions alternate); returns the day (YYYY-MM-DD, UTC)."""
    day_ms = 86_400_000
    old = (int(time.time() * 1000) - 2 * day_ms) // day_ms * day_ms + 3_600_000  # 01:00 UTC
    for i in range(parts):
        cols = {"ts_ms": [old + 60_000 * i] * 2, "gpu": [0, 1], "uuid": ["GPU-0", "GPU-1"]}
        value = batch("gpu", NODES[0], 900 + i, rows=2, version=1 + i % 2, **cols)
        (cwd / f"old-{i}.jsonl").write_bytes(message_line(value) + b"\n")
        subprocess.run(
            [GOODPUT, "ingest", "--config", str(config), "--from", f"old-{i}.jsonl", "--no-analyze"],
            cwd=cwd,
            check=True,
            capture_output=True,
            timeout=300,
        )
    return time.strftime("%Y-%m-%d", time.gmtime(old / 1000))


def good_stream(
    seqs: range, rows: int = 8, nodes: tuple[str, ...] = NODES[:4]
) -> list[tuple[str, str, bytes, int]]:
    """(kind, node, envelope, rows) for every kind: node batches from each of `nodes`, job events from
    the scheduler host; seq numbers from `seqs` per (node, kind). Odd seqs are sent as columnar
    envelopes (version 2), even ones as JSON: a loader meets both in one poll."""
    out = []
    for seq in seqs:
        for kind in KINDS:
            senders = (SCHEDULER,) if kind == "job" else nodes
            for node in senders:
                out.append((kind, node, batch(kind, node, seq, rows, version=1 + seq % 2), rows))
    return out


class Producer:
    """Sends to `<prefix>.<kind>` with key = node, as the agents do."""

    def __init__(self, bootstrap: str, prefix: str) -> None:
        self.prefix = prefix
        self.p = KafkaProducerTransport(bootstrap)

    def send(self, kind: str, node: str, value: bytes) -> None:
        self.p.send(topic_for(kind, self.prefix), node.encode(), value)

    def send_all(self, items) -> None:
        for kind, node, value, *_ in items:
            self.send(kind, node, value)
        self.p.flush(30)

    def close(self) -> None:
        self.p.close()


def new_topics(bootstrap: str, partitions: int) -> str:
    prefix = f"lt{uuid.uuid4().hex[:8]}"
    ensure_topics(bootstrap, partitions=partitions, prefix=prefix)
    return prefix


class ServiceThread:
    """The loader service in a thread of the test process, stopped by its `stop` event."""

    def __init__(self, config_path: Path, store, **kw) -> None:
        self.cfg = config_mod.load(config_path)
        self.service = LoaderService(
            self.cfg, store, KafkaSettings.from_config(self.cfg.transport.kafka), **kw
        )
        self.result = None
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        try:
            self.result = self.service.run()
        except BaseException as e:  # surfaced by stop_and_join, so a crash fails the test loudly
            self.error = e

    def start(self) -> "ServiceThread":
        self.thread.start()
        return self

    def wait_for(self, what, timeout_s: float = 60.0) -> None:
        deadline = time.monotonic() + timeout_s
        while not what():
            if self.error is not None or not self.thread.is_alive():
                raise AssertionError(f"the loader service ended early: {self.error!r}")
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"timed out after {timeout_s} s; loader totals {self.service.loader.totals}"
                )
            time.sleep(0.1)

    def stop_and_join(self, timeout_s: float = 60.0) -> None:
        self.service.stop.set()
        self.thread.join(timeout_s)
        assert not self.thread.is_alive(), "the loader service did not stop"
        if self.error is not None:
            raise self.error


class Scrape(dict):
    """/metrics parsed by prometheus_client's parser: {sample name: {sorted label items: value}}, and
    `families`, every declared family name (a labelled series appears there before its first sample)."""

    def __init__(self, port: int) -> None:
        super().__init__()
        text = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10).read().decode()
        self.families: set[str] = set()
        for family in text_string_to_metric_families(text):
            self.families.add(family.name)
            for s in family.samples:
                self.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value


scrape = Scrape


def metric_sum(metrics: dict, name: str, **labels) -> float:
    return sum(v for key, v in metrics.get(name, {}).items() if set(labels.items()) <= set(key))


class LoaderProcess:
    """`goodput ingest --config FILE` as a child process, as systemd would run it. `command` replaces
    the `goodput` executable (e.g. a wrapper module under tests/ that runs the same CLI)."""

    def __init__(
        self,
        config: Path,
        *args: str,
        env: dict | None = None,
        log: Path | None = None,
        command: tuple[str, ...] = (GOODPUT,),
    ) -> None:
        self.log_path = log or config.with_suffix(".log")
        self._log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(
            [*command, "-v", "ingest", "--config", str(config), *args],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            env={**os.environ, **(env or {})},
        )

    def wait(self, timeout_s: float = 120.0) -> int:
        try:
            return self.proc.wait(timeout_s)
        finally:
            self._log.close()

    def terminate(self, timeout_s: float = 60.0) -> int:
        self.proc.send_signal(signal.SIGTERM)
        return self.wait(timeout_s)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)
        self._log.close()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")


def raw_counts(store, final: bool = True) -> Counter:
    """Rows per kind in the raw tables (FINAL: as the ReplacingMergeTree key makes them unique)."""
    return Counter(
        {
            kind: store.query_arrow(f"SELECT count() AS n FROM raw_{kind}{' FINAL' if final else ''}")
            .column("n")[0]
            .as_py()
            for kind in KINDS
        }
    )


def ledger_keys(store) -> list[tuple[str, str, int]]:
    """(node, kind, seq) of every stored batch, repeats included."""
    t = store.query_arrow("SELECT node, kind, seq FROM ingested_batches")
    return list(zip(*(t.column(c).to_pylist() for c in ("node", "kind", "seq")), strict=True))
