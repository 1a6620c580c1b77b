"""What one node's health run needs from the site, as plain data, with a cache for the prolog.

Parsing and validating site.toml (pydantic) costs ~150 ms of interpreter time; a prolog runs for
every job. So the first run on a node writes the node's resolved settings as JSON to
`$SLURMADM_CACHE_DIR` (default /var/cache/slurmadm), keyed by the site file's SHA-256 and
slurmadm's version; later runs whose site file is unchanged read that JSON and never import the
site model. A cache that cannot be written only costs speed.
"""

from __future__ import annotations

import dataclasses
import json
import os
from dataclasses import field

from .. import __version__
from ..record import record
from ..sitefile import site_file as _site_file

ENV_CACHE_DIR = "SLURMADM_CACHE_DIR"
DEFAULT_CACHE_DIR = "/var/cache/slurmadm"


@record(frozen=True)
class GpuExpect:
    """What the node's profile says its GPUs are (count, model, memory, links)."""

    count: int
    model: str
    nvml_name: str
    nvlinks: int
    pcie_gen: int
    pcie_width: int
    power_limit_w: int


@record(frozen=True)
class Thresholds:
    """The site's limits the checks compare readings with."""

    nccl_busbw_floor_gbps: float
    max_gpu_temp_c: int
    max_memory_temp_c: int
    ecc_corrected_volatile_max: int
    retired_pages_max: int
    power_over_limit_factor: float
    nvlink_error_rise_max: int
    ecc_uncorrected_aggregate_warn: int = 0


@record(frozen=True)
class HealthConfig:
    """One node's resolved health settings (cached as JSON between runs)."""

    node: str
    site_path: str
    site_sha256: str
    gpu: GpuExpect
    thresholds: Thresholds
    driver_version: str
    store_path: str
    audit_log: str | None
    # [health] scalars (timeouts, windows, policies)
    check_timeout_s: float
    timeouts: dict[str, float]  # context -> whole-run limit
    on_error: str
    nccl_fresh_hours: float
    nccl_timeout_s: float
    nccl_size_mib: int
    nccl_iters: int
    xid_window_minutes: int
    xid_source: str
    xid_actions: dict[str, str]
    resume_after_clean_runs: int
    drain_cap_fraction: float
    results_log: str
    policies: dict[str, dict] = field(default_factory=dict)  # check id -> overrides given
    alert_repeat_minutes: int = 60
    job_map_dir: str = "/run/slurmadm/jobs"  # monitor.job_map_dir: the prolog's GPU -> job records
    dcgm_job_map_dir: str = ""  # monitor.gpu_source "dcgm": dcgm-exporter's --hpc-job-mapping-dir
    # node checks beyond the GPUs (fabric, clock events, InfiniBand, host basics): plain data
    host: dict = field(default_factory=dict)
    ship: bool = False  # store.url set: queue records for the central store; the periodic run ships them
    # [software] baseline of the facts the software-drift check reads on the node (fleet/collector.py)
    software_baseline: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "HealthConfig":
        data = json.loads(text)
        data["gpu"] = GpuExpect(**data["gpu"])
        data["thresholds"] = Thresholds(**data["thresholds"])
        return cls(**data)


def from_site(site, node: str, *, site_path: str, site_sha256: str) -> "HealthConfig":
    """Resolve one node's settings from a loaded `Site` (the slow path)."""
    from ..errors import UsageError

    if node not in site.node_group_of:
        raise UsageError(f"--node: {node!r} is not one of the site's nodes {site.all_nodes}")
    gpus = site.node_profile(node).gpus
    h = site.health
    t = site.thresholds(gpus.model)
    return HealthConfig(
        node=node,
        site_path=site_path,
        site_sha256=site_sha256,
        gpu=GpuExpect(gpus.count, gpus.model, gpus.nvml_name, gpus.nvlinks, gpus.pcie_gen, gpus.pcie_width,
                      gpus.power_limit_w),
        thresholds=Thresholds(**{f.name: getattr(t, f.name) for f in dataclasses.fields(Thresholds)}),
        driver_version=site.software.driver_version,
        store_path=site.store.local_path(node),
        audit_log=site.store.audit_log,
        check_timeout_s=h.check_timeout_s,
        timeouts={"prolog": h.prolog_timeout_s, "epilog": h.epilog_timeout_s,
                  "periodic": h.periodic_timeout_s, "run": h.run_timeout_s},
        on_error=h.on_error,
        nccl_fresh_hours=h.nccl_fresh_hours,
        nccl_timeout_s=h.nccl_timeout_s,
        nccl_size_mib=h.nccl_size_mib,
        nccl_iters=h.nccl_iters,
        xid_window_minutes=h.xid_window_minutes,
        xid_source=h.xid_source.replace("{node}", node),
        xid_actions=dict(h.xid_actions),
        resume_after_clean_runs=h.resume_after_clean_runs,
        drain_cap_fraction=h.drain_cap_fraction,
        results_log=h.results_log,
        policies={cid: p.model_dump(exclude_none=True) for cid, p in h.checks.items()},
        alert_repeat_minutes=h.alert_repeat_minutes,
        job_map_dir=site.monitor.job_map_dir,
        dcgm_job_map_dir=(site.monitor.dcgm_job_map_dir.replace("{node}", node)
                          if site.monitor.gpu_source == "dcgm" or "dcgm_job_map_dir" in site.monitor.model_fields_set
                          else ""),
        host=host_settings(site, node),
        ship=site.store.url is not None,
        software_baseline=_software_baseline(site),
    )


