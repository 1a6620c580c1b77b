"""Everything the Slurm config templates print, computed from the site as plain values.

Each config line is a list of (key, value) pairs; the templates only join them. Node and switch
lists are folded into hostlists (`b200-[001-128]`) here, through ClusterShell.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from decimal import ROUND_DOWN, Decimal

from ClusterShell.NodeSet import NodeSet
from ClusterShell.RangeSet import RangeSet

from ..hostlist import compress, nodeset
from ..site import NodeProfile, Site
from ..site.accounts import priority_usage_settings, slurm_time_seconds

Pairs = list[tuple[str, str]]

SCRIPT_NAMES = {"Prolog": "prolog.sh", "Epilog": "epilog.sh", "HealthCheckProgram": "healthcheck.sh"}
# Always in SchedulerParameters: a job whose prolog fails (and drains a bad node) goes back to
# the queue and runs elsewhere, instead of being requeued *and held*.
NOHOLD = "nohold_on_prolog_fail"


@dataclass(frozen=True)
class Section:
    title: str
    pairs: Pairs


@dataclass
class SlurmConf:
    sections: list[Section]
    nodes: list[Pairs]
    partitions: list[Pairs]


@dataclass
class GresConf:
    autodetect: str  # "nvml" or "off"
    lines: list[Pairs] = field(default_factory=list)


@dataclass
class TopologyConf:
    switches: list[Pairs]


def yes(flag: bool) -> str:
    return "yes" if flag else "no"


def quoted(value: str) -> str:
    """slurm.conf values with blanks need double quotes."""
    return f'"{value}"' if any(c.isspace() for c in value) else value


def several_slurmd_per_host(site: Site) -> bool:
    return any(g.port is not None for g in site.nodes)


def real_memory(site: Site, profile: NodeProfile) -> int:
    """RealMemory in MiB: the site's fraction of the physical memory (slurmd -C sees less)."""
    return int(profile.memory_mib * site.slurm.real_memory_fraction)


def gpu_cores(profile: NodeProfile) -> list[str]:
    """gres.conf Cores= of each GPU: logical core indexes (not OS CPU ids)."""
    if profile.gpus.cores is not None:
        return [str(RangeSet(c)) for c in profile.gpus.cores]
    per = profile.cores_per_socket
    return [f"{s * per}-{(s + 1) * per - 1}" for s in profile.gpus.sockets]


# ------------------------------------------------------------- GPU-site settings (issue 16)

BF_WINDOW_DEFAULT = 1440  # minutes: Slurm's default bf_window (one day)
BF_WINDOW_MAX = 43200  # minutes: the most Slurm accepts (30 days)
NO_MAIL = "/bin/true"  # MailProg when the site sends no job mail (slurm.mail_prog = "")


