"""Derive the dev cluster's own site file from a real site.

The dev cluster is described by an ordinary site.toml, so every slurmadm command (config render,
accounts, health, burnin) runs against it unchanged. From the source site it keeps the first N
nodes, their partitions, scalable units, QOS and projects, and changes only what one machine
needs: every node on 127.0.0.1 with its own slurmd port, hardware as `slurmd -C` reports it (8
GPUs backed by placeholder device files), paths under the state directory, quotas clipped to the
dev cluster's GPUs.
"""

from __future__ import annotations

import os
import typing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import tomli_w

from ..config.release import CGROUP_DISABLED_FROM, Release, fmt
from ..errors import UnreachableError, UsageError
from ..files import write_atomic
from ..hostlist import compress, expand
from ..site import Site, parse_site
from ..site.model import SlurmSection
from ..site.monitor import MonitorSection
from ..site.profiles import NodeProfile
from ..slurm.parse import parse_slurmd_c


RELEASES = typing.get_args(SlurmSection.model_fields["release"].annotation)


@dataclass(frozen=True)
class Hardware:
    """What `slurmd -C` reports for this machine."""

    sockets: int
    cores_per_socket: int
    threads_per_core: int
    real_memory_mib: int

    @classmethod
    def parse(cls, text: str) -> "Hardware":
        try:
            hw = parse_slurmd_c(text)
        except UnreachableError as exc:
            raise UsageError(str(exc)) from None
        return cls(hw.sockets, hw.cores_per_socket, hw.threads_per_core, hw.real_memory)


# A dev cluster's ports. The small plan (up to BMC_MAX_NODES = 50 nodes), base .. base+703 with up
# to 4 nodes (base+699+N with N): Slurm +0..+2 and one slurmd per node from +11, BMC emulators IPMI
# (UDP) +300.. and Redfish +350..+399, burn-in rendezvous +400..+499, fake nodes' sshd +500..+599,
# stand-in dcgm-exporters +600.., monitoring +690..+699, node exporters +700...
#
# The wide plan (more than 50 nodes, or `up --wide-ports`), base .. base+2199, for up to
# WIDE_MAX_NODES = 200 nodes: Slurm, the slurmds and monitoring where the small plan has them
# (+0..+2, +11.., +690..+699), and one block of 200 ports per per-node daemon from base+1000:
#   IPMI (UDP) +1000+i, Redfish +1200+i, sshd +1400+i, node exporter +1600+i, dcgm +1800+i,
#   burn-in rendezvous +2000..+2199 (job id % 200: 200 jobs in a row never share a port).
# +300..+689 and +700..+999 stay unused (the tests' clusters beside one at base+5000 are below it).
SPAN = 704
WIDE_FROM = 1000
WIDE_BLOCK = 200
WIDE_MAX_NODES = WIDE_BLOCK
WIDE_SPAN = WIDE_FROM + 6 * WIDE_BLOCK  # IPMI, Redfish, sshd, node exporter, dcgm, burn-in


