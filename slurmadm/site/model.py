"""The site model: everything slurmadm knows about a cluster, from one `site.toml`.

Pydantic models, strict (unknown keys are errors, no type coercion). Cross-references (node
ranges, partitions, QOS, projects) are checked by `slurmadm.site.validate` with key paths.
"""

from __future__ import annotations

import hashlib
import json
from functools import cached_property
from typing import Annotated, Literal

from pydantic import Field

from ..hostlist import compress, expand
from .accounts import AccountingSettings, Organization, Project, Qos, SlurmName, SlurmTime, User, memberships
from .burnin import BurninSection
from .deploy import DeploySection
from .fleet import BmcSection, FleetSection, SoftwareBaseline
from .health import HealthSection, ModelThresholds
from .monitor import MonitorSection
from .repair import RepairSection
from .profiles import BUILTIN_PROFILES, NodeProfile, Strict
from .slurmtext import (
    UINT32_NO_VAL,
    Hostlist,
    NodeAddress,
    SlurmExecutable,
    SlurmPath,
    SlurmProgram,
    SlurmValue,
    UnixUser,
)
from .store import StoreSection

Port = Annotated[int, Field(ge=1, le=65535)]
HostName = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9.\-]{0,252}$")]
# Absolute paths that may reach a Slurm config: no blanks, quotes, '#' or control characters.
AbsPath = SlurmPath


class ClusterSection(Strict):
    # Slurm ClusterName: lowercase, no spaces (Slurm lowercases it anyway).
    name: Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]{0,39}$")]
    # SlurmctldHost lines, primary first.
    controllers: Annotated[list[HostName], Field(min_length=1, max_length=8)]
    slurm_user: UnixUser = "slurm"


class DatabaseSection(Strict):
    host: HostName  # where slurmdbd runs (AccountingStorageHost)
    port: Port = 6819
    storage_host: HostName = "localhost"
    storage_port: Port = 3306
    storage_user: UnixUser = "slurm"
    storage_name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_$]{1,64}$")] = "slurm_acct_db"
    # The database password lives in a root-only file, never in site.toml.
    storage_password_file: AbsPath = "/etc/slurm/slurmdbd.password"


class NodeGroup(Strict):
    names: Hostlist  # hostlist, e.g. "b200-[001-128]"
    profile: str = "hgx-b200"
    features: list[Annotated[str, Field(pattern=r"^[A-Za-z0-9_\-.]+$")]] = []
    # Network placement, only needed when several slurmd share one host (the dev cluster):
    addr: NodeAddress | None = None  # NodeAddr
    hostname: NodeAddress | None = None  # NodeHostname
    port: Port | None = None  # Port of the first node; the i-th node of the group gets port+i


class ScalableUnit(Strict):
    name: Annotated[str, Field(pattern=r"^[A-Za-z0-9_\-]+$")]
    nodes: Hostlist


SwitchName = Annotated[str, Field(pattern=r"^[A-Za-z0-9_\-]+$")]


class TopologySection(Strict):
    plugin: Literal["tree", "none"] = "tree"
    # One virtual leaf per scalable unit (a rail-optimised SU shares its 8 rail leaves), one root.
    spine: SwitchName = "spine"
    # Explicit units; when empty, nodes are cut into units of `su_size` in hostlist order.
    units: list[ScalableUnit] = []
    su_size: Annotated[int, Field(ge=1, le=4096)] = 32
    # 0: one spine above every unit. N: a spine per N units (spine1, spine2, ...) under a `core`
    # switch, for fabrics with a core layer above the spine groups.
    units_per_spine: Annotated[int, Field(ge=0, le=4096)] = 0
    core: SwitchName = "core"


