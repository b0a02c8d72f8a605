"""The fake NVML as a module named `pynvml`, for an agent installed in its own venv (no repository on its
path). tests/agents/test_agent_only_install.py copies this file as `pynvml.py`, next to copies of
tests/collectors/{fake_pynvml,trees}.py, into a directory put first on the agent's PYTHONPATH, so the
agent's plain `import pynvml` finds the fake, as it would find nvidia-ml-py's module on a GPU node.

The fake takes its constants and error classes from the real module (nvidia-ml-py, a base dependency),
which this file shadows; so the real one is loaded from the rest of the path while the fake imports it.
"""

from __future__ import annotations

import importlib.machinery
import importlib.util
import os
import sys

_here = os.path.dirname(os.path.abspath(__file__))
_spec = importlib.machinery.PathFinder.find_spec(
    "pynvml", [p for p in sys.path if os.path.abspath(p or os.curdir) != _here]
)
assert _spec is not None and _spec.loader is not None, "nvidia-ml-py is not installed in this venv"
_real = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_real)
_self = sys.modules[__name__]
sys.modules["pynvml"] = _real
try:
    from tests.collectors.fake_pynvml import FakeNvml
    from tests.collectors.trees import typical_gpus
finally:
    sys.modules["pynvml"] = _self

_nvml = FakeNvml(typical_gpus(int(os.environ.get("GOODPUT_FAKE_GPUS", "8"))))
globals().update({name: getattr(_nvml, name) for name in dir(type(_nvml)) if name.startswith("nvml")})
globals().update(
    {name: getattr(_real, name) for name in dir(_real) if name.startswith(("NVML_", "NVMLError"))}
)
c_nvmlGpmMetricsGet_t = _nvml.c_nvmlGpmMetricsGet_t


def __getattr__(name: str):
    return getattr(_nvml, name)
