"""A module-shaped fake NVML for agent processes, which import it as `pynvml` (tests/agents/pynvml_shim/).

A test can so run the real agent (real NvmlCollector, real process) on a machine without GPUs. This
module is the fake pynvml of the collector tests (tests/collectors/fake_pynvml.py, which answers with
the real module's error codes) over `GOODPUT_FAKE_GPUS` (default 8) typical busy H100s. When
`GOODPUT_FAKE_NVML_LOST_FILE` names a file, the GPU indices written in it (whitespace-separated) answer
NVML_ERROR_GPU_IS_LOST from then on, and answer again once removed from it: a fault test's way to lose
a GPU under a running agent.
"""

from __future__ import annotations

import os
import threading
import time

import pynvml as _real

from tests.collectors.fake_pynvml import FakeNvml
from tests.collectors.trees import typical_gpus

_nvml = FakeNvml(typical_gpus(int(os.environ.get("GOODPUT_FAKE_GPUS", "8"))))


def _follow_lost_file(path: str) -> None:
    while True:
        try:
            with open(path) as f:
                lost = {int(x) for x in f.read().split()}
        except (OSError, ValueError):
            lost = set()
        for i, gpu in enumerate(_nvml.gpus):
            gpu.lost = i in lost
        time.sleep(0.1)


if os.environ.get("GOODPUT_FAKE_NVML_LOST_FILE"):
    threading.Thread(
        target=_follow_lost_file, args=(os.environ["GOODPUT_FAKE_NVML_LOST_FILE"],), daemon=True
    ).start()

# The fake's functions and the real module's constants and errors become this module's attributes,
# so a lookup costs what it costs on the real module (the agent benchmark measures the agent, not
# the shim); anything else is still refused by FakeNvml.__getattr__.
globals().update({name: getattr(_nvml, name) for name in dir(type(_nvml)) if name.startswith("nvml")})
globals().update(
    {name: getattr(_real, name) for name in dir(_real) if name.startswith(("NVML_", "NVMLError"))}
)
c_nvmlGpmMetricsGet_t = _nvml.c_nvmlGpmMetricsGet_t


def __getattr__(name: str):
    return getattr(_nvml, name)
