"""What the Slurm configs need from a site, checked before anything is rendered or written.

Each problem is one line naming the site key (`profiles.hgx-b200.gpus.cores[4]: ...`). The
site-only rules join `slurmadm site validate` through `site.validate.EXTRA_CHECKS`; the rules that
depend on the target Slurm release run when the release is known (render, diff, apply).
Sources: ../shared/anchors/slurm-config-and-accounts.md section 3 (the validation checklist).
"""

from __future__ import annotations

from collections import Counter

from ClusterShell.RangeSet import RangeSet, RangeSetException

from ..hostlist import expand
from ..site import Site
from ..site.accounts import slurm_time_seconds
from .build import METRICS_AUTH_KEYS, longest_max_time_minutes, several_slurmd_per_host, slurm_settings, spine_groups
from .release import (
    CGROUP_DISABLED_FROM,
    HEALTH_CHECK_FIXED_KILL_S,
    HEALTH_CHECK_NODE_STATES,
    HEALTH_CHECK_TIMEOUT_FROM,
    HEALTH_CHECK_TIMEOUT_MARGIN_S,
    METRICS_AUTH_FROM,
    METRICS_FROM,
    Release,
    fmt,
    has,
    health_check_timeout,
)

MAX_TIME_MINUTES = 2**32 - 3  # uint32 minutes below INFINITE and NO_VAL

# Lines slurmadm writes itself besides the settings (slurm.extra may not add them).
_LINE_KEYS = ("NodeName", "PartitionName", "NodeSet", "DownNodes", "FrontendName")


def check_profiles(site: Site) -> list[str]:
    """The site's own profiles (the built-in ones are known to be sound)."""
    problems: list[str] = []
    for name, prof in site.profiles.items():
        path = f"profiles.{name}"
        product = prof.sockets * prof.cores_per_socket * prof.threads_per_core
        if prof.cpus != product:
            problems.append(
                f"{path}.cpus: {prof.cpus} is not sockets x cores_per_socket x threads_per_core = "
                f"{prof.sockets} x {prof.cores_per_socket} x {prof.threads_per_core} = {product}"
            )
        bad_files = [f for f in prof.gpus.files() if not f.startswith("/")]
        if bad_files:
            problems.append(f"{path}.gpus.device_files: {bad_files[0]!r} is not an absolute path")
        if prof.gpus.cores is not None:
            problems.extend(_check_cores(prof, f"{path}.gpus.cores"))
        if site.slurm.has_nvml:
            nvml_type = prof.gpus.nvml_name.lower().replace(" ", "_")
            if prof.gpus.model not in nvml_type:
                problems.append(
                    f"{path}.gpus.model: {prof.gpus.model!r} must be part of NVML's type "
                    f"{nvml_type!r} when slurm.has_nvml is true (AutoDetect=nvml matches gres Type on it)"
                )
    return problems


def _check_cores(prof, path: str) -> list[str]:
    problems: list[str] = []
    per = prof.cores_per_socket
    total = prof.sockets * per
    for i, text in enumerate(prof.gpus.cores):
        try:
            cores = list(RangeSet(text).intiter())
        except (RangeSetException, ValueError):
            problems.append(f"{path}[{i}]: {text!r} is not a list of core indexes like '0-55'")
            continue
        if not cores:
            problems.append(f"{path}[{i}]: {text!r} names no cores")
            continue
        socket = prof.gpus.sockets[i]
        first, last = socket * per, (socket + 1) * per - 1
        if max(cores) >= total:
            problems.append(
                f"{path}[{i}]: {text!r} goes past core {total - 1}: Cores= takes logical core indexes "
                f"0-{total - 1} (sockets x cores_per_socket), not OS CPU ids"
            )
        elif min(cores) < first or max(cores) > last:
            problems.append(
                f"{path}[{i}]: {text!r} leaves GPU{i}'s socket {socket} (its cores are {first}-{last})"
            )
    return problems


