"""The `goodput` command. It sits at the top of the dependency graph (agents and the pipeline never
import each other), so it registers the agent's, the demo's and the pipeline's subcommands side by side."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import NoReturn

from alerts import build as alerts_build
from contracts.config import ConfigError
from contracts.envelope import VERSIONS
from goodput.replay import cli as replay_cli
from pipeline import cli as pipeline_cli
from pipeline.store import StoreError

# What the `pipeline` extra adds to the agent's base install. The commands import them only when they run,
# so on a GPU node (`pip install goodput`, docs/agent.md) `goodput agent` works and the others say why not.
ANALYTICS_PACKAGES = frozenset(
    {"numpy", "pyarrow", "chdb", "polars", "pandas", "clickhouse_driver", "tomli_w", "tqdm", "yaml"}
)


def cmd_demo(args) -> int:
    from goodput.demo import run_demo

    run_demo(gpus=args.gpus, hours=args.hours, seed=args.seed, out=Path(args.out), config_path=args.config)
    return 0


def cmd_simulate(args) -> int:
    """Writes the simulated cluster's messages one per line (JSON, or with --message-version 2 columnar
    in base64: contracts.envelope.message_line), for `goodput ingest --from` and other tools."""
    import time

    from contracts import config as config_mod
    from contracts.envelope import message_line
    from goodput.sim.cluster import SimConfig, scaled_config, simulate
    from goodput.sim.emit import messages

    cfg = scaled_config(config_mod.load(args.config), args.gpus)
    start_ms = (int(time.time()) // 60) * 60_000 - int(args.hours * 3_600_000)
    res = simulate(SimConfig.from_config(cfg, hours=args.hours, seed=args.seed, start_ms=start_ms), cfg)
    with open(args.out, "wb") as f:
        for _topic, _key, value in messages(res, version=args.message_version):
            f.write(message_line(value) + b"\n")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


def cmd_agent(args) -> int:
    """The node agent daemon: runs until SIGTERM or SIGINT, then sends or spools what it has."""
    import faulthandler
    import signal
    import threading

    import msgspec

    from agents import logs
    from agents.config import agent_config
    from agents.daemon import Agent
    from agents.seqstate import AgentStateError
    from agents.sources import SourceFailed, build_collectors
    from contracts import config as config_mod
    from transport.kafka import KafkaProducerTransport, KafkaSettings

    cfg = config_mod.load(args.config)
    acfg = agent_config(cfg, node=args.node)
    if args.state_dir:
        acfg = msgspec.structs.replace(acfg, state_dir=args.state_dir)
    logs.setup(acfg.log_format, logging.DEBUG if args.verbose else logging.INFO)
    if cfg.transport.kind != "kafka":
        raise ConfigError(
            f'{cfg.source}: the agent sends to Kafka: set [transport] kind = "kafka" and '
            f"[transport.kafka] bootstrap (or GOODPUT_KAFKA_BOOTSTRAP)"
        )
    known = cfg.known_nodes()
    if known and acfg.node not in known:
        raise ConfigError(
            f"{cfg.source}: node {acfg.node!r} is in no pool and not a control node, so the loader "
            f"would dead-letter its batches (unknown_node); add it to a pool's nodes, or set the "
            f"node name with --node / GOODPUT_NODE / [agent].node"
        )
    try:
        settings = KafkaSettings.from_config(cfg.transport.kafka)
    except ConfigError as e:
        raise ConfigError(f"{cfg.source}: {e}") from None
    try:
        collectors, _unavailable = build_collectors(acfg)
        agent = Agent(
            acfg,
            cluster=cfg.cluster.name,
            topic_prefix=cfg.transport.topic_prefix,
            collectors=collectors,
            make_producer=lambda: KafkaProducerTransport(settings, client_id=f"goodput-agent-{acfg.node}"),
        )
    except (SourceFailed, AgentStateError) as e:
        logging.getLogger("goodput.agent").error("agent cannot start: %s", e)
        return 2
    faulthandler.register(
        signal.SIGUSR1, all_threads=True
    )  # `kill -USR1 <pid>`: every thread's stack to the log
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    agent.run(stop)
    return 0


def cmd_dashboards_build(args) -> int:
    """Writes the Grafana dashboards and their provisioning (docs/dashboards.md)."""
    try:
        from dashboards.build import build
    except ModuleNotFoundError as e:
        if (e.name or "").partition(".")[0] != "grafanalib":
            raise
        print(
            "goodput dashboards build: needs grafanalib; pip install 'goodput[dashboards]'", file=sys.stderr
        )
        return 2
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        print(f"goodput dashboards build: --out {out} is a file; give a directory", file=sys.stderr)
        return 2
    for path in build(out):
        print(path)
    return 0


class OneLineParser(argparse.ArgumentParser):
    """argparse, with a usage error as one line naming the command and where to look (argparse prints
    the whole usage block first): like every other goodput error, one line and exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message} (see {self.prog} --help)\n")


