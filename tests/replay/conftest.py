"""The real traces the replay tests read, and the replays run once per module.

The traces are not copied into this repository: alibaba/clusterdata has no licence file and grants use
"for research or study purpose" only, which is not a grant to redistribute (docs/real-traces.md). The
tests read them from $GOODPUT_TRACE_DATA, else from `shared/data` beside or above the checkout (this
project's machines keep them at /work/shared/data); where none is, the tests that need them are skipped,
saying where to put the files."""

from __future__ import annotations

import contextlib
import io
import json
import os
from pathlib import Path

import pytest

from goodput.cli import main

ROOT = Path(__file__).resolve().parents[2]
CANDIDATES = [ROOT.parent / "shared" / "data", ROOT.parent.parent / "shared" / "data"]


def trace_dir(name: str) -> Path:
    """The directory of one trace (alibaba-gpu-v2023, alibaba-pai-minibatch), or a skip naming where
    to put it."""
    env = os.environ.get("GOODPUT_TRACE_DATA")
    for base in ([Path(env)] if env else []) + CANDIDATES:
        if (base / name).is_dir():
            return base / name
    pytest.skip(
        f"real trace {name} not found: set GOODPUT_TRACE_DATA to a directory holding {name}/ "
        f"(files from github.com/alibaba/clusterdata, listed in docs/real-traces.md)"
    )


def run_cli(*argv: str) -> tuple[int, str, str]:
    """`goodput ...` in this process: exit code, stdout, stderr."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        rc = main(list(argv))
    return rc, out.getvalue(), err.getvalue()


def replay_json(*argv: str) -> dict:
    rc, out, err = run_cli("replay", *argv, "--json")
    assert rc == 0, err
    return json.loads(out)
