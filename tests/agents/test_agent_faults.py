"""Faults on the node, with the real agent process and the real broker; each test counts what the agent
produced (its seqs) against what reached Kafka, and records it for docs/reliability.md.

"Stored" here means distinct (node, kind, seq) batches in Kafka: the loader stores exactly those
(its own fault tests cover the way from Kafka to the tables)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections import Counter

import pytest

from tests.agents.harness import NODE_KINDS, FixtureNode, seqs

pytestmark = pytest.mark.kafka


@pytest.fixture
def node(tmp_path, kafka_broker):
    n = FixtureNode(tmp_path, kafka_broker.bootstrap)
    yield n
    if n.proc is not None:
        n.stop(9)
    if not kafka_broker.running:
        kafka_broker.start()


def _count(node: FixtureNode, kinds=NODE_KINDS) -> tuple[int, int, int, dict[str, list[dict]]]:
    """(produced, distinct in Kafka, extra copies in Kafka, the stream) once the agent has stopped."""
    stream = node.read_stream(kinds)
    produced = sum(node.next_seqs()[k] for k in kinds)
    got = [s for k in kinds for s in ((k, q) for q in seqs(stream.get(k, [])))]
    counts = Counter(got)
    return produced, len(counts), sum(n - 1 for n in counts.values()), stream


def _drained(node: FixtureNode) -> bool:
    return node.metric("goodput_agent_spool_batches") <= 6


def test_spool_disk_full_during_an_outage_drops_counted_batches_and_keeps_running(
    node, kafka_broker, reliability
):
    if os.geteuid() != 0:
        pytest.fail("this test mounts a 192 KiB tmpfs as the spool's disk: run it as root (CI does)")
    spool_dir = node.state_dir / "spool"
    spool_dir.mkdir(parents=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=192k", "tmpfs", str(spool_dir)], check=True)
    try:
        node.start()
        node.wait_for(lambda: node.next_seqs()["gpu"] >= 4, 30, "a few gpu batches")
        kafka_broker.stop()
        node.wait_for(
            lambda: (node.metric("goodput_agent_spool_dropped_batches_total") or 0) >= 10,
            60,
            "the spool's disk to fill up and batches to be dropped",
        )
        during = node.next_seqs()["gpu"]
        node.wait_for(lambda: node.next_seqs()["gpu"] >= during + 8, 10, "collection going on")
        kafka_broker.start()
        node.wait_for(lambda: _drained(node), 90, "the spool to drain after the broker returned")
        # The last few batches may still be in flight: the disk must have room for new ones anyway.
        drained = node.next_seqs()["gpu"]
        node.wait_for(lambda: node.next_seqs()["gpu"] >= drained + 4, 10, "collection going on")
        dropped = node.metric("goodput_agent_spool_dropped_batches_total")
        assert node.stop() == 0
    finally:
        subprocess.run(["umount", "-l", str(spool_dir)], check=False)
    produced, stored, duplicates, stream = _count(node)
    assert duplicates == 0
    assert produced - stored == dropped, "every batch not in Kafka is one the agent counted as dropped"
    for kind in NODE_KINDS:
        got = seqs(stream[kind])
        assert got == sorted(got) and got[-1] == node.next_seqs()[kind] - 1, f"{kind}: in order, up to date"
    gpu = set(seqs(stream["gpu"]))
    assert set(range(drained, node.next_seqs()["gpu"])) <= gpu, "none dropped once the spool had drained"
    full = [r for r in node.log_records() if "is full" in r["msg"]]
    assert len(full) == 1 and full[0]["level"] == "warning", "the full disk is logged once"
    assert any("has room again" in r["msg"] for r in node.log_records())
    reliability.fault(
        "spool disk full (192 KiB tmpfs) during a broker outage",
        "the agent keeps collecting; batches the disk cannot hold are dropped, counted in "
        "goodput_agent_spool_dropped_batches_total and logged once; the rest arrive in order",
        produced=produced,
        stored=stored,
        duplicates=duplicates,
        dropped=int(dropped),
    )


def test_a_nic_disappearing_from_sysfs_costs_only_its_rows(node, reliability):
    node.start()
    node.wait_for(lambda: node.next_seqs()["nic"] >= 4, 30, "a few nic batches")
    link = node.root / "node" / "sys" / "class" / "infiniband" / "mlx5_3"
    target = link.resolve()
    link.unlink()
    shutil.rmtree(target)  # the device is gone (hot unplug, a failed PCIe link)
    gone_at = node.next_seqs()["nic"]
    node.wait_for(lambda: node.next_seqs()["nic"] >= gone_at + 6, 30, "nic batches after the removal")
    assert node.metric("goodput_collector_success", collector="rdma") == 1, "the collector carries on"
    node.wait_for(lambda: _drained(node), 30, "the spool to drain")
    assert node.stop() == 0
    produced, stored, duplicates, stream = _count(node)
    assert (stored, duplicates) == (produced, 0)
    last = stream["nic"][-1]["columns"]["device"]
    assert sorted(last) == sorted(f"mlx5_{i}" for i in range(8) if i != 3)
    reliability.fault(
        "a NIC disappearing from sysfs mid-run",
        "its rows stop, the other NICs and kinds carry on, the collector stays healthy",
        produced=produced,
        stored=stored,
        duplicates=duplicates,
    )


def _set_counter(node: FixtureNode, name: str, value: int) -> None:
    for port_dir in (node.root / "node" / "sys").glob("devices/*/*/infiniband/*/ports/1/counters"):
        (port_dir / name).write_text(f"{value}\n")


def test_counters_reset_by_a_driver_reload_never_give_a_negative_or_huge_rate(node, reliability):
    node.start()
    node.wait_for(lambda: node.next_seqs()["nic"] >= 2, 30, "a first nic batch")
    value = 500_000_000  # where the fixture node starts (port_xmit_data counts 4-byte words)
    for _ in range(8):  # traffic: the counter grows
        value += 100_000_000
        _set_counter(node, "port_xmit_data", value)
        time.sleep(0.25)
    _set_counter(node, "port_xmit_data", 1000)  # mlx5 reloaded: every counter starts again near 0
    reset_at = node.next_seqs()["nic"]
    node.wait_for(lambda: node.next_seqs()["nic"] >= reset_at + 6, 30, "nic batches after the reset")
    node.wait_for(lambda: _drained(node), 30, "the spool to drain")
    assert node.stop() == 0
    produced, stored, duplicates, stream = _count(node)
    assert (stored, duplicates) == (produced, 0)
    rates = [r for env in stream["nic"] for r in env["columns"].get("tx_bytes_per_s", []) if r is not None]
    link_bytes_per_s = 400e9 / 8
    assert rates and all(0 <= r <= link_bytes_per_s for r in rates), "no negative or wrapped-around rate"
    assert max(rates) > 0, "the traffic before the reset was seen"
    reliability.fault(
        "NIC counters reset by a driver reload",
        "the reset is taken for a reset, not a wrap: no negative or impossible rate, no batch lost",
        produced=produced,
        stored=stored,
        duplicates=duplicates,
    )


def test_nvml_reporting_gpu_is_lost_for_one_gpu(node, reliability, monkeypatch):
    lost_file = node.root / "lost-gpus"
    monkeypatch.setenv("GOODPUT_FAKE_NVML_LOST_FILE", str(lost_file))
    node.start()
    node.wait_for(lambda: node.next_seqs()["gpu"] >= 4, 30, "a few gpu batches")
    lost_file.write_text("2\n")  # NVML_ERROR_GPU_IS_LOST for GPU 2 (fell off the bus, Xid 79)
    lost_at = node.next_seqs()["gpu"]
    node.wait_for(lambda: node.next_seqs()["gpu"] >= lost_at + 6, 30, "gpu batches after the loss")
    assert node.metric("goodput_collector_success", collector="nvml") == 1, "the collector carries on"
    node.wait_for(lambda: _drained(node), 30, "the spool to drain")
    assert node.stop() == 0
    produced, stored, duplicates, stream = _count(node)
    assert (stored, duplicates) == (produced, 0)
    last = stream["gpu"][-1]["columns"]
    assert last["gpu"] == list(range(8)), "every GPU still has its row"
    assert last["lost"] == [i == 2 for i in range(8)], "only GPU 2 is flagged lost"
    assert last["util_gpu_pct"][2] is None and last["util_gpu_pct"][1] == 50.0, "no made-up sample"
    reliability.fault(
        "NVML reporting GPU_IS_LOST for one GPU of 8",
        "its row says lost=true with no samples; the other 7 GPUs and every other kind carry on",
        produced=produced,
        stored=stored,
        duplicates=duplicates,
    )


def test_a_node_silent_for_10_minutes_replays_its_spool_and_the_loader_stores_all_of_it(
    node, reliability, tmp_path
):
    """Ten minutes of gpu batches the node could not send (600, one a second, timestamped then) wait in
    its spool; the agent starts, sends them before anything new, and carries on; the loader then stores
    every batch once, none dead-lettered for its age or its clock."""
    from agents.spool import Spool
    from contracts.envelope import encode_batch
    from contracts.schema import topic_for
    from pipeline import ddl
    from pipeline.chdb_store import ChdbStore
    from tests.agents.harness import NODE
    from tests.loader.helpers import ServiceThread, ledger_keys, raw_counts

    silent_from_ms = (int(time.time()) - 600) * 1000
    with Spool(node.state_dir / "spool", fsync="never") as spool:
        for seq in range(600):
            ts = silent_from_ms + seq * 1000
            columns = {
                "ts_ms": [ts] * 8,
                "gpu": list(range(8)),
                "uuid": [f"GPU-silent-{g}" for g in range(8)],
                "util_gpu_pct": [50.0] * 8,
            }
            value = encode_batch(
                kind="gpu",
                cluster="agent-test",
                node=NODE,
                seq=seq,
                sent_ms=ts,
                columns=columns,
                agent="goodput-agent/test",
            )
            spool.append(topic_for("gpu", node.prefix), NODE.encode(), value)
    node.start()
    node.wait_for(
        lambda: (node.metric("goodput_agent_spool_replayed_batches_total") or 0) >= 600, 60, "the replay"
    )
    node.wait_for(lambda: node.next_seqs()["gpu"] >= 610, 30, "new gpu batches after the replay")
    node.wait_for(lambda: _drained(node), 30, "the spool to drain")
    assert node.stop() == 0
    produced = sum(node.next_seqs()[k] for k in NODE_KINDS)

    with ChdbStore(tmp_path / "store") as store:
        ddl.migrate(store)
        svc = ServiceThread(node.config, store, until_caught_up=True).start()
        svc.thread.join(180)
        assert not svc.thread.is_alive() and svc.error is None, svc.error
        keys = ledger_keys(store)
        rows = raw_counts(store)
        dead = store.query_arrow("SELECT count() AS n FROM dead_letters").column("n")[0].as_py()
    assert dead == 0, "no batch dead-lettered for its age or its clock"
    assert len(keys) == len(set(keys)) == produced
    assert rows["gpu"] == 8 * node.next_seqs()["gpu"], "every row of the 10 silent minutes is stored"
    reliability.fault(
        "a node silent for 10 minutes (600 gpu batches in its spool), then replaying it",
        "the agent sends the spool in seq order before its new batches; the loader stores every batch "
        "once, none dead-lettered for its age",
        produced=produced,
        stored=len(set(keys)),
        duplicates=len(keys) - len(set(keys)),
        dead_lettered=dead,
    )
