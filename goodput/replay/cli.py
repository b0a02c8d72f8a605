"""`goodput replay <trace> PATH`: the replays' subcommands (docs/real-traces.md)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Callable


def _run(args, replay: Callable[..., dict], describe: Callable[[dict], str]) -> int:
    """Runs one replay; prints its findings as tables or one JSON object. A trace the importer cannot read
    is one line and exit code 2, like every goodput error."""
    from goodput.replay.traces import TraceError

    try:
        result = replay(Path(args.path), Path(args.out), args.config)
    except TraceError as e:
        print(f"goodput replay {args.trace}: {e}", file=sys.stderr)
        return 2
    if args.json:
        json.dump(result, sys.stdout, indent=2)
        print()
    else:
        print(describe(result))
        print(
            f"\nwrote {args.out}/: store/ (chDB), config.toml — "
            f"try: goodput summary --config {args.out}/config.toml"
        )
    return 0


def cmd_openb(args) -> int:
    from goodput.replay import openb, openb_findings

    return _run(args, openb.replay, openb_findings.describe)


def cmd_pai(args) -> int:
    from goodput.replay import pai, pai_findings

    return _run(args, pai.replay, pai_findings.describe)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("replay", help="replay a real public cluster trace through the pipeline")
    rsub = p.add_subparsers(dest="trace", required=True)
    p = rsub.add_parser("alibaba-openb", help="Alibaba openb GPU pods → job events → queue delay, GPU-hours")
    p.add_argument("path", help="directory with openb_pod_list_default.csv and openb_node_list_gpu_node.csv")
    p.add_argument("--config", help="TOML laid over the replay's config: [teams] maps qos classes to teams")
    p.add_argument("--out", default="goodput-replay-openb", help="output directory (store, config.toml)")
    p.add_argument("--json", action="store_true", help="print the findings as one JSON object")
    p.set_defaults(func=cmd_openb)
    p = rsub.add_parser(
        "alibaba-pai-minibatch", help="PAI per-worker mini-batch times → step events → stragglers"
    )
    p.add_argument("path", help="a job_N_norm.csv file, or a directory of them")
    p.add_argument("--config", help="TOML laid over the replay's config: [analyzer] straggler_* keys")
    p.add_argument("--out", default="goodput-replay-pai", help="output directory (store, config.toml)")
    p.add_argument("--json", action="store_true", help="print the findings as one JSON object")
    p.set_defaults(func=cmd_pai)
