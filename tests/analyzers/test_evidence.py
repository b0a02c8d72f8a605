"""Evidence: CNPs sent count as congestion (8); storage pressure marks the nodes that read, not every node
of the pool (10)."""

import pytest

N1, N2 = "gpu-core-001", "gpu-core-002"


def half_stalled(sc, job_id, node, t_end=200):
    j = dict(job_id=job_id, account="research")
    sc.job(dict(t=0, event="allocated", node=node, gpu_indices=[0, 1], **j))
    sc.job(dict(t=0, event="gang_complete", **j), dict(t=0, event="running", **j))
    sc.job(
        dict(t=t_end, event="completed", **j),
        dict(t=t_end, event="released", node=node, gpu_indices=[0, 1], **j),
    )
    # healthy seconds at 90, stalled at 30: a third of the running time lost
    sc.gpu(node, [0, 1], 0, t_end, lambda s, g: 90.0 if s % 2 else 30.0)


def test_cnps_sent_are_congestion_evidence(sc):
    half_stalled(sc, "j8", N1)
    sc.rows("nic", N1, 0, 200, device="mlx5_0", port=1, link_layer="InfiniBand", cnp_sent_per_s=5000.0)
    sc.load()
    sc.analyze(0, 300)
    got = sc.cats("j8")
    assert got.get("idle", 0.0) == pytest.approx(0.0, abs=1e-6)
    assert got["comm_stall"] == pytest.approx(400 / 3, rel=0.02)


def test_storage_pressure_marks_only_the_nodes_that_read(sc):
    ceiling = sc.cfg.pools[0].storage_ceiling_bytes_per_s
    half_stalled(sc, "reader", N1)
    half_stalled(sc, "talker", N2)
    sc.rows("storage", N1, 0, 200, source="nfs", device="/data", read_bytes_per_s=0.95 * ceiling)
    sc.rows("storage", N2, 0, 200, source="nfs", device="/data", read_bytes_per_s=1e6)
    sc.rows("nic", N2, 0, 200, device="mlx5_0", port=1, link_layer="InfiniBand", xmit_wait_per_s=5e6)
    sc.load()
    sc.analyze(0, 300)
    reader, talker = sc.cats("reader"), sc.cats("talker")
    assert reader["data_stall"] == pytest.approx(400 / 3, rel=0.02)
    assert talker.get("data_stall", 0.0) == pytest.approx(0.0, abs=1e-6)
    assert talker["comm_stall"] == pytest.approx(400 / 3, rel=0.02)


def test_a_starved_reader_below_the_pools_mean_is_still_data_stall(sc):
    # the demo's shared pool: one job hogs the storage, another reads less because it is starved
    ceiling = sc.cfg.pools[0].storage_ceiling_bytes_per_s
    half_stalled(sc, "starved", N1)
    sc.rows("storage", N1, 0, 200, source="nfs", device="/data", read_bytes_per_s=0.04 * ceiling)
    sc.rows("storage", N2, 0, 200, source="nfs", device="/data", read_bytes_per_s=0.92 * ceiling)
    sc.load()
    sc.analyze(0, 300)
    assert sc.cats("starved")["data_stall"] == pytest.approx(400 / 3, rel=0.02)


def test_a_nodes_read_rate_sums_its_mounts_per_sample_time(sc):
    # two shared mounts sampled at the same seconds: the node reads 0.96 of the ceiling, not 0.48 (each
    # sample time counts once however many mounts report it, so the rates add up)
    ceiling = sc.cfg.pools[0].storage_ceiling_bytes_per_s
    half_stalled(sc, "two-mounts", N1)
    for device in ("/data", "/ckpt"):
        sc.rows("storage", N1, 0, 200, source="nfs", device=device, read_bytes_per_s=0.48 * ceiling)
    sc.load()
    sc.analyze(0, 300)
    assert sc.cats("two-mounts")["data_stall"] == pytest.approx(400 / 3, rel=0.02)
    why = (
        sc.store.query_arrow(
            "SELECT DISTINCT evidence FROM goodput_windows "
            "WHERE job_id = 'two-mounts' AND category = 'data_stall'"
        )
        .column("evidence")
        .to_pylist()
    )
    assert why and all("at 96% of its ceiling" in w for w in why), why
