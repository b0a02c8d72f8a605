"""What the node agent costs its node: CPU % of one core and resident memory, at 1 Hz, with 8 GPUs
(fake NVML, so NVML's own time inside the driver is not counted) and 8 RDMA ports, 4 disks, PSI, an
NFS mount and a Lustre client (fixture trees), sending to a real Kafka broker on loopback.

The agent runs as its own process, exactly as systemd starts it; CPU is its utime+stime from
/proc/<pid>/stat over the measuring window (after a warm-up), memory its VmRSS and VmHWM. Baseline, in
the same run: a Python process that only imports what the agent imports, so the figure separates
"Python + kafka-python + prometheus-client loaded" from what the agent does with them.

The agent runs once per message schema version (1: JSON, 2: columnar binary), and the encoding alone is
timed for each in this process.

Run: .venv/bin/python bench/bench_agent.py [seconds]   (needs `bash .ci/install.d/kafka.sh` first)
Goal (issue 4): < 1 % of one core, < 60 MB RSS.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from contracts.envelope import VERSIONS  # noqa: E402
from tests.agents.harness import PYNVML_SHIM, FixtureNode, agent_pythonpath  # noqa: E402
from tests.fixtures import kafka_dist  # noqa: E402
from tests.fixtures.kafka import KafkaBroker  # noqa: E402
from tests.fixtures.server_process import free_ports  # noqa: E402

TICKS_PER_S = os.sysconf("SC_CLK_TCK")
IMPORTS = (
    "import agents.daemon, agents.sources, agents.metrics, transport.kafka, kafka, "
    "prometheus_client, collectors.nvml, collectors.rdma, collectors.lustre, collectors.nfs, "
    "collectors.diskstats, collectors.psi, collectors.steps, pynvml, time; "
    "time.sleep(30)"
)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS_PER_S


def memory_kib(pid: int) -> dict[str, int]:
    out = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out[key] = int(value.split()[0])
    return out


def baseline_rss_kib() -> int:
    env = dict(os.environ, PYTHONPATH=agent_pythonpath())
    proc = subprocess.Popen([sys.executable, "-c", IMPORTS], cwd=ROOT, env=env)
    try:
        time.sleep(8)
        return memory_kib(proc.pid)["VmRSS"]
    finally:
        proc.kill()
        proc.wait()


def collectors_alone_pct(config: Path, ticks: int = 200) -> float:
    """CPU % of one core at 1 Hz of the same collectors on the same fixture node, in this process:
    what the agent costs beyond them is its own machinery (batching, spool, Kafka client, HTTP)."""
    from agents.config import load_agent
    from agents.sources import build_collectors

    os.environ.setdefault("GOODPUT_FAKE_GPUS", "8")
    sys.path.insert(0, str(PYNVML_SHIM))  # this process's `import pynvml` gets the fake too
    collectors, _ = build_collectors(load_agent(config))
    now = 1_700_000_000_000
    for c in collectors:
        c.collect(now)
    start = time.process_time()
    for t in range(1, ticks + 1):
        for c in collectors:
            c.collect(now + 1000 * t)
    pct = (time.process_time() - start) / ticks * 100
    for c in collectors:
        getattr(c, "close", lambda: None)()
    return pct


def encoding_alone_pct(config: Path, version: int, ticks: int = 200) -> tuple[float, int]:
    """CPU % of one core at 1 Hz to encode one tick's batches of every node kind (rows from the same
    collectors on the same fixture node) in message schema `version`, in this process; and the bytes
    a tick's batches take."""
    from agents.config import load_agent
    from agents.daemon import columns
    from agents.sources import build_collectors
    from contracts.envelope import encode_batch

    os.environ.setdefault("GOODPUT_FAKE_GPUS", "8")
    sys.path.insert(0, str(PYNVML_SHIM))
    collectors, _ = build_collectors(load_agent(config))
    now = 1_700_000_000_000
    by_kind: dict[str, list] = {}
    for t in (0, 1):  # the second tick has the rates
        by_kind = {}
        for c in collectors:
            by_kind.setdefault(c.kind, []).extend(c.collect(now + 1000 * t))
    batches = {kind: columns(kind, rows) for kind, rows in by_kind.items() if rows}
    size = 0
    start = time.process_time()
    for t in range(ticks):
        size = 0
        for kind, cols in batches.items():
            size += len(
                encode_batch(
                    kind=kind,
                    cluster="c",
                    node="n",
                    seq=t,
                    sent_ms=now,
                    columns=cols,
                    agent="a",
                    version=version,
                )
            )
    pct = (time.process_time() - start) / ticks * 100
    for c in collectors:
        getattr(c, "close", lambda: None)()
    return pct, size


