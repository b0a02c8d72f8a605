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
DERIVED = (*analyzers.OUTPUT_TABLES, analyzers.LIVE_OUTPUT)


def ms(t_s: float) -> int:
    return T0 + int(round(t_s * 1000))


class Scenario:
    def __init__(self, store, cfg=None, rollups: bool = True, parts: int | None = None):
        self.store = store
        self.cfg = cfg or config_mod.load()
        self.rollups = rollups
        self.parts = parts
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

    def steps(
        self,
        node: str,
        job_id: str,
        ranks: list[int],
        t0: int,
        t1: int,
        step_s: int = 1,
        waits: Callable[[int], tuple[float, float]] = lambda s: (5.0, 50.0),
        first_rank: int = 0,
    ) -> None:
        """Step events of `ranks` (rank = first_rank + GPU index on `node`), one step every `step_s`
        seconds ending at t0 + step_s, ..., t1; waits(end s) -> (data_ms, comm_ms) of the step, the rest
        compute."""
        cols: dict[str, list] = defaultdict(list)
        for i, end in enumerate(range(t0 + step_s, t1 + 1, step_s)):
            data, comm = waits(end)
            for g in ranks:
                duration = step_s * 1000.0
                row = dict(ts_ms=ms(end), job_id=job_id, rank=first_rank + g, step=i, attempt=1, gpu=g)
                row["duration_ms"] = duration
                row.update(data_ms=data, comm_ms=comm, compute_ms=duration - data - comm)
                for k, v in row.items():
                    cols[k].append(v)
        self._send("step", node, dict(cols), max(cols["ts_ms"]))

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
        analyzers.run(self.store, self.cfg, ms(t0), ms(t1), rollups=self.rollups, parts=self.parts)

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


def fails_once(
    sc, job_id, t0, t_fail, node="gpu-core-001", event="failed", reason="xid:79", xid_gpu=None, **extra
):
    """One node, 4 GPUs from t0 until a failure at t_fail with no restart (released then); `xid_gpu`: the
    GPU whose agent reports the reason's XID a second before."""
    j = dict(job_id=job_id, account="research")
    sc.job(dict(t=t0, event="allocated", node=node, gpu_indices=[0, 1, 2, 3], **j))
    sc.job(dict(t=t0, event="gang_complete", **j), dict(t=t0, event="running", **j))
    sc.job(dict(t=t_fail, event=event, reason=reason, **extra, **j))
    sc.job(dict(t=t_fail, event="released", node=node, gpu_indices=[0, 1, 2, 3], **j))
    skip = (t_fail - 1, xid_gpu)
    sc.gpu(node, [0, 1, 2, 3], t0, t_fail, lambda s, g: None if (s, g) == skip else 90.0)
    if xid_gpu is not None:
        xid = int(reason.removeprefix("xid:"))
        sc.rows("gpu", node, t_fail - 2, t_fail - 1, gpu=xid_gpu, uuid=f"GPU-{node}-{xid_gpu}", xid=xid)


def reset(store) -> None:
    raw = [*catalog.RAW_TABLES.values(), *catalog.ROLLUP_TABLES.values(), *catalog.ROLLUP_RECENT.values()]
    for name in [*raw, catalog.INGESTED_BATCHES, catalog.DEAD_LETTERS, *DERIVED]:
        store.execute(f"TRUNCATE TABLE IF EXISTS {name}")
