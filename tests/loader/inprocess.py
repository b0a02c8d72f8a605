"""The loader without Kafka: messages through the in-process transport into a real chDB store, with the
loader-test cluster's config (tests/loader/helpers.py). For tests of what the loader decides (stored or
dead-lettered, and why), where a broker would only add time."""

from __future__ import annotations

from pathlib import Path

from contracts import config as config_mod
from contracts.schema import topic_for
from pipeline import ddl
from pipeline.chdb_store import ChdbStore
from pipeline.loader import Loader, LoadStats, limits_from_config
from tests.loader.helpers import write_config
from transport.base import InProcessTransport

PREFIX = "goodput"


class InProcessLoader:
    """A chDB store in `tmp`, a Loader on it, and `send` + `load` through an InProcessTransport."""

    def __init__(self, tmp: Path) -> None:
        config = write_config(tmp / "goodput.toml", "127.0.0.1:9", PREFIX, tmp / "store")
        self.cfg = config_mod.load(config)
        self.store = ChdbStore(tmp / "store")
        ddl.migrate(self.store)
        self.loader = Loader(self.store, limits_from_config(self.cfg), topic_prefix=PREFIX)
        self.transport = InProcessTransport()

    def send(self, kind: str, value: bytes) -> None:
        self.transport.send(topic_for(kind, PREFIX), b"", value)

    def load(self) -> LoadStats:
        """Everything sent so far, in one poll (one load)."""
        return self.loader.load(self.transport.poll(1_000_000))

    def dead_letters(self) -> list[dict]:
        """Every dead letter in offset order: reason, detail, offset and the raw bytes."""
        rows = self.store.query_arrow(
            "SELECT reason, detail, offset, hex(raw) AS raw FROM dead_letters ORDER BY offset"
        ).to_pylist()
        return [{**r, "raw": bytes.fromhex(r["raw"])} for r in rows]

    def close(self) -> None:
        self.store.close()