def _software_baseline(site) -> dict[str, str]:
    from ..fleet.collector import CHEAP_FACTS, baseline

    return {k: v for k, v in baseline(site.software).items() if k in CHEAP_FACTS}


def host_settings(site, node: str) -> dict:
    """What the fabric, clock-event, InfiniBand and host checks need, as JSON-able data."""
    from ..hostlist import expand

    prof = site.node_profile(node)
    h = site.health
    return {
        "nvswitches": prof.gpus.nvswitches,
        "memory_gib": prof.memory_gib,
        "dimms": prof.dimms,
        "nic_kind": prof.nics.kind,
        "nic_gbps": prof.nics.gbps,
        "hcas": expand(prof.nics.hcas, what="nics.hcas") if prof.nics.hcas and prof.nics.count else [],
        "hca_port": prof.nics.port,
        "sysfs_root": h.sysfs_root.replace("{node}", node),
        "ib_counter_rise_max": dict(h.ib_counter_rise_max),
        "ib_flaps_max": h.ib_flaps_max,
        "ib_flap_window_hours": h.ib_flap_window_hours,
        "mounts": [m.model_dump() for m in h.mounts],
        "memory_tolerance_fraction": h.memory_tolerance_fraction,
        "fabric_manager_process": h.fabric_manager_process,
        "clock_event_confirm_ms": h.clock_event_confirm_ms,
        "leftover_outside_jobs": h.leftover_outside_jobs,
    }


def cache_dir() -> str:
    return os.environ.get(ENV_CACHE_DIR) or DEFAULT_CACHE_DIR


def _cache_file(node: str, sha: str) -> str:
    return os.path.join(cache_dir(), f"health-{node}-{__version__}-{sha[:20]}.json")


def _sha256(data: bytes) -> str:
    """hashlib.sha256 without loading OpenSSL's _hashlib (milliseconds of every prolog): the
    interpreter's built-in SHA-256 gives the same digest."""
    try:
        from _sha256 import sha256  # Python 3.11
    except ImportError:
        try:
            from _sha2 import sha256  # Python 3.12+
        except ImportError:
            from hashlib import sha256
    return sha256(data).hexdigest()


def _parents(path: str) -> list[str]:
    """pathlib's PurePath.parents of an absolute path, as strings."""
    out = []
    while True:
        up = os.path.dirname(path)
        if up == path:
            return out
        out.append(up)
        path = up


def untrusted(path: str | os.PathLike) -> str:
    """'' when only root can change `path` (the file and every directory above it), else why not.

    A root hook follows its site file (where to write the store and logs, what to run): like sshd's
    StrictModes, it refuses one that another user could change: not owned by root, writable by
    others, or by a group other than root's, or in a directory that is (a sticky world-writable
    directory such as /tmp is fine: others cannot replace root's files in it)."""
    try:
        real = os.path.realpath(path)
        st = os.stat(real)
    except OSError:
        return ""  # missing: load_site says so
    if st.st_uid != 0:
        return f"site file {path} is owned by uid {st.st_uid}, not root"
    if st.st_mode & 0o002 or (st.st_mode & 0o020 and st.st_gid != 0):
        return f"site file {path} is writable by {'everyone' if st.st_mode & 0o002 else f'group {st.st_gid}'}"
    for d in _parents(real):
        try:
            ds = os.stat(d)
        except OSError:
            continue
        sticky = ds.st_mode & 0o1000
        if ds.st_uid != 0:
            return f"directory {d} of site file {path} is owned by uid {ds.st_uid}, not root"
        if (ds.st_mode & 0o002 and not sticky) or (ds.st_mode & 0o020 and ds.st_gid != 0 and not sticky):
            return f"directory {d} of site file {path} is writable by others"
    return ""


def load(node: str, site_file: str | None = None, *, site_checks=None) -> HealthConfig:
    """The node's settings: from the cache when the site file is unchanged, else from the site.
    Run as root, a site file (or cache) another user could change is refused (UsageError).
    `site_checks`: called before the site is parsed (a cache miss only) to register the site
    checks the health package adds (health/sitecheck.py: the check ids live in checks.py, above
    this module, so the caller, above both, brings them)."""
    from ..errors import UsageError

    path = _site_file(site_file)
    if os.geteuid() == 0:
        why = untrusted(path)
        if why:
            raise UsageError(f"{why}: refusing it as root (chown root and chmod go-w)")
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError:
        raw = None  # let load_site produce the proper one-line error
    sha = _sha256(raw) if raw is not None else ""
    cached = _cache_file(node, sha)
    if raw is not None and (os.geteuid() != 0 or not untrusted(cached)):
        try:
            with open(cached, encoding="utf-8") as f:
                return HealthConfig.from_json(f.read())
        except (OSError, ValueError, TypeError, KeyError):
            pass
    from ..site import load_site, parse_site

    if site_checks is not None:
        site_checks()

    # the bytes just hashed, not a second read: the cache key must match what was parsed
    site = parse_site(raw, source=str(path)) if raw is not None else load_site(path)
    cfg = from_site(site, node, site_path=str(path), site_sha256=sha)
    from pathlib import Path

    from ..files import write_atomic

    try:
        os.makedirs(os.path.dirname(cached), exist_ok=True)
        write_atomic(Path(cached), cfg.to_json())
    except (OSError, UsageError):
        pass
    return cfg
