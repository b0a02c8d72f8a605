"""`goodput ingest`, `goodput analyze`, `goodput summary` and `goodput explain`: the pipeline's commands.

Each opens the store itself; with the embedded chDB store only one process may hold a directory, and
the store says so by name when another process has it (pipeline.store.StoreLocked). That is why the
loader service (`goodput ingest --config FILE` without `--from`) can run the analyzers itself
(`--analyze-every`): the process that owns the chDB directory does all the work on it.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from contracts import config as config_mod
from contracts.envelope import line_message
from transport.base import Record

# The store, loader, analyzers and summary (Arrow, Polars, chDB: ~60 MB and ~0.4 s to import) are
# imported inside the commands that use them: `goodput agent` shares this command line and must stay
# small on every GPU node.


def _store(args, cfg, *, create: bool = False):
    """The store of the config (or --store), migrated; `create` only for the commands that load."""
    from pipeline import ddl
    from pipeline.stores import open_store

    store = open_store(cfg.store.kind, args.store or cfg.store.path, cfg.store.server, create=create)
    try:
        ddl.migrate(store)
    except BaseException:
        store.close()
        raise
    return store


def file_records(path: Path):
    """One documented message per line (contracts.envelope.message_line); the line number is the record's
    offset (for dead letters)."""
    with open(path, "rb") as f:
        for lineno, line in enumerate(f, 1):
            line = line.strip()
            if line:
                yield Record(f"file:{path.name}", 0, lineno, None, line_message(line))


def cmd_ingest(args) -> int:
    from pipeline.loader import Loader, limits_from_config
    from pipeline.progress import Progress

    cfg = config_mod.load(args.config)
    if args.source is None:
        return _serve_kafka(args, cfg)
    path = Path(args.source)
    if not path.is_file():
        print(
            f"goodput ingest: --from {path} {'is not a file' if path.exists() else 'does not exist'}: give "
            f"a file of messages, one envelope per line (docs/messages.md, 'Messages files'; `goodput "
            f"simulate --out FILE` and `goodput dead-letters --export FILE` write one)",
            file=sys.stderr,
        )
        return 2
    open(path, "rb").close()  # unreadable: the command's OSError line, before a store is made for it
    with _store(args, cfg, create=True) as store:
        loader = Loader(store, limits_from_config(cfg), topic_prefix=cfg.transport.topic_prefix)
        progress = Progress("ingest", path.stat().st_size, unit="B", unit_scale=True)
        batch, read = [], 0
        for rec in file_records(path):
            batch.append(rec)
            read += len(rec.value) + 1
            if len(batch) >= 1000:
                loader.load(batch)
                batch = []
                progress.update(read)
        loader.load(batch)
        t = loader.totals
        progress.done(
            f"{t.records} messages: {sum(t.batches.values())} batches ({sum(t.rows.values())} rows) "
            f"stored, {t.redelivered} already stored, {sum(t.dead_letters.values())} dead letters"
        )
        if t.dead_letters:
            print(
                "dead letters by reason: " + ", ".join(f"{r}={n}" for r, n in t.dead_letters.most_common()),
                file=sys.stderr,
            )
        if not args.no_analyze:
            _analyze(store, cfg, None, None, shown=True)
    return 0


def _serve_kafka(args, cfg) -> int:
    """The loader service: Kafka → store until SIGTERM/SIGINT (or, with --until-caught-up, no lag)."""
    from pipeline.loader_service import LoaderService, install_signal_handlers
    from pipeline.loader_service import summary as load_summary
    from transport.kafka import KafkaSettings

    if cfg.transport.kind != "kafka":
        print(
            f"goodput ingest: {cfg.source} has [transport] kind = {cfg.transport.kind!r}, so there is no "
            f'Kafka to load from: set [transport] kind = "kafka" and [transport.kafka] bootstrap = '
            f'"host:port,..." (or GOODPUT_KAFKA_BOOTSTRAP) to run the loader service, or pass '
            f"--from FILE to load a file of messages",
            file=sys.stderr,
        )
        return 2
    try:
        kafka = KafkaSettings.from_config(cfg.transport.kafka)
    except config_mod.ConfigError as e:
        raise config_mod.ConfigError(f"{cfg.source}: {e}") from None
    every = cfg.loader.analyze_every_s if args.analyze_every is None else args.analyze_every
    if every < 0:
        raise config_mod.ConfigError(f"--analyze-every {every}: must be >= 0 seconds (0: never)")
    with _store(args, cfg, create=True) as store:

        def analyze() -> None:
            window_ms = cfg.analyzer.window_s * 1000
            since = (int((time.time() - cfg.loader.analyze_lookback_s) * 1000) // window_ms) * window_ms
            _analyze(store, cfg, since, None, shown=False)

        service = LoaderService(
            cfg,
            store,
            kafka,
            until_caught_up=args.until_caught_up,
            analyze=analyze,
            analyze_every_s=every,
            live=lambda: _analyze_live(store, cfg, cfg.loader.live_window_s, shown=False),
            progress=args.progress or (args.until_caught_up and sys.stderr.isatty()),
        )
        install_signal_handlers(service.stop)
        totals = service.run()
    print(f"goodput ingest: {load_summary(totals)}", file=sys.stderr)
    return 0


def _analyze(store, cfg, since_ms, until_ms, shown: bool) -> None:
    """Runs the analyzers over the range (default: all stored job events); `shown`: a step per statement
    on stderr, for the commands (the loader service's periodic runs log one line)."""
    from pipeline.analyzers import run as analyzers
    from pipeline.progress import Progress

    if since_ms is None or until_ms is None:
        t = store.query_arrow(
            "SELECT toUnixTimestamp64Milli(min(ts)) AS a, toUnixTimestamp64Milli(max(ts)) AS b FROM raw_job"
        ).to_pylist()[0]
        if not t["a"]:
            print(
                "goodput analyze: no job events in the store: nothing is allocated, nothing to classify",
                file=sys.stderr,
            )
            return
        since_ms = since_ms or t["a"]
        until_ms = until_ms or max(t["b"] + 1, int(time.time() * 1000))
        g = store.query_arrow("SELECT toUnixTimestamp64Milli(max(ts)) AS b FROM raw_gpu").to_pylist()[0]["b"]
        if g:
            until_ms = min(until_ms, g + 1000)
    progress = Progress("analyze", 0, unit="statement") if shown else None
    timings = analyzers.run(store, cfg, since_ms, until_ms, progress)
    if progress:
        progress.done()
    print("analyzers: " + ", ".join(f"{k} {v:.1f}s" for k, v in timings.items()), file=sys.stderr)


def cmd_analyze(args) -> int:
    cfg = config_mod.load(args.config)
    if args.live is not None and (args.live <= 0 or args.since_ms is not None or args.until_ms is not None):
        raise config_mod.ConfigError(
            f"--live {args.live}: give the seconds back from the end of the data (> 0), without "
            "--since-ms/--until-ms (a live run always ends at the end of the data)"
        )
    with _store(args, cfg) as store:
        if args.live is not None:
            _analyze_live(store, cfg, args.live, shown=True)
        else:
            _analyze(store, cfg, args.since_ms, args.until_ms, shown=True)
    return 0


def _analyze_live(store, cfg, seconds: float, shown: bool) -> None:
    """A live run over the data's last `seconds` (pipeline/analyzers/run.py run_live): provisional rows in
    goodput_live, each job with the numbers its last whole run kept."""
    from pipeline.analyzers import run as analyzers
    from pipeline.progress import Progress

    end = analyzers.data_end(store, cfg.cluster.name)
    if not end:
        print(
            "goodput analyze --live: no job events or GPU samples in the store: nothing to classify",
            file=sys.stderr,
        )
        return
    progress = Progress("analyze --live", 0, unit="statement") if shown else None
    timings = analyzers.run_live(store, cfg, end - int(seconds * 1000), progress, as_of_ms=end)
    if progress:
        progress.done()
    print("live analyzers: " + ", ".join(f"{k} {v:.2f}s" for k, v in timings.items()), file=sys.stderr)


def cmd_compact(args) -> int:
    """Merges the closed days' rollup partitions into one part each (pipeline/compaction.py)."""
    from pipeline.compaction import compact_closed_days

    cfg = config_mod.load(args.config)
    settle_s = cfg.loader.compact_after_s if args.settle_s is None else args.settle_s
    if settle_s < 0:
        raise config_mod.ConfigError(f"--settle-s {settle_s}: must be >= 0 seconds")
    with _store(args, cfg) as store:
        print("goodput compact: merging the closed days' rollup partitions ...", file=sys.stderr)
        done = compact_closed_days(store, time.time(), settle_s)
    for c in done:
        print(f"{c.table} {c.day}: {c.parts} parts into one in {c.seconds:.1f} s", file=sys.stderr)
    closed_before = time.strftime("%Y-%m-%d", time.gmtime(time.time() - settle_s))
    print(
        f"goodput compact: {len(done)} partitions merged; every rollup day before {closed_before} is "
        "one part",
        file=sys.stderr,
    )
    return 0


def cmd_summary(args) -> int:
    from pipeline.summary import as_json, format_team_table, team_table, unallocated_gpu_hours

    cfg = config_mod.load(args.config)
    with _store(args, cfg) as store:
        if args.json:
            report = as_json(store, cfg.cluster.name, cfg.cluster.currency, args.team, args.job)
            json.dump(report, sys.stdout, indent=2)
            sys.stdout.write("\n")
        else:
            teams = team_table(store, cfg.cluster.name, args.team, args.job)
            print(format_team_table(teams, cfg.cluster.currency))
            if args.team is None and args.job is None:
                capacity, unallocated = unallocated_gpu_hours(store, cfg.cluster.name)
                print(f"unallocated capacity: {unallocated:.1f} of {capacity:.1f} GPU-h")
    return 0


def cmd_explain(args) -> int:
    from pipeline.explain import UnknownJob, explain, format_explain

    cfg = config_mod.load(args.config)
    with _store(args, cfg) as store:
        try:
            e = explain(store, cfg.cluster.name, args.job, cfg.cluster.currency)
        except UnknownJob as err:
            print(f"goodput explain: {err}", file=sys.stderr)
            return 2
    if args.json:
        json.dump(e, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        print(format_explain(e))
    return 0


def cmd_report(args) -> int:
    from datetime import date

    from pipeline.report.build import build
    from pipeline.report.write import write

    cfg = config_mod.load(args.config)
    try:
        day = date.fromisoformat(args.day)
    except ValueError:
        print(f"goodput report: --day {args.day!r} is not a date; write it as YYYY-MM-DD", file=sys.stderr)
        return 2
    with _store(args, cfg) as store:
        report = build(store, cfg, day, args.team)
    pages = write(report, Path(args.out), args.lang)
    note = " (no data that day)" if report.empty else ""
    print(f"goodput report: wrote {len(pages)} pages to {args.out}/{note}; open {pages[0]}", file=sys.stderr)
    if args.send:
        from pipeline.report.send import SendError, send

        if not cfg.report.mail.smtp_host and not cfg.report.webhook_url:
            print(
                "goodput report: --send needs [report.mail] smtp_host or [report] webhook_url in the config",
                file=sys.stderr,
            )
            return 2
        try:
            sent = send(report, cfg.report, args.lang)
        except SendError as e:
            print(f"goodput report: {e}", file=sys.stderr)
            return 2
        print(f"goodput report: sent {sent['mails']} mails, {sent['posts']} webhook posts", file=sys.stderr)
    return 0


def cmd_exporter(args) -> int:
    """The goodput exporter on its own: reads the store every [exporter].refresh_s, serves /metrics."""
    import logging
    import signal
    import threading

    from pipeline.goodput_exporter import ExporterEndpoint, GoodputExporter

    cfg = config_mod.load(args.config)
    endpoint = cfg.exporter.metrics_address
    if not endpoint:
        raise config_mod.ConfigError(f"{cfg.source}: [exporter] metrics_address is empty: nothing to serve")
    host, port = config_mod.parse_address(endpoint, "[exporter].metrics_address")
    exporter = GoodputExporter(cfg)
    server = ExporterEndpoint(exporter)
    stop = threading.Event()
    with _store(args, cfg) as store:
        exporter.refresh(store)
        bound = server.serve(host, port)
        print(
            f"goodput exporter: metrics on http://{bound[0]}:{bound[1]}/metrics", file=sys.stderr, flush=True
        )
        logging.getLogger("goodput.exporter").info("refreshing every %.0f s", cfg.exporter.refresh_s)
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, lambda *_: stop.set())
        try:
            while not stop.wait(cfg.exporter.refresh_s):
                exporter.refresh(store)
        finally:
            server.close()
    return 0


def cmd_dead_letters(args) -> int:
    from pipeline import deadletters

    cfg = config_mod.load(args.config)
    where = deadletters.parse_filter(args.reason, args.since)
    if args.limit < 0:
        raise config_mod.ConfigError(f"--limit {args.limit}: must be >= 0 (0: all)")
    with _store(args, cfg) as store:
        by_reason = deadletters.counts(store, where)
        total = sum(by_reason.values())
        if args.export:
            with open(args.export, "wb") as out:
                n = deadletters.export(store, where, out)
            print(
                f"goodput dead-letters: wrote {n} messages to {args.export}; once their cause is fixed, "
                f"load them again with: goodput ingest --from {args.export}",
                file=sys.stderr,
            )
            return 0
        rows = deadletters.listing(store, where, args.limit or None)
    if args.json:
        json.dump({"total": total, "by_reason": by_reason, "dead_letters": rows}, sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    if rows:
        print(deadletters.format_listing(rows))
    shown = f"; showing the oldest {len(rows)} (--limit 0 for all)" if len(rows) < total else ""
    reasons = ", ".join(f"{r}={n}" for r, n in by_reason.items())
    print(f"{total} dead letters{f' ({reasons})' if total else ''}{shown}", file=sys.stderr)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--config", help="goodput TOML config (default: the shipped example)")
    common.add_argument("--store", help="chDB data directory (default: [store].path of the config)")

    p = sub.add_parser(
        "ingest",
        parents=[common],
        help="the loader: Kafka → store as a service (docs/loader.md), or --from a file of messages",
    )
    p.add_argument("--from", dest="source", help="file of messages (one per line) instead of Kafka")
    p.add_argument(
        "--no-analyze", action="store_true", help="--from: only load; do not run the analyzers after"
    )
    p.add_argument(
        "--until-caught-up",
        "--once",
        dest="until_caught_up",
        action="store_true",
        help="Kafka: exit once this loader's partitions have no lag (backfills, tests)",
    )
    p.add_argument(
        "--analyze-every",
        type=float,
        metavar="SECONDS",
        help="Kafka: run the analyzers in this process every SECONDS, over the last "
        "[loader].analyze_lookback_s (default: [loader].analyze_every_s; 0 = never)",
    )
    p.add_argument(
        "--progress",
        action="store_true",
        help="Kafka: progress bar on stderr (default: with --until-caught-up on a terminal)",
    )
    p.set_defaults(func=cmd_ingest)

    p = sub.add_parser("analyze", parents=[common], help="(re)classify a time range of stored data")
    p.add_argument("--since-ms", type=int)
    p.add_argument("--until-ms", type=int)
    p.add_argument(
        "--live",
        type=float,
        metavar="SECONDS",
        help="classify only the data's last SECONDS into goodput_live, provisionally: each job with the "
        "numbers its last whole run kept (b*, noise, evidence baselines; docs/goodput-model.md, Live runs)",
    )
    p.set_defaults(func=cmd_analyze)

    p = sub.add_parser(
        "compact",
        parents=[common],
        help="merge each closed day of the rollup tables into one part (faster reads of past days)",
    )
    p.add_argument(
        "--settle-s",
        type=float,
        metavar="SECONDS",
        help="a day is closed this long after its end, UTC (default: [loader].compact_after_s)",
    )
    p.set_defaults(func=cmd_compact)

    p = sub.add_parser(
        "dead-letters",
        parents=[common],
        help="list the messages the loader refused, and why; --export them for a replay",
    )
    p.add_argument("--reason", help="only this reason (e.g. bad_type; docs/messages.md lists them)")
    p.add_argument("--since", help="only those received since: an age (30m, 6h, 7d) or an ISO 8601 time")
    p.add_argument("--json", action="store_true", help="print JSON (the format is in docs/loader.md)")
    p.add_argument("--limit", type=int, default=100, help="list at most this many, oldest first (0: all)")
    p.add_argument(
        "--export",
        metavar="FILE",
        help="write the raw messages, one per line, for `goodput ingest --from FILE` after a fix",
    )
    p.set_defaults(func=cmd_dead_letters)

    p = sub.add_parser("summary", parents=[common], help="per-team and per-job GPU time by category")
    p.add_argument("--json", action="store_true", help="print JSON (the format is in docs/summary.md)")
    p.add_argument("--team", help="only this team's jobs and GPU time")
    p.add_argument("--job", help="only this job (its id as the scheduler reports it)")
    p.set_defaults(func=cmd_summary)

    p = sub.add_parser(
        "report",
        parents=[common],
        help="the daily efficiency report: HTML, Markdown, CSV, JSON (docs/report.md)",
    )
    p.add_argument("--day", required=True, help="YYYY-MM-DD, the day in [report] timezone")
    p.add_argument("--team", help="only this team's page (and the cluster page)")
    p.add_argument("--lang", choices=("en", "zh"), default="en")
    p.add_argument("--out", required=True, help="directory to write the report to")
    p.add_argument(
        "--send",
        action="store_true",
        help="mail each team its page ([report.mail]) and post to [report] webhook_url",
    )
    p.set_defaults(func=cmd_report)

    p = sub.add_parser(
        "explain", parents=[common], help="one job: GPU time per category and why (evidence, faults, queue)"
    )
    p.add_argument("job", help="job id as the scheduler knows it")
    p.add_argument("--json", action="store_true", help="print JSON (the format is in docs/summary.md)")
    p.set_defaults(func=cmd_explain)

    p = sub.add_parser(
        "exporter",
        parents=[common],
        help="Prometheus /metrics of recent analyzer results: goodput, waste, stragglers (docs/alerts.md)",
    )
    p.set_defaults(func=cmd_exporter)
