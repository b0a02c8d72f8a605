"""Hand-made scenarios for the analyzers: a few job events and one-second samples, encoded as agents
send them (envelopes with per-sender seq), loaded through pipeline.loader into a chDB store, analysed.

Times are seconds after T0 (an hour boundary a few hours ago, so the loader's limits accept them)."""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Callable

from contracts import catalog
from contracts import config as config_mod
from contracts.envelope import encode_batch
from contracts.schema import KINDS, topic_for
from pipeline.analyzers import run as analyzers
from pipeline.loader import Loader, limits_from_config
from transport.base import InProcessTransport

T0 = (int(time.time()) // 3600 - 6) * 3_600_000
SCHED = "sched-01"
JOB_FIELDS = [f.name for f in KINDS["job"].fields]
DERIVED = analyzers.OUTPUT_TABLES


def ms(t_s: float) -> int:
    return T0 + int(round(t_s * 1000))


class Scenario:
    def __init__(self, store, cfg=None):
        self.store = store
        self.cfg = cfg or config_mod.load()
        self.batches: list[tuple[str, bytes, bytes]] = []
        self.seq: dict[tuple[str, str], int] = defaultdict(int)

    def _send(self, kind: str, node: str, columns: dict, sent_ms: int) -> None:
        value = encode_batch(
            kind=kind,
            cluster=self.cfg.cluster.name,
            node=node,
            seq=self.seq[node, kind],
            sent_ms=sent_ms,
            columns=columns,
            agent="goodput-test/0",
        )
        self.seq[node, kind] += 1
        self.batches.append((topic_for(kind), node.encode(), value))

    def job(self, *rows: dict, sender: str = SCHED) -> None:
        """One batch of job events, in the order given; each row: t (s after T0), job_id, event, ..."""
        cols: dict[str, list] = {f: [] for f in JOB_FIELDS}
        for r in rows:
            r = {"attempt": 1, "source": "sim", **r}
            for f in JOB_FIELDS:
                if f == "ts_ms":
                    cols[f].append(ms(r["t"]))
                elif f == "gpu_indices":
                    cols[f].append(list(r.get(f, [])))
                else:
                    cols[f].append(r.get(f))
        self._send("job", sender, cols, max(cols["ts_ms"]))

    def gpu(
        self,
        node: str,
        gpus: range | list[int],
        t0: int,
        t1: int,
        busy: float | Callable[[int, int], float | None] = 90.0,
        throttle: int | Callable[[int, int], int] = 0,
        job_id: str | None = None,
    ) -> None:
        """One-second samples with ts in (t0, t1] for each GPU; busy(s, gpu) -> SM active % at ts s;
        `job_id`: the job the agent saw on these GPUs (NVML's process -> job mapping)."""
        cols: dict[str, list] = {
            "ts_ms": [],
            "gpu": [],
            "uuid": [],
            "job_id": [],
            "sm_active_pct": [],
            "throttle_reasons": [],
        }
        for s in range(t0 + 1, t1 + 1):
            for g in gpus:
                b = busy(s, g) if callable(busy) else busy
                if b is None:
                    continue
                cols["ts_ms"].append(ms(s))
                cols["gpu"].append(g)
                cols["uuid"].append(f"GPU-{node}-{g}")
                cols["job_id"].append(job_id)
                cols["sm_active_pct"].append(float(b))
                cols["throttle_reasons"].append(throttle(s, g) if callable(throttle) else throttle)
        for i in range(0, len(cols["ts_ms"]), 5000):
            part = {k: v[i : i + 5000] for k, v in cols.items()}
            self._send("gpu", node, part, max(part["ts_ms"]))

    def rows(self, kind: str, node: str, t0: int, t1: int, **fields) -> None:
        """One sample per second in (t0, t1] of `kind` (nic, storage) with constant fields."""
        ts = [ms(s) for s in range(t0 + 1, t1 + 1)]
        cols = {"ts_ms": ts, **{k: [v] * len(ts) for k, v in fields.items()}}
        self._send(kind, node, cols, max(ts))

    def load(self, batches=None) -> None:
        transport = InProcessTransport()
        loader = Loader(self.store, limits_from_config(self.cfg))
        for topic, key, value in self.batches if batches is None else batches:
            transport.send(topic, key, value)
        while records := transport.poll(5000):
            loader.load(records)
            transport.commit(records)
        assert not loader.totals.dead_letters, loader.totals
        if batches is None:
            self.batches = []

    def analyze(self, t0: float, t1: float) -> None:
        analyzers.run(self.store, self.cfg, ms(t0), ms(t1))

    def cats(self, job_id: str) -> dict[str, float]:
        t = self.store.query_arrow(
            f"SELECT category, sum(gpu_seconds) AS s FROM goodput_windows WHERE job_id = '{job_id}' "
            "GROUP BY category ORDER BY category"
        )
        return {
            c: round(s, 6)
            for c, s in zip(t.column("category").to_pylist(), t.column("s").to_pylist(), strict=True)
        }

    def windows(self, job_id: str) -> list[tuple]:
        t = self.store.query_arrow(
            "SELECT toUnixTimestamp(window_start) - intDiv({T0}, 1000) AS w, category, gpu_seconds, evidence "
            f"FROM goodput_windows WHERE job_id = '{job_id}' ORDER BY w, category".replace("{T0}", str(T0))
        )
        return list(zip(*(t.column(c).to_pylist() for c in t.column_names), strict=True))

    def dump(self) -> dict[str, list[tuple]]:
        """Every derived table, all columns but computed_at, sorted: for byte-for-byte comparisons."""
        out = {}
        for name in DERIVED:
            cols = [
                c
                for c in self.store.query_arrow(f"SELECT * FROM {name} LIMIT 0").column_names
                if c != "computed_at"
            ]
            t = self.store.query_arrow(f"SELECT {', '.join(cols)} FROM {name} ORDER BY {', '.join(cols)}")
            out[name] = list(zip(*(t.column(c).to_pylist() for c in cols), strict=True))
        return out


def reset(store) -> None:
    for name in [*catalog.RAW_TABLES.values(), catalog.INGESTED_BATCHES, catalog.DEAD_LETTERS, *DERIVED]:
        store.execute(f"TRUNCATE TABLE IF EXISTS {name}")
