"""Goodput's Prometheus recording and alerting rules, as data (docs/alerts.md documents each).

Every series a rule reads is spelt through `m()`, which refuses a name that contracts.catalog does not
declare (goodput's own series, and EXTERNAL_METRICS for Kafka, ClickHouse, Prometheus and Alertmanager):
a renamed metric breaks the build here, not an alert that silently never fires.

Each alert carries its own unit test: `fire`, input series under which it must fire with `labels`, and
`quiet`, series under which it must not (alerts/promtest.py turns them into `promtool test rules` cases).
Thresholds are constants in the expressions, named in the summary; `for:` is long enough that one bad
scrape or one analyzer window does not page anybody.

Conventions the expressions rely on (the scrape config in alerts/build.py sets them, docs/alerts.md):
every target has a `node` label (host name without port) and the Prometheus `job` names below; a node
under maintenance carries `maintenance="true"` on its targets.
"""

from __future__ import annotations

from dataclasses import dataclass

from contracts import catalog

JOBS = {
    "agent": "goodput-agent",
    "loader": "goodput-loader",
    "exporter": "goodput-exporter",
    "node": "node",
}
"""Prometheus `job` names of the scrape configs the rules assume."""

SEVERITIES = ("page", "ticket", "none")
"""page: on-call now; ticket: the owner's queue; none: routed nowhere (the Watchdog goes to the dead-man
receiver; inhibition sources only silence others)."""


def _declared() -> set[str]:
    names = set(catalog.agent_metrics()) | set(catalog.EXTERNAL_METRICS)
    for table in (
        catalog.AGENT_DERIVED_METRICS,
        catalog.AGENT_SELF_METRICS,
        catalog.LOADER_METRICS,
        catalog.GOODPUT_METRICS,
    ):
        names |= set(table)
    return names


DECLARED = _declared()


def m(name: str) -> str:
    """A declared series name, or KeyError naming it."""
    if name not in DECLARED:
        raise KeyError(f"{name}: not declared in contracts/catalog.py; declare it there first")
    return name


@dataclass(frozen=True)
class Recording:
    record: str
    expr: str
    why: str


@dataclass(frozen=True)
class Alert:
    name: str
    expr: str
    for_: str
    severity: str
    subsystem: str
    summary: str
    """One line; may use {{ $labels.<name> }}."""
    runbook: str
    """What to check first, in order; may use {{ $labels.<name> }}."""
    dashboard: str
    """Grafana path (dashboards/ uids), may use {{ $labels.<name> }}."""
    fire: tuple[tuple[str, str], ...]
    labels: dict[str, str]
    """The labels of the alert `fire` raises, beyond the rule's own."""
    quiet: tuple[tuple[str, str], ...] | None
    scope: str = ""
    """"job": a job's alert, routed to its team."""

    def rule_labels(self) -> dict[str, str]:
        out = {"severity": self.severity, "subsystem": self.subsystem}
        if self.scope:
            out["scope"] = self.scope
        return out


JOB_DASH = "/d/goodput-job/job-drill-down?var-job={{ $labels.job_id }}"
NODE_DASH = "/d/goodput-node/node-drill-down?var-node={{ $labels.node }}"
INFRA_DASH = "/d/goodput-infra/infrastructure-health"
CLUSTER_DASH = "/d/goodput-cluster/cluster-goodput?var-pool={{ $labels.pool }}"
TEAMS_DASH = "/d/goodput-teams/teams-and-cost?var-pool={{ $labels.pool }}"

_JOBGS = m("goodput_job_gpu_seconds")
_GS = m("goodput_gpu_seconds")

RECORDING = (
    Recording(
        "job:goodput_allocated_gpu_seconds",
        f"sum without (category) ({_JOBGS})",
        "a job's GPU-seconds in the exporter's lookback, every category",
    ),
    Recording(
        "job:goodput_category_ratio",
        f"{_JOBGS} / ignoring (category) group_left job:goodput_allocated_gpu_seconds",
        "share (0-1) of a job's GPU time per category: the stall alerts and the job dashboard",
    ),
    Recording(
        "job:goodput_ratio",
        'sum without (category) (job:goodput_category_ratio{category="productive"})',
        "a job's goodput (0-1)",
    ),
    Recording(
        "pool:goodput_ratio",
        f'sum by (pool) ({_GS}{{category="productive"}}) / sum by (pool) ({_GS})',
        "a pool's goodput (0-1) over the lookback",
    ),
    Recording(
        "team:goodput_ratio",
        f'sum by (team) ({_GS}{{category="productive"}}) / sum by (team) ({_GS})',
        "a team's goodput (0-1) over the lookback",
    ),
    Recording(
        "pool:goodput_live_stalled_ratio",
        f'sum by (pool) ({m("goodput_live_gpu_seconds")}{{category=~"data_stall|comm_stall|idle"}}) '
        f"/ sum by (pool) ({m('goodput_live_gpu_seconds')})",
        "share (0-1) of a pool's GPU time stalled (data, communication, idle below the jobs' levels) in "
        "the live runs' last minutes: GoodputPoolStalledNow",
    ),
    Recording(
        "pool_category:goodput_lost_gpu_seconds",
        f'sum by (pool, category) ({_GS}{{category!="productive"}})',
        "lost GPU-seconds by pool and waste category: the stacked cluster panel",
    ),
    Recording(
        "device:goodput_storage_pressure_full:ratio_rate5m",
        f"rate({m('goodput_storage_pressure_full_seconds_total')}[5m])",
        "share (0-1) of the last 5 minutes in which every task stalled on I/O: both saturation alerts",
    ),
)

_FULL_PRESSURE = "device:goodput_storage_pressure_full:ratio_rate5m"