def positive(kind: type[int] | type[float]):
    """An argparse type: a number of `kind` above 0 (GPUs, hours), refused by name otherwise."""

    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"{text} must be above 0")
        return value

    parse.__name__ = f"positive {kind.__name__}"
    return parse


def build_parser() -> argparse.ArgumentParser:
    parser = OneLineParser(prog="goodput", description="GPU cluster goodput analytics")
    parser.add_argument("-v", "--verbose", action="store_true")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("demo", help="simulated cluster → embedded pipeline → per-team goodput table")
    p.add_argument("--gpus", type=positive(int), default=256)
    p.add_argument("--hours", type=positive(float), default=2.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--out", default="goodput-demo", help="output directory (store, CSVs, ground truth)")
    p.add_argument("--config", help="cluster config to scale (default: the shipped example)")
    p.set_defaults(func=cmd_demo)
    p = sub.add_parser("simulate", help="write the simulated cluster's messages, one per line")
    p.add_argument("--gpus", type=positive(int), default=64)
    p.add_argument("--hours", type=positive(float), default=1.0)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--config")
    p.add_argument("--out", required=True)
    p.add_argument(
        "--message-version",
        type=int,
        choices=VERSIONS,
        default=VERSIONS[0],
        help="1: JSON envelopes; 2: columnar binary ones, base64 lines (docs/messages.md)",
    )
    p.set_defaults(func=cmd_simulate)
    p = sub.add_parser("agent", help="node agent: collectors → Kafka (spooled), Prometheus /metrics")
    p.add_argument("--config", help="goodput TOML config with [agent] and [transport.kafka]")
    p.add_argument("--node", help="node name (default: GOODPUT_NODE, [agent].node, the host name)")
    p.add_argument("--state-dir", help="override [agent].state_dir (seq state and spool)")
    p.set_defaults(func=cmd_agent)
    p = sub.add_parser("dashboards", help="Grafana dashboards as code")
    dsub = p.add_subparsers(dest="dashboards_command", required=True)
    p = dsub.add_parser("build", help="write the dashboards' JSON and Grafana provisioning YAML")
    p.add_argument("--out", required=True, help="directory: dashboards/*.json, provisioning/*/goodput.yaml")
    p.set_defaults(func=cmd_dashboards_build)
    pipeline_cli.register(sub)
    replay_cli.register(sub)
    alerts_build.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    logging.basicConfig(
        level=logging.INFO if args.verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    try:
        return args.func(args)
    except (ConfigError, StoreError) as e:
        print(f"goodput {args.command}: {e}", file=sys.stderr)
        return 2
    except OSError as e:  # a path from the command line or the config: say which, not a traceback
        where = f"{e.filename}: " if e.filename else ""
        print(
            f"goodput {args.command}: {where}{e.strerror or e}: check the path and this user's permissions",
            file=sys.stderr,
        )
        return 2
    except ModuleNotFoundError as e:
        if (e.name or "").partition(".")[0] not in ANALYTICS_PACKAGES:
            raise
        print(
            f"goodput {args.command}: this is the agent-only install (no module {e.name!r}); "
            f"pip install 'goodput[pipeline]'",
            file=sys.stderr,
        )
        return 2


if __name__ == "__main__":
    sys.exit(main())
