import time
from pathlib import Path

import pytest

from collectors.base import CollectorError, CollectorUnavailable
from collectors.diskstats import DiskstatsCollector, parse_diskstats
from collectors.lustre import LustreCollector, device_name, parse_stats
from collectors.nfs import NfsCollector, parse_mountstats
from collectors.psi import PsiCollector, parse_pressure
from tests.collectors.conftest import T0, assert_golden, assert_valid
from tests.collectors.trees import DISKSTATS, LLITE, MOUNTSTATS


def two_ticks(node, make):
    c = make(node(0))
    first = c.collect(T0)
    node(1)
    return c, first, c.collect(T0 + 1000)


# -- diskstats -------------------------------------------------------------------------------------


def test_diskstats_golden_and_rules(node):
    c, first, second = two_ticks(node, lambda root: DiskstatsCollector(root / "proc"))
    assert_valid("storage", first + second)
    assert_golden("diskstats", first + second)
    by = {r["device"]: r for r in second}
    assert sorted(by) == ["nvme0n1", "sda", "vda"]  # partitions, loop, ram, zram skipped
    assert by["sda"]["read_bytes_per_s"] == 8000 * 512 and by["sda"]["read_latency_ms"] == 1.0
    assert by["sda"]["busy_pct"] == 50.0
    assert by["nvme0n1"]["read_latency_ms"] == 10.0  # read_ms wrapped at 32 bits: 2000 ms / 200 reads
    assert "read_latency_ms" not in by["vda"] and by["vda"]["read_ops_per_s"] == 0.0  # no reads: no latency


def test_diskstats_parses_11_15_17_field_lines_and_rejects_others():
    disks, bad = parse_diskstats(DISKSTATS[0] + "   8  2 sdb2 1 2 3 4\n")
    by = {d.name: d for d in disks}
    assert by["sda"].discards is None and by["sda"].flushes is None  # 11 fields
    assert by["nvme0n1"].discards == 10 and by["nvme0n1"].flushes is None  # 15 fields
    assert by["vda"].discards == 3270 and by["vda"].flushes == 294  # 17 fields
    assert len(bad) == 1 and "sdb2" in bad[0]


def test_diskstats_device_regex_is_configurable(node):
    c = DiskstatsCollector(node(0) / "proc", exclude=r"^(vd|loop|ram|zram)")
    assert sorted(r["device"] for r in c.collect(T0)) == ["nvme0n1", "nvme0n1p1", "sda", "sda1"]


def test_diskstats_absent(tmp_path):
    with pytest.raises(CollectorUnavailable, match="diskstats"):
        DiskstatsCollector(tmp_path).collect(T0)


# -- PSI -------------------------------------------------------------------------------------------


def test_psi_percent_of_tick_from_totals(node):
    _, first, second = two_ticks(node, lambda root: PsiCollector(root / "proc"))
    assert first == [{"ts_ms": T0, "source": "psi", "device": "io"}]
    assert second == [
        {"ts_ms": T0 + 1000, "source": "psi", "device": "io", "psi_some_pct": 25.0, "psi_full_pct": 10.0}
    ]


def test_psi_without_full_line_and_bad_file(tmp_path):
    assert parse_pressure("some avg10=0.00 avg60=0.00 avg300=0.00 total=5\n").full_us is None
    (tmp_path / "pressure").mkdir()
    (tmp_path / "pressure" / "io").write_text("nonsense\n")
    with pytest.raises(CollectorError, match="pressure/io"):
        PsiCollector(tmp_path).collect(T0)


# -- NFS -------------------------------------------------------------------------------------------


def test_nfs_rows_for_configured_mount(node):
    c, _, second = two_ticks(
        node, lambda root: NfsCollector(root / "proc", mounts=["/mnt/datasets", "/mnt/gone"])
    )
    assert_valid("storage", second)
    (row,) = second
    assert row["device"] == "/mnt/datasets"
    assert row["read_bytes_per_s"] == 100 << 20  # server bytes read over the tick
    assert row["read_ops_per_s"] == 100.0 and row["write_ops_per_s"] == 32.0
    assert row["read_latency_ms"] == 5.0  # 500 ms of READ rtt over 100 READs
    assert c.skipped == [f"{c.path}: configured NFS mount /mnt/gone is not mounted"]


def test_nfs_parse_every_mount_with_escaped_path():
    mounts = parse_mountstats(MOUNTSTATS[0])
    assert [m.mount_point for m in mounts] == ["/mnt/datasets", "/home/shared dir"]
    assert mounts[0].export == "10.0.0.5:/export/datasets" and mounts[0].ops["READ"].rtt_ms == 2048


# -- Lustre ----------------------------------------------------------------------------------------


def test_lustre_llite_and_osc_rows(node):
    _, _, second = two_ticks(node, lambda root: LustreCollector([root / "proc" / "fs" / "lustre"]))
    assert_valid("storage", second)
    by = {r["device"]: r for r in second}
    assert sorted(by) == ["scratch", "scratch-OST0000", "scratch-OST0001"]
    assert by["scratch"]["read_bytes_per_s"] == 400 << 20 and by["scratch"]["read_ops_per_s"] == 400.0
    assert by["scratch"]["read_latency_ms"] == pytest.approx(0.1)  # 40000 µs / 400 reads
    assert by["scratch-OST0000"]["read_latency_ms"] == 5.0  # ost_read RPCs: 500000 µs / 100
    assert by["scratch-OST0000"]["write_ops_per_s"] == 0.0


def test_lustre_parse_and_absent(tmp_path):
    lines = parse_stats(LLITE[0])
    assert (
        "snapshot_time" not in lines and lines["read"].unit == "usec" and lines["read_bytes"].sum == 500 << 20
    )
    assert device_name("scratch-OST0003-osc-ffff9a8b7c6d5000") == "scratch-OST0003"
    with pytest.raises(CollectorUnavailable, match="no Lustre"):
        LustreCollector(
            [tmp_path / "fs" / "lustre", tmp_path / "sys" / "kernel" / "debug" / "lustre"]
        ).collect(T0)


# -- this machine's real files ---------------------------------------------------------------------


@pytest.mark.parametrize("make", [DiskstatsCollector, PsiCollector], ids=["diskstats", "psi"])
def test_real_proc_files_validate(make):
    path = {DiskstatsCollector: "/proc/diskstats", PsiCollector: "/proc/pressure/io"}[make]
    if not Path(path).exists():
        pytest.skip(f"{path} does not exist on this machine")
    c = make()  # the default root: the real /proc
    c.collect(T0)
    time.sleep(0.05)
    rows = c.collect(T0 + 50)
    assert rows and all(r["source"] in ("disk", "psi") for r in rows)
    assert_valid("storage", rows)
    if make is PsiCollector:
        assert 0.0 <= rows[0]["psi_some_pct"] <= 100.0