def check_topology(site: Site) -> list[str]:
    """Switch names are unique (units, spines and the core switch)."""
    if site.topology.plugin != "tree":
        return []
    spines = spine_groups(site)
    named = [(unit, "topology.units") for unit, _ in site.scalable_units]
    named += [(spine, "topology.spine") for spine, _ in spines]
    if len(spines) > 1:
        named.append((site.topology.core, "topology.core"))
    counts = Counter(name for name, _ in named)
    problems, reported = [], set()
    for name, key in reversed(named):  # blame the switch declared last
        if counts[name] < 2 or name in reported or key == "topology.units":
            continue  # a clash among explicit units alone is site.validate's to report
        if site.topology.units and key == "topology.spine" and name == site.topology.spine:
            continue  # so is an explicit unit named like the spine
        reported.add(name)
        problems.append(f"{key}: switch name {name!r} is used twice (switch names must be unique)")
    return problems


def _gpu_limits(site: Site) -> list[str]:
    """Key paths of every GPU limit in the site (they need gres/gpu in AccountingStorageTRES)."""
    paths = []
    for i, q in enumerate(site.qos):
        for key in ("max_gpus_per_user", "max_gpus_per_job", "grp_gpus"):
            if getattr(q, key) is not None:
                paths.append(f"qos[{i}].{key}")
    for i, org in enumerate(site.organizations):
        if org.gpu_quota is not None:
            paths.append(f"organizations[{i}].gpu_quota")
    for i, proj in enumerate(site.projects):
        for key in ("gpu_quota", "gpu_hours", "user_gpu_cap"):
            if getattr(proj, key) is not None:
                paths.append(f"projects[{i}].{key}")
    return paths


def check_slurm(site: Site) -> list[str]:
    s = site.slurm
    problems: list[str] = []
    p = problems.append

    limits = _gpu_limits(site)
    if limits:
        shown = ", ".join(limits[:3]) + (f" and {len(limits) - 3} more" if len(limits) > 3 else "")
        if s.accounting_storage != "slurmdbd":
            p(f"slurm.accounting_storage: 'none' cannot enforce the GPU limits set at {shown}")
        elif "gres/gpu" not in s.accounting_tres:
            p(f"slurm.accounting_tres: {s.accounting_tres} lacks 'gres/gpu', so Slurm would neither "
              f"count nor enforce the GPU limits set at {shown}")

    if "task/none" in s.task_plugins and len(s.task_plugins) > 1:
        p("slurm.task_plugins: task/none cannot be combined with other task plugins")
    if "task/cgroup" not in s.task_plugins:
        for key, setting in (("constrain_cores", "ConstrainCores"), ("constrain_devices", "ConstrainDevices"),
                             ("constrain_ram_space", "ConstrainRAMSpace"),
                             ("constrain_swap_space", "ConstrainSwapSpace")):
            if getattr(s, key):
                p(f"slurm.{key}: {setting}=yes is enforced by task/cgroup, which slurm.task_plugins "
                  f"{s.task_plugins} lacks (add it, or set {key} = false)")

    if s.reboot_program:
        for name in dict.fromkeys(g.profile for g in site.nodes):
            if site.has_profile(name) and s.resume_timeout < site.profile(name).boot_seconds:
                p(f"slurm.resume_timeout: {s.resume_timeout} s is shorter than profile {name}'s "
                  f"boot_seconds {site.profile(name).boot_seconds}; nodes that Slurm reboots "
                  f"(slurm.reboot_program) would be marked DOWN")

    if several_slurmd_per_host(site) and "%n" not in s.slurmd_spool_dir:
        p(f"slurm.slurmd_spool_dir: several slurmd share a host (nodes[].port is set), so the "
          f"spool dir needs %n: {s.slurmd_spool_dir!r}")
    daemon_ports = {s.slurmctld_port: "slurm.slurmctld_port"}  # (nodes with ports ignore SlurmdPort)
    for i, group in enumerate(site.nodes):
        if group.port is None:
            continue
        last = group.port + len(expand(group.names, what=f"nodes[{i}].names")) - 1
        for port, key in daemon_ports.items():
            if group.port <= port <= last:
                p(f"nodes[{i}].port: the nodes' ports {group.port}-{last} include {key} {port}")

    problems.extend(check_gpu_site(site))

    written = {key.lower() for section in slurm_settings(site) for key, _ in section.pairs}
    written |= {key.lower() for key in _LINE_KEYS}
    for key in s.extra:
        if key.lower() in written:
            p(f"slurm.extra.{key}: slurmadm writes {key} itself; set it through its own site key")
    return problems


