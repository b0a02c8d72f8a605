import pynvml
import pytest

from collectors.base import CollectorError, CollectorUnavailable
from collectors.nvml import NvmlCollector, job_from_cgroup, job_from_environ
from tests.collectors.conftest import T0, assert_valid
from tests.collectors.fake_pynvml import FakeGpu, FakeNvml

POD_UID = "1a2b3c4d-5e6f-4a1b-9c8d-0123456789ab"
CGROUPS = {
    # cgroup v2, Slurm's cgroup/v2 plugin
    201: "0::/system.slice/slurmstepd.scope/job_4242/step_0/user/task_0\n",
    # cgroup v2, kubelet with the systemd driver (dashes of the UID become underscores)
    202: "0::/kubepods.slice/kubepods-burstable.slice/"
    f"kubepods-burstable-pod{POD_UID.replace('-', '_')}.slice/cri-containerd-0123abcd.scope\n",
    # cgroup v1, Slurm
    203: "12:memory:/slurm/uid_1000/job_777/step_batch\n11:devices:/slurm/uid_1000/job_777/step_batch\n",
}


@pytest.fixture
def proc(tmp_path):
    """A /proc with four GPU processes: one with SLURM_JOB_ID in its environ, three by cgroup only."""
    root = tmp_path / "proc"
    (root / "200").mkdir(parents=True)
    (root / "200" / "environ").write_bytes(b"PATH=/usr/bin\0SLURM_JOB_ID=31337\0SLURM_PROCID=0\0")
    (root / "200" / "cgroup").write_text("0::/user.slice\n")
    for pid, text in CGROUPS.items():
        (root / str(pid)).mkdir()
        (root / str(pid) / "environ").write_bytes(b"PATH=/usr/bin\0")
        (root / str(pid) / "cgroup").write_text(text)
    return root


def make(proc, n=4, **kw):
    gpus = [FakeGpu(i, pids=[200 + i], gpm={2: 61.5, 3: 40.0, 5: 33.0, 10: 70.25}) for i in range(n)]
    for g in gpus:
        g.nvlink_kib = {(fid, link): 1000 for link in range(g.nvlinks) for fid in (138, 139)}
        g.nvlink_errors = {38: 0, 45: 0, 52: 5, 59: 0}
    fake = FakeNvml(gpus, **kw)
    return fake, NvmlCollector(fake, proc_root=proc)


def advance(fake, kib=1024):
    for g in fake.gpus:
        g.energy_mj += 700_000
        g.nvlink_kib = {k: v + kib for k, v in g.nvlink_kib.items()}
        g.nvlink_errors[52] += 2


def test_fields_units_and_jobs(proc):
    fake, c = make(proc)
    first = c.collect(T0)
    advance(fake)
    rows = c.collect(T0 + 1000)
    assert_valid("gpu", first + rows)
    r = rows[0]
    assert (r["gpu"], r["uuid"], r["model"], r["pci_bus_id"], r["lost"]) == (
        0,
        fake.gpus[0].uuid,
        "NVIDIA H100 80GB HBM3",
        "00000000:18:00.0",
        False,
    )
    assert r["power_w"] == 350.0 and r["energy_j"] == 1700.0  # mW -> W, mJ -> J
    assert r["util_gpu_pct"] == 50.0 and r["mem_total_bytes"] == 80 << 30 and r["temp_c"] == 55.0
    assert r["sm_clock_mhz"] == 1980.0 and r["mem_clock_mhz"] == 2619.0 and r["throttle_reasons"] == 0
    assert r["ecc_sbe_total"] == 0 and r["remapped_rows"] == 0
    assert r["pcie_tx_bytes_per_s"] == 1_000_000.0 and r["pcie_rx_bytes_per_s"] == 2_000_000.0
    assert r["nvlink_tx_bytes_per_s"] == 18 * 1024 * 1024  # 18 links x 1024 KiB in 1 s
    assert r["nvlink_errors_per_s"] == 2.0
    assert "nvlink_tx_bytes_per_s" not in first[0]  # a rate needs two readings
    assert [x["job_id"] for x in rows] == ["31337", "4242", POD_UID, "777"]


def test_gpm_needs_two_samples_and_is_absent_where_unsupported(proc):
    fake, c = make(proc)
    fake.gpus[3].gpm = None
    c2 = NvmlCollector(fake, proc_root=proc)
    first = c2.collect(T0)
    assert not any("sm_active_pct" in r for r in first)
    rows = c2.collect(T0 + 1000)
    assert rows[0]["sm_active_pct"] == 61.5 and rows[0]["sm_occupancy_pct"] == 40.0
    assert rows[0]["tensor_active_pct"] == 33.0 and rows[0]["dram_active_pct"] == 70.25
    assert "sm_active_pct" not in rows[3]
    fake.gpus[0].gpm = {2: 250.0}  # out of range from the driver: clamped, others of the set absent
    rows = c2.collect(T0 + 2000)
    assert rows[0]["sm_active_pct"] == 100.0 and "tensor_active_pct" not in rows[0]


