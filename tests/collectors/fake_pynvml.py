"""A fake pynvml for tests: the real module's function names, constants and NVMLError classes, over
GPUs whose readings the test sets.

Constants and error classes are the real module's (imported from pynvml, which imports fine without a
GPU), so `except pynvml.NVMLError` and `e.value == NVML_ERROR_NOT_SUPPORTED` in the collector behave
exactly as on a real node. Only functions the collector is meant to call are implemented; anything
else raises AttributeError rather than silently reaching the real library.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pynvml as _real


def _err(code: int) -> _real.NVMLError:
    return _real.NVMLError(code)


@dataclass
class FakeGpu:
    """One GPU's current readings; tests mutate them between ticks."""

    index: int
    uuid: str = ""
    name: str = "NVIDIA H100 80GB HBM3"
    util_gpu: int = 50
    util_mem: int = 20
    mem_used: int = 10 << 30
    mem_total: int = 80 << 30
    power_mw: int = 350_000
    energy_mj: int = 1_000_000
    temp: int = 55
    sm_clock: int = 1980
    mem_clock: int = 2619
    throttle: int = 0
    ecc: tuple[int, int] = (0, 0)
    remapped: tuple[int, int, int, int] = (0, 0, 0, 0)
    pcie_kbs: tuple[int, int] = (1000, 2000)  # tx, rx
    nvlinks: int = 18
    nvlink_kib: dict[tuple[int, int], int] = field(default_factory=dict)  # (138|139, link) -> KiB
    nvlink_errors: dict[int, int] = field(default_factory=dict)  # total field id -> count
    gpm: dict[int, float] | None = None  # metric id -> value; None: GPM not supported
    pids: list[int] = field(default_factory=list)
    unsupported: set[str] = field(default_factory=set)  # function names answering NOT_SUPPORTED
    lost: bool = False

    def __post_init__(self) -> None:
        self.uuid = self.uuid or f"GPU-{self.index:08x}-1111-2222-3333-444455556666"
        self.handle = SimpleNamespace(index=self.index)


class FakeGpmSample:
    def __init__(self) -> None:
        self.gpu: int | None = None
        self.seq = -1
        self.values: dict[int, float] = {}
        self.freed = False


class FakeMetricsGet:
    """Stands in for c_nvmlGpmMetricsGet_t: the same attribute names."""

    def __init__(self) -> None:
        self.version = 0
        self.numMetrics = 0
        self.sample1 = self.sample2 = None
        self.metrics = _MetricArray()


class _MetricArray(dict):
    """The struct's fixed array of NVML_GPM_METRIC_MAX entries, built only as touched (the bench
    would otherwise time 477 Python objects the real ctypes struct allocates in one C call)."""

    def __missing__(self, i: int) -> SimpleNamespace:
        if not 0 <= i < _real.NVML_GPM_METRIC_MAX:
            raise IndexError(i)
        self[i] = SimpleNamespace(metricId=0, nvmlReturn=_real.NVML_SUCCESS, value=0.0)
        return self[i]


