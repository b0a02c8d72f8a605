"""The network tree (contracts/topology.py, `[topology]` of the config): Slurm's topology.conf and the
config's own switches give each node its leaf and path to the top; bad input names the file and line."""

from __future__ import annotations

import subprocess
import sys
import tomllib

import pytest

from contracts import config, topology
from contracts.config import ConfigError
from pipeline.chdb_store import ChdbStore

CONF = """\
# two leaves under one spine
SwitchName=leaf1 Nodes=gpu-core-[001-008] LinkSpeed=400000
switchname=leaf2 \\
    nodes=gpu-core-[009-016]   # continued line, lower-case keys as Slurm accepts
SwitchName=spine Switches=leaf[1-2]
"""


def test_slurm_tree_maps_each_node_to_its_leaf_and_the_spine():
    placed = topology.build(topology.parse_slurm(CONF))
    assert len(placed) == 16
    assert placed["gpu-core-001"] == topology.Placement("leaf1", ("leaf1", "spine"))
    assert placed["gpu-core-012"].leaf == "leaf2" and placed["gpu-core-012"].spine == "spine"


@pytest.mark.parametrize(
    "text, message",
    [
        ("SwitchName=a Nodes=n1\nSwitchName=b Node=n2", "topology.conf:2: unknown key 'Node'"),
        ("Nodes=n1", "topology.conf:1: a line must start with SwitchName=<name>"),
        ("SwitchName=a Nodes", "topology.conf:1: expected Key=Value, got 'Nodes'"),
        ("\n\nSwitchName=a Nodes=n[3-1]", "topology.conf:3: bad range '3-1' in '3-1': end is below start"),
        ("SwitchName=a Nodes=n1 Nodes=n2", "topology.conf:1: Nodes given twice"),
        ("SwitchName=a\n", "topology.conf:1: switch 'a' has neither Nodes nor Switches"),
        ("SwitchName=s Switches=leaf9", "topology.conf:1: switch 's' lists 'leaf9', which is not declared"),
        (
            "SwitchName=a Nodes=n1\nSwitchName=b Nodes=n[1-2]",
            "topology.conf:2: node 'n1' is already under switch 'a'",
        ),
        (
            "SwitchName=a Nodes=n1\nSwitchName=a Nodes=n2",
            "topology.conf:2: switch 'a' is already declared at topology.conf:1",
        ),
        (
            "SwitchName=a Nodes=n1 Switches=b\nSwitchName=b Switches=a",
            "switches form a cycle",
        ),
    ],
)
def test_bad_topology_conf_is_refused_naming_the_line(text, message):
    with pytest.raises(ValueError) as e:
        topology.build(topology.parse_slurm(text))
    assert message in str(e.value)


def parse(text: str) -> config.Config:
    return config.parse(tomllib.loads(text), "test.toml")


def test_config_switches_and_racks_beside_a_slurm_file(tmp_path):
    (tmp_path / "topology.conf").write_text(CONF)
    (tmp_path / "goodput.toml").write_text(
        '[topology]\nslurm_topology_conf = "topology.conf"\n'
        '[topology.switches.leaf3]\nnodes = ["gpu-shr-[001-012]"]\n'
        '[topology.racks]\nr1 = ["gpu-core-[001-004]"]\n'
    )
    cfg = config.load(tmp_path / "goodput.toml")  # the file's path is relative to the config file
    placed = cfg.topology.placements()
    assert placed["gpu-core-016"].path == ("leaf2", "spine")
    assert placed["gpu-shr-003"].path == ("leaf3",)
    assert cfg.topology.rack_of() == {f"gpu-core-00{i}": "r1" for i in range(1, 5)}


@pytest.mark.parametrize(
    "text, message",
    [
        ("[topology]\nswitch = {}", "[topology].switch: unknown key; did you mean 'switches'?"),
        (
            '[topology.switches.s]\nnode = ["a"]',
            "[topology.switches.s].node: unknown key; did you mean 'nodes'?",
        ),
        ('[topology.switches.s]\nswitches = ["leaf1"]', "switch 's' lists 'leaf1', which is not declared"),
        ("[topology.switches.s]\n", "switch 's' has neither Nodes nor Switches"),
        ('[topology.racks]\nr1 = ["a[1-2]"]\nr2 = ["a2"]', "racks.r2: node 'a2' is already in rack 'r1'"),
        ("[analyzer]\ncapacity_bucket_s = 15", "capacity_bucket_s: 15 is not a multiple of window_s (10)"),
        (
            "[analyzer]\nidle_reclaim_after_s = 10.5",
            "idle_reclaim_after_s: 10.5 is under window_s + 1 s (11)",
        ),
        (
            "[analyzer]\nhealthy_tolerance = 0.0500001",
            "healthy_tolerance: 0.0500001 has more than 6 decimals; the analyzers compare at it exactly",
        ),
    ],
)
def test_bad_topology_config_is_refused_naming_the_key(text, message):
    with pytest.raises(ConfigError) as e:
        parse(text)
    assert message in str(e.value)


def test_a_missing_slurm_file_is_an_error_naming_the_key(tmp_path):
    cfg = parse(f'[topology]\nslurm_topology_conf = "{tmp_path}/nope.conf"')
    with pytest.raises(ConfigError, match=r"\[topology\].slurm_topology_conf: cannot read .*nope.conf"):
        cfg.topology.placements()


def test_analyze_with_a_bad_topology_conf_is_one_line_and_exit_2(tmp_path):
    """`goodput analyze` reads the file when it refreshes the dimensions: a typo is the command's error,
    naming the file and line, before anything is classified."""
    (tmp_path / "topology.conf").write_text(
        "SwitchName=leaf1 Nodes=gpu-core-[001-008]\nSwitchName=s Nodez=x\n"
    )
    example = config.EXAMPLE_CONFIG.read_text()
    (tmp_path / "goodput.toml").write_text(example + '\n[topology]\nslurm_topology_conf = "topology.conf"\n')
    ChdbStore(tmp_path / "store").close()  # analyze reads an existing store (it makes none)
    p = subprocess.run(
        [sys.executable, "-m", "goodput.cli", "analyze", "--config", str(tmp_path / "goodput.toml"),
         "--store", str(tmp_path / "store"), "--since-ms", "0", "--until-ms", "3600000"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert p.returncode == 2
    assert p.stderr.strip().splitlines() == [
        f"goodput analyze: {tmp_path}/topology.conf:2: unknown key 'Nodez' (expected SwitchName, Switches, "
        "Nodes, LinkSpeed) (from [topology].slurm_topology_conf)"
    ]