def main(seconds: float = 60.0) -> None:
    if not kafka_dist.is_installed():
        sys.exit("Kafka jars missing: run `bash .ci/install.d/kafka.sh` first")
    with tempfile.TemporaryDirectory() as tmp:
        port, controller, ssl_port, sasl_port = free_ports(4)
        broker = KafkaBroker(
            libs=kafka_dist.libs_dir(),
            workdir=Path(tmp) / "kafka",
            port=port,
            controller_port=controller,
            ssl_port=ssl_port,
            sasl_ssl_port=sasl_port,
            java=shutil.which("java"),
        )
        broker.workdir.mkdir()
        broker.configure()
        broker.start()
        try:
            runs = {v: run_agent(Path(tmp) / f"node-v{v}", broker.bootstrap, seconds, v) for v in VERSIONS}
            base = baseline_rss_kib()
            config = runs[VERSIONS[0]]["config"]
            alone = collectors_alone_pct(config)
            encoding = {v: encoding_alone_pct(config, v) for v in VERSIONS}
        finally:
            broker.stop()
    for v, run in runs.items():
        report(v, run, seconds, alone, base)
    print(
        "\nencoding alone, one tick's gpu + nic + storage batches, in this process "
        "(CPU % of one core at 1 Hz):"
    )
    for v, (pct, size) in encoding.items():
        print(f"  message schema version {v}: {pct:.3f} %, {size:,} bytes per tick")


def run_agent(root: Path, bootstrap: str, seconds: float, version: int) -> dict:
    """The agent process sending `version` for `seconds` after a warm-up: CPU, memory, batches."""
    node = FixtureNode(root, bootstrap, interval_s=1.0, extra_agent=f"message_version = {version}")
    node.start()
    time.sleep(10)  # warm-up: imports done, first ticks, producer connected
    pid = node.proc.pid
    c0, t0, sent0 = cpu_seconds(pid), time.monotonic(), node.next_seqs()
    time.sleep(seconds)
    c1, t1, sent1 = cpu_seconds(pid), time.monotonic(), node.next_seqs()
    mem = memory_kib(pid)
    spooled = node.metric("goodput_agent_spool_batches")
    node.stop()
    return {
        "cpu_pct": (c1 - c0) / (t1 - t0) * 100,
        "batches": sum(sent1[k] - sent0[k] for k in sent1),
        "per_s": sum(sent1[k] - sent0[k] for k in sent1) / (t1 - t0),
        "mem": mem,
        "spooled": spooled,
        "config": node.config,
    }


def report(version: int, run: dict, seconds: float, alone: float, base: int) -> None:
    cpu_pct, batches, mem, spooled = run["cpu_pct"], run["batches"], run["mem"], run["spooled"]
    print(
        "agent, 8 GPUs + 8 RDMA ports + 4 disks + PSI + NFS + Lustre (8 OSTs), 1 Hz, "
        f"real broker, {seconds:.0f} s, message schema version {version}"
    )
    print(
        f"  batches produced            {batches} ({run['per_s']:.1f}/s), "
        f"{spooled:.0f} in the spool at the end"
    )
    print(f"  CPU                         {cpu_pct:.2f} % of one core   (goal < 1 %)")
    print(
        f"    of which the collectors   {alone:.2f} %  (same fixture, timed alone in this process); "
        f"the agent's own machinery {cpu_pct - alone:.2f} %"
    )
    print(
        f"  RSS now / peak              {mem['VmRSS'] / 1024:.1f} MiB / {mem['VmHWM'] / 1024:.1f} MiB"
        "   (goal < 60 MB)"
    )
    print(
        f"  baseline: same imports, idle {base / 1024:.1f} MiB  -> the agent's own working set "
        f"{(mem['VmRSS'] - base) / 1024:.1f} MiB"
    )


if __name__ == "__main__":
    main(float(sys.argv[1]) if len(sys.argv) > 1 else 60.0)
