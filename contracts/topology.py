"""The network tree: which leaf switch each node hangs off, and the switches above it.

A job whose gang spans several leaf switches sends its collectives through the spine, where an
oversubscribed fabric slows it; the analyzers put each job's placement beside its comm stall
(docs/goodput-model.md, Topology), so "this gang was scattered" is evidence, not a guess.

The tree comes from Slurm's topology.conf (tree plugin) where the site has one, and/or from the
config's `[topology.switches]`, which use the same two forms:

    SwitchName=leaf1 Nodes=gpu-core-[001-008]        a leaf: the nodes cabled to it
    SwitchName=spine Switches=leaf[1-2]              a switch above: its child switches

Host lists are Slurm's (contracts/hostlist.py). Bad input is a ValueError naming the file and line (or
the config key), because a silently wrong tree would blame the wrong jobs' placement.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from contracts.hostlist import expand

SLURM_KEYS = {"switchname", "switches", "nodes", "linkspeed"}
"""Keys of a topology.conf line; LinkSpeed is accepted and ignored (the config's network tiers say it)."""


@dataclass(frozen=True)
class Switch:
    name: str
    nodes: tuple[str, ...] = ()
    switches: tuple[str, ...] = ()
    where: str = ""
    """Where it was declared (`topology.conf:12`, `switches.leaf1` of [topology]), for error messages."""


@dataclass(frozen=True)
class Placement:
    """A node's place in the tree: its leaf switch and the path from the leaf up to the root."""

    leaf: str
    path: tuple[str, ...]

    @property
    def spine(self) -> str:
        """The top of the node's tree (the leaf itself in a one-switch tree)."""
        return self.path[-1]


def parse_slurm(text: str, source: str = "topology.conf") -> list[Switch]:
    """The switches of a Slurm topology.conf (tree plugin): one `SwitchName=` per line, `#` comments,
    a trailing backslash continues a line. Keys are case-insensitive, as Slurm reads them."""
    out: list[Switch] = []
    pending, first = "", 0
    for lineno, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].rstrip()
        if not pending:
            first = lineno
        if line.endswith("\\"):
            pending += line[:-1] + " "
            continue
        line, pending = (pending + line).strip(), ""
        if line:
            out.append(_parse_line(line, f"{source}:{first}"))
    if pending.strip():
        out.append(_parse_line(pending.strip(), f"{source}:{first}"))
    return out


def _parse_line(line: str, where: str) -> Switch:
    fields: dict[str, str] = {}
    for token in line.split():
        key, eq, value = token.partition("=")
        k = key.lower()
        if not eq or not value:
            raise ValueError(f"{where}: expected Key=Value, got {token!r}")
        if k not in SLURM_KEYS:
            raise ValueError(
                f"{where}: unknown key {key!r} (expected SwitchName, Switches, Nodes, LinkSpeed)"
            )
        if k in fields:
            raise ValueError(f"{where}: {key} given twice")
        fields[k] = value
    if "switchname" not in fields:
        raise ValueError(f"{where}: a line must start with SwitchName=<name>")
    try:
        nodes = tuple(expand(fields["nodes"])) if "nodes" in fields else ()
        switches = tuple(expand(fields["switches"])) if "switches" in fields else ()
    except ValueError as e:
        raise ValueError(f"{where}: {e}") from None
    return Switch(fields["switchname"], nodes, switches, where)


def build(switches: Iterable[Switch]) -> dict[str, Placement]:
    """Node -> its Placement. Refused: a switch declared twice, a child switch never declared, a node
    or switch under two parents, a cycle, a switch with neither nodes nor child switches."""
    by_name: dict[str, Switch] = {}
    for s in switches:
        if s.name in by_name:
            raise ValueError(f"{s.where}: switch {s.name!r} is already declared at {by_name[s.name].where}")
        if not s.nodes and not s.switches:
            raise ValueError(f"{s.where}: switch {s.name!r} has neither Nodes nor Switches")
        by_name[s.name] = s
    parent: dict[str, str] = {}
    leaf_of: dict[str, str] = {}
    for s in by_name.values():
        for child in s.switches:
            if child not in by_name:
                raise ValueError(f"{s.where}: switch {s.name!r} lists {child!r}, which is not declared")
            if child in parent:
                raise ValueError(f"{s.where}: switch {child!r} is already under {parent[child]!r}")
            parent[child] = s.name
        for n in s.nodes:
            if n in leaf_of:
                raise ValueError(f"{s.where}: node {n!r} is already under switch {leaf_of[n]!r}")
            leaf_of[n] = s.name
    out: dict[str, Placement] = {}
    for node, leaf in leaf_of.items():
        path = [leaf]
        while path[-1] in parent:
            if parent[path[-1]] in path:
                raise ValueError(f"{by_name[leaf].where}: switches form a cycle through {path[-1]!r}")
            path.append(parent[path[-1]])
        out[node] = Placement(leaf, tuple(path))
    return out


_NAME = re.compile(r"^[A-Za-z0-9_.:-]+$")


def from_config(switches: Mapping[str, tuple[tuple[str, ...], tuple[str, ...]]]) -> list[Switch]:
    """Switches of `[topology.switches.<name>]` tables, given as name -> (nodes, switches) host lists."""
    out = []
    for name, (nodes, children) in switches.items():
        where = f"switches.{name}"
        if not _NAME.match(name):
            raise ValueError(f"{where}: a switch name is letters, digits, '.', '_', ':', '-'")
        try:
            out.append(
                Switch(
                    name,
                    tuple(n for spec in nodes for n in expand(spec)),
                    tuple(c for spec in children for c in expand(spec)),
                    where,
                )
            )
        except ValueError as e:
            raise ValueError(f"{where}: {e}") from None
    return out
