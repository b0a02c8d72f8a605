"""A module-shaped fake NVML for agent processes: `GOODPUT_NVML_MODULE=tests.agents.fake_nvml_module`.

The agent imports its NVML binding by module name, so a test can run the real agent (real
NvmlCollector, real process) on a machine without GPUs. This module is the fake pynvml of the
collector tests (tests/collectors/fake_pynvml.py, which answers with the real module's error codes)
over `GOODPUT_FAKE_GPUS` (default 8) typical busy H100s.
"""

from __future__ import annotations

import os

import pynvml as _real

from tests.collectors.fake_pynvml import FakeNvml
from tests.collectors.trees import typical_gpus

_nvml = FakeNvml(typical_gpus(int(os.environ.get("GOODPUT_FAKE_GPUS", "8"))))

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
