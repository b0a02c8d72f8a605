"""`pip install goodput` without extras is the node agent's install: built into a fresh venv, it holds no
analytics stack, runs the real agent against the fixture node and a real broker, and refuses the
pipeline's commands in one line (docs/agent.md, "The agent-only install")."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tests.agents.harness import NODE_KINDS, ROOT, FixtureNode, seqs

pytestmark = [pytest.mark.kafka, pytest.mark.slow]

ANALYTICS = ("chdb", "pyarrow", "polars", "pandas", "numpy", "clickhouse_driver", "tqdm")


@pytest.fixture(scope="module")
def agent_venv(tmp_path_factory) -> Path:
    """A venv with `pip install <a copy of the repository>`. A copy: pip builds in the source tree,
    which must not gain build/ and egg-info directories while other tests read it."""
    tmp = tmp_path_factory.mktemp("agent-only")
    src = tmp / "src"
    src.mkdir()
    packages = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]["find"]
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    for pattern in packages["include"]:
        top = pattern.rstrip("*")
        shutil.copytree(ROOT / top, src / top, ignore=shutil.ignore_patterns("__pycache__"))
    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    subprocess.run(
        [str(venv / "bin" / "pip"), "install", "--quiet", "--disable-pip-version-check", str(src)],
        check=True,
        timeout=600,
    )
    return venv


def _fake_pynvml_path(root: Path) -> Path:
    """A directory whose `pynvml` is the fake over 8 typical GPUs: the repository's shim
    (tests/agents/pynvml_shim/pynvml.py) beside copies of the test modules it imports, since the
    agent-only venv has no repository on its path."""
    root.mkdir(parents=True)
    shutil.copy(ROOT / "tests" / "agents" / "pynvml_shim" / "pynvml.py", root / "pynvml.py")
    for name in (
        "tests/__init__.py",
        "tests/agents/__init__.py",
        "tests/agents/fake_nvml_module.py",
        "tests/collectors/__init__.py",
        "tests/collectors/fake_pynvml.py",
        "tests/collectors/trees.py",
    ):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, root / name)
    return root


class AgentOnlyNode(FixtureNode):
    """The fixture node, with the agent run from the agent-only venv instead of the repository."""

    def __init__(self, root: Path, bootstrap: str, venv: Path) -> None:
        super().__init__(root, bootstrap)
        self.venv = venv
        self.fake_path = _fake_pynvml_path(root / "fake-nvml")

    def start(self) -> None:
        env = dict(os.environ, PYTHONPATH=str(self.fake_path), GOODPUT_FAKE_GPUS=str(self.gpus))
        env.pop("GOODPUT_KAFKA_BOOTSTRAP", None)
        self._log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            [str(self.venv / "bin" / "goodput"), "agent", "--config", str(self.config)],
            cwd=self.root,
            env=env,
            stdout=self._log,
            stderr=subprocess.STDOUT,
        )
        self.wait_for(self._metrics_up, 30, "the agent's /metrics")

    def _metrics_up(self) -> bool:
        if self.proc.poll() is not None:
            raise AssertionError(f"agent exited with {self.proc.returncode}:\n{self.log_tail()}")
        try:
            self.scrape()
            return True
        except OSError:
            return False


def test_the_agent_only_install_has_no_analytics_stack(agent_venv, tmp_path):
    found = subprocess.run(
        [
            str(agent_venv / "bin" / "python"),
            "-c",
            f"import importlib.util; print(*[m for m in {ANALYTICS!r} if importlib.util.find_spec(m)])",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert found.stdout.split() == []


@pytest.mark.parametrize("command", ["demo", "ingest --from x.jsonl", "analyze", "summary"])
def test_the_pipeline_commands_say_which_install_they_need(agent_venv, tmp_path, command):
    (tmp_path / "x.jsonl").touch()
    done = subprocess.run(
        [str(agent_venv / "bin" / "goodput"), *command.split()],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2, done.stderr
    assert "this is the agent-only install" in done.stderr
    assert "pip install 'goodput[pipeline]'" in done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_the_agent_only_install_sends_batches_and_serves_metrics(agent_venv, tmp_path, kafka_broker):
    node = AgentOnlyNode(tmp_path, kafka_broker.bootstrap, agent_venv)
    node.start()
    try:
        node.wait_for(lambda: all(node.next_seqs()[k] >= 4 for k in NODE_KINDS), 30, "four ticks per kind")
        assert node.metric("goodput_collector_success", collector="nvml") == 1
        assert node.metric("goodput_agent_batches_sent_total", kind="gpu") >= 1
        assert node.stop() == 0
    finally:
        if node.proc is not None:
            node.stop(signal.SIGKILL)
    stream = node.read_stream()
    for kind in NODE_KINDS:
        assert seqs(stream[kind]) == list(range(node.next_seqs()[kind])), kind
    gpu = stream["gpu"][-1]["columns"]
    assert gpu["gpu"] == list(range(8)) and gpu["util_gpu_pct"] == [50.0] * 8