def check_gpu_site(site: Site) -> list[str]:
    """Settings a GPU site needs to be right, not only valid (issue 16)."""
    s = site.slurm
    problems: list[str] = []
    p = problems.append
    if len(site.cluster.controllers) > 1 and not s.state_save_shared:
        p(f"cluster.controllers: {len(site.cluster.controllers)} controllers fail over through "
          f"slurm.state_save_location {s.state_save_location!r}, which must be storage every controller "
          f"mounts (NFS or similar); put it there and set slurm.state_save_shared = true, or list one "
          f"controller")
    for i, param in enumerate(s.scheduler_parameters):
        key = param.split("=", 1)[0]
        if key in ("bf_window", "bf_resolution"):
            p(f"slurm.scheduler_parameters[{i}]: set {key} through slurm.{key}_"
              f"{'minutes' if key == 'bf_window' else 's'} (slurmadm derives it from the partitions)")
    for i, part in enumerate(site.partitions):  # Slurm keeps time limits in uint32 minutes
        for key in ("max_time", "default_time"):
            value = getattr(part, key)
            seconds = slurm_time_seconds(value) if value else None
            if seconds and seconds // 60 > MAX_TIME_MINUTES:
                p(f"partitions[{i}].{key}: {value!r} is longer than Slurm can store "
                  f"({MAX_TIME_MINUTES} minutes); use INFINITE")
    if problems:
        return problems
    longest = longest_max_time_minutes(site)
    window = s.bf_window_minutes
    if window is not None and longest is not None and window < longest:  # (INFINITE: no window is enough)
        p(f"slurm.bf_window_minutes: {window} is shorter than the longest partition max_time ({longest} minutes); "
          f"backfill could not plan the longest jobs, which starve (omit it to derive it)")
    for i, part in enumerate(site.partitions):
        weights = part.billing_weights
        if weights is not None and not any(weights.values()):
            p(f"partitions[{i}].billing_weights: every weight is 0, so no job in {part.name!r} would be "
              f"charged (omit the key for slurm.billing)")
    return problems


def check_site_config(site: Site) -> list[str]:
    """The site-only rules (registered in site.validate.EXTRA_CHECKS)."""
    return check_profiles(site) + check_topology(site) + check_slurm(site)


def check_release(site: Site, release: Release) -> list[str]:
    """Rules that depend on the Slurm release the configs are written for."""
    problems = []
    if site.slurm.cgroup_plugin == "disabled" and release < CGROUP_DISABLED_FROM:
        problems.append(
            f"slurm.cgroup_plugin: 'disabled' exists from Slurm {fmt(CGROUP_DISABLED_FROM)}; the target "
            f"is {fmt(release)} (use 'autodetect', or set slurm.release)"
        )
    for i, state in enumerate(site.slurm.health_check_node_state):
        since = HEALTH_CHECK_NODE_STATES.get(state)
        if since is not None and release < since:
            problems.append(
                f"slurm.health_check_node_state[{i}]: {state!r} exists from Slurm {fmt(since)}; the target is "
                f"{fmt(release)} (use ANY, or set slurm.release)"
            )
    return problems + check_instruments(site, release)


def private_data(site: Site) -> str:
    """The site's PrivateData (slurm.extra), "" when unset."""
    for key, value in site.slurm.extra.items():
        if key.lower() == "privatedata":
            return str(value)
    return ""