@dataclass(frozen=True)
class Ports:
    base: int
    wide: bool = False

    @classmethod
    def plan(cls, base: int, nodes: int, *, wide: bool | None = None) -> "Ports":
        """The plan for a cluster of `nodes` nodes: wide above BMC_MAX_NODES (or when asked)."""
        if wide is None:
            wide = nodes > BMC_MAX_NODES
        return cls(base, wide)

    @classmethod
    def of_record(cls, rec: dict) -> "Ports":
        """The ports of a running dev cluster, from its cluster.json."""
        return cls(int(rec["port_base"]), rec.get("port_plan") == "wide")

    @property
    def name(self) -> str:
        return "wide" if self.wide else "small"

    @property
    def max_nodes(self) -> int:
        """The most nodes that get every per-node daemon (BMC, sshd, exporters) in this plan."""
        return WIDE_MAX_NODES if self.wide else BMC_MAX_NODES

    def span(self, nodes: int = 4) -> tuple[int, int]:
        """(first, last) port a dev cluster of `nodes` nodes may use."""
        if self.wide:
            return self.base, self.base + WIDE_SPAN - 1
        return self.base, self.base + max(SPAN, 700 + nodes) - 1

    def _block(self, k: int) -> int:
        return self.base + WIDE_FROM + k * WIDE_BLOCK

    @property
    def slurmctld(self) -> int:
        return self.base

    @property
    def slurmdbd(self) -> int:
        return self.base + 1

    @property
    def mysql(self) -> int:
        return self.base + 2

    @property
    def first_slurmd(self) -> int:
        return self.base + 11

    # Monitoring (slurmadm monitor dev-stack): base+690..base+699, node exporters from base+700
    # (wide: base+1600).
    @property
    def monitor_head_exporter(self) -> int:
        return self.base + 690

    @property
    def monitor_webhook(self) -> int:
        return self.base + 691

    @property
    def monitor_prometheus(self) -> int:
        return self.base + 692

    @property
    def monitor_alertmanager(self) -> int:
        return self.base + 693

    @property
    def monitor_alertmanager_cluster(self) -> int:
        return self.base + 694

    def monitor_node_exporter(self, index: int) -> int:
        return (self._block(3) if self.wide else self.base + 700) + index

    def monitor_dcgm_exporter(self, index: int) -> int:
        """The stand-in dcgm-exporter of node `index` (gpu_source "dcgm"): base+600.. (wide: +1800..)."""
        return (self._block(4) if self.wide else self.base + 600) + index

    def ssh(self, index: int) -> int:
        """Node i's sshd (fakenode.ssh_port in the small plan: base+500+i; wide: base+1400+i)."""
        return (self._block(2) if self.wide else self.base + 500) + index

    # Beside the dev cluster, in the tests: base+720..739 for BMCs we did not write and their
    # neighbours (ipmi_sim 720, sushy-static 721/722, one emulator BMC 725/726:
    # tests/integration/independent_bmcs.py).

    @property
    def burnin_rendezvous(self) -> int:
        """All fake nodes share 127.0.0.1: burn-in all-reduces listen on base+400..base+499
        (wide: base+2000..base+2199)."""
        return self._block(5) if self.wide else self.base + 400

    @property
    def burnin_rendezvous_ports(self) -> int:
        """How many rendezvous ports (a job listens on the first + job id % this many)."""
        return WIDE_BLOCK if self.wide else 100

    def daemon_ports(self, nodes: int, *, bmc: bool = False, ssh: bool = False) -> list[int]:
        """Every TCP port a dev cluster's daemons of `nodes` nodes listen on, checked free before
        `up`: Slurm's, and the Redfish emulators' (--bmc; IPMI is UDP) and sshds' (--ssh) when on
        (a capability that adds a daemon port adds it here too)."""
        ports = [self.slurmctld, self.slurmdbd, self.mysql, *range(self.first_slurmd, self.first_slurmd + nodes)]
        if bmc:
            ports += range(self.bmc_redfish, self.bmc_redfish + nodes)
        if ssh:
            ports += [self.ssh(i) for i in range(nodes)]
        return ports

    def job_ports(self) -> list[int]:
        """Ports only burn-in jobs listen on, briefly (a busy one is a warning: they lie in the
        kernel's ephemeral range, where any program's passing listener may sit for a moment)."""
        return list(range(self.burnin_rendezvous, self.burnin_rendezvous + self.burnin_rendezvous_ports))

    # --- BMC emulators (`dev-cluster up --bmc`): node i answers IPMI on bmc_ipmi + i and
    # Redfish on bmc_redfish + i, at most max_nodes nodes
    @property
    def bmc_ipmi(self) -> int:
        return self._block(0) if self.wide else self.base + 300

    @property
    def bmc_redfish(self) -> int:
        return self._block(1) if self.wide else self.base + 350


BMC_MAX_NODES = 50


def memory_cgroup_problem(root: Path = Path("/sys/fs/cgroup")) -> str | None:
    """Why this host cannot give the dev cluster's slurmd memory limits (task/cgroup,
    ConstrainRAMSpace), or None: a cgroup v1 memory controller root can write. cgroup v2 is
    refused: Slurm's cgroup/v2 wants systemd to create its scope, and the dev cluster's many
    slurmd have none."""
    if (root / "cgroup.controllers").is_file():
        return f"{root} is cgroup v2: the dev cluster's slurmd (no systemd) enforce memory on cgroup v1 only"
    mem = root / "memory"
    if not (mem / "memory.limit_in_bytes").is_file():
        return f"no cgroup v1 memory controller mounted at {mem}"
    if not os.access(mem, os.W_OK):
        return f"{mem} is not writable here (a container without cgroup delegation?)"
    return None


