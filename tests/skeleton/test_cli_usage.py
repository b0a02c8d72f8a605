"""Usage errors of the `goodput` command: one line naming the argument and where to look, exit code 2,
and nothing made on the way (a negative --hours used to end in a numpy traceback after the demo had
made its output directory)."""

import subprocess
import sys

import pytest

GOODPUT = [sys.executable, "-m", "goodput.cli"]


@pytest.mark.parametrize(
    "args, words",
    [
        (("demo", "--hours", "-1", "--out", "out"), "argument --hours: -1 must be above 0"),
        (("demo", "--gpus", "0", "--out", "out"), "argument --gpus: 0 must be above 0"),
        (("simulate", "--gpus", "x", "--out", "out"), "argument --gpus: 'x' is not a number"),
        (("simulate", "--hours", "nan", "--out", "out"), "argument --hours: nan must be above 0"),
        (("bogus",), "invalid choice: 'bogus'"),
        (("ingest", "--frm", "x"), "unrecognized arguments: --frm x"),
        (("dead-letters", "--limit", "many"), "argument --limit: invalid int value"),
    ],
    ids=["hours", "gpus", "not-a-number", "nan", "command", "flag", "limit"],
)
def test_a_usage_error_is_one_line_and_exit_2(tmp_path, args, words):
    p = subprocess.run([*GOODPUT, *args], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and words in lines[0] and "--help" in lines[0], p.stderr
    assert not list(tmp_path.iterdir()), "nothing made"