class Partition(Strict):
    name: SlurmName
    nodes: Hostlist = "ALL"  # hostlist or ALL
    default: bool = False
    max_time: SlurmTime = "INFINITE"
    default_time: SlurmTime | None = None
    state: Literal["UP", "DOWN", "DRAIN", "INACTIVE"] = "UP"
    qos: SlurmName | None = None  # partition QOS
    allow_qos: list[SlurmName] = []  # empty: all
    priority_tier: Annotated[int, Field(ge=0, le=65533)] = 1
    oversubscribe: Literal["NO", "EXCLUSIVE", "YES", "FORCE"] = "NO"
    # TRESBillingWeights of this partition, e.g. { "gres/gpu" = 1.0, cpu = 0.0 } (mem per GiB);
    # omitted: derived from slurm.billing and the partition's node profile.
    billing_weights: dict[Literal["cpu", "mem", "gres/gpu"], Annotated[float, Field(ge=0, le=1e6)]] | None = None
    # DefMemPerCPU in MiB; omitted: the node's RealMemory / CPUs (smallest over the partition).
    def_mem_per_cpu_mib: Annotated[int, Field(ge=1, le=2**40)] | None = None


class PrioritySection(Strict):
    decay_half_life: SlurmTime = "14-0"
    max_age: SlurmTime = "7-0"
    weight_fairshare: Annotated[int, Field(ge=0, le=UINT32_NO_VAL - 1)] = 100000
    weight_age: Annotated[int, Field(ge=0, le=UINT32_NO_VAL - 1)] = 1000
    weight_partition: Annotated[int, Field(ge=0, le=UINT32_NO_VAL - 1)] = 10000
    weight_job_size: Annotated[int, Field(ge=0, le=UINT32_NO_VAL - 1)] = 1000
    weight_qos: Annotated[int, Field(ge=0, le=UINT32_NO_VAL - 1)] = 10000


