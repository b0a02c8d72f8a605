"""The agent's parts without a broker: config, sequence state, batching, the sender's bookkeeping."""

from __future__ import annotations

import logging
import re
import time

import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from agents.config import agent_config
from agents.daemon import columns
from agents.metrics import AgentMetrics
from agents.sender import SpoolSender
from agents.seqstate import AgentStateError, SeqState
from agents.spool import Spool
from contracts.config import AgentConfig, ConfigError, apply_env, parse, parse_address
from transport.base import TransportError
from transport.kafka import KafkaSendError

# ------------------------------------------------------------------ config


def parse_agent(table: dict, env: dict, node: str | None = None) -> AgentConfig:
    """The agent's settings from an `[agent]` table, as `goodput agent` settles them."""
    return agent_config(apply_env(parse({"agent": table}), env), node)


def test_agent_config_defaults_and_precedence():
    cfg = parse_agent({}, env={}, node=None)
    assert cfg.interval_s("gpu") == 1.0 and cfg.interval_s("job") == 5.0
    assert "nvml" in cfg.collectors and "slurm" not in cfg.collectors
    assert parse_agent({"node": "from-file"}, env={"GOODPUT_NODE": "from-env"}).node == "from-env"
    assert parse_agent({"node": "from-file"}, env={"GOODPUT_NODE": "from-env"}, node="flag").node == "flag"
    assert parse_agent({"node": "from-file"}, env={}).node == "from-file"
    cfg = parse_agent({"intervals": {"gpu": 0.5}, "spool_fsync": "always"}, env={})
    assert cfg.interval_s("gpu") == 0.5 and cfg.interval_s("nic") == 1.0 and cfg.spool_fsync == "always"


def test_agent_intervals_are_the_signal_kinds():
    from contracts.config import AgentIntervals
    from contracts.schema import KINDS

    assert AgentIntervals.__struct_fields__ == tuple(KINDS)


