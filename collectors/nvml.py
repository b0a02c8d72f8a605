"""GPUs through NVML (package nvidia-ml-py, module pynvml): one row of kind "gpu" per device per tick.

Per-field degradation is the point of the structure below. Every NVML call goes through `_call`:
NOT_SUPPORTED (and the other "this device cannot tell you" codes) leaves the field absent, never
zero; GPU_IS_LOST turns the whole device's row into `{gpu, uuid, lost: True}` for this tick while the
other GPUs keep reporting (a lost GPU is the very event goodput must see); any other error leaves the
field absent and is noted in `skipped` with the call and the GPU, for the agent's log.

Rates (NVLink bytes and errors) come from NVML's cumulative counters through `collectors.counters`.
GPM metrics (Hopper+) are computed by NVML from two samples an interval apart, so the collector keeps
the previous sample of each GPU between ticks and reports from the second tick on. XID errors arrive
through one event set registered at start; each tick drains it without waiting (timeout 0 ms).

The pynvml module is a constructor parameter so tests pass a fake with the same functions and the
real module's NVMLError classes; the collector cannot tell them apart.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from collectors.base import CollectorError, CollectorUnavailable, Row
from collectors.counters import Counters, sum_rates

PCIE_KB = 1000  # nvmlDeviceGetPcieThroughput reports "KB/s" (NVML header); taken as SI kilobytes
NVLINK_KIB = 1024  # NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX/RX count KiB
FI_NVLINK_TX, FI_NVLINK_RX = 138, 139
FI_NVLINK_ERRORS = {38: "crc_flit", 45: "crc_data", 52: "replay", 59: "recovery"}  # totals over lanes
GPM_METRICS = {2: "sm_active_pct", 3: "sm_occupancy_pct", 5: "tensor_active_pct", 10: "dram_active_pct"}
MAX_EVENTS_PER_TICK = 256  # bound the XID drain so an event storm cannot stall the tick
_VALUE_FIELDS = ("dVal", "uiVal", "ulVal", "ullVal", "sllVal", "siVal", "usVal")  # by nvmlValueType_t


class _Lost(Exception):
    """NVML said GPU_IS_LOST for the device being read."""


@dataclass
class _Device:
    """What is kept per GPU between ticks: identity, the NVLinks found at start, GPM samples."""

    index: int
    handle: Any = None
    uuid: str | None = None
    model: str | None = None
    pci_bus_id: str | None = None
    nvlinks: list[int] = field(default_factory=list)
    gpm: list[Any] | None = None  # [previous, current] sample buffers when GPM is supported
    gpm_primed: bool = False  # previous buffer holds a sample


@dataclass
class GpuSample:
    """One GPU's reading for one tick, in NVML's own units; None where NVML could not say."""

    index: int
    uuid: str | None
    lost: bool = False
    model: str | None = None
    pci_bus_id: str | None = None
    util_gpu: int | None = None
    util_mem: int | None = None
    mem_used: int | None = None
    mem_total: int | None = None
    power_mw: int | None = None
    energy_mj: int | None = None
    temp_c: int | None = None
    sm_clock_mhz: int | None = None
    mem_clock_mhz: int | None = None
    throttle_reasons: int | None = None
    ecc_corrected: int | None = None
    ecc_uncorrected: int | None = None
    remapped_rows: int | None = None
    pcie_tx_kbs: int | None = None
    pcie_rx_kbs: int | None = None
    nvlink: dict[tuple[int, int], int] = field(default_factory=dict)
    """(field id, link or 0 for totals) -> cumulative counter (KiB for 138/139, count for errors)."""
    gpm: dict[str, float] = field(default_factory=dict)
    xid: int | None = None
    pids: list[int] = field(default_factory=list)


def _text(v: Any) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


_SLURM_CGROUP = re.compile(r"/job_(\d+)(?:/|$)")
_POD_CGROUP = re.compile(r"pod([0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12})")


def job_from_environ(data: bytes) -> str | None:
    """SLURM_JOB_ID from a /proc/<pid>/environ blob (NUL-separated KEY=value)."""
    for item in data.split(b"\0"):
        if item.startswith(b"SLURM_JOB_ID="):
            return item[13:].decode(errors="replace") or None
    return None


def job_from_cgroup(text: str) -> str | None:
    """Slurm job id (`.../job_1234/...`) or Kubernetes pod UID (`kubepods...pod<uid>...`, where the
    systemd driver writes the UID's dashes as underscores) from /proc/<pid>/cgroup."""
    for line in text.splitlines():
        path = line.split(":", 2)[-1]
        m = _SLURM_CGROUP.search(path)
        if m:
            return m.group(1)
        if "kubepods" in path:
            m = _POD_CGROUP.search(path)
            if m:
                return m.group(1).replace("_", "-")
    return None


def job_for_pid(proc_root: Path, pid: int) -> str | None:
    """The job a process belongs to: its SLURM_JOB_ID if its environ is readable, else its cgroup."""
    base = proc_root / str(pid)
    try:
        job = job_from_environ((base / "environ").read_bytes())
        if job:
            return job
    except OSError:
        pass  # another user's environ is root-only; the cgroup file is world-readable
    try:
        return job_from_cgroup((base / "cgroup").read_text())
    except OSError:
        return None


class NvmlCollector:
    """Rows of kind "gpu". `nvml`: the pynvml module (default: import it). `proc_root`: procfs mount
    used to map GPU process ids to jobs (the host's, so that NVML's host pids resolve)."""

    name = "nvml"
    kind = "gpu"

    def __init__(self, nvml: ModuleType | None = None, *, proc_root: str | Path = "/proc") -> None:
        if nvml is None:
            try:
                import pynvml
            except ImportError as e:
                raise CollectorUnavailable(
                    "python package nvidia-ml-py (module pynvml) is not installed"
                ) from e
            nvml = pynvml
        self.nvml = nvml
        self.proc_root = Path(proc_root)
        self.counters = Counters()
        self.skipped: list[str] = []
        self._jobs: dict[int, str | None] = {}
        self._absent = {
            nvml.NVML_ERROR_NOT_SUPPORTED,
            nvml.NVML_ERROR_NO_PERMISSION,
            nvml.NVML_ERROR_NOT_FOUND,
            nvml.NVML_ERROR_NO_DATA,
            nvml.NVML_ERROR_FUNCTION_NOT_FOUND,
        }
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as e:
            if e.value in (nvml.NVML_ERROR_LIBRARY_NOT_FOUND, nvml.NVML_ERROR_DRIVER_NOT_LOADED):
                raise CollectorUnavailable(
                    f"nvmlInit failed: {e} — no NVIDIA driver on this node (libnvidia-ml.so.1 missing or "
                    f"driver not loaded); the GPU collector is off"
                ) from e
            raise CollectorError(f"nvmlInit failed: {e}; check the NVIDIA driver (nvidia-smi)") from e
        try:
            count = nvml.nvmlDeviceGetCount()
        except nvml.NVMLError as e:
            nvml.nvmlShutdown()
            raise CollectorError(f"nvmlDeviceGetCount failed: {e}") from e
        if count == 0:
            nvml.nvmlShutdown()
            raise CollectorUnavailable("NVML found no GPUs on this node")
        self.devices = [_Device(i) for i in range(count)]
        self._events = self._call(None, "nvmlEventSetCreate")
        for dev in self.devices:
            try:
                self._attach(dev)
            except _Lost:
                pass  # retried every tick until the GPU answers

    # -- NVML access ---------------------------------------------------------------------------

    def _call(self, dev: _Device | None, fn: str, *args: Any) -> Any:
        """Call nvml.<fn>; None for an unanswerable field, _Lost for a lost GPU (see module doc)."""
        try:
            return getattr(self.nvml, fn)(*args)
        except self.nvml.NVMLError as e:
            if e.value == self.nvml.NVML_ERROR_GPU_IS_LOST:
                raise _Lost() from e
            if e.value not in self._absent:
                where = "" if dev is None else f" (gpu {dev.index})"
                self.skipped.append(f"{fn}{where}: {e}")
            return None

    def _attach(self, dev: _Device) -> None:
        """Identity, NVLinks, XID registration and GPM buffers; done once per GPU that answers."""
        nv = self.nvml
        dev.handle = self._call(dev, "nvmlDeviceGetHandleByIndex", dev.index)
        if dev.handle is None:
            return
        uuid = self._call(dev, "nvmlDeviceGetUUID", dev.handle)
        dev.uuid = _text(uuid) if uuid is not None else None
        name = self._call(dev, "nvmlDeviceGetName", dev.handle)
        dev.model = _text(name) if name is not None else None
        pci = self._call(dev, "nvmlDeviceGetPciInfo", dev.handle)
        dev.pci_bus_id = _text(pci.busId) if pci is not None else None
        dev.nvlinks = []
        for link in range(nv.NVML_NVLINK_MAX_LINKS):
            try:
                active = nv.nvmlDeviceGetNvLinkState(dev.handle, link)
            except nv.NVMLError as e:
                if e.value == nv.NVML_ERROR_GPU_IS_LOST:
                    raise _Lost() from e
                break  # NOT_SUPPORTED (no NVLink) or INVALID_ARGUMENT (past the last link)
            if active:
                dev.nvlinks.append(link)
        if self._events is not None:
            self._call(
                dev, "nvmlDeviceRegisterEvents", dev.handle, nv.nvmlEventTypeXidCriticalError, self._events
            )
        support = self._call(dev, "nvmlGpmQueryDeviceSupport", dev.handle)
        if support is not None and support.isSupportedDevice:
            dev.gpm = [nv.nvmlGpmSampleAlloc(), nv.nvmlGpmSampleAlloc()]

    def _drain_xids(self) -> dict[int, int]:
        """GPU index -> last XID seen since the previous tick."""
        nv = self.nvml
        xids: dict[int, int] = {}
        if self._events is None:
            return xids
        for _ in range(MAX_EVENTS_PER_TICK):
            try:
                ev = nv.nvmlEventSetWait_v2(self._events, 0)
            except nv.NVMLError as e:
                if e.value != nv.NVML_ERROR_TIMEOUT:  # TIMEOUT: no event pending
                    self.skipped.append(f"nvmlEventSetWait_v2: {e}")
                break
            if ev.eventType & nv.nvmlEventTypeXidCriticalError:
                try:
                    xids[nv.nvmlDeviceGetIndex(ev.device)] = int(ev.eventData)
                except nv.NVMLError as e:
                    self.skipped.append(f"nvmlDeviceGetIndex (XID {ev.eventData} event): {e}")
        return xids

    def _gpm(self, dev: _Device) -> dict[str, float]:
        """GPM metrics over the interval since the previous tick's sample (empty on the first)."""
        nv = self.nvml
        out: dict[str, float] = {}
        assert dev.gpm is not None  # only called for devices with GPM support
        prev, cur = dev.gpm
        if self._call(dev, "nvmlGpmSampleGet", dev.handle, cur) is None:
            return out
        if dev.gpm_primed:
            mg = nv.c_nvmlGpmMetricsGet_t()
            mg.version = nv.NVML_GPM_METRICS_GET_VERSION
            mg.numMetrics = len(GPM_METRICS)
            mg.sample1, mg.sample2 = prev, cur
            for i, metric in enumerate(GPM_METRICS):
                mg.metrics[i].metricId = metric
            if self._call(dev, "nvmlGpmMetricsGet", mg) is not None:
                for i, name in enumerate(GPM_METRICS.values()):
                    if mg.metrics[i].nvmlReturn == nv.NVML_SUCCESS:
                        out[name] = min(max(float(mg.metrics[i].value), 0.0), 100.0)
        dev.gpm = [cur, prev]
        dev.gpm_primed = True
        return out

    def read_device(self, dev: _Device) -> GpuSample:
        """One GPU's sample; raises _Lost when NVML reports the GPU lost."""
        nv, h = self.nvml, dev.handle

        def get(fn: str, *args: Any) -> Any:
            return self._call(dev, fn, h, *args)

        s = GpuSample(dev.index, dev.uuid, model=dev.model, pci_bus_id=dev.pci_bus_id)
        util = get("nvmlDeviceGetUtilizationRates")
        if util is not None:
            s.util_gpu, s.util_mem = util.gpu, util.memory
        mem = get("nvmlDeviceGetMemoryInfo")
        if mem is not None:
            s.mem_used, s.mem_total = mem.used, mem.total
        s.power_mw = get("nvmlDeviceGetPowerUsage")
        s.energy_mj = get("nvmlDeviceGetTotalEnergyConsumption")
        s.temp_c = get("nvmlDeviceGetTemperature", nv.NVML_TEMPERATURE_GPU)
        s.sm_clock_mhz = get("nvmlDeviceGetClockInfo", nv.NVML_CLOCK_SM)
        s.mem_clock_mhz = get("nvmlDeviceGetClockInfo", nv.NVML_CLOCK_MEM)
        s.throttle_reasons = get("nvmlDeviceGetCurrentClocksEventReasons")
        s.ecc_corrected = get(
            "nvmlDeviceGetTotalEccErrors", nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, nv.NVML_VOLATILE_ECC
        )
        s.ecc_uncorrected = get(
            "nvmlDeviceGetTotalEccErrors", nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC
        )
        rows = get("nvmlDeviceGetRemappedRows")
        if rows is not None:
            s.remapped_rows = rows[0] + rows[1]  # (correctable, uncorrectable, pending, failure)
        s.pcie_tx_kbs = get("nvmlDeviceGetPcieThroughput", nv.NVML_PCIE_UTIL_TX_BYTES)
        s.pcie_rx_kbs = get("nvmlDeviceGetPcieThroughput", nv.NVML_PCIE_UTIL_RX_BYTES)
        if dev.nvlinks:
            ids = [(fid, link) for link in dev.nvlinks for fid in (FI_NVLINK_TX, FI_NVLINK_RX)]
            ids += [(fid, 0) for fid in FI_NVLINK_ERRORS]
            for v in get("nvmlDeviceGetFieldValues", ids) or ():
                if v.nvmlReturn == nv.NVML_SUCCESS:
                    s.nvlink[(v.fieldId, v.scopeId)] = int(getattr(v.value, _VALUE_FIELDS[v.valueType]))
        if dev.gpm is not None:
            s.gpm = self._gpm(dev)
        procs = get("nvmlDeviceGetComputeRunningProcesses")
        s.pids = sorted(p.pid for p in procs or ())
        return s

    def read(self) -> list[GpuSample]:
        """Every GPU's sample for this tick, lost GPUs included (the pure-ish half of `collect`)."""
        xids = self._drain_xids()
        samples = []
        for dev in self.devices:
            try:
                if dev.handle is None:
                    self._attach(dev)
                s = (
                    self.read_device(dev)
                    if dev.handle is not None
                    else GpuSample(dev.index, dev.uuid, lost=True)
                )
            except _Lost:
                s = GpuSample(dev.index, dev.uuid, lost=True)
                self.counters.forget(f"gpu{dev.index}")
                dev.gpm_primed = False
            s.xid = xids.get(dev.index)
            samples.append(s)
        return samples

    def close(self) -> None:
        """Free GPM buffers and the event set, and shut NVML down."""
        nv = self.nvml
        for dev in self.devices:
            for sample in dev.gpm or ():
                self._call(dev, "nvmlGpmSampleFree", sample)
        if self._events is not None:
            self._call(None, "nvmlEventSetFree", self._events)
        nv.nvmlShutdown()

    # -- rows ----------------------------------------------------------------------------------

    def collect(self, now_ms: int) -> list[Row]:
        self.skipped = []
        samples = self.read()
        live = {p for s in samples for p in s.pids}
        self._jobs = {p: j for p, j in self._jobs.items() if p in live}
        return [self._row(s, now_ms) for s in samples]

    def _job(self, pids: list[int]) -> str | None:
        for pid in pids:
            if pid not in self._jobs:
                self._jobs[pid] = job_for_pid(self.proc_root, pid)
            if self._jobs[pid]:
                return self._jobs[pid]
        return None

    def _row(self, s: GpuSample, now_ms: int) -> Row:
        row: Row = {
            "ts_ms": now_ms,
            "gpu": s.index,
            "uuid": s.uuid or f"unknown-gpu-{s.index}",
            "lost": s.lost,
        }
        if s.xid is not None:
            row["xid"] = s.xid
        if s.lost:
            return row
        src = f"gpu{s.index}"
        nvlink_rates: dict[str, list[float | None]] = {"tx": [], "rx": [], "err": []}
        for (fid, scope), value in sorted(s.nvlink.items()):
            which = {FI_NVLINK_TX: "tx", FI_NVLINK_RX: "rx"}.get(fid, "err")
            scale = NVLINK_KIB if which != "err" else 1.0
            nvlink_rates[which].append(
                self.counters.rate(src, f"fi{fid}.{scope}", value, now_ms, scale=scale)
            )
        values: dict[str, Any] = {
            "model": s.model,
            "pci_bus_id": s.pci_bus_id,
            "job_id": self._job(s.pids),
            "util_gpu_pct": None if s.util_gpu is None else float(s.util_gpu),
            "util_mem_pct": None if s.util_mem is None else float(s.util_mem),
            "mem_used_bytes": s.mem_used,
            "mem_total_bytes": s.mem_total,
            "power_w": None if s.power_mw is None else s.power_mw / 1000.0,
            "energy_j": None if s.energy_mj is None else s.energy_mj / 1000.0,
            "temp_c": None if s.temp_c is None else float(s.temp_c),
            "sm_clock_mhz": None if s.sm_clock_mhz is None else float(s.sm_clock_mhz),
            "mem_clock_mhz": None if s.mem_clock_mhz is None else float(s.mem_clock_mhz),
            "throttle_reasons": s.throttle_reasons,
            "ecc_sbe_total": s.ecc_corrected,
            "ecc_dbe_total": s.ecc_uncorrected,
            "remapped_rows": s.remapped_rows,
            "pcie_tx_bytes_per_s": None if s.pcie_tx_kbs is None else float(s.pcie_tx_kbs * PCIE_KB),
            "pcie_rx_bytes_per_s": None if s.pcie_rx_kbs is None else float(s.pcie_rx_kbs * PCIE_KB),
            "nvlink_tx_bytes_per_s": sum_rates(nvlink_rates["tx"]),
            "nvlink_rx_bytes_per_s": sum_rates(nvlink_rates["rx"]),
            "nvlink_errors_per_s": sum_rates(nvlink_rates["err"]),
            **s.gpm,
        }
        row.update({k: v for k, v in values.items() if v is not None})
        return row
