"""`goodput replay alibaba-openb` on the real trace: every figure recomputed here with polars straight from
the CSV, not through the pipeline (docs/real-traces.md)."""

from __future__ import annotations

import math

import polars as pl
import pytest

from tests.replay.conftest import replay_json, trace_dir

CLASSES = ["BE", "Burstable", "Guaranteed", "LS"]


@pytest.fixture(scope="module")
def data():
    return trace_dir("alibaba-gpu-v2023")


@pytest.fixture(scope="module")
def pods(data) -> pl.DataFrame:
    """The trace's GPU pods, as the CSV has them."""
    return pl.read_csv(data / "openb_pod_list_default.csv").filter(pl.col("num_gpu") > 0)


@pytest.fixture(scope="module")
def found(data, tmp_path_factory) -> dict:
    return replay_json("alibaba-openb", str(data), "--out", str(tmp_path_factory.mktemp("openb")))


def nearest_rank(values: list[int], q: float) -> float:
    v = sorted(values)
    return float(v[math.ceil(q * len(v)) - 1])


def test_queue_delay_percentiles_all_and_per_class(found, pods):
    scheduled = pods.filter(pl.col("scheduled_time").is_not_null()).with_columns(
        wait=pl.col("scheduled_time") - pl.col("creation_time")
    )
    expect = {"all": scheduled["wait"].to_list()}
    for c in CLASSES:
        expect[c] = scheduled.filter(pl.col("qos") == c)["wait"].to_list()
    for key, waits in expect.items():
        got = found["queue_delay_s"][key]
        assert got["jobs"] == len(waits), key
        for q in (0.5, 0.9, 0.99):
            assert got[f"p{round(q * 100)}"] == nearest_rank(waits, q), (key, q)
    assert found["queue_delay_s"]["all"]["p99"] > found["queue_delay_s"]["all"]["p50"]


def gpu_hours(pods: pl.DataFrame, share: bool) -> pl.DataFrame:
    held = pl.col("num_gpu") * (pl.col("deletion_time") - pl.col("scheduled_time")) / 3600
    frac = pl.when(pl.col("num_gpu") == 1).then(pl.col("gpu_milli") / 1000).otherwise(1.0)
    return pods.filter(pl.col("scheduled_time").is_not_null()).with_columns(h=held * frac if share else held)


@pytest.mark.parametrize("share, key", [(True, "gpu_hours"), (False, "gpu_hours_held")])
def test_gpu_hours_per_class_and_final_state(found, pods, share, key):
    h = gpu_hours(pods, share)
    got = found[key]
    assert got["total"] == pytest.approx(h["h"].sum(), abs=1e-3)
    for by, col in (("by_class", "qos"), ("by_state", "pod_phase")):
        expect = {k: v for k, v in h.group_by(col).agg(pl.col("h").sum()).rows()}
        nonzero = {k: v for k, v in got[by].items() if v}
        assert nonzero.keys() == expect.keys(), by
        for k, v in expect.items():
            assert nonzero[k] == pytest.approx(v, abs=1e-3), (by, k)
    # a pod withdrawn while queued never held a GPU
    assert got["by_state"].get("Pending", 0) == 0


def test_withdrawn_pods_are_the_pending_ones(found, pods):
    pending = pods.filter(pl.col("scheduled_time").is_null())
    assert (pending["pod_phase"] == "Pending").all()
    assert pending["deletion_time"].is_not_null().all()  # withdrawn while queued, never scheduled
    expect = {k: v for k, v in pending.group_by("qos").len().rows()}
    assert found["pods"]["withdrawn_while_queued"] == expect
    assert found["pods"]["gpu_pods"] == pods.height


def test_allocated_share_of_the_cluster(found, pods, data):
    nodes = pl.read_csv(data / "openb_node_list_gpu_node.csv")
    gpus = int(nodes["gpu"].sum())
    end_s = int(
        pl.read_csv(data / "openb_pod_list_default.csv")
        .select(pl.max_horizontal("creation_time", "deletion_time", "scheduled_time").max())
        .item()
    )
    held_s = float(gpu_hours(pods, share=False)["h"].sum()) * 3600
    hours = math.ceil(end_s / 3600)  # the hourly buckets from the trace's start to past its end
    a = found["allocated_pct"]
    assert a["of_gpus"] == gpus
    assert a["mean"] == pytest.approx(100 * held_s / (gpus * hours * 3600), abs=1e-3)
    # the peak hour cannot exceed the most GPUs ever held at once
    sched = pods.filter(pl.col("scheduled_time").is_not_null())
    steps = pl.concat(
        [
            sched.select(t=pl.col("scheduled_time"), d=pl.col("num_gpu")),
            sched.select(t=pl.col("deletion_time"), d=-pl.col("num_gpu")),
        ]
    ).sort("t", "d")
    peak = int(steps["d"].cum_sum().max())
    assert 0 < a["peak_hour"] <= 100 * peak / gpus + 1e-9
    assert len(a["by_trace_day"]) == math.ceil(end_s / 86400)


def test_json_is_versioned_and_counts_what_it_read(found):
    assert found["replay_version"] == 1 and found["trace"] == "alibaba-openb"
    pod_import = found["import"][0]
    assert pod_import["rows_read"] == 8152
    assert pod_import["dropped"] == {"no GPU (num_gpu = 0)": 1088}
    assert found["loaded"]["dead_letters"] == 0
    assert found["fragmentation"]["instants_with_pending"] >= 0


def test_cost_is_the_share_of_the_price(found):
    """Without prices in the trace every GPU-hour costs 1: the cost is the GPU-hours by the share rule."""
    assert found["cost"]["total"] == pytest.approx(found["gpu_hours"]["total"], abs=1e-3)
    assert found["cost"]["by_class"] == pytest.approx(found["gpu_hours"]["by_class"], abs=1e-3)


def test_config_maps_classes_to_teams_and_prices_gpus(data, tmp_path, found):
    models = pl.read_csv(data / "openb_node_list_gpu_node.csv")["model"].unique().to_list()
    cfg = tmp_path / "teams.toml"
    cfg.write_text(
        '[teams]\nonline = ["LS", "Guaranteed"]\nbatch = ["BE", "Burstable"]\n'
        + "".join(f"[gpu_types.{m}]\nprice_per_gpu_hour = 2.5\n" for m in models)
    )
    mapped = replay_json("alibaba-openb", str(data), "--config", str(cfg), "--out", str(tmp_path / "o"))
    assert mapped["cost"]["total"] == pytest.approx(2.5 * found["gpu_hours"]["total"], abs=1e-2)
    by = found["gpu_hours"]["by_class"]
    assert mapped["gpu_hours"]["by_class"] == pytest.approx(
        {"online": by["LS"] + by["Guaranteed"], "batch": by["BE"] + by["Burstable"]}, abs=1e-3
    )
    assert mapped["queue_delay_s"]["online"]["jobs"] == (
        found["queue_delay_s"]["LS"]["jobs"] + found["queue_delay_s"]["Guaranteed"]["jobs"]
    )