@pytest.mark.parametrize(
    "table, message",
    [
        ({"colectors": ["nvml"]}, "[agent].colectors: unknown key; did you mean 'collectors'?"),
        ({"collectors": ["nvml", "dcgm"]}, "[agent].collectors[1]: invalid enum value 'dcgm'"),
        ({"intervals": {"gpus": 1}}, "[agent.intervals].gpus: unknown key; did you mean 'gpu'?"),
        ({"intervals": {"gpu": 0}}, "[agent.intervals].gpu: expected float >= 0.05"),
        ({"spool_fsync": "sometimes"}, "spool_fsync"),
        ({"spool_fsync": 0}, "spool_fsync"),
        ({"spool_max_bytes": "1G"}, "spool_max_bytes: expected int"),
        ({"metrics_address": "9477"}, "expected host:port"),
        ({"collectors": ["jobfile"]}, "needs job_file"),
        ({"log_format": "xml"}, "log_format"),
        ({"nvml_module": "pynvml"}, "[agent].nvml_module: unknown key"),
        ({"disk_exclude": "("}, "disk_exclude: not a regular expression"),
    ],
)
def test_agent_config_refuses_mistakes_by_name(table, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        parse_agent(table, env={})


def test_parse_address():
    assert parse_address(":9477", "x") == ("0.0.0.0", 9477)
    assert parse_address("[::1]:9477", "x") == ("::1", 9477)


# ------------------------------------------------------------------ sequence numbers


def test_seq_state_survives_restarts_and_refuses_another_nodes_file(tmp_path):
    path = tmp_path / "seq.json"
    s = SeqState(path, "n1", boot_id="boot-1")
    assert [s.reserve("gpu") for _ in range(3)] == [0, 1, 2]
    assert s.reserve("nic") == 0
    again = SeqState(path, "n1", boot_id="boot-1")  # killed, restarted on the same boot: exact
    assert again.reserve("gpu") == 3 and again.reserve("nic") == 1
    again.floor("gpu", 10)
    assert SeqState(path, "n1", boot_id="boot-1").reserve("gpu") == 10
    with pytest.raises(AgentStateError, match="belongs to node 'n1'"):
        SeqState(path, "n2", boot_id="boot-1")


def test_seq_state_after_power_loss_leaves_a_gap_never_a_reuse(tmp_path):
    path = tmp_path / "seq.json"
    s = SeqState(path, "n1", block=100, boot_id="boot-1")
    for _ in range(150):
        s.reserve("gpu")
    stale = path.read_bytes()
    for _ in range(30):
        s.reserve("gpu")  # 180 used; say the page cache holding these writes was lost with the power
    path.write_bytes(stale)
    after = SeqState(path, "n1", block=100, boot_id="boot-2")  # unclean stop, then a reboot
    first = after.reserve("gpu")
    assert 180 <= first <= 180 + 100, "resumes at the durable ceiling: above every seq used, gap <= block"
    after.close()
    assert SeqState(path, "n1", boot_id="boot-3").reserve("gpu") == first + 1, "a clean stop is trusted"


def test_seq_state_torn_exact_file_falls_back_to_the_ceiling_and_both_unreadable_is_an_error(tmp_path):
    path = tmp_path / "seq.json"
    s = SeqState(path, "n1", boot_id="b")
    for _ in range(5):
        s.reserve("gpu")
    path.write_text('{"version": 1, "next": {"gp')
    assert SeqState(path, "n1", boot_id="b").reserve("gpu") >= 5
    (tmp_path / "seq.ceiling.json").write_text("{not json")
    with pytest.raises(AgentStateError, match="max\\(seq\\) FROM ingested_batches"):
        SeqState(path, "n1", boot_id="b")


# ------------------------------------------------------------------ batching


def test_columns_leave_unmeasured_fields_out_and_null_where_a_row_lacks_them():
    rows = [
        {"ts_ms": 1, "source": "disk", "device": "nvme0n1", "read_bytes_per_s": 5.0},
        {"ts_ms": 1, "source": "psi", "device": "io", "psi_some_pct": 3.0},
    ]
    cols = columns("storage", rows)
    assert list(cols) == ["ts_ms", "source", "device", "read_bytes_per_s", "psi_some_pct"]  # schema order
    assert cols["read_bytes_per_s"] == [5.0, None] and cols["psi_some_pct"] == [None, 3.0]
    assert "write_bytes_per_s" not in cols


# ------------------------------------------------------------------ sender bookkeeping


class ScriptedProducer:
    """Stands in for Kafka only where a real broker cannot be made to fail on cue: it accepts sends
    and, at flush, fails the records whose value is in `fail` (as KafkaSendError does)."""

    def __init__(
        self, fail: set[bytes] = frozenset(), refuse_after: int | None = None, hold: set[bytes] = frozenset()
    ):
        self.fail, self.refuse_after, self.hold = set(fail), refuse_after, set(hold)
        self.sent: list[bytes] = []
        self._queued: list = []

    @property
    def pending_bytes(self):
        return sum(len(r[2]) for r in self._queued)

    def send(self, topic, key, value, on_delivered=None):
        if self.refuse_after is not None and len(self._queued) >= self.refuse_after:
            raise KafkaSendError("max_pending_bytes reached", [(topic, key, value)])
        self._queued.append((topic, key, value, on_delivered))

    def flush(self, timeout_s=None):
        """Delivers or fails what was sent, except the values in `hold`: those stay pending (a broker
        that went away mid-round), and flush then times out as the real one does."""
        queued = [r for r in self._queued if r[2] not in self.hold]
        self._queued = [r for r in self._queued if r[2] in self.hold]
        for _, _, v, on_delivered in queued:
            if v not in self.fail:
                self.sent.append(v)
                on_delivered()
        failed = [r[:3] for r in queued if r[2] in self.fail]
        if failed:
            raise KafkaSendError(f"{len(failed)} failed", failed)
        if self._queued:
            time.sleep(timeout_s or 0)
            raise TransportError(f"{len(self._queued)} records still unacknowledged")

    def close(self, timeout_s=None):
        pass


class Recorder:
    """The sender's metrics sink, counting what it is told."""

    def __init__(self):
        self.n_delivered, self.n_replayed, self.n_failed = 0, 0, 0

    def delivered(self, entries, replayed, now_s):
        self.n_delivered += len(entries)
        self.n_replayed += replayed

    def failed(self, entries):
        self.n_failed += len(entries)


def _sender(tmp_path, producer, preload: int = 0):
    spool = Spool(tmp_path / "spool", fsync="never")
    for i in range(preload):
        spool.append("goodput.gpu", b"n", f"old-{i}".encode())
    rec = Recorder()
    sender = SpoolSender(spool, lambda: producer, rec, window=100)
    sender._producer = producer
    return sender, spool, rec


def test_a_failed_batch_stops_the_ack_there_and_is_sent_again_in_order(tmp_path):
    producer = ScriptedProducer(fail={b"v-3"})
    sender, spool, rec = _sender(tmp_path, producer)
    for i in range(6):
        spool.append("goodput.gpu", b"n", f"v-{i}".encode())
    entries = list(spool.replay())
    assert sender.send_window(entries) == 3
    assert [e.value for e in spool.replay()] == [b"v-3", b"v-4", b"v-5"], (
        "acked exactly the prefix before v-3"
    )
    assert rec.n_delivered == 5 and rec.n_failed == 1
    producer.fail.clear()
    assert sender.send_window(list(spool.replay())) == 3
    assert len(spool) == 0 and rec.n_replayed == 3, "the retried batches count as replayed"
    assert producer.sent == [b"v-0", b"v-1", b"v-2", b"v-4", b"v-5", b"v-3", b"v-4", b"v-5"], (
        "within one topic the order wins: what followed the failed batch goes again after it"
    )


def test_delivered_batches_leave_the_spool_while_the_rest_of_the_round_is_in_flight(tmp_path):
    """The "spool gauge at 99 for 2 minutes after the broker came back" report: a round was
    acknowledged only once all of it had settled, so while one batch stayed in flight (up to the
    producer's 120 s delivery timeout) the delivered ones counted as waiting, and a stop or a crash
    then sent them again at the next start."""
    producer = ScriptedProducer(hold={b"nic-0"})
    spool = Spool(tmp_path / "spool", fsync="never")
    spool.append("goodput.nic", b"n", b"nic-0")
    for i in range(98):
        spool.append("goodput.gpu", b"n", f"gpu-{i}".encode())
    sender = SpoolSender(spool, lambda: producer, Recorder(), flush_step_s=0.05)
    sender.start()
    try:
        deadline = time.monotonic() + 10
        while len(producer.sent) < 98 and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)
        assert spool.stats.batches == 1, "only the batch in flight is waiting"
        with Spool(tmp_path / "spool") as after_a_crash:
            assert [e.value for e in after_a_crash.replay()] == [b"nic-0"], "a restart sends only it"
    finally:
        sender.stop(0.1)
    assert [e.value for e in spool.replay()] == [b"nic-0"]