def check_instruments(site: Site, release: Release) -> list[str]:
    """Slurm's own instruments against the target release (issue 38): the health-check kill and
    the metrics endpoint's access rules."""
    problems = []
    h = site.health
    if not has(release, HEALTH_CHECK_TIMEOUT_FROM) and h.periodic_timeout_s + HEALTH_CHECK_TIMEOUT_MARGIN_S > \
            HEALTH_CHECK_FIXED_KILL_S:
        problems.append(
            f"health.periodic_timeout_s: {h.periodic_timeout_s:g} s plus the {HEALTH_CHECK_TIMEOUT_MARGIN_S} s "
            f"margin is past the fixed {HEALTH_CHECK_FIXED_KILL_S} s after which Slurm {fmt(release)} kills "
            f"HealthCheckProgram (HealthCheckTimeout exists from {fmt(HEALTH_CHECK_TIMEOUT_FROM)}): periodic runs "
            f"would be cut short without a verdict; use at most "
            f"{HEALTH_CHECK_FIXED_KILL_S - HEALTH_CHECK_TIMEOUT_MARGIN_S} s"
        )
    if has(release, HEALTH_CHECK_TIMEOUT_FROM) and site.slurm.health_check_interval:
        timeout = health_check_timeout(h.periodic_timeout_s)
        if timeout >= site.slurm.health_check_interval:  # slurm.conf.5 of 26.05: "should be less"
            problems.append(
                f"health.periodic_timeout_s: HealthCheckTimeout would be {timeout} s ({h.periodic_timeout_s:g} + "
                f"{HEALTH_CHECK_TIMEOUT_MARGIN_S} s), not less than slurm.health_check_interval "
                f"({site.slurm.health_check_interval} s), which Slurm {fmt(release)} requires"
            )
    m = site.monitor
    if m.slurm_metrics and has(release, METRICS_FROM):
        if m.slurm_metrics_users and not has(release, METRICS_AUTH_FROM):
            problems.append(f"monitor.slurm_metrics_users: MetricsAuthUsers exists from Slurm "
                            f"{fmt(METRICS_AUTH_FROM)}; the target is {fmt(release)}")
        if m.slurm_metrics_users and has(release, METRICS_AUTH_FROM):
            written = [k for k in METRICS_AUTH_KEYS if k in site.slurm.extra]
            if written:
                problems.append(f"slurm.extra.{written[0]}: slurmadm writes {', '.join(METRICS_AUTH_KEYS)} itself "
                                f"from monitor.slurm_metrics_users and monitor.slurm_metrics_jwt_key_file; remove "
                                f"{', '.join(written)} from slurm.extra")
            if m.slurm_metrics_ignore_private_data:
                problems.append("monitor.slurm_metrics_ignore_private_data: Slurm ignores "
                                "MetricsParameters=ignore_private_data while MetricsAuthUsers is set "
                                "(monitor.slurm_metrics_users); set one of them")
        if m.slurm_metrics_ignore_private_data and not has(release, METRICS_AUTH_FROM):
            problems.append(f"monitor.slurm_metrics_ignore_private_data: MetricsParameters=ignore_private_data "
                            f"exists from Slurm {fmt(METRICS_AUTH_FROM)}; the target is {fmt(release)}")
        if private_data(site):
            if not has(release, METRICS_AUTH_FROM):
                problems.append(f"slurm.extra.PrivateData: Slurm {fmt(release)} turns its metrics off while "
                                f"PrivateData is set; set monitor.slurm_metrics = false (the head exporter keeps "
                                f"exporting everything) or drop PrivateData")
            elif not m.slurm_metrics_users and not m.slurm_metrics_ignore_private_data:
                problems.append(f"slurm.extra.PrivateData: with PrivateData Slurm {fmt(release)} answers its "
                                f"metrics only to SlurmUser and root, which Prometheus is not; set "
                                f"monitor.slurm_metrics_users (JWT) or monitor.slurm_metrics_ignore_private_data")
    return problems


def check_known_release(site: Site) -> list[str]:
    """`site validate`: the release rules, when slurm.release names the release (with "auto" they
    run when the configs are rendered, against the installed Slurm)."""
    if site.slurm.release == "auto":
        return []
    from .release import parse_release

    return check_release(site, parse_release(site.slurm.release, what="slurm.release"))
