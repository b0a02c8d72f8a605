"""`goodput explain JOB`: per category of one job, how much and *why*, read back from the analyzer outputs.

The why is the evidence goodput.sql wrote per window (the saturated storage, the congested link, the
straggler, the failure and its reason), merged into time ranges, beside the job's faults (faults.sql)
and its scheduling delay. The JSON form is a versioned contract (docs/summary.md); the text form is
for people and may change.
"""

from __future__ import annotations

from contracts import catalog
from pipeline.store import Params, Store
from pipeline.summary import SUMMARY_VERSION, iso

TEXT_RANGES = 5
"""Evidence ranges shown per category in the text form (the largest); --json has them all."""


class UnknownJob(LookupError):
    """No analyzer output names the job: never analysed, another cluster, or a wrong id."""


def _rows(store: Store, sql: str, params: Params) -> list[dict]:
    return store.query_arrow(sql, params).to_pylist()


def merge_ranges(windows: list[dict]) -> list[dict]:
    """Consecutive windows (one's end is the next's start) with the same evidence become one range;
    `windows` are one category's, in time order: start_ms, end_ms, gpu_seconds, evidence."""
    out: list[dict] = []
    for w in windows:
        last = out[-1] if out else None
        if last and last["end_ms"] == w["start_ms"] and last["evidence"] == w["evidence"]:
            last["end_ms"] = w["end_ms"]
            last["gpu_seconds"] += w["gpu_seconds"]
        else:
            out.append(dict(w))
    return out


def _categories(store: Store, where: str, params: Params, allocated: float) -> list[dict]:
    windows = _rows(
        store,
        f"""SELECT category, toInt64(toUnixTimestamp(window_start)) * 1000 AS start_ms,
                   start_ms + toInt64(window_s) * 1000 AS end_ms, gpu_seconds, evidence
            FROM {catalog.GOODPUT_WINDOWS} {where} ORDER BY category, start_ms""",
        params,
    )
    out = []
    for c in catalog.CATEGORIES:
        mine = [w for w in windows if w["category"] == c]
        secs = sum(w["gpu_seconds"] for w in mine)
        ranges = [] if c == "productive" else merge_ranges(mine)
        out.append(
            {
                "category": c,
                "gpu_seconds": secs,
                "gpu_hours": secs / 3600,
                "pct": 100 * secs / allocated if allocated > 0 else 0.0,
                "ranges": [
                    {
                        "start": iso(r["start_ms"]),
                        "end": iso(r["end_ms"]),
                        "gpu_seconds": r["gpu_seconds"],
                        "evidence": r["evidence"],
                    }
                    for r in ranges
                ],
            }
        )
    return out


REPEAT_KEYS = ("failures", "repeats", "max_in_window", "window_s")


def _faults(store: Store, where: str, params: Params) -> list[dict]:
    rows = _rows(
        store,
        f"""SELECT toUnixTimestamp64Milli(ts) AS t, attempt, event, kind, owner, reason, xid, exit_code,
                   node, gpu, nic, located_by, lost_gpu_seconds, restart_gpu_seconds, held_gpu_seconds,
                   gpu_seconds, cost
            FROM {catalog.FAULTS} {where} ORDER BY t, event""",
        params,
    )
    nodes = sorted({r["node"] for r in rows if r["node"]})
    repeats = {}
    if nodes:
        for r in _rows(
            store,
            f"""SELECT scope, node, gpu, {", ".join(REPEAT_KEYS)} FROM {catalog.FAULT_REPEATS}
                WHERE cluster = {{cluster:String}}""",
            {"cluster": params["cluster"]},
        ):
            if r["node"] not in nodes:
                continue
            repeats[r["scope"], r["node"], r["gpu"]] = {k: r[k] for k in REPEAT_KEYS}
    return [
        {
            "time": iso(r.pop("t")),
            **r,
            "node_repeats": repeats.get(("node", r["node"], None)),
            "gpu_repeats": repeats.get(("gpu", r["node"], r["gpu"])) if r["gpu"] is not None else None,
        }
        for r in rows
    ]


