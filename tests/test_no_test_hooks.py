"""Production code carries no test hooks: no environment variable only tests set (a loader that SIGKILLs
itself, a fake GPU count), no config key only tests use (`nvml_module`), no branch that says it is for
tests. Tests inject their seams from the test side instead: a wrapper module that runs the real
command (tests/loader/kill_before_commit.py), a fake `pynvml` first on the agent's path
(tests/agents/pynvml_shim/), a test store that rewrites statements (tests/clickhouse/chdb_cluster.py).
The production packages are the import-linter root packages of pyproject.toml, so a new one is covered."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TEXT_SUFFIXES = {".py", ".toml", ".sql", ".yml", ".yaml", ".json", ".md"}

FORBIDDEN = {
    "an environment variable only tests set": re.compile(
        r"""["'](?:[A-Z][A-Z0-9]*_)*(?:TEST|FAKE)(?:_[A-Z0-9]+)*["']"""
    ),
    "a GOODPUT_TEST_* name": re.compile(r"GOODPUT_TEST"),
    "the removed [agent] nvml_module key": re.compile(r"\bnvml_module\b"),
    "a branch or hook described as for tests": re.compile(
        r"test hook|test-only|only tests|tests turn|for tests\b", re.IGNORECASE
    ),
}


def production_files() -> list[Path]:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    packages = pyproject["tool"]["importlinter"]["root_packages"]
    files = [
        p
        for package in packages
        for p in sorted((ROOT / package).rglob("*"))
        if p.suffix in TEXT_SUFFIXES and "__pycache__" not in p.parts
    ]
    assert len(files) > 50, f"found only {len(files)} production files under {packages}"
    return files


def test_production_code_has_no_test_hooks():
    found = []
    for path in production_files():
        for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            for what, pattern in FORBIDDEN.items():
                if pattern.search(line):
                    found.append(f"{path.relative_to(ROOT)}:{n}: {what}: {line.strip()}")
    assert not found, "test hooks in production code; inject the seam from tests/ instead:\n" + "\n".join(
        found
    )


def test_the_check_catches_the_hooks_it_names():
    hooks = [
        'TEST_KILL_ENV = "GOODPUT_TEST_KILL_BEFORE_COMMIT"',
        'os.environ.get("GOODPUT_FAKE_GPUS", "8")',
        "module = importlib.import_module(cfg.nvml_module)",
        "# test hook: never set it in production",
    ]
    for line in hooks:
        assert any(p.search(line) for p in FORBIDDEN.values()), line
    assert not any(p.search('os.environ.get("GOODPUT_STORE_PATH")') for p in FORBIDDEN.values())
