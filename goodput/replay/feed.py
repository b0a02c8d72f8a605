"""Sending a replay's messages through the in-process transport into the loader, on the trace's clock.

The loader refuses rows older than `max_past_days` or ahead of its clock (docs/loader.md), which is right
for live data and wrong for a trace months long. A replay therefore runs the loader on a *replay clock*:
each batch is loaded at the moment a live collector would have sent it (its last row's time), so every
batch passes the same validation as live data would, and no interval of the trace is changed. The store
keeps job and step events 400 days, so a trace rebased to end now stays whole."""

from __future__ import annotations

import shutil
import tomllib
from collections import defaultdict
from pathlib import Path
from typing import Any, Mapping, Sequence

from contracts.config import Config
from contracts.envelope import encode_batch
from contracts.schema import topic_for
from goodput.replay.traces import TraceError
from pipeline import ddl
from pipeline.chdb_store import ChdbStore
from pipeline.loader import Loader, LoadStats, limits_from_config
from pipeline.progress import Progress
from pipeline.store import Store
from transport.base import InProcessTransport

AGENT = "goodput-replay/0.1.0"


def fresh_store(out: Path, cluster: str) -> ChdbStore:
    """An empty chDB store in `out`/store: a replay is a snapshot, so an earlier replay's store there (its
    config.toml beside it names the same cluster) is replaced; opening it first refuses, naming the
    holder, when another process uses it. Any other directory there is refused, never deleted."""
    path = out / "store"
    if path.exists():
        if _replayed_cluster(out / "config.toml") != cluster:
            raise TraceError(
                f"{path} exists and is not the store of an earlier {cluster} replay; choose another --out"
            )
        ChdbStore(path).close()
        shutil.rmtree(path)
    out.mkdir(parents=True, exist_ok=True)
    store = ChdbStore(path)
    ddl.migrate(store)
    return store


def _replayed_cluster(config: Path) -> str | None:
    try:
        return tomllib.loads(config.read_text()).get("cluster", {}).get("name")
    except (OSError, tomllib.TOMLDecodeError):
        return None


class Feeder:
    """Encodes batches as the documented envelopes (docs/messages.md), sends each through the transport
    and loads it at once, with the loader's clock at the batch's send time."""

    def __init__(self, store: Store, cfg: Config) -> None:
        self.cfg = cfg
        self.now_ms = 0
        self.transport = InProcessTransport()
        self.loader = Loader(
            store,
            limits_from_config(cfg),
            topic_prefix=cfg.transport.topic_prefix,
            clock=lambda: self.now_ms / 1000,
        )
        self.seq: dict[tuple[str, str], int] = defaultdict(int)

    def send(self, kind: str, node: str, columns: Mapping[str, Sequence[Any]], sent_ms: int) -> None:
        value = encode_batch(
            kind=kind,
            cluster=self.cfg.cluster.name,
            node=node,
            seq=self.seq[(node, kind)],
            sent_ms=sent_ms,
            columns=columns,
            agent=AGENT,
        )
        self.seq[(node, kind)] += 1
        self.transport.send(topic_for(kind, self.cfg.transport.topic_prefix), node.encode(), value)
        self.now_ms = sent_ms
        records = self.transport.poll(1)
        self.loader.load(records)
        self.transport.commit(records)

    @property
    def totals(self) -> LoadStats:
        return self.loader.totals

    def finish(self, progress: Progress, source: Path) -> LoadStats:
        """Closes the load's progress line; a dead letter is a bug of the importer, so TraceError."""
        totals = self.loader.totals
        progress.done(f"{sum(totals.rows.values()):,} rows, {sum(totals.dead_letters.values())} dead letters")
        if totals.dead_letters:
            raise TraceError(
                f"{source}: the loader refused {dict(totals.dead_letters)}; see goodput dead-letters"
            )
        return totals


def event_columns(events: list[dict]) -> dict[str, list]:
    """Job events (one dict each) as an envelope's columns: a field an event lacks is null in its row
    (`gpu_indices`: empty, an allocation without placement)."""
    fields = sorted({k for e in events for k in e})
    return {f: [e.get(f, [] if f == "gpu_indices" else None) for e in events] for f in fields}
