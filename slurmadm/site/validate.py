"""Cross-reference checks that a single key's type cannot express. Each problem is one line
that starts with the key path (`partitions[1].nodes: ...`)."""

from __future__ import annotations

from collections.abc import Callable

from ClusterShell.NodeSet import NodeSet

from ..errors import UsageError
from ..hostlist import MAX_HOSTLIST_NODES, hostlist_size, nodeset
from .accounts import account_problems, slurm_time_seconds
from .accounts import dupes as _dupes
from .model import Site
from .profiles import BUILTIN_PROFILES

# Capabilities may add their own site checks (e.g. health check ids) without the site package
# importing them: each returns problem lines.
EXTRA_CHECKS: list[Callable[[Site], list[str]]] = []


def _ns(pattern: str, path: str, problems: list[str]) -> NodeSet | None:
    try:
        return nodeset(pattern, what=path)
    except UsageError as exc:
        problems.append(str(exc))
        return None


def check_site(site: Site) -> list[str]:
    problems: list[str] = []
    p = problems.append

    # ---- nodes and profiles ----
    defined = NodeSet()
    total = 0
    for i, group in enumerate(site.nodes):
        total += hostlist_size(group.names) or 0
        if total > MAX_HOSTLIST_NODES:  # each group is bounded; so is the whole site
            p(f"nodes[{i}].names: the node groups up to here name {total:,} nodes, more than the "
              f"{MAX_HOSTLIST_NODES:,} slurmadm handles")
            return problems
        if not site.has_profile(group.profile):
            known = sorted(set(site.profiles) | set(BUILTIN_PROFILES))
            p(f"nodes[{i}].profile: {group.profile!r} is not a defined profile (known: {', '.join(known)})")
        ns = _ns(group.names, f"nodes[{i}].names", problems)
        if ns is None:
            continue
        if len(ns) == 0:
            p(f"nodes[{i}].names: names no nodes")
        overlap = defined & ns
        if len(overlap):
            p(f"nodes[{i}].names: {group.names!r} overlaps nodes declared earlier at {overlap}")
        defined.update(ns)
        if group.port is not None and group.port + len(ns) - 1 > 65535:
            p(f"nodes[{i}].port: {group.port} + {len(ns)} nodes runs past port 65535")
    if problems:
        return problems  # everything below needs a sound node list

    def within(pattern: str, path: str) -> NodeSet | None:
        ns = _ns(pattern, path, problems)
        if ns is None:
            return None
        outside = ns - defined
        if len(outside):
            p(f"{path}: {pattern!r} is outside nodes {str(defined)!r} (undefined: {outside})")
            return None
        return ns

    # ---- topology ----
    if site.topology.units:
        for name in _dupes(u.name for u in site.topology.units):
            p(f"topology.units: unit name {name!r} is used twice")
        seen = NodeSet()
        for i, unit in enumerate(site.topology.units):
            ns = within(unit.nodes, f"topology.units[{i}].nodes")
            if ns is None:
                continue
            twice = seen & ns
            if len(twice):
                p(f"topology.units[{i}].nodes: {twice} already belong to another unit")
            seen.update(ns)
            if unit.name == site.topology.spine:
                p(f"topology.units[{i}].name: {unit.name!r} is also the spine's name")
        missing = defined - seen
        if len(missing) and not any("topology.units" in x for x in problems):
            p(f"topology.units: nodes {missing} are in no scalable unit")

    # ---- QOS, organisations, projects, users (site/accounts.py) ----
    problems.extend(account_problems(site))
    qos_names = {q.name for q in site.qos}

    def known_qos(name: str | None, path: str) -> None:
        if name is not None and name not in qos_names:
            p(f"{path}: QOS {name!r} is not defined in [[qos]]")

    # ---- partitions ----
    for name in _dupes(x.name for x in site.partitions):
        p(f"partitions: partition {name!r} is defined twice")
    defaults = [i for i, x in enumerate(site.partitions) if x.default]
    if len(defaults) > 1:
        p(f"partitions[{defaults[1]}].default: only one partition can be the default "
          f"(partitions[{defaults[0]}] already is)")
    for i, part in enumerate(site.partitions):
        if part.nodes != "ALL":
            within(part.nodes, f"partitions[{i}].nodes")
        known_qos(part.qos, f"partitions[{i}].qos")
        for j, name in enumerate(part.allow_qos):
            known_qos(name, f"partitions[{i}].allow_qos[{j}]")

    # ---- burn-in ----
    if site.qos:
        known_qos(site.burnin.qos, "burnin.qos")
    if site.burnin.partition is not None and site.burnin.partition not in {x.name for x in site.partitions}:
        p(f"burnin.partition: {site.burnin.partition!r} is not a defined partition")
    if site.organizations or site.projects:
        if site.burnin.account not in site.account_names():
            p(f"burnin.account: {site.burnin.account!r} is not a defined organization or project")
    _check_burnin_times(site, p)

    _check_store(site, p)

    for extra in EXTRA_CHECKS:
        problems.extend(extra(site))
    return problems


