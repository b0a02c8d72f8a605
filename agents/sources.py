"""Builds the collectors an agent's configuration names, each from its own roots.

A source this node does not have (no NVIDIA driver, no InfiniBand, no Lustre client) raises
CollectorUnavailable at construction: it is reported once and left out, so one agent build and one
config serve CPU-only login nodes and GPU nodes alike. Any other construction error stops the agent
with the source's name, because a misconfigured source that silently collects nothing would look
like an idle node on the dashboards.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable

from collectors.base import Collector, CollectorError, CollectorUnavailable
from contracts.config import AgentConfig, parse_address

log = logging.getLogger(__name__)


def _nvml(cfg: AgentConfig) -> Collector:
    from collectors.nvml import NvmlCollector

    return NvmlCollector(proc_root=cfg.proc_root)


def _rdma(cfg: AgentConfig) -> Collector:
    from collectors.rdma import RdmaCollector

    if not (Path(cfg.sys_root) / "class" / "infiniband").is_dir():
        raise CollectorUnavailable(f"no RDMA devices: {cfg.sys_root}/class/infiniband does not exist")
    return RdmaCollector(cfg.sys_root, pfc_netdevs=cfg.pfc_netdevs)


def _diskstats(cfg: AgentConfig) -> Collector:
    from collectors.diskstats import DiskstatsCollector

    return DiskstatsCollector(cfg.proc_root, exclude=cfg.disk_exclude)


def _psi(cfg: AgentConfig) -> Collector:
    from collectors.psi import PsiCollector

    if not (Path(cfg.proc_root) / "pressure" / "io").exists():
        raise CollectorUnavailable(
            f"no pressure stall information: {cfg.proc_root}/pressure/io does not "
            f"exist (kernel < 4.20 or booted with psi=0)"
        )
    return PsiCollector(cfg.proc_root)


def _nfs(cfg: AgentConfig) -> Collector:
    from collectors.nfs import NfsCollector

    return NfsCollector(cfg.proc_root, mounts=cfg.nfs_mounts or None)


def _lustre(cfg: AgentConfig) -> Collector:
    from collectors.lustre import LustreCollector, find_roots, no_client

    roots = [Path(r) for r in cfg.lustre_roots]
    present, denied = find_roots(roots, layers=())  # llite/ may appear later, when a filesystem is mounted
    if not present:
        raise no_client(roots, denied)
    return LustreCollector(roots)


def _steps(cfg: AgentConfig) -> Collector:
    from collectors.steps import StepReceiver

    return StepReceiver(parse_address(cfg.step_address, "[agent].step_address"))


def _slurm(cfg: AgentConfig) -> Collector:
    from collectors.slurm import SlurmCollector

    return SlurmCollector()


def _kube(scheduler: str) -> Callable[[AgentConfig], Collector]:
    def build(cfg: AgentConfig) -> Collector:
        from collectors.kube import KubeJobCollector

        return KubeJobCollector(scheduler)

    return build


def _jobfile(cfg: AgentConfig) -> Collector:
    from collectors.jobfile import JobFileCollector

    return JobFileCollector(cfg.job_file)


BUILDERS: dict[str, Callable[[AgentConfig], Collector]] = {
    "nvml": _nvml,
    "rdma": _rdma,
    "diskstats": _diskstats,
    "psi": _psi,
    "nfs": _nfs,
    "lustre": _lustre,
    "steps": _steps,
    "slurm": _slurm,
    "volcano": _kube("volcano"),
    "kueue": _kube("kueue"),
    "jobfile": _jobfile,
}


class SourceFailed(RuntimeError):
    """A configured source could not be set up for a reason other than the node lacking it."""


def build_collectors(cfg: AgentConfig) -> tuple[list[Collector], dict[str, str]]:
    """The collectors to run, and the unavailable sources with the reason each is off."""
    collectors: list[Collector] = []
    unavailable: dict[str, str] = {}
    for name in cfg.collectors:
        try:
            collectors.append(BUILDERS[name](cfg))
        except CollectorUnavailable as e:
            unavailable[name] = str(e)
            log.info("source %s is off on this node: %s", name, e, extra={"collector": name})
        except (CollectorError, OSError, ValueError) as e:
            raise SourceFailed(
                f"source {name} could not start: {e}; fix [agent] in the config or the "
                f"node, or remove {name!r} from [agent].collectors"
            ) from e
    return collectors, unavailable
