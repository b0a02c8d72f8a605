"""The agent needs no privilege for what every GPU node has: the real agent process, started as the
unprivileged `nobody` with every capability dropped (setpriv; when the tests do not run as root they
are unprivileged already), reads the fixture node's sysfs/procfs trees, the fake NVML and the step
socket, and every node collector reports success. The trees carry the permissions of the real files
(world-readable, owned by root), which is what agents/deploy relies on (docs/agent.md, "Privileges")."""

from __future__ import annotations

import os
import signal
import tempfile
from pathlib import Path

import pytest

from contracts.config import NODE_SOURCES
from tests.agents.harness import FixtureNode
from tests.fixtures.ports import free_port

NOBODY = 65534
DROP_PRIVILEGES = (
    "setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups",
    "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs",
)  # fmt: skip


@pytest.fixture
def world_readable_root():
    """A directory others may traverse (pytest's tmp_path is 0700), removed afterwards."""
    root = Path(tempfile.mkdtemp(prefix="goodput-unpriv-"))
    root.chmod(0o755)
    yield root
    for path in root.rglob("*"):
        if path.is_dir():
            path.chmod(0o755)
    for path in sorted(root.rglob("*"), key=lambda p: len(p.parts), reverse=True):
        path.rmdir() if path.is_dir() and not path.is_symlink() else path.unlink()
    root.rmdir()


def test_every_node_collector_runs_without_privileges(world_readable_root):
    as_root = os.geteuid() == 0
    node = FixtureNode(
        world_readable_root,
        f"127.0.0.1:{free_port()}",  # no broker: batches go to the spool, which the agent owns
        create_topics=False,
        run_as=DROP_PRIVILEGES if as_root else (),
    )
    # Like /sys/kernel/debug, root-only (0700) on every host with debugfs: a default Lustre root
    # inside it cannot even be looked at, and must not stop the agent nor hide the readable root.
    debugfs = world_readable_root / "debug"
    (debugfs / "lustre" / "llite").mkdir(parents=True)
    debugfs.chmod(0o700)
    lustre = world_readable_root / "node" / "lustre"
    text = node.config.read_text()
    assert f'lustre_roots = ["{lustre}"]' in text
    node.config.write_text(
        text.replace(f'lustre_roots = ["{lustre}"]', f'lustre_roots = ["{debugfs / "lustre"}", "{lustre}"]')
    )
    if as_root:
        node.state_dir.mkdir()
        os.chown(node.state_dir, NOBODY, NOBODY)
    node.start()
    try:
        status = Path(f"/proc/{node.proc.pid}/status").read_text()
        fields = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)
        assert fields["CapEff"].strip() == fields["CapPrm"].strip() == "0" * 16
        if as_root:
            assert fields["Uid"].split()[0] == str(NOBODY)
        node.wait_for(
            lambda: all(node.metric("goodput_collector_success", collector=c) == 1.0 for c in NODE_SOURCES),
            30,
            "every node collector to succeed",
        )
        assert node.metric("goodput_agent_spool_batches") > 0
    finally:
        assert node.stop(signal.SIGTERM) == 0
