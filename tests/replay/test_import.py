"""The importers' tolerance, on small files written here: unknown columns, missing values, unsorted and
repeated rows are handled and counted; a file of another shape is refused in one line (exit 2)."""

from __future__ import annotations

import random
import subprocess
import sys

import pytest

from tests.replay.conftest import replay_json, run_cli

POD_HEADER = "name,num_gpu,gpu_milli,qos,pod_phase,creation_time,deletion_time,scheduled_time,extra_col"
PODS = [
    "p2,2,1000,BE,Failed,100,3700,100,x",
    "p1,1,500,LS,Succeeded,0,7200,3600,x",
    "p1,1,1000,BE,Failed,5,10,5,x",  # the same pod again: the first row kept
    "p3,1,,LS,Running,50,3650,50,x",  # no gpu_milli: a whole GPU
    "p4,1,1000,BE,Pending,200,400,,x",  # withdrawn while queued
    "p5,,1000,LS,Running,10,100,10,x",  # no num_gpu: dropped
    "p6,1,1000,,Running,300,,300,x",  # no class, no deletion: open at the trace's end
    "p7,1,1000,LS,Running,500,400,500,x",  # deleted before scheduled: dropped
    "p8,0,0,LS,Running,0,100,0,x",  # CPU only
]
NODES = "sn,gpu,model,rack\nn0,2,T4,r1\nn1,8,G2,r1\n"


def write_openb(d, pods=PODS, header=POD_HEADER, nodes=NODES):
    d.mkdir(exist_ok=True)
    (d / "openb_pod_list_default.csv").write_text("\n".join([header, *pods]) + "\n")
    (d / "openb_node_list_gpu_node.csv").write_text(nodes)
    return d


def test_openb_tolerates_and_counts(tmp_path):
    found = replay_json("alibaba-openb", str(write_openb(tmp_path / "t")), "--out", str(tmp_path / "o"))
    pods = found["import"][0]
    assert pods["rows_read"] == 9 and pods["rows_used"] == 5
    assert pods["unknown_columns"] == ["extra_col"]
    assert pods["out_of_order"] == 1  # p1 (created at 0) after p2 (at 100)
    assert pods["dropped"] == {
        "duplicate name": 1,
        "missing num_gpu": 1,
        "no GPU (num_gpu = 0)": 1,
        "times out of order (scheduled < created or deleted < scheduled)": 1,
    }
    assert pods["filled"] == {"deletion_time": 1, "gpu_milli": 1, "qos": 1}
    assert found["import"][1]["unknown_columns"] == ["rack"]
    # p1: half a GPU for 1 h; p2: 2 GPUs for 1 h; p3: 1 GPU for 1 h; p6: held to the data's end (7200 s)
    g = found["gpu_hours"]
    assert g["total"] == pytest.approx(0.5 + 2 + 1 + 6900 / 3600, abs=1e-6)
    assert g["by_class"] == pytest.approx({"LS": 1.5, "BE": 2.0, "unclassified": 6900 / 3600}, abs=1e-6)
    assert g["by_state"] == pytest.approx(
        {"Succeeded": 0.5, "Failed": 2.0, "Running": 1.0, "Pending": 0.0, "open at trace end": 6900 / 3600},
        abs=1e-6,
    )
    q = found["queue_delay_s"]["all"]
    assert (q["jobs"], q["p50"], q["p90"], q["p99"]) == (4, 0.0, 3600.0, 3600.0)
    assert found["pods"]["withdrawn_while_queued"] == {"BE": 1}


@pytest.mark.parametrize("missing", ["num_gpu", "creation_time", "name"])
def test_openb_of_another_shape_is_refused_naming_the_column(tmp_path, missing):
    cols = POD_HEADER.split(",")
    keep = [i for i, c in enumerate(cols) if c != missing]
    rows = [",".join(r.split(",")[i] for i in keep) for r in PODS]
    d = write_openb(tmp_path / "t", rows, ",".join(cols[i] for i in keep))
    rc, out, err = run_cli("replay", "alibaba-openb", str(d), "--out", str(tmp_path / "o"), "--json")
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and f"no column {missing!r}" in err, err
    assert err.startswith("goodput replay alibaba-openb: ")


def test_openb_node_list_of_another_shape_is_refused(tmp_path):
    d = write_openb(tmp_path / "t", nodes="sn,cpu_milli\nn0,1000\n")
    rc, _, err = run_cli("replay", "alibaba-openb", str(d), "--out", str(tmp_path / "o"))
    assert rc == 2 and "no column 'gpu'" in err and err.count("\n") == 1


def test_openb_missing_files_are_named(tmp_path):
    rc, _, err = run_cli("replay", "alibaba-openb", str(tmp_path), "--out", str(tmp_path / "o"))
    assert rc == 2 and "openb_pod_list_default.csv" in err and err.count("\n") == 1