def _scheduling(store: Store, where: str, params: Params) -> dict | None:
    rows = _rows(
        store,
        f"""SELECT queue, priority, gpus_requested, toUnixTimestamp64Milli(submitted) AS submitted,
                   toUnixTimestamp64Milli(first_allocated) AS first_allocated,
                   toUnixTimestamp64Milli(gang_complete) AS gang_complete, queue_wait_s, gang_wait_s
            FROM {catalog.SCHEDULING_DELAY} {where}""",
        params,
    )
    if not rows:
        return None
    r = rows[0]
    return {**r, **{k: iso(r[k]) for k in ("submitted", "first_allocated", "gang_complete")}}


JOB_KEYS = (
    "team",
    "account",
    "pool",
    "gpus",
    "attempts",
    "allocated_gpu_seconds",
    "goodput_pct",
    "sm_active_pct",
    "healthy_busy_pct",
    "clock_offset_s",
    "cost",
    "waste_cost",
)


def _stragglers(store: Store, where: str, params: Params) -> list[dict]:
    """The job's straggler episodes (table straggler_episodes), in time order."""
    rows = _rows(
        store,
        f"""SELECT toInt64(toUnixTimestamp(start)) * 1000 AS start,
                   toInt64(toUnixTimestamp(end)) * 1000 AS end,
                   source, rank, node, gpu, kind, steps, slowdown_pct, score, gross, cost_gpu_seconds
            FROM {catalog.STRAGGLER_EPISODES} {where} ORDER BY start, rank""",
        params,
    )
    return [{**r, "start": iso(r["start"]), "end": iso(r["end"])} for r in rows]


def explain(store: Store, cluster: str, job_id: str, currency: str) -> dict:
    """The job's explanation (docs/summary.md, `goodput explain --json`); UnknownJob when no output
    table names it."""
    where = "WHERE cluster = {cluster:String} AND job_id = {job:String}"
    params = {"cluster": cluster, "job": job_id}  # the job id is typed by a user: only ever a parameter
    jobs = _rows(
        store,
        f"""SELECT {", ".join(JOB_KEYS)}, toInt64(toUnixTimestamp(first_allocated)) * 1000 AS first_allocated,
                   toInt64(toUnixTimestamp(last_seen)) * 1000 AS last_seen
            FROM {catalog.JOB_SUMMARY} {where}""",
        params,
    )
    scheduling = _scheduling(store, where, params)
    if not jobs and scheduling is None:
        raise UnknownJob(
            f"no job {job_id!r} in cluster {cluster!r}: not analysed yet (goodput analyze), or another "
            f"cluster or store"
        )
    job = jobs[0] if jobs else {k: None for k in (*JOB_KEYS, "first_allocated", "last_seen")}
    job.update(first_allocated=iso(job["first_allocated"]), last_seen=iso(job["last_seen"]))
    return {
        "version": SUMMARY_VERSION,
        "cluster": cluster,
        "currency": currency,
        "job_id": job_id,
        "job": job,
        "scheduling": scheduling,
        "categories": _categories(store, where, params, job["allocated_gpu_seconds"] or 0.0),
        "faults": _faults(store, where, params),
        "stragglers": _stragglers(store, where, params),
    }


def _when(start: str, end: str) -> str:
    """A range for people: date and time of its start, and the end's time (and date if another day)."""
    a, b = start.replace("T", " ")[:19], end.replace("T", " ")[:19]
    return f"{a} – {b[11:] if a[:10] == b[:10] else b} UTC"


def _table(head: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(x) for x in col) for col in zip(head, *rows, strict=True)]
    return [
        "  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
        for r in [head, *rows]
    ]