def _check_store(site: Site, p: Callable[[str], None]) -> None:
    """The central store gets its own database, never slurmdbd's."""
    url = site.store.central()
    if url is not None and url.dialect == "mysql" and url.database == site.database.storage_name:
        p(f"store.url: database {url.database!r} is slurmdbd's (database.storage_name); "
          "give slurmadm its own (e.g. mysql://slurmadm@host/slurmadm)")


def _check_burnin_times(site: Site, p: Callable[[str], None]) -> None:
    """Every burn-in job and the sweep itself must have a finite time limit that Slurm accepts."""
    b = site.burnin
    secs = {}
    for key in ("job_time_limit", "start_timeout", "sweep_time_limit"):
        secs[key] = slurm_time_seconds(getattr(b, key))
        if not secs[key]:
            p(f"burnin.{key}: {getattr(b, key)!r} must be a finite, non-zero time")
    if None in secs.values() or 0 in secs.values():
        return
    if secs["job_time_limit"] > secs["sweep_time_limit"]:
        p(f"burnin.job_time_limit: {b.job_time_limit} is longer than burnin.sweep_time_limit "
          f"{b.sweep_time_limit}")
    # the qualification job runs under it (a default watch is cut to fit: repair.run.link_watch_s)
    if "link_watch_s" in site.repair.model_fields_set and site.repair.link_watch_s >= secs["job_time_limit"]:
        p(f"repair.link_watch_s: {site.repair.link_watch_s:g} s does not fit in burnin.job_time_limit "
          f"{b.job_time_limit}, the qualification job's limit")
    qos = site.qos_by_name().get(b.qos)
    if qos is not None and qos.max_wall is not None:
        wall = slurm_time_seconds(qos.max_wall)
        if wall is not None and secs["job_time_limit"] > wall:
            p(f"burnin.job_time_limit: {b.job_time_limit} is above the max_wall {qos.max_wall} of "
              f"QOS {b.qos!r} (Slurm would reject the jobs)")
    part = next((x for x in site.partitions if x.name == b.partition), site.default_partition)
    limit = slurm_time_seconds(part.max_time)
    if limit is not None and secs["job_time_limit"] > limit:
        p(f"burnin.job_time_limit: {b.job_time_limit} is above the max_time {part.max_time} of "
          f"partition {part.name!r}")


def require_nodes(site: Site, pattern: str, *, what: str = "--nodes") -> list[str]:
    """Expand a hostlist given on the command line and insist every node is in the site."""
    ns = nodeset(pattern, what=what)
    unknown = ns - NodeSet.fromlist(site.node_names)
    if len(unknown):
        raise UsageError(f"{what}: {unknown} not in the site's nodes {site.all_nodes}")
    return list(ns)