class SlurmSection(Strict):
    """How slurm.conf, gres.conf, topology.conf and cgroup.conf are written."""

    # Slurm release the configs target ("auto": ask the installed `sinfo --version`).
    release: Literal["auto", "22.05", "23.02", "23.11", "24.05", "24.11", "25.05", "25.11", "26.05"] = "auto"
    config_dir: AbsPath = "/etc/slurm"
    slurmctld_port: Port = 6817
    slurmd_port: Port = 6818
    state_save_location: AbsPath = "/var/spool/slurmctld"
    slurmd_spool_dir: AbsPath = "/var/spool/slurmd"  # %n allowed
    log_dir: AbsPath = "/var/log/slurm"
    run_dir: AbsPath = "/run/slurm"
    munge_socket: AbsPath | None = None  # AuthInfo=socket=...; None: munge's default
    # AuthInfo=cred_expire=N: a job step credential's lifetime, which is also how long a requeued
    # job (e.g. one whose prolog found a fault) waits before it may start again. None: Slurm's 120 s.
    cred_expire_s: Annotated[int, Field(ge=30, le=86400)] | None = None
    slurm_user: UnixUser | None = None  # SlurmUser; default cluster.slurm_user
    proctrack: Literal["cgroup", "linuxproc"] = "cgroup"
    task_plugins: Annotated[list[Literal["task/cgroup", "task/affinity", "task/none"]], Field(min_length=1)] = [
        "task/cgroup",
        "task/affinity",
    ]
    # cgroup.conf. "disabled" exists from Slurm 23.02 (24.11's slurmd needs it without cgroupfs).
    cgroup_plugin: Literal["autodetect", "cgroup/v1", "cgroup/v2", "disabled"] = "autodetect"
    constrain_cores: bool = True  # cgroup.conf ConstrainCores: a job uses only its allocated cores
    constrain_devices: bool = True  # ConstrainDevices: a job sees only its allocated GPUs
    constrain_ram_space: bool = True  # ConstrainRAMSpace: a job is held to its memory
    constrain_swap_space: bool = True  # ConstrainSwapSpace: and to no more swap
    # RealMemory = this fraction of the profile's physical memory (slurmd -C sees less than DIMMs).
    real_memory_fraction: Annotated[float, Field(gt=0.1, le=1.0)] = 0.95
    # Debian's Slurm has no gpu_nvml.so: explicit gres.conf lines unless the site's build has it.
    has_nvml: bool = False
    # Where prolog.sh, epilog.sh and healthcheck.sh are installed on compute nodes.
    prolog_dir: AbsPath = "/opt/slurmadm/prolog_epilog"
    health_check_interval: Annotated[int, Field(ge=0, le=86400)] = 300  # HealthCheckInterval, seconds (0: never)
    # Node states in which HealthCheckProgram runs (HealthCheckNodeState).
    # START_ONLY from Slurm 25.11, REBOOT_ONLY from 26.05 (checked against the target release).
    health_check_node_state: list[Literal["ALLOC", "ANY", "CYCLE", "IDLE", "MIXED", "START_ONLY",
                                          "REBOOT_ONLY"]] = [
        "ANY"
    ]
    # Must cover profiles.*.boot_seconds when Slurm reboots nodes (RebootProgram set).
    resume_timeout: Annotated[int, Field(ge=60, le=86400)] = 900
    reboot_program: SlurmProgram = "/usr/sbin/reboot"  # "" for none
    return_to_service: Literal[0, 1, 2] = 2
    preempt_mode: Literal["REQUEUE", "CANCEL", "SUSPEND,GANG"] = "REQUEUE"
    # SchedulerParameters besides nohold_on_prolog_fail (always set: a job whose prolog drains
    # a bad node is requeued to run elsewhere instead of being held).
    scheduler_parameters: list[Annotated[str, Field(pattern=r"^[a-z_]+(=[A-Za-z0-9_.:\-]+)?$")]] = []
    # "none" runs without slurmdbd (no limits, no fairshare history): only for tests and demos.
    accounting_storage: Literal["slurmdbd", "none"] = "slurmdbd"
    # AccountingStorageTRES (cpu, mem, energy, node, billing, fs/disk and vmem are always tracked).
    accounting_tres: list[Annotated[str, Field(pattern=r"^[a-z]+(/[a-z0-9_]+(:[a-z0-9_]+)?)?$")]] = [
        "gres/gpu"
    ]
    accounting_enforce: list[Literal["associations", "limits", "nojobs", "nosteps", "qos", "safe", "wckeys"]] = [
        "associations",
        "limits",
        "qos",
        "safe",
    ]
    # SlurmctldParameters=enable_configless: slurmd started with --conf-server fetches the
    # configs, and `scontrol reconfigure` pushes a new set to every node.
    configless: bool = True
    priority: PrioritySection = PrioritySection()
    # ---- what makes the configuration right for a GPU site (see site.example.toml) ----
    # How jobs are billed (fairshare usage, sshare, the billing TRES):
    #   "gpu-equivalent"  in GPUs: GRES/gpu=1 and CPUs and memory weighted so a whole node's worth
    #                     equals its GPU count, with PriorityFlags=MAX_TRES (a job pays for the
    #                     largest share of a node it holds)
    #   "gpus"            GPUs only (CPU-only jobs are free)
    #   "cpus"            Slurm's default: allocated CPUs
    billing: Literal["gpu-equivalent", "gpus", "cpus"] = "gpu-equivalent"
    # EnforcePartLimits: ALL rejects at submit a job that a partition's limits (AllowQos, MaxTime,
    # ...) would leave pending forever.
    enforce_part_limits: Literal["ALL", "ANY", "NO"] = "ALL"
    # SchedulerParameters bf_window (minutes) and bf_resolution (seconds); omitted: bf_window
    # covers the longest partition max_time, bf_resolution grows with it (60 s per day).
    bf_window_minutes: Annotated[int, Field(ge=1, le=43200)] | None = None
    bf_resolution_s: Annotated[int, Field(ge=1, le=3600)] | None = None  # bf_resolution (see bf_window_minutes)
    # True when state_save_location is storage that every controller mounts (required with more
    # than one cluster.controllers: the backup takes over from the primary's saved state).
    state_save_shared: bool = False
    # MailProg: the mailer slurmctld runs for --mail-type; "" for no job mail (MailProg=/bin/true).
    mail_prog: SlurmExecutable = "/usr/bin/mail"
    # systemd units slurmd starts after (`slurmadm config slurmd-unit`): the GPU device files of
    # gres.conf must exist before slurmd reads it, or it exits.
    slurmd_after: list[Annotated[str, Field(pattern=r"^[A-Za-z0-9@_.\-]+\.(service|target|mount|device)$")]] = [
        "nvidia-persistenced.service"
    ]
    # Extra slurm.conf lines for what the model does not cover (KEY -> value). Keys slurmadm
    # writes itself are refused here (set them through their own key).
    extra: dict[Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9]*$")], SlurmValue] = {}