def format_explain(e: dict) -> str:
    """The text form: the job, a table of its categories, then per category the evidence ranges (the
    largest TEXT_RANGES), the faults and the scheduling delay."""
    j = e["job"]
    out = [f"job {e['job_id']} ({e['cluster']})"]
    if j["allocated_gpu_seconds"] is not None:
        out[0] += (
            f": team {j['team']}, pool {j['pool']}, {j['gpus']} GPUs, {j['attempts']} attempt(s), "
            f"goodput {j['goodput_pct']:.1f}%, cost {j['cost']:,.2f} {e['currency']}"
        )
        rows = [
            [c["category"], f"{c['gpu_seconds']:,.1f}", f"{c['gpu_hours']:,.2f}", f"{c['pct']:.1f}%"]
            for c in e["categories"]
            if c["gpu_seconds"] > 0
        ]
        rows.append(
            ["total", f"{j['allocated_gpu_seconds']:,.1f}", f"{j['allocated_gpu_seconds'] / 3600:,.2f}", ""]
        )
        out += ["", *_table(["category", "GPU-s", "GPU-h", "%"], rows)]
    why = []
    for c in e["categories"]:
        ranges = c["ranges"]
        top = sorted(sorted(ranges, key=lambda r: -r["gpu_seconds"])[:TEXT_RANGES], key=lambda r: r["start"])
        why += [
            f"  {c['category']:<12} {_when(r['start'], r['end'])}  {r['gpu_seconds']:,.1f} GPU-s  "
            f"{r['evidence'] or '(no evidence)'}"
            for r in top
        ]
        if len(ranges) > len(top):
            why.append(f"  {c['category']:<12} ... {len(ranges) - len(top)} more range(s): --json lists all")
    if why:
        out += ["", "why:", *why]
    if e["faults"]:
        out += ["", "faults:"]
        for f in e["faults"]:
            where = " ".join(
                x
                for x in (
                    f"node {f['node']}" if f["node"] else "",
                    f"GPU {f['gpu']}" if f["gpu"] is not None else "",
                    f"NIC {f['nic']}" if f["nic"] else "",
                )
                if x
            )
            line = (
                f"  {f['time'].replace('T', ' ')[:19]} UTC  attempt {f['attempt']}  {f['event']}  {f['kind']}"
                f" ({f['reason'] or 'no reason'}, cost owner {f['owner']})  {where or 'location unknown'}"
                f"  retry waste {f['gpu_seconds']:,.1f} GPU-s"
            )
            if f["held_gpu_seconds"]:
                line += f", held after {f['held_gpu_seconds']:,.1f} GPU-s"
            for scope in ("node", "gpu"):
                r = f[f"{scope}_repeats"]
                if r:
                    line += (
                        f"; repeat offender: this {scope.upper() if scope == 'gpu' else scope} failed "
                        f"{r['failures']}x, {r['repeats']} within {r['window_s'] / 86400:g} d of the last"
                    )
            out.append(line)
    if e["stragglers"]:
        out += ["", "stragglers:"]
        for g in e["stragglers"]:
            gpu = f" GPU {g['gpu']}" if g["gpu"] >= 0 else " (all its GPUs)"
            who, found = (
                (f"rank {g['rank']} on {g['node']}{gpu}", f"{g['steps']} steps")
                if g["source"] == "steps"
                else (f"{g['node']}{gpu}", "from SM activity")
            )
            out.append(
                f"  {_when(g['start'], g['end'])}  {who}  {g['slowdown_pct']:.1f}% slower"
                f" (score {g['score']:.2f}{', gross' * g['gross']}), {g['kind']}, {found};"
                f" cost the gang {g['cost_gpu_seconds']:,.1f} GPU-s"
            )
    s = e["scheduling"]
    if s:
        waits = [
            f"queued {s['queue_wait_s']:,.1f} s" if s["queue_wait_s"] is not None else "never allocated",
            f"gang wait {s['gang_wait_s']:,.1f} s" if s["gang_wait_s"] is not None else "",
        ]
        out += ["", f"scheduling: {', '.join(w for w in waits if w)} (queue {s['queue'] or '-'})"]
    return "\n".join(out)
