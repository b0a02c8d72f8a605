"""A module of this repository as it was at another git revision, for benchmarks that time today's code
against it in the same process (the ratio then compares code, not machines or moments)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def module_at(rev: str, path: str) -> ModuleType:
    """`path` (e.g. pipeline/validate.py) as it was at `rev`, imported under another name; it imports
    today's modules for what it imports."""
    source = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{rev}:{path}"], check=True, capture_output=True
    ).stdout
    name = Path(path).stem + "_baseline"
    spec = importlib.util.spec_from_loader(name, loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up there
    exec(compile(source, f"{rev}:{path}", "exec"), module.__dict__)
    return module
