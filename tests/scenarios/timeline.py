"""Hand-made cluster timelines with their own ground truth: the analyzers' edge cases.

The simulator (goodput/sim) was written by the same people as the classifier, and its evidence sits
far above every threshold. A `Timeline` is written second by second instead: a scenario says what each
allocated GPU did in each second (its true category) and which signals that left behind, including
evidence just either side of a threshold, silent nodes, skewed clocks and simultaneous events. The
truth is what happened to the job, not what the counters can show: where the counters cannot tell, the
analyzers are expected to be wrong, and bench/accuracy.py says by how much.

Conventions, as docs/messages.md defines them:
- second `t` of the timeline is the interval [start + t s, start + t + 1 s);
- the sample that describes second `t` carries ts_ms = start + (t + 1) s (a sample describes the second
  before its timestamp), shifted by the node's clock offset;
- job events come from the scheduler's node (correct clock) at start + t s + `ms`; events with the same
  timestamp are sent in the order they happened, in one batch.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Iterator

import numpy as np

from contracts import config as config_mod
from contracts.catalog import CATEGORIES
from contracts.config import Config
from contracts.envelope import encode_batch
from contracts.schema import topic_for

CODE = {c: i for i, c in enumerate(CATEGORIES)}
UNALLOCATED = -1
GPUS = 8
BATCH_S = 10
AGENT = "goodput-scenarios/1"
HEALTHY_SM = 80.0
STALLED_SM = 3.0
STORAGE_CEILING = "storage_ceiling_bytes_per_s"


@dataclass
class Timeline:
    """Per-second signals and truth for `len(nodes)` nodes of the example config's core pool."""

    name: str
    seconds: int
    nodes: int = 2
    seed: int = 0
    start_ms: int = 0
    config: Config = field(default_factory=config_mod.load)
    events: list[dict] = field(default_factory=list)
    steps: list[dict] = field(default_factory=list)
    attempts: dict[str, int] = field(default_factory=dict)
    """The attempt each job is at: events without one belong to it."""

    def __post_init__(self) -> None:
        if not self.start_ms:
            # a whole hour back from now, on a window boundary: inside the loader's accepted past
            self.start_ms = (int(time.time()) // 3600 - 2) * 3_600_000
        self.rng = np.random.default_rng(self.seed)
        core = next(p for p in self.config.pools if p.name == "core")
        self.pool = core
        self.node_names = list(core.nodes[: self.nodes])
        shape_g = (self.nodes, GPUS, self.seconds)
        shape_n = (self.nodes, self.seconds)
        self.truth = np.full(shape_g, UNALLOCATED, dtype=np.int8)
        self.job = np.full(shape_g, "", dtype=object)
        self.sm = np.zeros(shape_g)
        self.clock_events = np.zeros(shape_g, dtype=np.int64)
        self.read_bps = np.full(shape_n, 1e6)
        self.psi = np.zeros(shape_n)
        self.xmit_wait = np.zeros(shape_n)
        self.ecn = np.zeros(shape_n)
        self.cnp_sent = np.zeros(shape_n)
        self.cnp_handled = np.zeros(shape_n)
        self.tx_fraction = np.full(shape_n, 0.05)
        self.silent = np.zeros(shape_n, dtype=bool)
        self.offset_ms = np.zeros(self.nodes, dtype=np.int64)
        self.noise_sd = 1.5

    # -- what happened ---------------------------------------------------------------------------
    def event(self, t: int, job_id: str, event: str, ms: int = 0, **fields) -> None:
        """A job event at second `t` (+ `ms`); `node` may be given as an index into the timeline's nodes."""
        if isinstance(fields.get("node"), int):
            fields["node"] = self.node_names[fields["node"]]
        attempt = fields.setdefault("attempt", self.attempts.get(job_id, 1))
        self.attempts[job_id] = attempt
        self.events.append(
            {
                "ts_ms": self.start_ms + t * 1000 + ms,
                "job_id": job_id,
                "event": event,
                "source": "file",
                **fields,
            }
        )

    def phase(
        self,
        job_id: str,
        nodes: list[int],
        t0: int,
        t1: int,
        category: str,
        sm: float | None = None,
        gpus: list[int] | None = None,
    ) -> None:
        """GPUs `gpus` (default all) of `nodes` spend [t0, t1) in `category` with SM activity `sm`
        (default: the healthy level when productive, almost nothing otherwise)."""
        level = sm if sm is not None else (HEALTHY_SM if category == "productive" else STALLED_SM)
        for n in nodes:
            for g in gpus if gpus is not None else range(GPUS):
                self.truth[n, g, t0:t1] = CODE[category]
                self.job[n, g, t0:t1] = job_id
                self.sm[n, g, t0:t1] = level

    def stall(
        self,
        job_id: str,
        nodes: list[int],
        t0: int,
        t1: int,
        category: str,
        stalled_per_window: int = 6,
        gpus: list[int] | None = None,
        healthy_sm: float = HEALTHY_SM,
    ) -> None:
        """A stall as whole seconds: in every window of [t0, t1) the first `stalled_per_window` seconds
        wait (SM near zero, true category `category`), the rest compute at the healthy level."""
        for w in range(t0, t1, BATCH_S):
            cut = min(w + stalled_per_window, t1)
            self.phase(job_id, nodes, w, cut, category, gpus=gpus)
            self.phase(job_id, nodes, cut, min(w + BATCH_S, t1), "productive", sm=healthy_sm, gpus=gpus)

    def simple_job(
        self,
        job_id: str,
        nodes: list[int],
        *,
        alloc: int = 10,
        running: int = 60,
        end: int | None = None,
        account: str = "llm",
    ) -> None:
        """submitted → allocated → gang_complete at `alloc`, startup until `running`, productive until
        `end` (completed and released there)."""
        end = self.seconds - 10 if end is None else end
        self.event(0, job_id, "submitted", account=account, gpus_requested=GPUS * len(nodes), attempt=1)
        for n in nodes:
            self.event(alloc, job_id, "allocated", node=n, gpu_indices=list(range(GPUS)), attempt=1)
        self.event(alloc, job_id, "gang_complete", attempt=1)
        self.event(running, job_id, "running", attempt=1)
        self.phase(job_id, nodes, alloc, running, "startup")
        self.phase(job_id, nodes, running, end, "productive")
        self.finish(job_id, nodes, end)

    def finish(self, job_id: str, nodes: list[int], end: int, released: int | None = None) -> None:
        self.event(end, job_id, "completed", exit_code=0)
        for n in nodes:
            self.event(
                end if released is None else released,
                job_id,
                "released",
                node=n,
                gpu_indices=list(range(GPUS)),
            )

    def storage_load(self, nodes: list[int], t0: int, t1: int, fraction_of_ceiling: float) -> None:
        """Reads on `nodes` that add up to `fraction_of_ceiling` of the pool's storage ceiling."""
        per_node = fraction_of_ceiling * self.pool.storage_ceiling_bytes_per_s / len(nodes)
        for n in nodes:
            self.read_bps[n, t0:t1] = per_node

    # -- what the pipeline receives ------------------------------------------------------------------
    def messages(self) -> Iterator[tuple[str, bytes, bytes]]:
        """(topic, key, value) for every batch, in time order: what agents and the scheduler would send."""
        seq: dict[tuple[str, str], int] = defaultdict(int)
        sched = self.config.cluster.control_nodes[0]
        cluster = self.config.cluster.name
        link_bps = self.config.network_tiers[self.pool.network_tier].link_gbps * 1e9 / 8
        events = sorted(self.events, key=lambda e: e["ts_ms"])  # stable: simultaneous ones keep their order
        ei = 0

        def envelope(kind: str, node: str, columns: dict, sent_ms: int) -> tuple[str, bytes, bytes]:
            value = encode_batch(
                kind=kind,
                cluster=cluster,
                node=node,
                seq=seq[(node, kind)],
                sent_ms=sent_ms,
                columns=columns,
                agent=AGENT,
            )
            seq[(node, kind)] += 1
            return topic_for(kind), node.encode(), value

        for t0 in range(0, self.seconds, BATCH_S):
            t1 = min(self.seconds, t0 + BATCH_S)
            batch = []
            while ei < len(events) and events[ei]["ts_ms"] < self.start_ms + t1 * 1000:
                batch.append(events[ei])
                ei += 1
            if batch:
                names = sorted({k for e in batch for k in e})
                cols = {k: [e.get(k, [] if k == "gpu_indices" else None) for e in batch] for k in names}
                yield envelope("job", sched, cols, self.start_ms + t1 * 1000)
            steps = [s for s in self.steps if t0 <= s["t"] < t1]
            by_node: dict[str, list[dict]] = defaultdict(list)
            for s in steps:
                by_node[self.node_names[s["node"]]].append(s)
            for node, rows in by_node.items():
                names = [
                    "ts_ms",
                    "job_id",
                    "rank",
                    "step",
                    "attempt",
                    "gpu",
                    "duration_ms",
                    "data_ms",
                    "compute_ms",
                    "comm_ms",
                ]
                cols = {k: [r[k] for r in rows] for k in names}
                yield envelope("step", node, cols, self.start_ms + t1 * 1000)
            for n, node in enumerate(self.node_names):
                secs = [t for t in range(t0, t1) if not self.silent[n, t]]
                if not secs:
                    continue
                ts = [self.start_ms + (t + 1) * 1000 + int(self.offset_ms[n]) for t in secs]
                sent = self.start_ms + t1 * 1000 + int(self.offset_ms[n])
                yield envelope("gpu", node, self._gpu_columns(n, secs, ts), sent)
                yield envelope("nic", node, self._nic_columns(n, secs, ts, link_bps), sent)
                yield envelope("storage", node, self._storage_columns(n, secs, ts), sent)

    def _gpu_columns(self, n: int, secs: list[int], ts: list[int]) -> dict:
        sm = self.sm[n][:, secs] + self.rng.normal(0, self.noise_sd, size=(GPUS, len(secs)))
        sm = np.where(self.truth[n][:, secs] == UNALLOCATED, 0.0, np.clip(sm, 0.0, 100.0))
        rows = [(t, g) for t in range(len(secs)) for g in range(GPUS)]
        node = self.node_names[n]
        return {
            "ts_ms": [ts[t] for t, _ in rows],
            "gpu": [g for _, g in rows],
            "uuid": [f"GPU-{node}-{g}" for _, g in rows],
            "job_id": [self.job[n, g, secs[t]] or None for t, g in rows],
            "sm_active_pct": [round(float(sm[g, t]), 2) for t, g in rows],
            "util_gpu_pct": [100.0 if sm[g, t] > 1 else 0.0 for t, g in rows],
            "throttle_reasons": [int(self.clock_events[n, g, secs[t]]) for t, g in rows],
        }

    def _nic_columns(self, n: int, secs: list[int], ts: list[int], link_bps: float) -> dict:
        rows = [(t, p) for t in range(len(secs)) for p in range(GPUS)]
        at = [secs[t] for t, _ in rows]
        return {
            "ts_ms": [ts[t] for t, _ in rows],
            "device": [f"mlx5_{p}" for _, p in rows],
            "port": [1] * len(rows),
            "link_layer": ["InfiniBand"] * len(rows),
            "state": ["ACTIVE"] * len(rows),
            "rate_gbps": [link_bps * 8 / 1e9] * len(rows),
            "tx_bytes_per_s": [float(self.tx_fraction[n, t] * link_bps) for t in at],
            "rx_bytes_per_s": [float(self.tx_fraction[n, t] * link_bps) for t in at],
            "xmit_wait_per_s": [float(self.xmit_wait[n, t]) for t in at],
            "ecn_marked_per_s": [float(self.ecn[n, t]) for t in at],
            "cnp_sent_per_s": [float(self.cnp_sent[n, t]) for t in at],
            "cnp_handled_per_s": [float(self.cnp_handled[n, t]) for t in at],
        }

    def _storage_columns(self, n: int, secs: list[int], ts: list[int]) -> dict:
        k = len(secs)
        return {
            "ts_ms": ts + ts,
            "source": ["nfs"] * k + ["psi"] * k,
            "device": ["/mnt/datasets"] * k + ["io"] * k,
            "read_bytes_per_s": [float(self.read_bps[n, t]) for t in secs] + [None] * k,
            "psi_some_pct": [None] * k + [float(self.psi[n, t]) for t in secs],
        }

    # -- the truth -------------------------------------------------------------------------------
    def truth_seconds(self, window_s: int) -> dict[tuple[str, int, str], float]:
        """GPU-seconds per (job, window start in epoch seconds, category)."""
        out: dict[tuple[str, int, str], float] = defaultdict(float)
        start_s = self.start_ms // 1000
        for n in range(self.nodes):
            for g in range(GPUS):
                for t in np.flatnonzero(self.truth[n, g] != UNALLOCATED):
                    w = (start_s + int(t)) // window_s * window_s
                    out[(self.job[n, g, t], w, CATEGORIES[self.truth[n, g, t]])] += 1.0
        return out
