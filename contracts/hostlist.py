"""Slurm's compact host list and index range syntax, expanded.

Slurm names node sets the short way everywhere a job's allocation appears: squeue's `nodes`
(`gpu-[01-03,07],cpu1`), `job_resources`, sacct's `nodes`, and the GPU indices in `gres_detail`
(`gpu:8(IDX:0-3,6)`). The collector needs the long form (one event per node, one index per GPU), and
`scontrol show hostnames` would be a subprocess per job per poll, so the grammar is expanded here:

    hostlist := item ("," item)*          commas inside brackets do not split items
    item     := (text | "[" ranges "]")+  several bracket groups multiply: r[1-2]n[1-2] is 4 hosts
    ranges   := range ("," range)*
    range    := N | N "-" M               zero padding follows the lower bound's width: 01-10

Malformed input raises ValueError naming the input, because a silently wrong node list would put GPU
time on the wrong node.
"""

from __future__ import annotations

import itertools
import re

_RANGE = re.compile(r"^(\d+)(?:-(\d+))?$")
MAX_HOSTS = 1_000_000
"""Refuse expansions larger than any real cluster (a typo like [1-999999999] would exhaust memory)."""


def expand_ranges(ranges: str) -> list[str]:
    """`"01-03,7"` -> `["01", "02", "03", "7"]`, keeping each range's zero padding."""
    out: list[str] = []
    for part in ranges.split(","):
        m = _RANGE.match(part.strip())
        if not m:
            raise ValueError(f"bad range {part!r} in {ranges!r}: expected N or N-M")
        lo_text, hi_text = m.group(1), m.group(2)
        lo = int(lo_text)
        hi = int(hi_text) if hi_text is not None else lo
        if hi < lo:
            raise ValueError(f"bad range {part!r} in {ranges!r}: end is below start")
        if len(out) + hi - lo + 1 > MAX_HOSTS:
            raise ValueError(f"range {ranges!r} expands to more than {MAX_HOSTS} entries")
        width = len(lo_text) if lo_text.startswith("0") else 0
        out.extend(str(i).zfill(width) for i in range(lo, hi + 1))
    return out


def expand_indices(ranges: str) -> list[int]:
    """`"0-3,6"` -> `[0, 1, 2, 3, 6]`: GPU indices as gres_detail prints them."""
    return [int(i) for i in expand_ranges(ranges)]


def _split_items(hostlist: str) -> list[str]:
    items, depth, start = [], 0, 0
    for i, ch in enumerate(hostlist):
        if ch == "[":
            depth += 1
            if depth > 1:
                raise ValueError(f"nested '[' in host list {hostlist!r}")
        elif ch == "]":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced ']' in host list {hostlist!r}")
        elif ch == "," and depth == 0:
            items.append(hostlist[start:i])
            start = i + 1
    if depth:
        raise ValueError(f"unclosed '[' in host list {hostlist!r}")
    items.append(hostlist[start:])
    return [item.strip() for item in items if item.strip()]


def expand(hostlist: str) -> list[str]:
    """Every host name in a Slurm host list, in order, duplicates kept as Slurm gives them."""
    hosts: list[str] = []
    for item in _split_items(hostlist):
        parts = re.split(r"\[([^\]]*)\]", item)
        # re.split with one group alternates literal text and bracket contents: t0 [r0] t1 [r1] t2 ...
        choices = [[p] if i % 2 == 0 else expand_ranges(p) for i, p in enumerate(parts)]
        for combo in itertools.product(*choices):
            hosts.append("".join(combo))
            if len(hosts) > MAX_HOSTS:
                raise ValueError(f"host list {hostlist[:80]!r} expands to more than {MAX_HOSTS} hosts")
    return hosts