_BIG_JOB = "3600"
"""GPU-seconds in the lookback below which a job's ratios are noise (one GPU for an hour)."""


def _series(name: str, **labels: str) -> str:
    inner = ",".join(f'{k}="{v}"' for k, v in labels.items())
    return f"{m(name) if ':' not in name and name != 'up' else name}{{{inner}}}"


def _job(cat_secs: dict[str, int], job: str = "j1", team: str = "vision") -> tuple[tuple[str, str], ...]:
    return tuple(
        (_series("goodput_job_gpu_seconds", job_id=job, pool="core", team=team, category=c), f"{s}x120")
        for c, s in cat_secs.items()
    )


def _stalled_live_pool(stamp: str) -> tuple[tuple[str, str], ...]:
    """Pool core's live minutes, three quarters stalled on data, with the live runs' stamp `stamp`."""
    live = "goodput_live_gpu_seconds"
    return (
        (_series(live, pool="core", team="vision", category="productive"), "100x120"),
        (_series(live, pool="core", team="vision", category="data_stall"), "300x120"),
        (_series("goodput_live_until_timestamp_seconds"), stamp),
    )


_JOB_LABELS = {"job_id": "j1", "pool": "core", "team": "vision"}
_GPU = {"node": "n1", "gpu": "0", "UUID": "GPU-1", "Hostname": "n1"}
_NIC = {"node": "n1", "device": "mlx5_0", "port": "1"}
_DISK = {"node": "n1", "source": "nfs", "device": "/data"}


def _stall(category: str, subsystem_hint: str) -> Alert:
    title = category.replace("_", " ")
    return Alert(
        name=f"GoodputJob{''.join(w.title() for w in category.split('_'))}",
        expr=(
            f'job:goodput_category_ratio{{category="{category}"}} > 0.3 '
            f"and on (job_id) job:goodput_allocated_gpu_seconds > {_BIG_JOB}"
        ),
        for_="15m",
        severity="page",
        subsystem="goodput",
        scope="job",
        summary=f"Job {{{{ $labels.job_id }}}} lost over 30 % of its GPU time to {title}",
        runbook=(
            f"Job {{{{ $labels.job_id }}}} (team {{{{ $labels.team }}}}, pool {{{{ $labels.pool }}}}) spent "
            f"more than 30 % of its GPU time in the exporter's lookback in {title}. First: "
            f"`goodput explain {{{{ $labels.job_id }}}}` for the evidence (which {subsystem_hint}); then the "
            "job dashboard's category timeline and the node dashboards it links."
        ),
        dashboard=JOB_DASH,
        fire=_job({category: 6000, "productive": 4000}),
        labels={**_JOB_LABELS, "category": category},
        quiet=_job({category: 1000, "productive": 9000}),
    )


def _up(job: str, name: str, severity: str, subsystem: str, what: str, first: str) -> Alert:
    lab = {"job": JOBS[job], "instance": "n1:9", "node": "n1"}
    return Alert(
        name=name,
        expr=f'up{{job="{JOBS[job]}"}} == 0',
        for_="5m",
        severity=severity,
        subsystem=subsystem,
        summary=f"{what} on {{{{ $labels.node }}}} is not answering scrapes",
        runbook=f"Prometheus cannot scrape {{{{ $labels.instance }}}} ({what}) for 5 minutes. First: {first}",
        dashboard=NODE_DASH if job in ("node", "agent") else INFRA_DASH,
        fire=((_series("up", **lab), "0x120"),),
        labels=lab,
        quiet=((_series("up", **lab), "1x120"),),
    )


_THERMAL = "|".join(r for r in catalog.CLOCK_EVENT_REASONS.values() if r.endswith("thermal_slowdown"))


def _stalled(node: str, share: float) -> tuple[str, str]:
    """Test input: a node's PSI io full counter (one sample a minute), stalled `share` of the time."""
    series = _series("goodput_storage_pressure_full_seconds_total", **{**_DISK, "node": node})
    return series, f"0+{share * 60:g}x120"


_XID_HW = catalog.XID_CLASSES["xid_hw"]
_XIDS = m("goodput_gpu_xid_errors_total")
_XID_HW_RE = "|".join(str(code) for code in _XID_HW)


def _increase(
    name: str,
    alert: str,
    severity: str,
    subsystem: str,
    labels: dict,
    summary: str,
    runbook: str,
    dashboard: str,
) -> Alert:
    return Alert(
        name=alert,
        expr=f"increase({m(name)}[15m]) > 0",
        for_="0m",
        severity=severity,
        subsystem=subsystem,
        summary=summary,
        runbook=runbook,
        dashboard=dashboard,
        fire=((_series(name, **labels), "0x40 1x80"),),
        labels=labels,
        quiet=((_series(name, **labels), "3x120"),),
    )