def longest_max_time_minutes(site: Site) -> int | None:
    """The longest partition MaxTime in minutes (None: some partition has no limit, INFINITE)."""
    limits = [slurm_time_seconds(p.max_time) for p in site.partitions]
    if any(not sec for sec in limits):
        return None
    return max(-(-sec // 60) for sec in limits)


def backfill(site: Site) -> tuple[int, int]:
    """(bf_window minutes, bf_resolution seconds). Slurm's man page: a window at least as long as
    the highest time limit prevents starving large jobs, and a longer window wants a coarser
    resolution (60 s, the default, per day of window)."""
    s = site.slurm
    window = s.bf_window_minutes
    if window is None:
        longest = longest_max_time_minutes(site)
        window = BF_WINDOW_MAX if longest is None else min(BF_WINDOW_MAX, max(BF_WINDOW_DEFAULT, longest))
    resolution = s.bf_resolution_s or min(3600, 60 * -(-window // BF_WINDOW_DEFAULT))
    return window, resolution


def mail_prog(site: Site) -> str:
    return site.slurm.mail_prog or NO_MAIL


def _weight(value: float) -> str:
    """Six significant digits, rounded down: a whole node must not bill above its GPU count."""
    if value == 0:
        return "0"
    text = format(Decimal(repr(value)).quantize(Decimal(1).scaleb(Decimal(repr(value)).adjusted() - 5),
                                                rounding=ROUND_DOWN), "f")
    return text.rstrip("0").rstrip(".") if "." in text else text


def billing_weights(site: Site, part, profiles: list[NodeProfile]) -> str | None:
    """TRESBillingWeights of a partition (None: Slurm bills allocated CPUs)."""
    if part.billing_weights is not None:
        weights = dict(part.billing_weights)
    elif site.slurm.billing == "cpus":
        return None
    elif site.slurm.billing == "gpus":
        weights = {"gres/gpu": 1.0}
    else:
        # gpu-equivalent: a whole node's CPUs, or its whole memory, cost as much as its GPUs.
        # Mixed profiles: the weights of the node with the fewest GPUs per CPU / per GiB, so no
        # job pays more than the GPUs it keeps from others.
        weights = {
            "cpu": min(p.gpus.count / p.cpus for p in profiles),
            "mem": min(p.gpus.count / (real_memory(site, p) / 1024) for p in profiles),
            "gres/gpu": 1.0,
        }
    names = {"cpu": "CPU", "mem": "Mem", "gres/gpu": "GRES/gpu"}
    parts = []
    for key in ("cpu", "mem", "gres/gpu"):
        if key in weights:
            parts.append(f"{names[key]}={_weight(weights[key])}{'G' if key == 'mem' else ''}")
    return ",".join(parts) or None


def priority_flags(site: Site) -> list[str]:
    return ["MAX_TRES"] if site.slurm.billing == "gpu-equivalent" else []


def def_mem_per_cpu(site: Site, part, profiles: list[NodeProfile]) -> int:
    """DefMemPerCPU (MiB): a CPU-only job gets memory in proportion to its CPUs instead of the
    whole node; a GPU job gets DefCpuPerGPU x this per GPU. (DefMemPerCPU, DefMemPerGPU and
    DefMemPerNode are mutually exclusive, so DefMemPerGPU is not written.)"""
    if part.def_mem_per_cpu_mib is not None:
        return part.def_mem_per_cpu_mib
    return max(1, min(real_memory(site, p) // p.cpus for p in profiles))


def spine_groups(site: Site) -> list[tuple[str, list[str]]]:
    """(spine name, unit names) above the scalable units; one spine unless units_per_spine."""
    units = [name for name, _ in site.scalable_units]
    size = site.topology.units_per_spine
    if size == 0 or len(units) <= size:
        return [(site.topology.spine, units)]
    return [
        (f"{site.topology.spine}{i // size + 1}", units[i : i + size]) for i in range(0, len(units), size)
    ]


# ------------------------------------------------------------------------------ slurm.conf


def slurm_settings(site: Site, release: tuple[int, int] | None = None) -> list[Section]:
    """`release`: the target Slurm (None: the oldest supported; release-added keys left out)."""
    from .release import HEALTH_CHECK_TIMEOUT_FROM, has, health_check_timeout

    s = site.slurm
    cgroup_tracking = s.proctrack == "cgroup"
    multi = several_slurmd_per_host(site)
    per_node = "-%n" if multi else ""

    control: Pairs = [("ClusterName", site.cluster.name)]
    control += [("SlurmctldHost", host) for host in site.cluster.controllers]
    control += [
        ("SlurmctldPort", str(s.slurmctld_port)),
        ("SlurmdPort", str(s.slurmd_port)),
        ("SlurmUser", site.slurm_user),
        ("MailProg", mail_prog(site)),
        ("AuthType", "auth/munge"),
        ("CredType", "cred/munge"),
    ]
    auth_info = ([f"socket={s.munge_socket}"] if s.munge_socket else []) + (
        [f"cred_expire={s.cred_expire_s}"] if s.cred_expire_s is not None else [])
    if auth_info:
        control.append(("AuthInfo", ",".join(auth_info)))
    if s.configless:
        control.append(("SlurmctldParameters", "enable_configless"))
    control += [
        ("StateSaveLocation", s.state_save_location),
        ("SlurmdSpoolDir", s.slurmd_spool_dir),
        ("SlurmctldPidFile", f"{s.run_dir}/slurmctld.pid"),
        ("SlurmdPidFile", f"{s.run_dir}/slurmd{per_node}.pid"),
        ("SlurmctldLogFile", f"{s.log_dir}/slurmctld.log"),
        ("SlurmdLogFile", f"{s.log_dir}/slurmd{per_node}.log"),
    ]

    resources: Pairs = [
        ("SelectType", "select/cons_tres"),
        ("SelectTypeParameters", "CR_Core_Memory"),
        ("GresTypes", "gpu"),
        ("ProctrackType", f"proctrack/{s.proctrack}"),
        ("TaskPlugin", ",".join(s.task_plugins)),
        ("JobAcctGatherType", "jobacct_gather/cgroup" if cgroup_tracking else "jobacct_gather/linux"),
        ("TopologyPlugin", f"topology/{site.topology.plugin}"),
    ]

    prio = s.priority
    window, resolution = backfill(site)
    scheduling: Pairs = [
        ("SchedulerType", "sched/backfill"),
        ("SchedulerParameters", ",".join([NOHOLD, *s.scheduler_parameters,
                                          f"bf_window={window}", f"bf_resolution={resolution}"])),
        ("EnforcePartLimits", s.enforce_part_limits),
        ("PriorityType", "priority/multifactor"),
    ]
    if priority_flags(site):
        scheduling.append(("PriorityFlags", ",".join(priority_flags(site))))
    # How GPU-hour budgets refill (decay, reset per period, lifetime): site/accounts.py decides.
    scheduling += list(priority_usage_settings(site).items())
    scheduling += [
        ("PriorityMaxAge", prio.max_age),
        ("PriorityWeightFairshare", str(prio.weight_fairshare)),
        ("PriorityWeightAge", str(prio.weight_age)),
        ("PriorityWeightPartition", str(prio.weight_partition)),
        ("PriorityWeightJobSize", str(prio.weight_job_size)),
        ("PriorityWeightQOS", str(prio.weight_qos)),
        ("PreemptType", "preempt/qos"),
        ("PreemptMode", s.preempt_mode),
    ]

    if s.accounting_storage == "slurmdbd":
        accounting: Pairs = [
            ("AccountingStorageType", "accounting_storage/slurmdbd"),
            ("AccountingStorageHost", site.database.host),
            ("AccountingStoragePort", str(site.database.port)),
        ]
        if s.munge_socket:  # connections to slurmdbd name their munge socket here, not in AuthInfo
            accounting.append(("AccountingStoragePass", s.munge_socket))
        if s.accounting_tres:
            accounting.append(("AccountingStorageTRES", ",".join(s.accounting_tres)))
        if s.accounting_enforce:
            accounting.append(("AccountingStorageEnforce", ",".join(s.accounting_enforce)))
    else:
        accounting = [("AccountingStorageType", "accounting_storage/none")]

    # Contain (pam_slurm_adopt's job container) needs proctrack/cgroup; it implies Alloc, which
    # runs the prolog at allocation time, before the job's first step. DeferBatch: the batch
    # script starts once the prolog (slurmadm's GPU checks) passed on every node of the job, not
    # as soon as the batch host's did (Alloc alone, every release): a node that fails its checks
    # requeues the job before its script ran, not while it runs on the others.
    lifecycle: Pairs = [
        ("Prolog", f"{s.prolog_dir}/{SCRIPT_NAMES['Prolog']}"),
        ("Epilog", f"{s.prolog_dir}/{SCRIPT_NAMES['Epilog']}"),
        ("PrologFlags", "Alloc,Contain,DeferBatch" if cgroup_tracking else "Alloc,DeferBatch"),
        ("HealthCheckProgram", f"{s.prolog_dir}/{SCRIPT_NAMES['HealthCheckProgram']}"),
        ("HealthCheckInterval", str(s.health_check_interval)),
        ("HealthCheckNodeState", ",".join(s.health_check_node_state)),
    ]
    if has(release, HEALTH_CHECK_TIMEOUT_FROM):  # before 26.05 a fixed 60 s (checks.check_instruments)
        lifecycle.append(("HealthCheckTimeout", str(health_check_timeout(site.health.periodic_timeout_s))))
    if s.reboot_program:
        lifecycle.append(("RebootProgram", quoted(s.reboot_program)))
    lifecycle += [
        ("ResumeTimeout", str(s.resume_timeout)),
        ("ReturnToService", str(s.return_to_service)),
    ]

    sections = [
        Section("Controllers, daemons, authentication", control),
        Section("Resources: consumable cores, memory and GPUs", resources),
        Section("Scheduling, priority, preemption", scheduling),
        Section("Accounting", accounting),
        Section("Node lifecycle: prolog/epilog, health checks, reboots", lifecycle),
    ]
    metrics = metrics_settings(site, release)
    if metrics:
        sections.append(Section("Slurm's own metrics (slurmctld /metrics/*, scraped by Prometheus)", metrics))
    return sections


# slurm.conf keys that authenticated metrics take (metrics_settings); slurm.extra may not set them then
METRICS_AUTH_KEYS = ("MetricsAuthUsers", "AuthAltTypes", "AuthAltParameters", "SlurmctldHttpAuthParameters")


def metrics_settings(site: Site, release: tuple[int, int] | None) -> Pairs:
    """MetricsType and, on 26.05, its authentication (metrics.shtml; NEWS of 26.05: with PrivateData
    only SlurmUser and root may read unless MetricsParameters=ignore_private_data; MetricsAuthUsers
    names who may, JWT-authenticated).

    Authenticated metrics take four keys (slurm.conf.5 of 26.05; seen on 26.05.5,
    tests/fixtures/slurm/26.05/jwt-metrics-auth.txt): MetricsAuthUsers; AuthAltTypes=auth/jwt with
    AuthAltParameters=jwt_key=<key> (slurmctld loads auth/jwt for MetricsAuthUsers and dies
    without a key; `scontrol token` mints the JWT with it; disable_token_creation: only root and
    SlurmUser may mint one); and SlurmctldHttpAuthParameters=jwt_key=<key>, without which the
    HTTP listener has no key and answers 401 to every token. Only the key's path is written."""
    from .release import METRICS_AUTH_FROM, METRICS_FROM, has

    m = site.monitor
    if not m.slurm_metrics or not has(release, METRICS_FROM):
        return []
    pairs: Pairs = [("MetricsType", "metrics/openmetrics")]
    if has(release, METRICS_AUTH_FROM):
        if m.slurm_metrics_ignore_private_data:
            pairs.append(("MetricsParameters", "ignore_private_data"))
        if m.slurm_metrics_users:
            key = m.slurm_metrics_jwt_key_file
            pairs += [
                ("MetricsAuthUsers", ",".join(m.slurm_metrics_users)),
                ("AuthAltTypes", "auth/jwt"),
                ("AuthAltParameters", f"jwt_key={key},disable_token_creation"),
                ("SlurmctldHttpAuthParameters", f"jwt_key={key}"),
            ]
    return pairs


@dataclass
class Layout:
    """The site's nodes as NodeSets, folded once: set operations on them cost little, while
    folding name lists (parsing every name) dominates the render time of large sites."""

    groups: list[NodeSet]  # per node group
    units: list[tuple[str, NodeSet]]  # per scalable unit, in order

    @classmethod
    def of(cls, site: Site) -> "Layout":
        groups = [nodeset(g.names, what=f"nodes[{i}].names") for i, g in enumerate(site.nodes)]
        if site.topology.units:
            units = [(u.name, nodeset(u.nodes, what=f"topology.units[{i}].nodes"))
                     for i, u in enumerate(site.topology.units)]
        else:
            units = [(name, NodeSet.fromlist(members)) for name, members in site.scalable_units]
        return cls(groups, units)

    def union(self, sets) -> NodeSet:
        out = NodeSet()
        for ns in sets:
            out.update(ns)
        return out


def node_lines(site: Site, layout: Layout) -> list[Pairs]:
    """One NodeName line per (node group, scalable unit): nodes of a line share features."""
    lines: list[Pairs] = []
    for group, members in zip(site.nodes, layout.groups):
        prof = site.profile(group.profile)
        port_of = {name: group.port + i for i, name in enumerate(members)} if group.port is not None else {}
        hardware: Pairs = [
            ("Sockets", str(prof.sockets)),
            ("CoresPerSocket", str(prof.cores_per_socket)),
            ("ThreadsPerCore", str(prof.threads_per_core)),
            ("CPUs", str(prof.cpus)),
            ("RealMemory", str(real_memory(site, prof))),
            ("Gres", f"gpu:{prof.gpus.model}:{prof.gpus.count}"),
        ]
        for unit, unit_nodes in layout.units:
            ns = members & unit_nodes
            if not ns:
                continue
            line: Pairs = [("NodeName", str(ns))]
            if group.hostname:
                line.append(("NodeHostname", group.hostname))
            if group.addr:
                line.append(("NodeAddr", group.addr))
            if port_of:
                ports = [port_of[n] for n in ns]  # NodeSet order: the order Slurm pairs them in
                line.append(("Port", str(ports[0]) if len(ports) == 1 else f"[{RangeSet(ports)}]"))
            line += hardware
            line += [("Features", ",".join([*group.features, unit])), ("State", "UNKNOWN")]
            lines.append(line)
    return lines


def partition_lines(site: Site, layout: Layout) -> list[Pairs]:
    lines: list[Pairs] = []
    everything = layout.union(layout.groups)
    for i, part in enumerate(site.partitions):
        nodes = everything if part.nodes == "ALL" else nodeset(part.nodes, what=f"partitions[{i}].nodes")
        names = dict.fromkeys(g.profile for g, members in zip(site.nodes, layout.groups) if members & nodes)
        profiles = [site.profile(p) for p in names]
        # Defaults that fit every node of the partition (a job may land on any of them).
        cpu_per_gpu = min(p.cpus // p.gpus.count for p in profiles)
        line: Pairs = [("PartitionName", part.name), ("Nodes", str(nodes))]
        if part.default:
            line.append(("Default", "YES"))
        line.append(("MaxTime", part.max_time))
        if part.default_time:
            line.append(("DefaultTime", part.default_time))
        line.append(("State", part.state))
        if part.qos:
            line.append(("QOS", part.qos))
        if part.allow_qos:
            line.append(("AllowQos", ",".join(part.allow_qos)))
        line += [("PriorityTier", str(part.priority_tier)), ("OverSubscribe", part.oversubscribe)]
        if cpu_per_gpu > 0:  # fewer CPUs than GPUs (a dev node): no per-GPU CPU default
            line.append(("DefCpuPerGPU", str(cpu_per_gpu)))
        line.append(("DefMemPerCPU", str(def_mem_per_cpu(site, part, profiles))))
        weights = billing_weights(site, part, profiles)
        if weights:
            line.append(("TRESBillingWeights", weights))
        lines.append(line)
    return lines


def slurm_conf(site: Site, layout: Layout, release: tuple[int, int] | None = None) -> SlurmConf:
    """`release`: write every key the way that Slurm release reads it (release.RENAMED_KEYS)."""
    sections = slurm_settings(site, release)
    if site.slurm.extra:
        extra = [(key, quoted(value)) for key, value in site.slurm.extra.items()]
        sections.append(Section("Site extras (slurm.extra)", extra))
    if release is not None:
        from .release import conf_key

        sections = [Section(sec.title, [conf_key(k, v, release) for k, v in sec.pairs]) for sec in sections]
    return SlurmConf(sections, node_lines(site, layout), partition_lines(site, layout))


# ------------------------------------------------------------------------------- gres.conf


def gres_conf(site: Site, layout: Layout) -> GresConf:
    """Explicit GPU lines per profile (Debian's Slurm has no NVML autodetect); consecutive GPUs
    with the same cores share a line."""
    groups_of: dict[str, list[NodeSet]] = defaultdict(list)
    for group, members in zip(site.nodes, layout.groups):
        groups_of[group.profile].append(members)
    conf = GresConf(autodetect="nvml" if site.slurm.has_nvml else "off")
    for name, sets in groups_of.items():
        prof = site.profile(name)
        files = prof.gpus.files()
        cores = gpu_cores(prof)
        hostlist = str(layout.union(sets))
        start = 0
        for i in range(1, len(files) + 1):
            if i == len(files) or cores[i] != cores[start]:
                conf.lines.append([
                    ("NodeName", hostlist),
                    ("Name", "gpu"),
                    ("Type", prof.gpus.model),
                    ("File", compress(files[start:i])),
                    ("Cores", cores[start]),
                ])
                start = i
    return conf


# --------------------------------------------------------------------------- topology.conf


def topology_conf(site: Site, layout: Layout) -> TopologyConf:
    """topology/tree: one leaf per scalable unit, spine(s) above, a core above several spines."""
    switches: list[Pairs] = [[("SwitchName", unit), ("Nodes", str(members))] for unit, members in layout.units]
    spines = spine_groups(site)
    switches += [[("SwitchName", spine), ("Switches", compress(units))] for spine, units in spines]
    if len(spines) > 1:
        switches.append([("SwitchName", site.topology.core), ("Switches", compress(s for s, _ in spines))])
    return TopologyConf(switches)


# ----------------------------------------------------------------------------- cgroup.conf


def cgroup_conf(site: Site) -> Pairs:
    s = site.slurm
    return [
        ("CgroupPlugin", s.cgroup_plugin),
        ("ConstrainCores", yes(s.constrain_cores)),
        ("ConstrainDevices", yes(s.constrain_devices)),
        ("ConstrainRAMSpace", yes(s.constrain_ram_space)),
        ("ConstrainSwapSpace", yes(s.constrain_swap_space)),
    ]