def test_a_failed_batch_of_one_topic_leaves_the_other_topics_deliveries_acknowledged(tmp_path):
    producer = ScriptedProducer(fail={b"nic-1"})
    sender, spool, rec = _sender(tmp_path, producer)
    for i in range(3):
        spool.append("goodput.gpu", b"n", f"gpu-{i}".encode())
        spool.append("goodput.nic", b"n", f"nic-{i}".encode())
    assert sender.send_window(list(spool.replay())) == 3  # gpu-0 nic-0 gpu-1, then nic-1 failed
    waiting = [b"nic-1", b"nic-2"]
    assert [e.value for e in spool.replay()] == waiting and spool.stats.batches == 2
    with Spool(tmp_path / "spool") as after_a_crash:
        assert [e.value for e in after_a_crash.replay()] == waiting, "the acknowledgements are on disk"
        assert after_a_crash.stats.batches == 2
    producer.fail.clear()
    assert sender.send_window(list(spool.replay())) == 2
    assert producer.sent.count(b"gpu-2") == 1 and len(spool) == 0


def test_a_refused_send_leaves_the_rest_for_the_next_window(tmp_path):
    producer = ScriptedProducer(refuse_after=2)
    sender, spool, rec = _sender(tmp_path, producer, preload=5)
    assert rec.n_replayed == 0
    assert sender.send_window(list(spool.replay())) == 2
    assert len(spool) == 3 and rec.n_replayed == 2, "batches present at start-up count as replayed"


