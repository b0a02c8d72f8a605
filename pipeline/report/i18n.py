"""The report's words and number formats in English and Chinese: one table of labels per language, so
every renderer (HTML, Markdown, charts) says the same thing, and a missing label fails the tests."""

# ruff: noqa: E501  (label sentences read best unbroken)
from __future__ import annotations

LANGS = ("en", "zh")

LABELS: dict[str, dict[str, str]] = {
    "en": {
        "title": "GPU efficiency report",
        "cluster_page": "Cluster",
        "team_page": "Team",
        "day": "Day",
        "timezone": "time zone",
        "no_data": "No GPU time was allocated on this day: there is nothing to report.",
        "allocated_gpu_hours": "GPU-hours allocated",
        "productive_gpu_hours": "productive GPU-hours",
        "goodput_pct": "goodput",
        "sm_active_pct": "mean SM activity",
        "cost": "cost",
        "waste_cost": "money lost",
        "jobs": "jobs",
        "previous_day_goodput_pct": "goodput the day before",
        "change_pct_points": "change vs the day before (points)",
        "queue_jobs": "jobs submitted",
        "queue_wait_p50_s": "queue delay p50 (s)",
        "queue_wait_p95_s": "queue delay p95 (s)",
        "cluster_goodput_pct": "cluster goodput",
        "target_goodput_pct": "target goodput",
        "faults": "failures and preemptions",
        "reclaimable_gpu_hours": "reclaimable idle GPU-hours",
        "capacity_gpu_hours": "capacity GPU-hours",
        "unallocated_gpu_hours": "unallocated GPU-hours",
        "categories": "Hours and money lost per category",
        "trend": "7-day trend",
        "accounts": "Per account",
        "top_jobs": "Top jobs by waste",
        "why": "why",
        "why_sentence": "lost {pct}% to {category} on pool {pool}",
        "stragglers": "Stragglers (comm stall evidence)",
        "straggler_episodes": "Straggler episodes",
        "idle_allocations": "Idle allocations (reclaim candidates)",
        "teams": "Teams",
        "team_categories": "Teams by category",
        "pools": "Pools: goodput, capacity, fragmentation",
        "pool_hours": "Allocated % of capacity, pool x hour",
        "core_pool_holders": "Who holds the core pool",
        "repeat_offenders": "Repeat offenders",
        "capacity_signals": "Capacity signals",
        "recommendations": "Recommendations",
        "none": "none",
        "coverage": "Data coverage",
        "silent_gpu_hours": "GPU-hours classified without telemetry",
        "dead_letters": "dead letters",
        "analyzed_at": "analyzers last ran",
        "reanalyzed_after_day": "late data re-analysed this day after it ended",
        "vs": "team vs cluster vs target",
        "waterfall": "Where the allocated GPU-hours went",
        "hour": "hour",
        "gpu_hours_unit": "GPU-h",
        "productive": "productive",
        "data_stall": "data stall",
        "comm_stall": "comm stall",
        "gang_wait": "gang wait",
        "retry_waste": "retry waste",
        "startup": "startup",
        "checkpoint": "checkpoint",
        "idle": "idle",
        "storage_ceiling": "storage at its ceiling",
        "network_congestion": "network congestion",
        "gpu_shortage": "GPU shortage (gang wait; jobs that queued)",
        "rec_checkpoint_interval": "Job {job_id}: {failures} failure(s), one per {mtbf_h} h of running; a save "
        "takes {cost_s} s, so Young/Daly's interval sqrt(2 x {cost_s} s x {mtbf_h} h) = {rec_min} min "
        "(now about {cur_min} min).",
        "rec_storage": "Data stall cost {gpu_h} GPU-h ({money}, {pct} of the allocated time), most on pool "
        "{pool}; {ceil_h} GPU-h of it with storage at its ceiling: raise pool {pool}'s storage ceiling "
        "or move the dataset closer to it.",
        "rec_drain_node": "Drain node {node}: its GPU {gpu} straggled and cost {gpu_h} GPU-h across {jobs} job(s).",
        "rec_gang_too_large": "Job {job_id} asked for {gpus} GPUs at once on pool {pool}, which never had more "
        "than {free} free (of {pool_gpus}); its GPUs waited {wait_s} s for the rest of the gang: ask for "
        "fewer or a larger pool.",
    },
    "zh": {
        "title": "GPU 效率日报",
        "cluster_page": "集群",
        "team_page": "团队",
        "day": "日期",
        "timezone": "时区",
        "no_data": "当日没有分配任何 GPU 时间：没有可报告的内容。",
        "allocated_gpu_hours": "已分配 GPU 小时",
        "productive_gpu_hours": "有效 GPU 小时",
        "goodput_pct": "有效产出率",
        "sm_active_pct": "平均 SM 活跃度",
        "cost": "成本",
        "waste_cost": "损失金额",
        "jobs": "作业数",
        "previous_day_goodput_pct": "前一日有效产出率",
        "change_pct_points": "较前一日变化（百分点）",
        "queue_jobs": "提交作业数",
        "queue_wait_p50_s": "排队时间 p50（秒）",
        "queue_wait_p95_s": "排队时间 p95（秒）",
        "cluster_goodput_pct": "集群有效产出率",
        "target_goodput_pct": "目标有效产出率",
        "faults": "故障与抢占",
        "reclaimable_gpu_hours": "可回收空闲 GPU 小时",
        "capacity_gpu_hours": "容量 GPU 小时",
        "unallocated_gpu_hours": "未分配 GPU 小时",
        "categories": "各类别损失的时间与金额",
        "trend": "7 日趋势",
        "accounts": "按账户",
        "top_jobs": "浪费最多的作业",
        "why": "原因",
        "why_sentence": "在资源池 {pool} 上因{category}损失 {pct}%",
        "stragglers": "慢节点（通信等待证据）",
        "straggler_episodes": "慢节点片段",
        "idle_allocations": "空闲分配（可回收）",
        "teams": "团队",
        "team_categories": "团队分类",
        "pools": "资源池：有效产出、容量、碎片",
        "pool_hours": "资源池 × 小时 分配率",
        "core_pool_holders": "核心资源池占用者",
        "repeat_offenders": "重复故障",
        "capacity_signals": "容量信号",
        "recommendations": "建议",
        "none": "无",
        "coverage": "数据覆盖",
        "silent_gpu_hours": "无遥测数据的 GPU 小时",
        "dead_letters": "死信",
        "analyzed_at": "分析器最近运行",
        "reanalyzed_after_day": "当日结束后迟到数据已重新分析",
        "vs": "团队 / 集群 / 目标",
        "waterfall": "已分配 GPU 小时的去向",
        "hour": "小时",
        "gpu_hours_unit": "GPU 小时",
        "productive": "有效",
        "data_stall": "数据等待",
        "comm_stall": "通信等待",
        "gang_wait": "成组等待",
        "retry_waste": "重试浪费",
        "startup": "启动",
        "checkpoint": "检查点",
        "idle": "空闲",
        "storage_ceiling": "存储达到上限",
        "network_congestion": "网络拥塞",
        "gpu_shortage": "GPU 不足（成组等待；排队作业）",
        "rec_checkpoint_interval": "作业 {job_id}：{failures} 次故障，平均每运行 {mtbf_h} 小时一次；每次保存耗时 "
        "{cost_s} 秒，按 Young/Daly 公式 sqrt(2 × {cost_s} 秒 × {mtbf_h} 小时) 建议间隔 {rec_min} 分钟"
        "（当前约 {cur_min} 分钟）。",
        "rec_storage": "数据等待损失 {gpu_h} GPU 小时（{money}，占已分配时间 {pct}），主要在资源池 {pool}；"
        "其中 {ceil_h} GPU 小时存储已达上限：提高资源池 {pool} 的存储上限，或将数据集迁移到更近处。",
        "rec_drain_node": "下线节点 {node}：其 GPU {gpu} 拖慢了 {jobs} 个作业，损失 {gpu_h} GPU 小时。",
        "rec_gang_too_large": "作业 {job_id} 在资源池 {pool} 一次申请 {gpus} 块 GPU，而该池空闲从未超过 {free} 块"
        "（共 {pool_gpus} 块）；已分配的 GPU 等待其余部分 {wait_s} 秒：请减少申请量或换更大的资源池。",
    },
}


def label(lang: str, key: str) -> str:
    return LABELS[lang][key]


def number(x: float | int | None, lang: str, digits: int = 1) -> str:
    """A number as the reader writes it: thousands grouped in English; in Chinese 万 (10^4) and 亿 (10^8)
    for large values, as Chinese readers count."""
    if x is None:
        return "–"
    if lang == "zh" and abs(x) >= 1e8:
        return f"{x / 1e8:,.2f}亿"
    if lang == "zh" and abs(x) >= 1e4:
        return f"{x / 1e4:,.2f}万"
    if isinstance(x, int):
        return f"{x:,}"
    return f"{x:,.{digits}f}"


def percent(x: float | None, lang: str) -> str:
    return "–" if x is None else f"{x:.1f}%"


def money(x: float | None, currency: str, lang: str) -> str:
    return "–" if x is None else f"{number(x, lang, 0 if abs(x) >= 100 else 2)} {currency}"