def test_openb_config_may_not_bring_pools(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text('[[pools]]\nname = "x"\n')
    d = write_openb(tmp_path / "t")
    rc, _, err = run_cli(
        "replay", "alibaba-openb", str(d), "--config", str(cfg), "--out", str(tmp_path / "o")
    )
    assert rc == 2 and "[[pools]]" in err and err.count("\n") == 1


def pai_rows(iterations: int = 200) -> list[str]:
    """Four workers at 20 % of a GPU; worker 2 takes 120 units where the others take 100."""
    return [
        f"{i},{w},20,{t},{120 if w == 2 else 100}"
        for i, (t, w) in enumerate((t, w) for t in range(1, iterations + 1) for w in range(4))
    ]


def test_pai_tolerates_counts_and_finds_the_planted_straggler(tmp_path):
    rows = pai_rows()
    rows = [r + ",z" for r in rows]
    rows.append("9998,1,20,7,100,z")  # (iteration 7, worker 1) again: the first kept
    rows.append("9999,3,20,201,,z")  # no batch time: dropped
    random.Random(1).shuffle(rows)
    f = tmp_path / "job_9_norm.csv"
    f.write_text("\n".join([",worker,gpu,time,batch_time_norm,note", *rows]) + "\n")
    found = replay_json("alibaba-pai-minibatch", str(f), "--out", str(tmp_path / "o"))
    stats = found["import"][0]
    assert stats["rows_read"] == 802 and stats["rows_used"] == 800
    assert stats["unknown_columns"] == ["note"]
    assert stats["dropped"] == {"duplicate time/worker": 1, "missing batch_time_norm": 1}
    assert stats["out_of_order"] > 0
    [s] = found["stragglers"]
    assert (s["job"], s["rank"], s["kind"], s["start"], s["end"]) == ("pai-job-9", 2, "persistent", 1, 200)
    assert s["score"] == pytest.approx(100 / 120, abs=1e-4)
    assert s["gang_wait"] == pytest.approx(200 * 20 * 3)  # 20 units per iteration, 3 workers waiting
    j = found["jobs"]["pai-job-9"]
    assert j["step_time_goodput_pct"] == pytest.approx(100 * (3 * 100 + 120) / (4 * 120), abs=0.01)


def test_pai_gang_without_a_straggler_has_none(tmp_path):
    f = tmp_path / "job_1_norm.csv"
    f.write_text(
        ",worker,gpu,time,batch_time_norm\n"
        + "\n".join(f"0,{w},50,{t},100" for t in range(1, 201) for w in range(4))
        + "\n"
    )
    assert replay_json("alibaba-pai-minibatch", str(f), "--out", str(tmp_path / "o"))["stragglers"] == []


def test_pai_file_of_another_shape_is_refused_naming_the_column(tmp_path):
    d = write_openb(tmp_path / "t")
    rc, out, err = run_cli("replay", "alibaba-pai-minibatch", str(d / "openb_pod_list_default.csv"))
    assert rc == 2 and out == ""
    assert err.count("\n") == 1 and "no column 'worker'" in err, err


def test_pai_directory_without_job_files_is_refused(tmp_path):
    rc, _, err = run_cli("replay", "alibaba-pai-minibatch", str(tmp_path), "--out", str(tmp_path / "o"))
    assert rc == 2 and "job_*_norm.csv" in err and err.count("\n") == 1


def test_empty_file_is_refused(tmp_path):
    f = tmp_path / "job_3_norm.csv"
    f.write_text("")
    rc, _, err = run_cli("replay", "alibaba-pai-minibatch", str(f), "--out", str(tmp_path / "o"))
    assert rc == 2 and str(f) in err and err.count("\n") == 1


@pytest.mark.parametrize(
    "args, words",
    [(("bogus",), "invalid choice: 'bogus'"), (("alibaba-pai-minibatch",), "required: path")],
)
def test_a_usage_error_is_one_line_and_makes_nothing(tmp_path, args, words):
    p = subprocess.run(
        [sys.executable, "-m", "goodput.cli", "replay", *args],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    assert p.returncode == 2 and p.stderr.count("\n") == 1 and words in p.stderr, p.stderr
    assert not list(tmp_path.iterdir())


def test_a_replay_replaces_its_own_store_and_no_other(tmp_path):
    d = write_openb(tmp_path / "t")
    out = tmp_path / "o"
    first = replay_json("alibaba-openb", str(d), "--out", str(out))
    again = replay_json("alibaba-openb", str(d), "--out", str(out))
    assert again["gpu_hours"] == first["gpu_hours"]  # replaced, not loaded twice
    (tmp_path / "other" / "store").mkdir(parents=True)
    (tmp_path / "other" / "store" / "keep").write_text("x")
    rc, _, err = run_cli("replay", "alibaba-openb", str(d), "--out", str(tmp_path / "other"))
    assert rc == 2 and "choose another --out" in err and err.count("\n") == 1
    assert (tmp_path / "other" / "store" / "keep").exists()


def test_pai_prints_a_table_without_json(tmp_path):
    f = tmp_path / "job_9_norm.csv"
    f.write_text(",worker,gpu,time,batch_time_norm\n" + "\n".join(pai_rows()) + "\n")
    rc, out, err = run_cli("replay", "alibaba-pai-minibatch", str(f), "--out", str(tmp_path / "o"))
    assert rc == 0, err
    row = next(line for line in out.splitlines() if line.startswith("pai-job-9 "))
    assert row.split()[1:4] == ["2", "persistent", "1-200"]
    assert "replay pai: done" in err  # progress, on stderr