def test_a_producer_that_cannot_start_is_retried_without_losing_batches(tmp_path):
    attempts = []

    def make():
        attempts.append(1)
        if len(attempts) < 3:
            raise TransportError("no broker answers")
        return ScriptedProducer()

    spool = Spool(tmp_path / "spool", fsync="never")
    spool.append("goodput.gpu", b"n", b"v")
    sender = SpoolSender(spool, make, Recorder(), backoff_s=0.01)
    sender.start()
    deadline = time.monotonic() + 10
    while len(spool) and time.monotonic() < deadline:
        time.sleep(0.01)
    sender.stop(1.0)
    assert len(attempts) == 3 and len(spool) == 0


# ------------------------------------------------------------------ exporter


def test_samples_exported_with_labels_scale_and_vanish_when_forgotten():
    m = AgentMetrics("gpu-a-001")
    m.samples.update(
        "nvml",
        "gpu",
        [
            {
                "ts_ms": 1,
                "gpu": 0,
                "uuid": "GPU-x",
                "model": "H100",
                "sm_clock_mhz": 1980.0,
                "energy_j": 12.5,
                "util_gpu_pct": None,
            }
        ],
    )
    m.collector_ran("nvml", True, 0.002, 1)
    fams = {f.name: f for f in text_string_to_metric_families(generate_latest(m.registry).decode())}
    clock = fams["goodput_gpu_sm_clock_hertz"].samples[0]
    assert clock.value == 1.98e9
    assert clock.labels == {
        "gpu": "0",
        "UUID": "GPU-x",
        "modelName": "H100",
        "pci_bus_id": "",
        "hpc_job": "",
        "Hostname": "gpu-a-001",
    }
    assert fams["goodput_gpu_energy_joules"].samples[0].name == "goodput_gpu_energy_joules_total"
    assert "goodput_gpu_utilization_ratio" not in fams, "absent stays absent, never 0"
    m.samples.forget("nvml")
    fams = {f.name for f in text_string_to_metric_families(generate_latest(m.registry).decode())}
    assert "goodput_gpu_sm_clock_hertz" not in fams and "goodput_collector_success" in fams


def test_xids_count_by_code_lost_gpus_and_port_state_are_series():
    """An XID is a counter per code that a scrape cannot miss; a lost GPU and a port not ACTIVE are
    gauges an alert can test (contracts.catalog.AGENT_DERIVED_METRICS, the schema's `lost` field)."""
    m = AgentMetrics("gpu-a-001")
    gpu = {"ts_ms": 1, "gpu": 2, "uuid": "GPU-y"}
    for tick in ({"xid": 79}, {}, {"xid": 79, "lost": True}, {"xid": 13}):
        m.samples.update("nvml", "gpu", [{**gpu, **tick}])
    m.samples.update(
        "rdma",
        "nic",
        [
            {"ts_ms": 1, "device": "mlx5_0", "port": 1, "state": "ACTIVE"},
            {"ts_ms": 1, "device": "mlx5_1", "port": 1, "state": "DOWN"},
        ],
    )
    text = generate_latest(m.registry).decode()
    got = {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }
    xid = {"gpu": "2", "UUID": "GPU-y", "Hostname": "gpu-a-001"}
    assert got[("goodput_gpu_xid_errors_total", tuple(sorted({**xid, "xid": "79"}.items())))] == 2
    assert got[("goodput_gpu_xid_errors_total", tuple(sorted({**xid, "xid": "13"}.items())))] == 1
    ports = {dict(k)["device"]: v for (n, k), v in got.items() if n == "goodput_nic_port_active"}
    assert ports == {"mlx5_0": 1.0, "mlx5_1": 0.0}
    assert [v for (n, _), v in got.items() if n == "goodput_gpu_lost"] == [0.0]  # the latest tick: not lost
    m.samples.update("nvml", "gpu", [{**gpu, "lost": True}])
    fams = {f.name: f for f in text_string_to_metric_families(generate_latest(m.registry).decode())}
    assert [s.value for s in fams["goodput_gpu_lost"].samples] == [1.0]