def test_not_supported_fields_are_absent_not_zero(proc):
    fake, c = make(proc)
    fake.gpus[1].unsupported = {
        "nvmlDeviceGetPowerUsage",
        "nvmlDeviceGetTotalEccErrors",
        "nvmlDeviceGetRemappedRows",
        "nvmlDeviceGetFieldValues",
        "nvmlDeviceGetCurrentClocksEventReasons",
    }
    c.collect(T0)
    advance(fake)
    rows = c.collect(T0 + 1000)
    assert_valid("gpu", rows)
    for f in (
        "power_w",
        "ecc_sbe_total",
        "ecc_dbe_total",
        "remapped_rows",
        "nvlink_tx_bytes_per_s",
        "nvlink_errors_per_s",
        "throttle_reasons",
    ):
        assert f not in rows[1], f
        assert f in rows[0], f
    assert rows[1]["temp_c"] == 55.0  # the rest of that GPU still reports
    assert c.skipped == []  # NOT_SUPPORTED is expected, not worth a log line


def test_other_errors_leave_the_field_absent_and_are_named(proc, monkeypatch):
    fake, c = make(proc)

    def unknown(h):
        raise pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)

    monkeypatch.setattr(fake, "nvmlDeviceGetPowerUsage", unknown, raising=False)
    rows = c.collect(T0)
    assert all("power_w" not in r for r in rows)
    assert "nvmlDeviceGetPowerUsage (gpu 0): Unknown Error" in c.skipped


def test_lost_gpu_mid_run_others_keep_reporting(proc):
    fake, c = make(proc)
    c.collect(T0)
    advance(fake)
    fake.gpus[2].lost = True
    rows = c.collect(T0 + 1000)
    assert_valid("gpu", rows)
    assert rows[2] == {"ts_ms": T0 + 1000, "gpu": 2, "uuid": fake.gpus[2].uuid, "lost": True}
    assert all(not r["lost"] and "power_w" in r for i, r in enumerate(rows) if i != 2)
    fake.gpus[2].lost = False  # back (after a reset): rates restart instead of spanning the outage
    advance(fake)
    rows = c.collect(T0 + 2000)
    assert not rows[2]["lost"] and "nvlink_tx_bytes_per_s" not in rows[2] and "sm_active_pct" not in rows[2]
    assert rows[1]["nvlink_tx_bytes_per_s"] > 0


def test_gpu_lost_before_start_is_reported_lost_then_attached(proc):
    fake, _ = make(proc)
    fake.gpus[1].lost = True
    c = NvmlCollector(fake, proc_root=proc)
    rows = c.collect(T0)
    assert rows[1]["lost"] is True and rows[1]["gpu"] == 1 and rows[1]["uuid"] == "unknown-gpu-1"
    fake.gpus[1].lost = False
    rows = c.collect(T0 + 1000)
    assert rows[1]["uuid"] == fake.gpus[1].uuid and rows[1]["lost"] is False


def test_xid_events_drained_without_blocking(proc):
    fake, c = make(proc)
    assert all("xid" not in r for r in c.collect(T0))
    fake.inject_xid(1, 48)
    fake.inject_xid(3, 13)
    fake.inject_xid(3, 79)
    rows = c.collect(T0 + 1000)
    assert [r.get("xid") for r in rows] == [None, 48, None, 79]  # the last XID of the tick
    assert all("xid" not in r for r in c.collect(T0 + 2000))  # edge: events are consumed


def test_close_frees_gpm_samples_and_event_set(proc):
    fake, c = make(proc, n=2)
    samples = [s for d in c.devices for s in d.gpm]
    c.close()
    assert all(s.freed for s in samples) and fake._event_sets == [] and not fake.initialized


def test_init_failures(proc):
    with pytest.raises(CollectorUnavailable, match="no NVIDIA driver"):
        NvmlCollector(FakeNvml([], init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED), proc_root=proc)
    with pytest.raises(CollectorError, match="nvmlInit failed"):
        NvmlCollector(FakeNvml([], init_error=pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH), proc_root=proc)
    with pytest.raises(CollectorUnavailable, match="no GPUs"):
        NvmlCollector(FakeNvml([]), proc_root=proc)


def test_real_pynvml_without_gpu_is_unavailable_with_a_clear_message():
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError_LibraryNotFound:
        pass
    else:
        pynvml.nvmlShutdown()
        pytest.skip("this machine has an NVIDIA driver; the no-driver path cannot be exercised here")
    with pytest.raises(CollectorUnavailable) as e:
        NvmlCollector()  # default: the real pynvml module
    assert "NVML Shared Library Not Found" in str(e.value) and "no NVIDIA driver" in str(e.value)


def test_job_lookup_helpers():
    assert job_from_environ(b"A=1\0SLURM_JOB_ID=99\0") == "99" and job_from_environ(b"A=1") is None
    assert job_from_cgroup(CGROUPS[202]) == POD_UID
    assert job_from_cgroup(f"0::/kubepods/burstable/pod{POD_UID}/0123abcd\n") == POD_UID  # cgroupfs driver
    assert job_from_cgroup("0::/user.slice/user-1000.slice\n") is None
