"""A fixture GPU node and the real agent process on it, for the agent tests and the agent benchmark.

`FixtureNode` lays down a typical node's sysfs/procfs (tests/collectors/trees.py), writes a goodput
config whose `[agent]` points the real collectors at those trees and at the fake NVML module, and runs
`python -m goodput.cli agent` as a child process, exactly as systemd would (SIGTERM to stop it, SIGKILL
to crash it). `read_stream` consumes the agent's topics with an independent consumer group.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from collections import defaultdict
from collections.abc import Mapping
from pathlib import Path

import orjson

from contracts.schema import KINDS, topic_for
from tests.collectors.trees import write_typical_node
from tests.fixtures.ports import free_port
from tests.messages import envelope_dict
from transport.kafka import KafkaConsumerTransport, ensure_topics

ROOT = Path(__file__).resolve().parents[2]
NODE = "gpu-t-001"
NODE_KINDS = ("gpu", "nic", "storage")
PYNVML_SHIM = Path(__file__).resolve().parent / "pynvml_shim"


def agent_pythonpath() -> str:
    """PYTHONPATH of an agent process under test: the fake NVML as `pynvml` ahead of nvidia-ml-py,
    then this checkout."""
    return os.pathsep.join((str(PYNVML_SHIM), str(ROOT)))


def toml_table(keys: Mapping[str, object]) -> str:
    """`key = value` lines of a TOML table (strings, numbers and booleans: their JSON form is TOML)."""
    return "\n".join(f"{k} = {json.dumps(v)}" for k, v in keys.items())


class FixtureNode:
    def __init__(
        self,
        root: Path,
        bootstrap: str,
        *,
        interval_s: float = 0.25,
        extra_agent: str = "",
        gpus: int = 8,
        ports: int = 8,
        kafka: Mapping[str, object] | None = None,
        env: Mapping[str, str] | None = None,
        extra_tables: str = "",
        create_topics: bool = True,
        run_as: tuple[str, ...] = (),
    ) -> None:
        """`kafka` adds to or overrides the `[transport.kafka]` keys, `env` to the agent's environment;
        `extra_tables` is appended to the config (e.g. `[store]`, for a loader reading the same file).
        Without `create_topics` the caller creates the topics (a secured broker needs an admin for it).
        `run_as` prefixes the agent's command line (e.g. setpriv, to drop to an unprivileged user)."""
        self.root = root
        self.bootstrap = bootstrap
        self.env = dict(env or {})
        self.run_as = run_as
        self.prefix = f"t{uuid.uuid4().hex[:10]}"
        self.metrics_port = free_port()
        self.state_dir = root / "state"
        self.config = root / "goodput.toml"
        self.gpus = gpus
        self.ports = ports
        self.proc: subprocess.Popen | None = None
        self.log_path = root / "agent.log"
        write_typical_node(root / "node", ports=ports)
        self.config.write_text(f"""
[cluster]
name = "agent-test"
[gpu_types.H100]
price_per_gpu_hour = 2.5
[network_tiers.ib]
link_gbps = 400.0
[[pools]]
name = "core"
class = "core"
gpu_type = "H100"
network_tier = "ib"
nodes = ["gpu-t-[001-004]"]
storage_ceiling_bytes_per_s = 1.0e10
[transport]
kind = "kafka"
topic_prefix = "{self.prefix}"
[transport.kafka]
{toml_table({"bootstrap": bootstrap, "reconnect_backoff_max_ms": 1000, **(kafka or {})})}
[agent]
node = "{NODE}"
state_dir = "{self.state_dir}"
metrics_address = "127.0.0.1:{self.metrics_port}"
step_address = "127.0.0.1:{free_port(socket.SOCK_DGRAM)}"
collectors = ["nvml", "rdma", "diskstats", "psi", "nfs", "lustre", "steps"]
sys_root = "{root / "node" / "sys"}"
proc_root = "{root / "node" / "proc"}"
lustre_roots = ["{root / "node" / "lustre"}"]
log_format = "json"
shutdown_timeout_s = 10.0
{extra_agent}
[agent.intervals]
gpu = {interval_s}
nic = {interval_s}
storage = {interval_s}
{extra_tables}
""")
        if create_topics:
            ensure_topics(bootstrap, partitions=1, prefix=self.prefix)

    # ------------------------------------------------------------ the agent process

    def start(self) -> None:
        env = dict(os.environ, PYTHONPATH=agent_pythonpath(), GOODPUT_FAKE_GPUS=str(self.gpus), **self.env)
        env.pop("GOODPUT_KAFKA_BOOTSTRAP", None)
        self._log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [*self.run_as, sys.executable, "-m", "goodput.cli", "agent", "--config", str(self.config)],
            cwd=ROOT,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(f"agent exited with {self.proc.returncode}:\n{self.log_tail()}")
            try:
                self.scrape()
                return
            except OSError:
                time.sleep(0.2)
        raise AssertionError(f"agent /metrics not up after 30 s:\n{self.log_tail()}")

    def stop(self, sig: int = signal.SIGTERM, timeout_s: float = 30.0) -> int:
        assert self.proc is not None
        self.proc.send_signal(sig)
        rc = self.proc.wait(timeout_s)
        self._log.close()
        self.proc = None
        return rc

    def log_tail(self, n: int = 30) -> str:
        return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-n:])

    def log_records(self) -> list[dict]:
        out = []
        for line in self.log_path.read_text(errors="replace").splitlines():
            try:
                out.append(orjson.loads(line))
            except orjson.JSONDecodeError:
                pass
        return out

    # ------------------------------------------------------------ observing it

    def scrape(self) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=5) as r:
            return r.read().decode()

    def metric(self, name: str, **labels: str) -> float | None:
        """One sample's value from a fresh scrape (None when absent)."""
        from prometheus_client.parser import text_string_to_metric_families

        for fam in text_string_to_metric_families(self.scrape()):
            for s in fam.samples:
                if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                    return s.value
        return None

    def wait_for(self, predicate, timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if predicate():
                return
            time.sleep(0.25)
        raise AssertionError(f"timed out after {timeout_s} s waiting for {what}:\n{self.log_tail()}")

    def spooled(self) -> int:
        """Batches left in the agent's spool on disk (read while the agent is stopped)."""
        from agents.spool import Spool

        with Spool(self.state_dir / "spool") as spool:
            return spool.stats.batches

    def next_seqs(self) -> dict[str, int]:
        """The agent's persisted next seq per kind (all 0 before its first batch)."""
        path = self.state_dir / "seq.json"
        if not path.exists():
            return {k: 0 for k in KINDS}
        return orjson.loads(path.read_bytes())["next"]

    def read_stream(self, kinds=NODE_KINDS, timeout_s: float = 60.0) -> dict[str, list[dict]]:
        """Every envelope in the agent's topics, per kind, in partition order (a fresh group reads all).
        Reads until each kind has reached the seq the agent's state says comes next."""
        want = self.next_seqs()
        consumer = KafkaConsumerTransport(
            self.bootstrap,
            [topic_for(k, self.prefix) for k in kinds],
            group_id=f"reader-{uuid.uuid4().hex[:8]}",
        )
        out: dict[str, list[dict]] = defaultdict(list)
        try:
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline:
                for rec in consumer.poll(max_records=2000, timeout_s=0.5):
                    out[rec.topic.rsplit(".", 1)[1]].append(envelope_dict(rec.value))
                if all(max((e["seq"] for e in out[k]), default=-1) >= want[k] - 1 for k in kinds):
                    break
        finally:
            consumer.close()
        return dict(out)


def seqs(envelopes: list[dict]) -> list[int]:
    return [e["seq"] for e in envelopes]