def bmc_settings(ports: Ports, state_dir: Path) -> dict[str, Any]:
    """The dev site's [bmc] when the dev cluster runs BMC emulators: one address, per-node ports,
    Redfish TLS checked against the dev cluster's own CA, short timeouts (loopback)."""
    d = state_dir.resolve()
    return {"shared_address": "127.0.0.1", "port": ports.bmc_ipmi, "redfish_port": ports.bmc_redfish,
            "password_file": f"{d}/bmc/password", "tls_ca_file": f"{d}/bmc/ca.pem", "timeout_s": 3.0,
            "retries": 1, "drain_timeout_s": 60.0, "username": "admin"}


def dev_profile(src: NodeProfile, hw: Hardware, dev_dir: Path) -> NodeProfile:
    gpus = src.gpus
    count = gpus.count
    # Map each GPU's socket onto the sockets this machine has (keeps the 0-3 / 4-7 split on a
    # two-socket machine, folds everything onto socket 0 on a one-socket one).
    sockets = [min(s, hw.sockets - 1) for s in gpus.sockets]
    dev_gpus = gpus.model_copy(
        update={"sockets": sockets, "device_files": f"{dev_dir}/nvidia[0-{count - 1}]"}
    )
    return NodeProfile(
        description=f"dev-cluster stand-in for: {src.description or 'profile'}",
        sockets=hw.sockets,
        cores_per_socket=hw.cores_per_socket,
        threads_per_core=hw.threads_per_core,
        memory_gib=max(1, hw.real_memory_mib // 1024),
        gpus=dev_gpus,
        nics=src.nics,
        boot_seconds=5,  # its "reboot" restarts its slurmd (bin/reboot)
    )


def _drop_none(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _drop_none(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [_drop_none(v) for v in value]
    return value


def derive(src: Site, *, nodes: int, state_dir: Path, ports: Ports, hostname: str, hw: Hardware,
           prolog_dir: Path, release: Release, central_store: bool = False,
           ssh: bool = False, enforce_memory: bool = False) -> dict[str, Any]:
    """The dev site as a plain dict (TOML-ready), for the installed Slurm `release`.
    `enforce_memory`: task/cgroup with ConstrainRAMSpace, as a site runs it, so a step over its
    --mem is OOM-killed and ends OUT_OF_MEMORY (the host needs a writable memory cgroup:
    memory_cgroup_problem); otherwise task/none, no limits."""
    if nodes < 1:
        raise UsageError("--nodes: must be at least 1")
    if nodes > len(src.node_names):
        raise UsageError(f"--nodes: {nodes} is more than the site's {len(src.node_names)} nodes")
    if ports.first_slurmd + nodes - 1 > 65535:
        raise UsageError(f"--port-base: {ports.base} leaves no room for {nodes} slurmd ports")
    if ports.first_slurmd + nodes > ports.base + 300:
        raise UsageError(f"--nodes: at most {ports.base + 300 - ports.first_slurmd} nodes fit "
                         f"below the BMC emulators' ports (base+300)")
    keep = src.node_names[:nodes]
    keep_set = set(keep)
    state_dir = state_dir.resolve()
    data = _drop_none(src.model_dump(mode="json"))

    # nodes: one group per source group that keeps nodes, on 127.0.0.1 with consecutive ports
    groups, profiles, port = [], {}, ports.first_slurmd
    for group in src.nodes:
        names = [n for n in expand(group.names) if n in keep_set]
        if not names:
            continue
        prof_name = f"dev-{group.profile}"
        prof = dev_profile(src.profile(group.profile), hw, state_dir / "dev")
        profiles[prof_name] = _drop_none(prof.model_dump(mode="json"))
        groups.append({
            "names": compress(names), "profile": prof_name, "features": list(group.features),
            "addr": "127.0.0.1", "hostname": hostname, "port": port,
        })
        port += len(names)
    data["nodes"] = groups
    data["profiles"] = profiles

    units = []
    for name, members in src.scalable_units:
        inside = [n for n in members if n in keep_set]
        if inside:
            units.append({"name": name, "nodes": compress(inside)})
    data["topology"]["units"] = units

    parts = []
    for part, raw in zip(src.partitions, data["partitions"]):
        if part.nodes == "ALL":
            parts.append(raw)
            continue
        inside = [n for n in src.partition_nodes(part) if n in keep_set]
        if inside:
            parts.append({**raw, "nodes": compress(inside)})
    if not parts:
        parts = [{**data["partitions"][0], "nodes": "ALL"}]
    data["partitions"] = parts
    if data["burnin"].get("partition") not in {p["name"] for p in parts}:
        data["burnin"].pop("partition", None)

    total = sum(src.profile(g.profile).gpus.count * len([n for n in expand(g.names) if n in keep_set])
                for g in src.nodes)
    for section, keys in (("qos", ("max_gpus_per_user", "max_gpus_per_job", "grp_gpus")),
                          ("organizations", ("gpu_quota",)),
                          ("projects", ("gpu_quota", "user_gpu_cap"))):
        for entry in data.get(section, []):
            for key in keys:
                if key in entry and entry[key] > total:
                    entry[key] = total
    for entry in data.get("projects", []):
        caps = entry.get("member_gpu_caps") or {}
        entry["member_gpu_caps"] = {user: min(cap, total) for user, cap in caps.items()}
    data["burnin"]["max_nodes"] = min(data["burnin"]["max_nodes"], nodes)

    d = str(state_dir)
    data["cluster"]["controllers"] = [hostname]
    data["cluster"]["slurm_user"] = "root"
    data["database"].update({
        "host": hostname, "port": ports.slurmdbd, "storage_host": "127.0.0.1",
        "storage_port": ports.mysql, "storage_user": "slurm",
        "storage_password_file": f"{d}/mysql/slurm.password",
    })
    data["store"] = store_section(state_dir, ports, central=central_store)
    # RMA evidence bundles (`repair rma open`) stay inside the dev cluster's state directory
    data.setdefault("repair", {})["rma"] = {"bundle_dir": f"{d}/rma"}
    # the repair breaker's share of a partition: 10 % of 4 nodes is one node in repair at a time;
    # half, as the health breaker here, so the demo's reset and its lemon can be in repair together
    data["repair"]["breaker_fraction"] = max(data["repair"].get("breaker_fraction", 0.1), 0.5)
    # a node repaired for an HCA: its qualification watches the links a few of the stand-in
    # flapper's periods (`ib-fault --kind flap --every 2`), not a site's ten minutes
    data["repair"]["link_watch_s"] = min(float(data["repair"].get("link_watch_s", 6)), 6.0)
    data["slurm"].update({
        "config_dir": f"{d}/etc",
        "slurmctld_port": ports.slurmctld,
        "state_save_location": f"{d}/spool/ctld",
        "slurmd_spool_dir": f"{d}/spool/d/%n",
        "log_dir": f"{d}/log",
        "run_dir": f"{d}/run",
        "munge_socket": f"{d}/run/munge/munge.socket",  # DevCluster.munge_socket
        # a job requeued by a failing prolog waits this long, not Slurm's 120 s, before it runs elsewhere
        "cred_expire_s": 45,
        "slurm_user": "root",
        "release": fmt(release) if fmt(release) in RELEASES else "auto",
        "proctrack": "linuxproc",
        "task_plugins": ["task/cgroup"] if enforce_memory else ["task/none"],
        # 24.11's slurmd loads the cgroup plugin even with task/none and fails without cgroupfs;
        # "disabled" exists from 23.02 only. With enforce_memory every slurmd shares the host's
        # cgroup tree (job and step cgroups are named by job id: no two slurmd collide).
        "cgroup_plugin": "autodetect" if enforce_memory or release < CGROUP_DISABLED_FROM else "disabled",
        "constrain_cores": False,
        "constrain_devices": False,
        "constrain_ram_space": enforce_memory,
        "constrain_swap_space": False,
        "prolog_dir": str(prolog_dir),
        # restarts the node's slurmd (and sshd): `scontrol reboot` goes through Slurm's states
        "reboot_program": f"{d}/bin/reboot",
        "mail_prog": "",  # no job mail from the dev cluster (MailProg=/bin/true)
        "resume_timeout": 60,
        "health_check_interval": 30,
    })
    if nodes > 16:
        # A periodic health run (and the shipper it starts) costs ~1 CPU-s: 128 nodes every 30 s
        # would need 4 of the machine's 2 cores. Every node once per 2 s x nodes instead, spread
        # over the interval by Slurm (CYCLE) rather than all at once.
        data["slurm"]["health_check_interval"] = 2 * nodes
        states = list(data["slurm"].get("health_check_node_state") or ["ANY"])
        data["slurm"]["health_check_node_state"] = [*states, "CYCLE"] if "CYCLE" not in states else states
    # Usage reaches sshare (GrpTRESRaw: what budgets are charged) every PriorityCalcPeriod; one
    # minute instead of five, so `accounts report` shows a finished job soon.
    data["slurm"]["extra"] = {**data["slurm"].get("extra", {}), "PriorityCalcPeriod": "1"}
    # Health checks against the stand-in GPUs (gpus/); sized for a handful of nodes:
    # - the breaker's cap is a fraction of a partition: 10 % of 4 nodes would forbid every drain;
    # - there is nothing to all-reduce on, so nccl-allreduce runs only when asked (`health run
    #   --checks nccl-allreduce`), never in the prolog/epilog where it could only "cannot run";
    # - short limits, so a `hang` fault gives up quickly and resuming takes two periodic runs.
    health = data["health"]
    health.update({
        "results_log": f"{d}/log/health.jsonl",
        "xid_source": f"{d}/gpus/{{node}}.kmsg",
        "drain_cap_fraction": max(health.get("drain_cap_fraction", 0.1), 0.5),
        "resume_after_clean_runs": 2,
        "check_timeout_s": 2.0,
        "prolog_timeout_s": 10.0,
        "epilog_timeout_s": 20.0,
        "periodic_timeout_s": 20.0,
        # the stand-in InfiniBand sysfs (devcluster/ibsysfs.py); no Fabric Manager process here
        "sysfs_root": f"{d}/gpus/{{node}}.sysfs",
        "fabric_manager_process": "",
        # the site's /home, /scratch, ... do not exist here: the machine's root stands in
        "mounts": [{"path": "/", "writable": True, "min_free_gib": 0.1}],
    })
    if nodes > 16:
        # every fake node's hooks share this machine's cores: 128 prologs at once (a 128-task
        # array) take ~15 s each on 2 loaded cores where one alone takes 0.1 s; a real node runs
        # only its own. The limits grow with the node count so that sharing is no timeout.
        for key, floor in (("prolog_timeout_s", 10.0), ("epilog_timeout_s", 20.0), ("periodic_timeout_s", 20.0)):
            health[key] = max(floor, 0.3 * nodes)
    health.setdefault("checks", {})
    health["checks"]["nccl-allreduce"] = {**health["checks"].get("nccl-allreduce", {}), "contexts": ["run"]}
    data["burnin"].update({
        "report_dir": f"{d}/burnin",
        # CPU-only machine: gloo on the CPU instead of NCCL, short phases, floors for loopback
        # (the report labels these numbers as CPU numbers), any time of day.
        "collective": "gloo", "allreduce_mib": 16, "allreduce_iters": 5,
        "node_busbw_floor_gbps": 0.01, "pair_busbw_floor_gbps": 0.01,
        "stress_seconds": 3, "dcgm_level": 0,
        "job_time_limit": "00:10:00", "start_timeout": "00:02:00", "sweep_time_limit": "00:30:00",
        "window_start": "00:00", "window_end": "00:00",
        "rendezvous_port": ports.burnin_rendezvous, "rendezvous_ports": ports.burnin_rendezvous_ports,
        # fleet-relative verdicts off: four CPU stand-ins on one loaded machine differ by 2x from
        # noise alone (tests/unit/burnin/test_fleet.py); the straggler test turns them on with
        # the stand-in slowdown fault (`dev-cluster gpu-fault --kind slow`)
        "straggler": {**data["burnin"].get("straggler", {}), "enabled": False},
    })
    data["bmc"]["password_file"] = f"{d}/bmc/password"
    if ssh:  # every fake node's sshd on 127.0.0.1, its own port (fakenode.py)
        data["fleet"] = {
            **data.get("fleet", {}),
            "host_pattern": "127.0.0.1",
            "ports": {n: ports.ssh(i) for i, n in enumerate(keep)},
            "key_file": f"{d}/ssh/id_ed25519",
            "known_hosts": f"{d}/ssh/known_hosts",
            "drain_timeout_s": 300.0,
            "reboot_timeout_s": 120.0,
        }
        data["software"]["hash_files"] = [f"{d}/etc/slurm.conf", f"{d}/etc/gres.conf"]
    data["monitor"] = monitor_settings(data.get("monitor", {}), d, ports)
    return data


def monitor_settings(src: dict[str, Any], d: str, ports: Ports) -> dict[str, Any]:
    """Monitoring on the dev cluster (`slurmadm monitor dev-stack`): every port from the port
    base, short intervals so a fault becomes an alert in seconds, and PCIe replays (which no
    health check drains for) mapped to a drain so the alert path is the one that isolates."""
    return {
        **src,
        "node_listen": f"127.0.0.1:{ports.monitor_node_exporter(0)}",
        "head_listen": f"127.0.0.1:{ports.monitor_head_exporter}",
        "node_cache_s": 0.5, "head_cache_s": 1.0, "read_deadline_s": 2.0,
        "job_map_dir": f"{d}/run/jobs",
        "prometheus_url": f"http://127.0.0.1:{ports.monitor_prometheus}",
        "webhook_listen": f"127.0.0.1:{ports.monitor_webhook}",
        "webhook_token_file": f"{d}/monitor/webhook.token",
        # authenticated Slurm metrics (26.05), where the source site asks for them: slurmctld's
        # key and Prometheus's JWT in the state directory (`up` makes both)
        **({"slurm_metrics_token_file": f"{d}/monitor/slurm.jwt",
            "slurm_metrics_jwt_key_file": f"{d}/etc/jwt_hs256.key"} if src.get("slurm_metrics_users") else {}),
        "resume_check_s": 2.0,
        "gpu_temp_for": "30s", "error_rise_window": "20s", "absent_for": "30s", "quota_for": "1m",
        "flap_for": "3s",  # debounce the flappy alerts, a few 1 s evaluations here
        "host_port": 0,  # no node_exporter on the fake nodes (the host alerts have promtool tests)
        "dcgm_job_map_dir": f"{d}/run/dcgm-jobs/{{node}}",
        "actions": {**MonitorSection().actions, **src.get("actions", {}), "GpuPcieReplayRising": "drain"},
        "idle_minutes": 0.25,
        "idle_action": "report",
    }


def write(data: dict[str, Any], path: Path, *, source: str) -> Site:
    """Write the dev site (with a header) and prove it parses back as a valid site."""
    text = (
        f"# slurmadm dev-cluster site, derived from {source}.\n"
        "# Written by `slurmadm dev-cluster up`; edit the source site instead.\n\n"
        + tomli_w.dumps(data)
    )
    site = parse_site(text, source=str(path))
    write_atomic(path, text)
    return site


CENTRAL_DB = "slurmadm"  # the central store's database and user in the dev cluster's MariaDB


def store_section(state_dir: Path, ports: Ports, *, central: bool) -> dict[str, Any]:
    """The dev site's [store]: one SQLite file shared by every fake node; or, with a central
    store, a file per node (stores/<node>.db, as on real hosts) shipping to the dev cluster's
    MariaDB (its own `slurmadm` database and user, never slurmdbd's)."""
    d = str(state_dir)
    if not central:
        return {"path": f"{d}/slurmadm.db", "audit_log": f"{d}/log/audit.jsonl"}
    return {"path": f"{d}/stores/{{node}}.db", "audit_log": f"{d}/log/audit.jsonl",
            "url": f"mysql://{CENTRAL_DB}@127.0.0.1:{ports.mysql}/{CENTRAL_DB}",
            "password_file": f"{d}/etc/store.password", "stale_after_minutes": 5, "ship_batch": 500,
            # least privilege (issue 24): each fake node ships as its own account
            "node_user": "slurmadm-{node}", "node_password_file": f"{d}/etc/store-nodes/{{node}}.password",
            "node_account_host": "127.0.0.1"}