ALERTS: tuple[Alert, ...] = (
    # ---------------------------------------------------------------- goodput (the exporter)
    Alert(
        name="GoodputJobLow",
        expr=f"job:goodput_ratio < 0.5 and on (job_id) job:goodput_allocated_gpu_seconds > {_BIG_JOB}",
        for_="30m",
        severity="ticket",
        subsystem="goodput",
        scope="job",
        summary="Job {{ $labels.job_id }} is below 50 % goodput",
        runbook=(
            "Less than half of job {{ $labels.job_id }}'s GPU time in the lookback was productive. First: "
            "`goodput explain {{ $labels.job_id }}` for the category that dominates and its evidence; the "
            "stall alerts of the job say which one if it is a data or comm stall."
        ),
        dashboard=JOB_DASH,
        fire=_job({"productive": 3000, "idle": 7000}),
        labels=_JOB_LABELS,
        quiet=_job({"productive": 9000, "idle": 1000}),
    ),
    _stall("data_stall", "file system or storage was saturated"),
    _stall("comm_stall", "fabric congestion, line rate or straggler GPU"),
    Alert(
        name="GoodputJobInStartupOrCheckpoint",
        expr=f'{m("goodput_job_last_window_ratio")}{{category=~"startup|checkpoint"}} > 0.5',
        for_="0m",
        severity="none",
        subsystem="goodput",
        scope="job",
        summary="Job {{ $labels.job_id }} is in its {{ $labels.category }} phase",
        runbook=(
            "Not a problem: an inhibition source. While it fires, Alertmanager holds back the job's pages "
            "(a job starting or writing a checkpoint stalls by design)."
        ),
        dashboard=JOB_DASH,
        fire=(
            (
                _series("goodput_job_last_window_ratio", **_JOB_LABELS, category="checkpoint"),
                "1x120",
            ),
        ),
        labels={**_JOB_LABELS, "category": "checkpoint"},
        quiet=((_series("goodput_job_last_window_ratio", **_JOB_LABELS, category="checkpoint"), "0.2x120"),),
    ),
    Alert(
        name="GoodputPoolLow",
        expr="pool:goodput_ratio < 0.6",
        for_="1h",
        severity="ticket",
        subsystem="goodput",
        summary="Pool {{ $labels.pool }} is below 60 % goodput",
        runbook=(
            "Less than 60 % of the GPU time allocated in pool {{ $labels.pool }} was productive over the "
            "lookback. First: the cluster dashboard's lost GPU-hours by category for the pool, then its "
            "top jobs by waste; several jobs with one category points at shared infrastructure."
        ),
        dashboard=CLUSTER_DASH,
        fire=(
            (_series("goodput_gpu_seconds", pool="core", team="vision", category="productive"), "5x180"),
            (_series("goodput_gpu_seconds", pool="core", team="vision", category="idle"), "5x180"),
        ),
        labels={"pool": "core"},
        quiet=(
            (_series("goodput_gpu_seconds", pool="core", team="vision", category="productive"), "9x180"),
            (_series("goodput_gpu_seconds", pool="core", team="vision", category="idle"), "1x180"),
        ),
    ),
    Alert(
        name="GoodputPoolStalledNow",
        expr=(
            "pool:goodput_live_stalled_ratio > 0.5 and on () "
            f"(time() - {m('goodput_live_until_timestamp_seconds')} < 1800)"
        ),
        for_="5m",
        severity="page",
        subsystem="goodput",
        summary="Pool {{ $labels.pool }}: over half its GPU time stalled in the last minutes",
        runbook=(
            "In the live runs' last minutes (provisional, each job against its own healthy level) over half "
            "of the GPU time allocated in pool {{ $labels.pool }} waited on data, on the fabric or idled "
            "below its level: something the pool's jobs share. First: the cluster dashboard's live panel and "
            "lost GPU-hours by category, then the infrastructure dashboard's storage and fabric panels, then "
            "one job's drill-down for the evidence (which pool ceiling, which node's ports)."
        ),
        dashboard=CLUSTER_DASH,
        fire=_stalled_live_pool(stamp="0+60x120"),
        labels={"pool": "core"},
        # the same stall, but the live runs stopped an hour ago: GoodputLiveAnalysisNotRun's case
        quiet=_stalled_live_pool(stamp="0x120"),
    ),
    Alert(
        name="GoodputGangWaitLong",
        expr=f"{m('goodput_gang_wait_max_seconds')} > 900",
        for_="10m",
        severity="ticket",
        subsystem="goodput",
        summary="A job in pool {{ $labels.pool }} has held GPUs over 15 minutes waiting for its gang",
        runbook=(
            "A job of pool {{ $labels.pool }} was allocated part of its GPUs more than 15 minutes before "
            "the rest (GPU time held, nothing runs). First: the teams dashboard's queue panel and the "
            "scheduler's reservation for the job; fragmentation of the pool often explains it."
        ),
        dashboard=TEAMS_DASH,
        fire=((_series("goodput_gang_wait_max_seconds", pool="core"), "1500x120"),),
        labels={"pool": "core"},
        quiet=((_series("goodput_gang_wait_max_seconds", pool="core"), "60x120"),),
    ),
    Alert(
        name="GoodputQueueWaitLong",
        expr=f"{m('goodput_queue_wait_p90_seconds')} > 3600",
        for_="30m",
        severity="ticket",
        subsystem="goodput",
        summary="90 % of pool {{ $labels.pool }}'s jobs wait up to over an hour for a GPU",
        runbook=(
            "The 90th percentile of submit -> first GPU in pool {{ $labels.pool }} is above an hour. "
            "First: the pool's capacity and holds on the teams dashboard; a queue of large jobs behind "
            "fragmentation or a team holding the core pool."
        ),
        dashboard=TEAMS_DASH,
        fire=((_series("goodput_queue_wait_p90_seconds", pool="core"), "7200x120"),),
        labels={"pool": "core"},
        quiet=((_series("goodput_queue_wait_p90_seconds", pool="core"), "600x120"),),
    ),
    Alert(
        name="GoodputStraggler",
        expr=f"{m('goodput_straggler_windows')} >= 3",
        for_="10m",
        severity="ticket",
        subsystem="gpu",
        summary="A GPU on {{ $labels.node }} is slowing its job down (straggler)",
        runbook=(
            "In 3 or more analysed windows of the lookback a GPU on {{ $labels.node }} was under a "
            "hardware or thermal clock event while its job stalled on communication. First: the node "
            "dashboard's clock event reasons and temperature; then cooling, power and the GPU's XIDs."
        ),
        dashboard=NODE_DASH,
        fire=((_series("goodput_straggler_windows", node="n1"), "4x120"),),
        labels={"node": "n1"},
        quiet=((_series("goodput_straggler_windows", node="n1"), "1x120"),),
    ),
    Alert(
        name="GoodputHardwareFaults",
        expr=f'{m("goodput_faults")}{{kind=~"xid_hw|node_lost"}} >= 3',
        for_="5m",
        severity="ticket",
        subsystem="goodput",
        summary="{{ $labels.kind }} ended 3 or more job attempts in the lookback",
        runbook=(
            "Hardware ended job attempts ({{ $labels.kind }}) 3 or more times in the lookback. First: "
            "`goodput explain` of the jobs on the infrastructure dashboard, and fault_repeats for the node "
            "or GPU that keeps failing; drain it."
        ),
        dashboard=INFRA_DASH,
        fire=((_series("goodput_faults", kind="xid_hw"), "4x120"),),
        labels={"kind": "xid_hw"},
        quiet=((_series("goodput_faults", kind="xid_hw"), "1x120"),),
    ),
    Alert(
        name="GoodputDataStale",
        expr=f"time() - {m('goodput_analysed_until_timestamp_seconds')} > 7200",
        for_="15m",
        severity="ticket",
        subsystem="pipeline",
        summary="The goodput analysis is over 2 hours behind",
        runbook=(
            "The latest analysed window is more than 2 hours old: the analyzers did not run or had no "
            "new data. First: GoodputAnalyzerNotRun and the loader's lag; the loader log's 'analyzers' "
            "lines; `goodput analyze` by hand reports an error the service only logs."
        ),
        dashboard=INFRA_DASH,
        fire=((_series("goodput_analysed_until_timestamp_seconds"), "-100000x120"),),
        labels={},
        quiet=((_series("goodput_analysed_until_timestamp_seconds"), "0+60x120"),),
    ),
    Alert(
        name="GoodputAnalyzerNotRun",
        expr=(
            f"{m('goodput_loader_analyzer_last_success_timestamp_seconds')} > 0 and "
            f"time() - {m('goodput_loader_analyzer_last_success_timestamp_seconds')} > 1800"
        ),
        for_="10m",
        severity="ticket",
        subsystem="pipeline",
        summary="The loader's embedded analyzers have not succeeded for 30 minutes",
        runbook=(
            "The loader on {{ $labels.instance }} last finished its analyzers over 30 minutes ago. First: "
            "its log ('analyzers failed: ...'), goodput_loader_store_errors_total{operation=\"analyze\"}, "
            "and the store's health."
        ),
        dashboard=INFRA_DASH,
        fire=(
            (_series("goodput_loader_analyzer_last_success_timestamp_seconds", instance="l:9479"), "1x120"),
        ),
        labels={"instance": "l:9479"},
        quiet=(
            (
                _series("goodput_loader_analyzer_last_success_timestamp_seconds", instance="l:9479"),
                "0+60x120",
            ),
        ),
    ),
    Alert(
        name="GoodputLiveAnalysisNotRun",
        expr=(
            f"{m('goodput_loader_live_analysis_last_success_timestamp_seconds')} > 0 and "
            f"time() - {m('goodput_loader_live_analysis_last_success_timestamp_seconds')} > 900"
        ),
        for_="10m",
        severity="ticket",
        subsystem="pipeline",
        summary="The loader's live runs have not succeeded for 15 minutes",
        runbook=(
            "The loader on {{ $labels.instance }} last finished a live run ([loader].live_every_s) over 15 "
            "minutes ago: goodput_live and the live panels are stale. First: its log ('live analysis "
            'failed: ...\'), goodput_loader_store_errors_total{operation="live"}; a live run longer than '
            "live_every_s delays the whole runs too (docs/performance.md, Live runs)."
        ),
        dashboard=INFRA_DASH,
        fire=(
            (
                _series("goodput_loader_live_analysis_last_success_timestamp_seconds", instance="l:9479"),
                "1x120",
            ),
        ),
        labels={"instance": "l:9479"},
        quiet=(
            (
                _series("goodput_loader_live_analysis_last_success_timestamp_seconds", instance="l:9479"),
                "0+60x120",
            ),
        ),
    ),
    # ---------------------------------------------------------------- GPUs, NICs, storage (the agent)
    # ---------------------------------------------------------------- GPUs, NICs, storage (the agent)
    Alert(
        name="GoodputGpuXidHardware",
        expr=f'increase({_XIDS}{{xid=~"{_XID_HW_RE}"}}[15m]) > 0',
        for_="0m",
        severity="page",
        subsystem="gpu",
        summary="GPU {{ $labels.gpu }} on {{ $labels.node }} reported hardware XID {{ $labels.xid }}",
        runbook=(
            "GPU {{ $labels.gpu }} on {{ $labels.node }} reported an XID NVIDIA's catalog resolves by reset, "
            "drain or service (ECC, row remap, NVLink, fallen off the bus, GSP). First: `dmesg | grep -i "
            "xid` on the node; drain it (scontrol update nodename=... state=drain) before the next job."
        ),
        dashboard=NODE_DASH,
        fire=((_series("goodput_gpu_xid_errors_total", **_GPU, xid="79"), "0x40 1x80"),),
        labels={**_GPU, "xid": "79"},
        quiet=((_series("goodput_gpu_xid_errors_total", **_GPU, xid="13"), "0x40 1x80"),),
    ),
    Alert(
        name="GoodputGpuXid",
        expr=f'increase({_XIDS}{{xid!~"{_XID_HW_RE}"}}[15m]) > 0',
        for_="0m",
        severity="ticket",
        subsystem="gpu",
        summary="GPU {{ $labels.gpu }} on {{ $labels.node }} reported XID {{ $labels.xid }}",
        runbook=(
            "An XID NVIDIA's catalog sends back to the application (or an unclassified one). First: the "
            "job running on the GPU (node dashboard) and its log; repeated XIDs on one GPU: drain it."
        ),
        dashboard=NODE_DASH,
        fire=((_series("goodput_gpu_xid_errors_total", **_GPU, xid="13"), "0x40 1x80"),),
        labels={**_GPU, "xid": "13"},
        quiet=((_series("goodput_gpu_xid_errors_total", **_GPU, xid="13"), "1x120"),),
    ),
    Alert(
        name="GoodputGpuLost",
        expr=f"{m('goodput_gpu_lost')} == 1",
        for_="0m",
        severity="page",
        subsystem="gpu",
        summary="GPU {{ $labels.gpu }} on {{ $labels.node }} fell off the bus",
        runbook=(
            "NVML reports the GPU lost (GPU_IS_LOST): its job has failed or hangs. First: `nvidia-smi` "
            "and `dmesg | grep -i xid` (XID 79) on {{ $labels.node }}; drain the node: it needs a reset "
            "or a reboot."
        ),
        dashboard=NODE_DASH,
        fire=((_series("goodput_gpu_lost", **_GPU), "0x40 1x80"),),
        labels=_GPU,
        quiet=((_series("goodput_gpu_lost", **_GPU), "0x120"),),
    ),
    _increase(
        "goodput_gpu_ecc_uncorrected_errors_total",
        "GoodputGpuEccUncorrected",
        "page",
        "gpu",
        _GPU,
        "GPU {{ $labels.gpu }} on {{ $labels.node }} had an uncorrected ECC error",
        "A double-bit ECC error: the job on the GPU has likely crashed and the GPU needs a reset or row "
        "remap. First: `nvidia-smi -q -d ECC,ROW_REMAPPER` on {{ $labels.node }}; drain the node.",
        NODE_DASH,
    ),
    Alert(
        name="GoodputGpuThermalThrottle",
        expr=(f'max without (reason) ({m("goodput_gpu_clock_event_active")}{{reason=~"{_THERMAL}"}}) == 1'),
        for_="10m",
        severity="ticket",
        subsystem="gpu",
        summary="GPU {{ $labels.gpu }} on {{ $labels.node }} is throttled for temperature",
        runbook=(
            "The GPU's clocks are held down by a software or hardware thermal slowdown (clock event "
            "reason sw_thermal_slowdown or hw_thermal_slowdown) for 10 minutes. First: its temperature "
            "and the node's fans and inlet air on the node dashboard; one hot GPU slows its whole job "
            "(a straggler)."
        ),
        dashboard=NODE_DASH,
        fire=(
            (_series("goodput_gpu_clock_event_active", **_GPU, reason="hw_thermal_slowdown"), "1x120"),
            (_series("goodput_gpu_clock_event_active", **_GPU, reason="sw_thermal_slowdown"), "0x120"),
        ),
        labels=_GPU,
        quiet=(  # held down by the power cap, not by temperature
            (_series("goodput_gpu_clock_event_active", **_GPU, reason="hw_thermal_slowdown"), "0x120"),
            (_series("goodput_gpu_clock_event_active", **_GPU, reason="sw_power_cap"), "1x120"),
        ),
    ),
    Alert(
        name="GoodputNicLinkDown",
        expr=f"{m('goodput_nic_port_active')} == 0",
        for_="2m",
        severity="page",
        subsystem="nic",
        summary="RDMA port {{ $labels.device }}/{{ $labels.port }} on {{ $labels.node }} is down",
        runbook=(
            "The port's state is not ACTIVE for 2 minutes: the jobs using it lost their collective. First: "
            "`ibstat {{ $labels.device }}` on {{ $labels.node }}, the cable and the switch port; symbol "
            "errors before the drop point at the cable."
        ),
        dashboard=NODE_DASH,
        fire=((_series("goodput_nic_port_active", **_NIC), "1x30 0x90"),),
        labels=_NIC,
        quiet=((_series("goodput_nic_port_active", **_NIC), "1x120"),),
    ),
    Alert(
        name="GoodputNicLinkFlapping",
        expr=f"increase({m('goodput_nic_link_downed_total')}[1h]) >= 3",
        for_="0m",
        severity="ticket",
        subsystem="nic",
        summary="RDMA port {{ $labels.device }}/{{ $labels.port }} on {{ $labels.node }} is flapping",
        runbook=(
            "The link went down 3 or more times in the last hour. First: replace or reseat the cable "
            "(symbol and receive errors on the node dashboard), then the switch port; drain the node "
            "meanwhile."
        ),
        dashboard=NODE_DASH,
        fire=((_series("goodput_nic_link_downed_total", **_NIC), "0x35 1 2 3x82"),),
        labels=_NIC,
        quiet=((_series("goodput_nic_link_downed_total", **_NIC), "0x35 1x84"),),
    ),
    Alert(
        name="GoodputRdmaCongestion",
        expr=(
            f"rate({m('goodput_nic_ecn_marked_packets_total')}[5m]) > 10000 or "
            f"rate({m('goodput_nic_pfc_pause_duration_seconds_total')}[5m]) > 0.1"
        ),
        for_="15m",
        severity="ticket",
        subsystem="nic",
        summary="RDMA port {{ $labels.device }}/{{ $labels.port }} on {{ $labels.node }} is congested",
        runbook=(
            "Over 10k ECN-marked packets/s or over 10 % of the time paused by PFC for 15 minutes. First: "
            "the job dashboard's NIC panels of the jobs on the node, the leaf switch's other ports "
            "(incast, a hot spine) and the job placement across leaves."
        ),
        dashboard=NODE_DASH,
        fire=((_series("goodput_nic_ecn_marked_packets_total", **_NIC), "0+3000000x120"),),  # 50k/s
        labels=_NIC,
        quiet=(
            (_series("goodput_nic_ecn_marked_packets_total", **_NIC), "0+600x120"),  # 10/s
            (_series("goodput_nic_pfc_pause_duration_seconds_total", **_NIC), "0+3x120"),  # 5 % paused
        ),
    ),
    Alert(
        name="GoodputStorageSaturated",
        expr=f"{_FULL_PRESSURE} > 0.5",
        for_="10m",
        severity="ticket",
        subsystem="storage",
        summary="I/O stalls every task on {{ $labels.node }} over half the time ({{ $labels.device }})",
        runbook=(
            "PSI io 'full' above 50 % for 10 minutes: tasks on the node wait on {{ $labels.device }}. "
            "First: the node's storage throughput against the pool's ceiling, and whether other nodes "
            "see it too (then GoodputClusterStorageSaturated)."
        ),
        dashboard=NODE_DASH,
        fire=(_stalled("n1", 0.8),),
        labels=_DISK,
        quiet=(_stalled("n1", 0.05),),
    ),
    Alert(
        name="GoodputClusterStorageSaturated",
        expr=(f"count({_FULL_PRESSURE} > 0.5) / count({_FULL_PRESSURE}) >= 0.5"),
        for_="10m",
        severity="page",
        subsystem="storage",
        summary="Storage is saturated on half the cluster's nodes",
        runbook=(
            "Half or more of the reporting storage devices stall tasks over half the time: shared "
            "storage is the bottleneck (per-job data stall pages are held back meanwhile). First: the "
            "file system's servers and its ceiling on the infrastructure dashboard; which jobs read most."
        ),
        dashboard=INFRA_DASH,
        fire=(_stalled("n1", 0.8), _stalled("n2", 0.9)),
        labels={},
        quiet=(_stalled("n1", 0.8), _stalled("n2", 0.01), _stalled("n3", 0.01)),
    ),
    # ---------------------------------------------------------------- nodes and agents
    _up(
        "node",
        "GoodputNodeDown",
        "page",
        "node",
        "the node (node_exporter)",
        "ping the node and its BMC; its GPU, NIC and storage alerts are held back meanwhile.",
    ),
    _up(
        "agent",
        "GoodputAgentDown",
        "ticket",
        "agent",
        "the goodput agent",
        "`systemctl status goodput-agent` on the node and its log (docs/agent.md).",
    ),
    Alert(
        name="GoodputAgentSilent",
        expr=f"time() - {m('goodput_agent_last_send_timestamp_seconds')} > 300",
        for_="10m",
        severity="ticket",
        subsystem="agent",
        summary="The agent on {{ $labels.node }} has not delivered a batch to Kafka for 5 minutes",
        runbook=(
            "The agent answers scrapes but Kafka acknowledged nothing from it for 5 minutes: it spools. "
            "First: goodput_agent_send_errors_total and the spool size on the node dashboard, the "
            "agent's log line naming the brokers, and the brokers themselves (KafkaBrokersLost)."
        ),
        dashboard=NODE_DASH,
        fire=((_series("goodput_agent_last_send_timestamp_seconds", node="n1"), "-100000x120"),),
        labels={"node": "n1"},
        quiet=((_series("goodput_agent_last_send_timestamp_seconds", node="n1"), "0+60x120"),),
    ),
    _increase(
        "goodput_agent_spool_dropped_batches_total",
        "GoodputAgentSpoolDropping",
        "ticket",
        "agent",
        {"node": "n1"},
        "The agent on {{ $labels.node }} is dropping batches: its spool is full",
        "Kafka has been unreachable long enough to fill the spool ([agent] spool_max_bytes); data is "
        "lost. First: the brokers and the node's network, then a larger spool.",
        NODE_DASH,
    ),
    Alert(
        name="GoodputCollectorFailing",
        expr=f"{m('goodput_collector_success')} == 0",
        for_="15m",
        severity="ticket",
        subsystem="agent",
        summary="Collector {{ $labels.collector }} on {{ $labels.node }} has been failing for 15 minutes",
        runbook=(
            "The agent's {{ $labels.collector }} collector fails on every run, so its series are absent. "
            "First: the agent's log (it names the source and the error), then the driver or tool it reads."
        ),
        dashboard=NODE_DASH,
        fire=((_series("goodput_collector_success", node="n1", collector="nvml"), "0x120"),),
        labels={"node": "n1", "collector": "nvml"},
        quiet=((_series("goodput_collector_success", node="n1", collector="nvml"), "1x120"),),
    ),
    Alert(
        name="GoodputClockSkew",
        expr=f"abs({m('goodput_loader_node_clock_offset_seconds')}) > 2",
        for_="10m",
        severity="ticket",
        subsystem="agent",
        summary="The clock of {{ $labels.node }} is over 2 s off the Kafka brokers'",
        runbook=(
            "Batches from {{ $labels.node }} are stamped more than 2 s from the broker's append time; the "
            "analyzers correct it, but events and samples misalign. First: `chronyc tracking` on the node."
        ),
        dashboard=NODE_DASH,
        fire=((_series("goodput_loader_node_clock_offset_seconds", node="n1"), "-5x120"),),
        labels={"node": "n1"},
        quiet=((_series("goodput_loader_node_clock_offset_seconds", node="n1"), "0.1x120"),),
    ),
    # ---------------------------------------------------------------- the pipeline
    _up(
        "loader",
        "GoodputLoaderDown",
        "page",
        "pipeline",
        "the goodput loader",
        "the loader service's log and `systemctl status`; Kafka keeps the data meanwhile.",
    ),
    _up(
        "exporter",
        "GoodputExporterDown",
        "ticket",
        "pipeline",
        "the goodput exporter",
        "`goodput exporter` (or the loader) log; the goodput alerts are blind meanwhile.",
    ),
    Alert(
        name="GoodputLoaderLag",
        expr=f"sum by (topic) ({m('goodput_loader_consumer_lag_records')}) > 100000",
        for_="15m",
        severity="ticket",
        subsystem="pipeline",
        summary="The loader is over 100k records behind on {{ $labels.topic }}",
        runbook=(
            "The loaders' group has more than 100k records to load on {{ $labels.topic }} for 15 minutes. "
            "First: goodput_loader_store_errors_total (a failing store stops loading), the load duration "
            "histogram, then add loaders (up to the topic's partitions)."
        ),
        dashboard=INFRA_DASH,
        fire=(
            (_series("goodput_loader_consumer_lag_records", topic="goodput.gpu", partition="0"), "2e5x120"),
        ),
        labels={"topic": "goodput.gpu"},
        quiet=(
            (_series("goodput_loader_consumer_lag_records", topic="goodput.gpu", partition="0"), "10x120"),
        ),
    ),
    Alert(
        name="GoodputLoaderNoCommit",
        expr=f"time() - {m('goodput_loader_last_commit_timestamp_seconds')} > 900",
        for_="5m",
        severity="page",
        subsystem="pipeline",
        summary="The loader on {{ $labels.instance }} has committed nothing for 15 minutes",
        runbook=(
            "Agents send all the time, so a loader that commits nothing is stuck: the store refuses "
            "inserts (it retries forever) or Kafka refuses commits. First: its log and "
            "goodput_loader_store_errors_total / goodput_loader_commit_failures_total."
        ),
        dashboard=INFRA_DASH,
        fire=((_series("goodput_loader_last_commit_timestamp_seconds", instance="l:9479"), "-100000x120"),),
        labels={"instance": "l:9479"},
        quiet=((_series("goodput_loader_last_commit_timestamp_seconds", instance="l:9479"), "0+60x120"),),
    ),
    Alert(
        name="GoodputLoaderDeadLetters",
        expr=(
            f"sum(rate({m('goodput_loader_dead_letters_total')}[15m])) / "
            f"sum(rate({m('goodput_loader_records_consumed_total')}[15m])) > 0.01"
        ),
        for_="15m",
        severity="ticket",
        subsystem="pipeline",
        summary="Over 1 % of the records the loader reads are dead-lettered",
        runbook=(
            "More than 1 % of records go to dead_letters. First: `SELECT reason, count() FROM dead_letters "
            "GROUP BY reason` (docs/loader.md lists the reasons); unknown_node: a node missing from the "
            "config; schema errors: an agent of another version."
        ),
        dashboard=INFRA_DASH,
        fire=(
            (_series("goodput_loader_dead_letters_total", reason="invalid"), "0+50x120"),
            (_series("goodput_loader_records_consumed_total", topic="goodput.gpu"), "0+1000x120"),
        ),
        labels={},
        quiet=(
            (_series("goodput_loader_dead_letters_total", reason="invalid"), "0+1x120"),
            (_series("goodput_loader_records_consumed_total", topic="goodput.gpu"), "0+1000x120"),
        ),
    ),
    Alert(
        name="KafkaBrokersLost",
        expr=f"{m('kafka_brokers')} < max_over_time({m('kafka_brokers')}[6h])",
        for_="5m",
        severity="page",
        subsystem="pipeline",
        summary="A Kafka broker left the cluster",
        runbook=(
            "Fewer brokers than in the last 6 hours: partitions it led are under-replicated or offline, "
            "agents may spool. First: the broker's host and log; kafka-topics --describe "
            "--under-replicated-partitions."
        ),
        dashboard=INFRA_DASH,
        fire=((_series("kafka_brokers"), "3x10 2x110"),),
        labels={},
        quiet=((_series("kafka_brokers"), "3x120"),),
    ),
    Alert(
        name="KafkaConsumerLag",
        expr=f"sum by (consumergroup, topic) ({m('kafka_consumergroup_lag')}) > 100000",
        for_="15m",
        severity="ticket",
        subsystem="pipeline",
        summary="Group {{ $labels.consumergroup }} is over 100k records behind on {{ $labels.topic }}",
        runbook=(
            "The brokers' view of the lag (independent of the loader's own series). First: whether the "
            "group has members (`kafka-consumer-groups --describe`), then GoodputLoaderLag."
        ),
        dashboard=INFRA_DASH,
        fire=(
            (
                _series("kafka_consumergroup_lag", consumergroup="goodput", topic="t", partition="0"),
                "2e5x120",
            ),
        ),
        labels={"consumergroup": "goodput", "topic": "t"},
        quiet=(
            (_series("kafka_consumergroup_lag", consumergroup="goodput", topic="t", partition="0"), "5x120"),
        ),
    ),
    Alert(
        name="ClickHouseDiskLow",
        expr=(
            f"{m('ClickHouseAsyncMetrics_FilesystemMainPathAvailableBytes')} / "
            f"{m('ClickHouseAsyncMetrics_FilesystemMainPathTotalBytes')} < 0.1"
        ),
        for_="10m",
        severity="page",
        subsystem="pipeline",
        summary="ClickHouse on {{ $labels.instance }} has under 10 % disk left",
        runbook=(
            "The data path is over 90 % full; inserts fail when it fills and the loader stops. First: "
            "`SELECT table, sum(bytes_on_disk) FROM system.parts GROUP BY table`; the raw tables' TTL; "
            "add disk."
        ),
        dashboard=INFRA_DASH,
        fire=(
            (_series("ClickHouseAsyncMetrics_FilesystemMainPathAvailableBytes", instance="ch:9363"), "5x120"),
            (_series("ClickHouseAsyncMetrics_FilesystemMainPathTotalBytes", instance="ch:9363"), "100x120"),
        ),
        labels={"instance": "ch:9363"},
        quiet=(
            (
                _series("ClickHouseAsyncMetrics_FilesystemMainPathAvailableBytes", instance="ch:9363"),
                "50x120",
            ),
            (_series("ClickHouseAsyncMetrics_FilesystemMainPathTotalBytes", instance="ch:9363"), "100x120"),
        ),
    ),
    Alert(
        name="ClickHouseTooManyParts",
        expr=f"{m('ClickHouseAsyncMetrics_MaxPartCountForPartition')} > 150",
        for_="10m",
        severity="ticket",
        subsystem="pipeline",
        summary="ClickHouse on {{ $labels.instance }} has a partition with over 150 parts",
        runbook=(
            "Inserts are delayed above parts_to_delay_insert (150) and refused at 300 ('too many parts'). "
            "First: whether merges run (system.merges), and the loader's batch sizes ([loader] "
            "flush_records): many small inserts make many parts."
        ),
        dashboard=INFRA_DASH,
        fire=((_series("ClickHouseAsyncMetrics_MaxPartCountForPartition", instance="ch:9363"), "200x120"),),
        labels={"instance": "ch:9363"},
        quiet=((_series("ClickHouseAsyncMetrics_MaxPartCountForPartition", instance="ch:9363"), "20x120"),),
    ),
    _increase(
        "prometheus_rule_evaluation_failures_total",
        "PrometheusRuleFailures",
        "ticket",
        "meta",
        {"instance": "p:9090", "rule_group": "goodput"},
        "Prometheus on {{ $labels.instance }} fails to evaluate rules",
        "Some alert may never fire. First: the Prometheus log and its /rules page for the failing rule.",
        INFRA_DASH,
    ),
    _increase(
        "prometheus_notifications_errors_total",
        "PrometheusNotificationsFailing",
        "ticket",
        "meta",
        {"instance": "p:9090", "alertmanager": "http://am:9093/api/v2/alerts"},
        "Prometheus on {{ $labels.instance }} cannot send alerts to {{ $labels.alertmanager }}",
        "Alerts are not reaching Alertmanager (the Watchdog stops arriving too). First: Alertmanager's "
        "health and the network between the two.",
        INFRA_DASH,
    ),
    Alert(
        name="PrometheusConfigReloadFailed",
        expr=f"{m('prometheus_config_last_reload_successful')} == 0",
        for_="10m",
        severity="ticket",
        subsystem="meta",
        summary="Prometheus on {{ $labels.instance }} runs an old configuration",
        runbook="The last reload failed: rule changes are not active. First: `promtool check config`.",
        dashboard=INFRA_DASH,
        fire=((_series("prometheus_config_last_reload_successful", instance="p:9090"), "0x120"),),
        labels={"instance": "p:9090"},
        quiet=((_series("prometheus_config_last_reload_successful", instance="p:9090"), "1x120"),),
    ),
    _increase(
        "alertmanager_notifications_failed_total",
        "AlertmanagerNotificationsFailing",
        "ticket",
        "meta",
        {"instance": "am:9093", "integration": "webhook"},
        "Alertmanager on {{ $labels.instance }} fails to deliver {{ $labels.integration }} notifications",
        "Receivers are not getting alerts. First: the Alertmanager log for the receiver's error (URL, "
        "credentials, the receiver's own health).",
        INFRA_DASH,
    ),
    Alert(
        name="AlertmanagerConfigReloadFailed",
        expr=f"{m('alertmanager_config_last_reload_successful')} == 0",
        for_="10m",
        severity="ticket",
        subsystem="meta",
        summary="Alertmanager on {{ $labels.instance }} runs an old configuration",
        runbook="The last reload failed: routing changes are not active. First: `amtool check-config`.",
        dashboard=INFRA_DASH,
        fire=((_series("alertmanager_config_last_reload_successful", instance="am:9093"), "0x120"),),
        labels={"instance": "am:9093"},
        quiet=((_series("alertmanager_config_last_reload_successful", instance="am:9093"), "1x120"),),
    ),
    Alert(
        name="GoodputNodeInMaintenance",
        expr='max by (node) (up{maintenance="true"}) >= 0',
        for_="0m",
        severity="none",
        subsystem="node",
        summary="{{ $labels.node }} is under maintenance: its alerts are held back",
        runbook=(
            'Not a problem: an inhibition source. A node whose targets carry maintenance="true" (set in '
            "the file_sd target file when draining it) has every alert with its node label silenced."
        ),
        dashboard=NODE_DASH,
        fire=(
            (_series("up", job="goodput-agent", instance="n1:9477", node="n1", maintenance="true"), "1x120"),
        ),
        labels={"node": "n1"},
        quiet=((_series("up", job="goodput-agent", instance="n1:9477", node="n1"), "1x120"),),
    ),
    Alert(
        name="Watchdog",
        expr="vector(1)",
        for_="0m",
        severity="none",
        subsystem="meta",
        summary="The alerting pipeline works (always firing)",
        runbook=(
            "A dead-man's switch: always firing, routed to the dead-man receiver, which pages when it "
            "stops arriving (Prometheus, Alertmanager or the path between them is down)."
        ),
        dashboard=INFRA_DASH,
        fire=(),
        labels={},
        quiet=None,  # by design it never stops; its absence is detected at the receiver
    ),
)
