"""The Alertmanager configuration: who hears about which alert, grouped how, and what silences what.

- `severity="page"` goes to the on-call receiver (a PagerDuty-style webhook), everything else to the
  ticket/chat receiver; `severity="none"` (inhibition sources) to a receiver that sends nothing, and the
  Watchdog to the dead-man receiver, which expects it every `repeat_interval`.
- A job's alerts (`scope="job"`) go to the team that owns the job (`team` label, one receiver per team of
  the config's [teams]), pages included: a stalled job is its team's problem before infrastructure
  on-call's; a team without a receiver falls back to the ticket receiver.
- Inhibition (alerts/rules.py names the sources): a node down silences that node's GPU, NIC, storage
  and agent alerts; a node under maintenance silences every alert of that node; a job in its startup or
  checkpoint phase has its pages held; cluster-wide storage saturation holds the per-job data stall pages.
"""

from __future__ import annotations

from collections.abc import Mapping

CORE_RECEIVERS = ("oncall", "ticket", "deadman", "blackhole")


def receivers(teams: tuple[str, ...]) -> list[str]:
    return list(CORE_RECEIVERS) + [f"team-{t}" for t in teams]


def config(
    teams: tuple[str, ...],
    urls: Mapping[str, str],
    *,
    group_wait: str = "30s",
    group_interval: str = "5m",
    repeat_interval: str = "4h",
) -> dict:
    """`urls`: receiver name -> webhook URL, for every receiver but blackhole."""

    def hook(name: str) -> dict:
        return {"name": name, "webhook_configs": [{"url": urls[name], "send_resolved": True}]}

    team_routes = [{"receiver": f"team-{t}", "matchers": [f'team="{t}"']} for t in teams]
    return {
        "route": {
            "receiver": "ticket",
            "group_by": ["alertname", "cluster", "pool", "node"],
            "group_wait": group_wait,
            "group_interval": group_interval,
            "repeat_interval": repeat_interval,
            "routes": [
                {
                    "receiver": "deadman",
                    "matchers": ['alertname="Watchdog"'],
                    "group_wait": "0s",
                    "group_interval": "1m",
                    "repeat_interval": "1m",
                },
                {"receiver": "blackhole", "matchers": ['severity="none"']},
                {
                    "receiver": "ticket",
                    "matchers": ['scope="job"'],
                    "group_by": ["alertname", "team", "job_id"],
                    "routes": team_routes,
                },
                {"receiver": "oncall", "matchers": ['severity="page"'], "repeat_interval": "1h"},
            ],
        },
        "receivers": [hook(r) for r in receivers(teams) if r != "blackhole"] + [{"name": "blackhole"}],
        "inhibit_rules": [
            {
                "source_matchers": ['alertname="GoodputNodeDown"'],
                "target_matchers": ['subsystem=~"gpu|nic|storage|agent"'],
                "equal": ["node"],
            },
            {
                "source_matchers": ['alertname="GoodputNodeInMaintenance"'],
                "target_matchers": ['node=~".+"'],
                "equal": ["node"],
            },
            {
                "source_matchers": ['alertname="GoodputJobInStartupOrCheckpoint"'],
                "target_matchers": ['scope="job"', 'severity="page"'],
                "equal": ["job_id"],
            },
            {
                "source_matchers": ['alertname="GoodputClusterStorageSaturated"'],
                "target_matchers": ['alertname="GoodputJobDataStall"'],
                "equal": [],
            },
        ],
    }