def test_the_example_configs_agent_table_states_the_defaults():
    import tomllib

    from contracts.config import EXAMPLE_CONFIG

    table = tomllib.loads(EXAMPLE_CONFIG.read_text())["agent"]
    assert parse_agent(table, env={}, node="n") == AgentConfig(node="n")


def test_the_agent_loads_no_columnar_stack():
    """The agent runs on every GPU node: Arrow, Polars, NumPy and chDB (~60 MB) stay out of it."""
    import subprocess
    import sys

    code = (
        "import sys, goodput.cli, agents.daemon, agents.sources, agents.metrics; "
        "print(sorted(m for m in ('pyarrow', 'polars', 'numpy', 'chdb', 'pandas') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


class SteadyGpus:
    """A stand-in collector (the agent's side of the interface is what is under test here)."""

    name, kind = "steady", "gpu"

    def collect(self, now_ms):
        return [{"ts_ms": now_ms, "gpu": i, "uuid": f"GPU-{i}", "util_gpu_pct": 50.0} for i in range(8)]


def test_a_full_spool_drops_the_oldest_and_counts_it_while_kafka_is_unreachable(tmp_path):
    from agents.daemon import Agent

    def no_broker():
        raise TransportError("no broker answers")

    cfg = parse_agent(
        {
            "state_dir": str(tmp_path),
            "metrics_address": "",
            "spool_max_bytes": 64 * 1024,
            "spool_segment_bytes": 16 * 1024,
        },
        env={},
        node="n1",
    )
    agent = Agent(
        cfg, cluster="c", topic_prefix="goodput", collectors=[SteadyGpus()], make_producer=no_broker
    )
    try:
        for t in range(400):
            agent.tick("gpu", 1_700_000_000_000 + 1000 * t)
        agent._report_spool()
        stats = agent.spool.stats
        assert stats.bytes <= 64 * 1024 and stats.dropped > 0
        fams = {
            f.name: f
            for f in text_string_to_metric_families(generate_latest(agent.metrics.registry).decode())
        }
        assert fams["goodput_agent_spool_dropped_batches"].samples[0].value == stats.dropped
        assert fams["goodput_agent_spool_batches"].samples[0].value == stats.batches == 400 - stats.dropped
        newest = [e.value for e in agent.spool.replay()][-1]
        assert b'"seq":399' in newest, "the newest batches are the ones kept"
    finally:
        agent.spool.close()


@pytest.mark.parametrize("version", [1, 2])
def test_a_lost_seq_state_restarts_above_what_the_spool_still_holds(tmp_path, version):
    """seq.json and its ceiling gone (a state directory restored from an old copy, say): the agent
    reads the highest seq per kind from the spooled batches, in either message version, so it never
    sends a seq again that the loader would refuse as a duplicate."""
    from agents.daemon import Agent

    def no_broker():
        raise TransportError("no broker answers")

    cfg = parse_agent(
        {"state_dir": str(tmp_path), "metrics_address": "", "message_version": version}, env={}, node="n1"
    )

    def agent() -> Agent:
        return Agent(
            cfg, cluster="c", topic_prefix="goodput", collectors=[SteadyGpus()], make_producer=no_broker
        )

    first = agent()
    for t in range(5):
        first.tick("gpu", 1_700_000_000_000 + 1000 * t)
    first.spool.close()
    for state in tmp_path.glob("seq*.json"):
        state.unlink()
    second = agent()
    try:
        assert second.seqs.reserve("gpu") == 5
        assert second.seqs.reserve("nic") == 0
    finally:
        second.spool.close()


def test_outage_log_warns_once_reminds_rarely_and_says_when_it_ended(caplog):
    from agents.outage import OutageLog

    now = [0.0]
    outage = OutageLog(remind_s=300.0, clock=lambda: now[0])
    outage.delivered(0)  # no outage going on: nothing to say
    with caplog.at_level(logging.INFO, logger="agents.sender"):
        for t in range(0, 700, 5):  # a failed round every 5 s for 700 s
            now[0] = float(t)
            outage.failed("connection refused", waiting=t)
        now[0] = 701.0
        outage.delivered(waiting=140)
    lines = [(r.levelname, r.__dict__["outage"]) for r in caplog.records]
    assert lines == [
        ("WARNING", "started"),
        ("WARNING", "ongoing"),
        ("WARNING", "ongoing"),
        ("INFO", "ended"),
    ], "one warning, a reminder every 300 s, one line at the end"
    assert "connection refused" in caplog.records[0].getMessage()
    assert "701 s" in caplog.records[-1].getMessage() and not outage.failing


def _samples(m: AgentMetrics, name: str) -> dict[tuple, float]:
    """One family's samples: sorted label items -> value."""
    return {
        tuple(sorted(s.labels.items())): s.value
        for f in text_string_to_metric_families(generate_latest(m.registry).decode())
        for s in f.samples
        if s.name == name
    }


def _port(sys_root, counters: dict[str, int]) -> None:
    port = sys_root / "class" / "infiniband" / "mlx5_0" / "ports" / "1"
    (port / "counters").mkdir(parents=True, exist_ok=True)
    for name, text in (("state", "4: ACTIVE"), ("rate", "400 Gb/sec (4X NDR)"), ("link_layer", "InfiniBand")):
        (port / name).write_text(text + "\n")
    for name, value in counters.items():
        (port / "counters" / name).write_text(f"{value}\n")


def test_counters_are_monotonic_totals_across_wraps_and_resets(tmp_path):
    """The real RDMA collector reads a 32-bit counter that wraps and then is cleared, and a 64-bit one
    that is cleared: each total is the sum of the true advances, and never decreases."""
    from collectors.rdma import RdmaCollector

    wait = [4294967000, 704, 1704, 5, 1005]  # +1000 across the wrap, +1000, reset (counts 5), +1000
    data = [100, 350, 600, 10, 60]  # 4-octet words: +250, +250, reset (counts 10), +50
    want_wait = [None, 1000.0, 2000.0, 2005.0, 3005.0]
    want_bytes = [None, 1000.0, 2000.0, 2040.0, 2240.0]
    c = RdmaCollector(tmp_path)
    m = AgentMetrics("gpu-a-001")
    port = (("device", "mlx5_0"), ("port", "1"))
    for tick, (w, d) in enumerate(zip(wait, data, strict=True)):
        _port(tmp_path, {"port_xmit_wait": w, "port_xmit_data": d})
        m.samples.update("rdma", "nic", c.collect(1_000_000 + tick * 1000))
        assert _samples(m, "goodput_nic_transmit_wait_ticks_total").get(port) == want_wait[tick], tick
        assert _samples(m, "goodput_nic_transmit_bytes_total").get(port) == want_bytes[tick], tick
    assert _samples(m, "goodput_nic_info") == {(*port[:1], ("link_layer", "InfiniBand"), port[1]): 1.0}


def test_a_device_counter_is_kept_monotonic_across_its_reset_and_ratios_are_0_to_1():
    m = AgentMetrics("gpu-a-001")
    gpu = {"gpu": 0, "uuid": "GPU-x"}
    energy = []
    for t, joules in enumerate((500.0, 800.0, 20.0, 70.0)):  # a driver reload between 800 and 20
        m.samples.update(
            "nvml", "gpu", [{**gpu, "ts_ms": 1000 * t, "energy_j": joules, "util_gpu_pct": 37.0}]
        )
        energy += list(_samples(m, "goodput_gpu_energy_joules_total").values())
    assert energy == [500.0, 800.0, 820.0, 870.0]
    assert list(_samples(m, "goodput_gpu_utilization_ratio").values()) == [0.37]


def test_clock_events_are_one_series_per_reason_not_a_bitmask():
    from contracts.catalog import CLOCK_EVENT_REASONS

    m = AgentMetrics("gpu-a-001")
    m.samples.update("nvml", "gpu", [{"ts_ms": 1, "gpu": 3, "uuid": "GPU-z", "throttle_reasons": 0x44}])
    got = {dict(k)["reason"]: v for k, v in _samples(m, "goodput_gpu_clock_event_active").items()}
    assert set(got) == set(CLOCK_EVENT_REASONS.values())
    assert {r for r, v in got.items() if v == 1.0} == {"sw_power_cap", "hw_thermal_slowdown"}
    assert _samples(m, "goodput_gpu_clock_event_reasons") == {}, "the bitmask is not a series"