class Site(Strict):
    cluster: ClusterSection
    database: DatabaseSection
    store: StoreSection = StoreSection()
    # Node hardware profiles by name ([profiles.<name>]); `hgx-b200` is built in.
    profiles: dict[Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9\-_.]*$")], NodeProfile] = {}
    nodes: Annotated[list[NodeGroup], Field(min_length=1)]  # groups of nodes ([[nodes]]) and their profile
    topology: TopologySection = TopologySection()
    partitions: Annotated[list[Partition], Field(min_length=1)]  # Slurm partitions ([[partitions]])
    slurm: SlurmSection = SlurmSection()
    qos: list[Qos] = []  # Slurm QOS ([[qos]]): limits, priority, preemption, GPU-hour usage factors
    organizations: list[Organization] = []
    projects: list[Project] = []
    users: list[User] = []
    accounting: AccountingSettings = AccountingSettings()
    health: HealthSection = HealthSection()
    bmc: BmcSection = BmcSection()
    software: SoftwareBaseline = SoftwareBaseline()
    fleet: FleetSection = FleetSection()
    burnin: BurninSection = BurninSection()
    monitor: MonitorSection = MonitorSection()
    deploy: DeploySection = DeploySection()
    repair: RepairSection = RepairSection()

    # ---- derived views (computed once; the model is frozen) ----

    @cached_property
    def digest(self) -> str:
        """sha256 of the validated site: comments and formatting of site.toml don't change it."""
        canonical = json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()

    def profile(self, name: str) -> NodeProfile:
        if name in self.profiles:
            return self.profiles[name]
        return BUILTIN_PROFILES[name]

    def has_profile(self, name: str) -> bool:
        return name in self.profiles or name in BUILTIN_PROFILES

    @cached_property
    def node_names(self) -> list[str]:
        """Every node, in declaration order."""
        names: list[str] = []
        for group in self.nodes:
            names.extend(expand(group.names, what="nodes.names"))
        return names

    @cached_property
    def node_group_of(self) -> dict[str, NodeGroup]:
        out: dict[str, NodeGroup] = {}
        for group in self.nodes:
            for name in expand(group.names, what="nodes.names"):
                out.setdefault(name, group)
        return out

    def node_profile(self, node: str) -> NodeProfile:
        return self.profile(self.node_group_of[node].profile)

    @cached_property
    def total_gpus(self) -> int:
        return sum(
            len(expand(g.names, what="nodes.names")) * self.profile(g.profile).gpus.count
            for g in self.nodes
            if self.has_profile(g.profile)
        )

    @cached_property
    def all_nodes(self) -> str:
        return compress(self.node_names)

    def partition_nodes(self, partition: Partition) -> list[str]:
        if partition.nodes == "ALL":
            return list(self.node_names)
        return expand(partition.nodes, what=f"partition {partition.name} nodes")

    @cached_property
    def default_partition(self) -> Partition:
        for p in self.partitions:
            if p.default:
                return p
        return self.partitions[0]

    @cached_property
    def scalable_units(self) -> list[tuple[str, list[str]]]:
        """(unit name, node names) per scalable unit; explicit units or su_size chunks."""
        if self.topology.units:
            return [(u.name, expand(u.nodes, what="topology.units")) for u in self.topology.units]
        size = self.topology.su_size
        names = self.node_names
        return [(f"su{i // size + 1}", names[i : i + size]) for i in range(0, len(names), size)]

    def thresholds(self, model: str) -> ModelThresholds:
        return self.health.models.get(model) or ModelThresholds()

    def qos_by_name(self) -> dict[str, Qos]:
        return {q.name: q for q in self.qos}

    @property
    def slurm_user(self) -> str:
        return self.slurm.slurm_user or self.cluster.slurm_user

    def account_names(self) -> set[str]:
        return {o.name for o in self.organizations} | {p.name for p in self.projects}

    @cached_property
    def memberships(self) -> dict[str, list[str]]:
        """user -> the projects they are a member of, in site order."""
        return memberships(self)
