"""The `goodput` command. It sits at the top of the dependency graph (agents may use the pipeline;
the pipeline never imports agents), so it registers the pipeline's subcommands beside its own."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from pipeline import cli as pipeline_cli
from pipeline.config import ConfigError
from pipeline.store import StoreError


def cmd_demo(args) -> int:
    from agents.demo import run_demo

    run_demo(gpus=args.gpus, hours=args.hours, seed=args.seed, out=Path(args.out), config_path=args.config)
    return 0


def cmd_simulate(args) -> int:
    """Writes the simulated cluster's messages as JSON lines, for `goodput ingest --from` and other tools."""
    import time

    from agents.sim.cluster import SimConfig, scaled_config, simulate
    from agents.sim.emit import messages
    from pipeline import config as config_mod

    cfg = scaled_config(config_mod.load(args.config), args.gpus)
    start_ms = (int(time.time()) // 60) * 60_000 - int(args.hours * 3_600_000)
    res = simulate(SimConfig.from_config(cfg, hours=args.hours, seed=args.seed, start_ms=start_ms), cfg)
    with open(args.out, "wb") as f:
        for _topic, _key, value in messages(res):
            f.write(value + b"\n")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="goodput", description="GPU cluster goodput analytics")
    parser.add_argument("-v", "--verbose", action="store_true")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("demo", help="simulated cluster → embedded pipeline → per-team goodput table")
    p.add_argument("--gpus", type=int, default=256)
    p.add_argument("--hours", type=float, default=2.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", default="goodput-demo", help="output directory (store, CSVs, ground truth)")
    p.add_argument("--config", help="cluster config to scale (default: the shipped example)")
    p.set_defaults(func=cmd_demo)
    p = sub.add_parser("simulate", help="write the simulated cluster's messages as JSON lines")
    p.add_argument("--gpus", type=int, default=64)
    p.add_argument("--hours", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--config")
    p.add_argument("--out", required=True)
    p.set_defaults(func=cmd_simulate)
    pipeline_cli.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO if args.verbose else logging.WARNING,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return args.func(args)
    except (ConfigError, StoreError) as e:
        print(f"goodput {args.command}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
