"""`slurmadm exporter`: Prometheus exporters for compute nodes (`--mode node`) and the head node
(`--mode head`). The collectors (`node.py`, `head.py`) read through small Protocols
(`sources.py`, `head.HeadSource`), each read cached for a site interval and bounded by a deadline
(`cache.py`), so a hung NVML or Slurm call never blocks a scrape."""

from __future__ import annotations


def node_collector(site, node: str):
    from .node import NodeCollector
    from .sources import LogXids, NvmlGpus, ProcHost, StoreHealth, SysfsInfiniband

    m = site.monitor
    h = site.health
    return NodeCollector(
        node=node, gpus=NvmlGpus(), ib=SysfsInfiniband(sysfs_root(site, node)), host=ProcHost(),
        health=StoreHealth(site.store.local_path(node), node),
        xids=LogXids(h.xid_source.replace("{node}", node), node, h.xid_window_minutes * 60.0, dict(h.xid_actions)),
        job_map_dir=m.job_map_dir, cache_s=m.node_cache_s, deadline_s=m.read_deadline_s,
        idle_util_percent=m.idle_util_percent, gpu_source=m.gpu_source)


def sysfs_root(site, node: str) -> str:
    """monitor.sysfs_root, else the health checks' own (health.sysfs_root), else /sys."""
    root = site.monitor.sysfs_root or getattr(site.health, "sysfs_root", None) or "/sys"
    return root.replace("{node}", node)


def head_collector(site, *, env=None):
    from ..slurm import get_backend
    from . import storefacts
    from .head import HeadCollector, SlurmHead
    from .slurmseries import replaced, site_release

    m = site.monitor
    backend = get_backend()
    def cost():
        from ..report.reliability import today_figures

        return today_figures(site)

    return HeadCollector(site=site, source=SlurmHead(backend, env=env, timeout=max(m.read_deadline_s * 4, 30.0)),
                         cache_s=m.head_cache_s, deadline_s=m.read_deadline_s, store=storefacts.for_site(site),
                         cost=cost, replaced=replaced(site_release(site, env=env)))
