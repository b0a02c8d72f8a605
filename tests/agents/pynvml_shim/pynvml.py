"""`pynvml` for agent processes under test: a directory holding this file goes first on the agent's
PYTHONPATH (tests/agents/harness.py, bench/bench_agent.py), so the agent's own `import pynvml` gets
the fake NVML of tests/agents/fake_nvml_module.py and production code needs no switch for it.

The fake takes the real module's constants and error classes (tests/collectors/fake_pynvml.py), so
nvidia-ml-py's pynvml is loaded first, from its installed file, under its own name; then this
module puts the fake in its place in sys.modules, which is what `import pynvml` returns.
"""

import importlib.metadata
import importlib.util
import sys

_path = importlib.metadata.distribution("nvidia-ml-py").locate_file("pynvml.py")
_spec = importlib.util.spec_from_file_location("pynvml", _path)
_real = importlib.util.module_from_spec(_spec)
sys.modules["pynvml"] = _real
_spec.loader.exec_module(_real)

from tests.agents import fake_nvml_module  # noqa: E402 (needs the real module in place first)

sys.modules["pynvml"] = fake_nvml_module