class FakeNvml:
    """Pass an instance where the collector expects the pynvml module."""

    c_nvmlGpmMetricsGet_t = FakeMetricsGet

    def __init__(self, gpus: list[FakeGpu], *, init_error: int | None = None) -> None:
        self.gpus = gpus
        self.init_error = init_error
        self.initialized = False
        self.calls: dict[str, int] = {}
        self._event_sets: list[dict[str, Any]] = []
        self._gpm_seq = 0

    def __getattr__(self, name: str) -> Any:
        if name.startswith(("NVML_", "NVMLError", "nvmlEventType")):
            return getattr(_real, name)
        raise AttributeError(f"fake pynvml does not implement {name}")

    # -- helpers for tests ---------------------------------------------------------------------

    def inject_xid(self, index: int, code: int) -> None:
        for es in self._event_sets:
            if index in es["gpus"]:
                es["queue"].append(
                    SimpleNamespace(
                        device=self.gpus[index].handle,
                        eventType=_real.nvmlEventTypeXidCriticalError,
                        eventData=code,
                        gpuInstanceId=0,
                        computeInstanceId=0,
                    )
                )

    def _gpu(self, handle: Any, fn: str) -> FakeGpu:
        self.calls[fn] = self.calls.get(fn, 0) + 1
        if not self.initialized:
            raise _err(_real.NVML_ERROR_UNINITIALIZED)
        g = self.gpus[handle.index]
        if g.lost:
            raise _err(_real.NVML_ERROR_GPU_IS_LOST)
        if fn in g.unsupported:
            raise _err(_real.NVML_ERROR_NOT_SUPPORTED)
        return g

    # -- library ---------------------------------------------------------------------------------

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise _err(self.init_error)
        self.initialized = True

    def nvmlShutdown(self) -> None:
        self.initialized = False

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> Any:
        g = self.gpus[index]
        if g.lost:
            raise _err(_real.NVML_ERROR_GPU_IS_LOST)
        return g.handle

    def nvmlDeviceGetIndex(self, handle: Any) -> int:
        return self._gpu(handle, "nvmlDeviceGetIndex").index

    # -- identity --------------------------------------------------------------------------------

    def nvmlDeviceGetUUID(self, h: Any) -> str:
        return self._gpu(h, "nvmlDeviceGetUUID").uuid

    def nvmlDeviceGetName(self, h: Any) -> str:
        return self._gpu(h, "nvmlDeviceGetName").name

    def nvmlDeviceGetPciInfo(self, h: Any) -> Any:
        g = self._gpu(h, "nvmlDeviceGetPciInfo")
        return SimpleNamespace(busId=f"00000000:{0x18 + g.index:02X}:00.0".encode())

    # -- readings --------------------------------------------------------------------------------

    def nvmlDeviceGetUtilizationRates(self, h: Any) -> Any:
        g = self._gpu(h, "nvmlDeviceGetUtilizationRates")
        return SimpleNamespace(gpu=g.util_gpu, memory=g.util_mem)

    def nvmlDeviceGetMemoryInfo(self, h: Any) -> Any:
        g = self._gpu(h, "nvmlDeviceGetMemoryInfo")
        return SimpleNamespace(used=g.mem_used, total=g.mem_total, free=g.mem_total - g.mem_used)

    def nvmlDeviceGetPowerUsage(self, h: Any) -> int:
        return self._gpu(h, "nvmlDeviceGetPowerUsage").power_mw

    def nvmlDeviceGetTotalEnergyConsumption(self, h: Any) -> int:
        return self._gpu(h, "nvmlDeviceGetTotalEnergyConsumption").energy_mj

    def nvmlDeviceGetTemperature(self, h: Any, sensor: int) -> int:
        assert sensor == _real.NVML_TEMPERATURE_GPU
        return self._gpu(h, "nvmlDeviceGetTemperature").temp

    def nvmlDeviceGetClockInfo(self, h: Any, clock: int) -> int:
        g = self._gpu(h, "nvmlDeviceGetClockInfo")
        return {_real.NVML_CLOCK_SM: g.sm_clock, _real.NVML_CLOCK_MEM: g.mem_clock}[clock]

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: Any) -> int:
        return self._gpu(h, "nvmlDeviceGetCurrentClocksEventReasons").throttle

    def nvmlDeviceGetTotalEccErrors(self, h: Any, error_type: int, counter_type: int) -> int:
        assert counter_type == _real.NVML_VOLATILE_ECC
        return self._gpu(h, "nvmlDeviceGetTotalEccErrors").ecc[error_type]

    def nvmlDeviceGetRemappedRows(self, h: Any) -> tuple[int, int, int, int]:
        return self._gpu(h, "nvmlDeviceGetRemappedRows").remapped

    def nvmlDeviceGetPcieThroughput(self, h: Any, counter: int) -> int:
        g = self._gpu(h, "nvmlDeviceGetPcieThroughput")
        return g.pcie_kbs[{_real.NVML_PCIE_UTIL_TX_BYTES: 0, _real.NVML_PCIE_UTIL_RX_BYTES: 1}[counter]]

    def nvmlDeviceGetNvLinkState(self, h: Any, link: int) -> int:
        g = self._gpu(h, "nvmlDeviceGetNvLinkState")
        if g.nvlinks == 0:
            raise _err(_real.NVML_ERROR_NOT_SUPPORTED)
        if link >= g.nvlinks:
            raise _err(_real.NVML_ERROR_INVALID_ARGUMENT)
        return _real.NVML_FEATURE_ENABLED

    def nvmlDeviceGetFieldValues(self, h: Any, ids: list[tuple[int, int]]) -> list[Any]:
        g = self._gpu(h, "nvmlDeviceGetFieldValues")
        out = []
        for fid, scope in ids:
            value = g.nvlink_kib.get((fid, scope), 0) if fid in (138, 139) else g.nvlink_errors.get(fid)
            ret = _real.NVML_SUCCESS if value is not None else _real.NVML_ERROR_NOT_SUPPORTED
            out.append(
                SimpleNamespace(
                    fieldId=fid,
                    scopeId=scope,
                    timestamp=0,
                    latencyUsec=0,
                    valueType=_real.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG,
                    nvmlReturn=ret,
                    value=SimpleNamespace(ullVal=value or 0),
                )
            )
        return out

    def nvmlDeviceGetComputeRunningProcesses(self, h: Any) -> list[Any]:
        g = self._gpu(h, "nvmlDeviceGetComputeRunningProcesses")
        return [SimpleNamespace(pid=p, usedGpuMemory=1 << 30) for p in g.pids]

    # -- events ----------------------------------------------------------------------------------

    def nvmlEventSetCreate(self) -> Any:
        es = {"gpus": set(), "queue": []}
        self._event_sets.append(es)
        return es

    def nvmlDeviceRegisterEvents(self, h: Any, types: int, es: dict) -> None:
        g = self._gpu(h, "nvmlDeviceRegisterEvents")
        assert types & _real.nvmlEventTypeXidCriticalError
        es["gpus"].add(g.index)

    def nvmlEventSetWait_v2(self, es: dict, timeout_ms: int) -> Any:
        self.calls["nvmlEventSetWait_v2"] = self.calls.get("nvmlEventSetWait_v2", 0) + 1
        assert timeout_ms == 0, "the collector must never block on the event set"
        if not es["queue"]:
            raise _err(_real.NVML_ERROR_TIMEOUT)
        return es["queue"].pop(0)

    def nvmlEventSetFree(self, es: dict) -> None:
        self._event_sets.remove(es)

    # -- GPM -------------------------------------------------------------------------------------

    def nvmlGpmQueryDeviceSupport(self, h: Any) -> Any:
        g = self._gpu(h, "nvmlGpmQueryDeviceSupport")
        return SimpleNamespace(version=1, isSupportedDevice=int(g.gpm is not None))

    def nvmlGpmSampleAlloc(self) -> FakeGpmSample:
        return FakeGpmSample()

    def nvmlGpmSampleFree(self, sample: FakeGpmSample) -> None:
        sample.freed = True

    def nvmlGpmSampleGet(self, h: Any, sample: FakeGpmSample) -> FakeGpmSample:
        g = self._gpu(h, "nvmlGpmSampleGet")
        if g.gpm is None:
            raise _err(_real.NVML_ERROR_NOT_SUPPORTED)
        self._gpm_seq += 1
        sample.gpu, sample.seq, sample.values = g.index, self._gpm_seq, dict(g.gpm)
        return sample

    def nvmlGpmMetricsGet(self, mg: FakeMetricsGet) -> FakeMetricsGet:
        """Like NVML: needs two samples of one GPU, the first older; the fake reports the values the
        GPU held at the second sample as the activity over the interval."""
        s1, s2 = mg.sample1, mg.sample2
        if mg.version != _real.NVML_GPM_METRICS_GET_VERSION:
            raise _err(_real.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
        if s1 is None or s2 is None or s1.gpu != s2.gpu or not 0 <= s1.seq < s2.seq:
            raise _err(_real.NVML_ERROR_INVALID_ARGUMENT)
        for m in (mg.metrics[i] for i in range(mg.numMetrics)):
            if m.metricId in s2.values:
                m.value, m.nvmlReturn = s2.values[m.metricId], _real.NVML_SUCCESS
            else:
                m.value, m.nvmlReturn = 0.0, _real.NVML_ERROR_NOT_SUPPORTED
        return mg
