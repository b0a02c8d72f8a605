"""A store path that cannot be used ends every `goodput` command with one line naming the path and what
to do, exit code 2, and nothing left behind (issue 14: these were raw tracebacks, FileExistsError,
NotADirectoryError, PermissionError on the lock, chDB's own error, and half-made store directories).

The unwritable cases need a user without root's override of file modes: as root, the command runs as
`nobody` (setpriv), in a directory that user may enter."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from pipeline.chdb_store import ChdbStore
from tests.loader.helpers import GOODPUT

NOBODY = 65534


@pytest.fixture
def work():
    """A directory every user may enter, with a message file in it (tmp_path is private to root)."""
    d = Path(tempfile.mkdtemp(prefix="goodput-paths-"))
    d.chmod(0o755)
    (d / "msgs.jsonl").write_text("")
    (d / "msgs.jsonl").chmod(0o644)
    yield d
    shutil.rmtree(d)


def tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


def goodput(*args: str, cwd: Path, unprivileged: bool = False) -> subprocess.CompletedProcess:
    prefix: list[str] = []
    if unprivileged and os.geteuid() == 0:
        prefix = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    return subprocess.run(
        [*prefix, GOODPUT, *args], capture_output=True, text=True, cwd=cwd, timeout=120, env=os.environ
    )


def assert_one_line_exit_2(p: subprocess.CompletedProcess, *words: str) -> None:
    assert p.returncode == 2, p.stderr
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in p.stderr, p.stderr
    for w in words:
        assert w in lines[0], (w, lines[0])


LOADING = ("ingest", "--from", "msgs.jsonl", "--no-analyze")
READING = (("summary",), ("explain", "job-1"), ("analyze",), ("dead-letters",))


@pytest.mark.parametrize("command", [LOADING, *READING], ids=lambda c: c[0])
def test_a_file_where_the_store_should_be(work, command):
    (work / "afile").write_text("x")
    before = tree(work)
    p = goodput(*command, "--store", "afile", cwd=work)
    assert_one_line_exit_2(p, str(work / "afile"), "is a file, not a directory", "--store")
    assert tree(work) == before


def test_a_store_under_a_file(work):
    (work / "afile").write_text("x")
    before = tree(work)
    p = goodput(*LOADING, "--store", "afile/store", cwd=work)
    assert_one_line_exit_2(p, str(work / "afile" / "store"), "Not a directory", "--store")
    assert tree(work) == before


def test_a_store_where_no_directory_can_be_made(work):
    p = goodput(*LOADING, "--store", "/proc/goodput/store", cwd=work)
    assert_one_line_exit_2(p, "/proc/goodput/store", "cannot make the goodput store directory")


@pytest.mark.parametrize("command", [LOADING, *READING], ids=lambda c: c[0])
def test_a_store_owned_by_another_user(work, command):
    with ChdbStore(work / "store"):
        pass
    if os.geteuid() != 0:
        (work / "store").chmod(0o555)
        (work / "store" / ChdbStore.LOCK_NAME).chmod(0o444)
    before = tree(work)
    p = goodput(*command, "--store", "store", cwd=work, unprivileged=True)
    assert_one_line_exit_2(p, str(work / "store" / ChdbStore.LOCK_NAME), "writable by this user")
    assert tree(work) == before


def test_a_store_directory_this_user_cannot_make(work):
    (work / "parent").mkdir(mode=0o555)
    before = tree(work)
    p = goodput(*LOADING, "--store", "parent/store", cwd=work, unprivileged=True)
    assert_one_line_exit_2(p, str(work / "parent" / "store"), "Permission denied")
    assert tree(work) == before


def test_chdb_refusing_the_directory_is_one_line_and_leaves_nothing(work):
    """The lock file is this user's, the directory is not: chDB itself cannot write there."""
    (work / "store").mkdir(mode=0o755)
    (work / "store" / ChdbStore.LOCK_NAME).touch()
    if os.geteuid() == 0:
        os.chown(work / "store" / ChdbStore.LOCK_NAME, NOBODY, NOBODY)
    else:
        (work / "store").chmod(0o555)
    before = tree(work)
    p = goodput(*LOADING, "--store", "store", cwd=work, unprivileged=True)
    assert_one_line_exit_2(p, "chDB could not open the store", str(work / "store"), "Permission denied")
    assert tree(work) == before


@pytest.mark.parametrize("command", [LOADING, *READING], ids=lambda c: c[0])
def test_a_store_in_use_by_another_process(work, command):
    with ChdbStore(work / "store"):
        before = tree(work)
        p = goodput(*command, "--store", "store", cwd=work)
        assert tree(work) == before
    assert_one_line_exit_2(p, str(work / "store"), "is in use by", f'"pid": {os.getpid()}')


@pytest.mark.parametrize("command", READING, ids=lambda c: c[0])
def test_reading_a_store_that_does_not_exist_makes_none(work, command):
    p = goodput(*command, "--store", "typo", cwd=work)
    assert_one_line_exit_2(p, str(work / "typo"), "does not exist", "goodput ingest")
    assert not (work / "typo").exists()


@pytest.mark.parametrize(
    "source, words",
    [("nothere.jsonl", "does not exist"), (".", "is not a file")],
    ids=["missing", "directory"],
)
def test_ingest_from_what_is_not_a_file_opens_no_store(work, source, words):
    p = goodput("ingest", "--from", source, "--store", "store", cwd=work)
    assert_one_line_exit_2(p, f"--from {source}", words, "one envelope per line")
    assert not (work / "store").exists()


def test_ingest_from_an_unreadable_file_opens_no_store(work):
    (work / "msgs.jsonl").chmod(0o200 if os.geteuid() else 0o600)
    p = goodput("ingest", "--from", "msgs.jsonl", "--store", "store", cwd=work, unprivileged=True)
    assert_one_line_exit_2(p, "msgs.jsonl", "Permission denied")
    assert not (work / "store").exists()


@pytest.mark.parametrize(
    "args", [("demo", "--out", "afile"), ("simulate", "--out", "afile/x.jsonl")], ids=["demo", "simulate"]
)
def test_other_commands_with_an_unusable_output_path(work, args):
    (work / "afile").write_text("x")
    before = tree(work)
    p = goodput(*args, "--gpus", "8", "--hours", "0.05", cwd=work)
    assert_one_line_exit_2(p, "afile")
    assert tree(work) == before
