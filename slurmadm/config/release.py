"""Which Slurm release the configs are written for: `slurm.release` in the site, or the installed
Slurm when it says "auto". Release-specific keys are decided here and nowhere else."""

from __future__ import annotations

import re
from collections.abc import Mapping

from ..errors import SlurmadmError, UnreachableError, UsageError
from ..proc import run
from ..slurm.parse import parse_version

Release = tuple[int, int]

OLDEST: Release = (22, 5)
# cgroup.conf CgroupPlugin=disabled (needed by 24.11's slurmd on a host without cgroupfs).
CGROUP_DISABLED_FROM: Release = (23, 2)

# slurm.conf keys a release renamed: old key -> (from release, new key, old value -> new value).
# 25.11 renamed the job container plugins to namespace plugins (JobContainerType=job_container/tmpfs
# became NamespaceType=namespace/tmpfs; slurm.conf.5 of 25.11). A key given either way (the
# generator's own, or slurm.extra) is written the way the target release reads it.
RENAMED_KEYS: dict[str, tuple[Release, str, dict[str, str]]] = {
    "JobContainerType": ((25, 11), "NamespaceType", {"job_container/tmpfs": "namespace/tmpfs",
                                                     "job_container/none": "namespace/none"}),
}

# HealthCheckNodeState values and the release that added each (slurm.conf.5): START_ONLY (run
# only when slurmd starts) from 25.11, REBOOT_ONLY (only after a reboot) from 26.05.
HEALTH_CHECK_NODE_STATES: dict[str, Release] = {
    "ALLOC": OLDEST, "ANY": OLDEST, "CYCLE": OLDEST, "IDLE": OLDEST, "MIXED": OLDEST, "NONDRAINED_IDLE": OLDEST,
    "START_ONLY": (25, 11), "REBOOT_ONLY": (26, 5),
}


# Slurm's own instruments (issue 38), each with the release that added it and where it says so.
# slurmctld serves OpenMetrics itself (MetricsType=metrics/openmetrics; slurm.conf.5 and
# metrics.shtml of 25.11), GET /metrics/{jobs,jobs-users-accts,nodes,partitions,scheduler} on its
# own port; it is off while PrivateData is set.
METRICS_FROM: Release = (25, 11)
# 26.05: MetricsAuthUsers (JWT authentication for the endpoints; SlurmUser and root always allowed)
# and MetricsParameters=ignore_private_data (metrics on beside PrivateData, without authentication).
METRICS_AUTH_FROM: Release = (26, 5)
# 25.11: slurmctld (and the other daemons) answer GET /livez, /readyz and /healthz on their port.
PROBES_FROM: Release = (25, 11)
# 26.05: HealthCheckTimeout (seconds HealthCheckProgram may run); before it slurmd killed the
# program after a fixed 60 s (slurm.conf.5 HealthCheckProgram of 22.05-25.11).
HEALTH_CHECK_TIMEOUT_FROM: Release = (26, 5)
HEALTH_CHECK_FIXED_KILL_S = 60
# HealthCheckTimeout = health.periodic_timeout_s + this: the hook's own supervisor stops a run at
# periodic_timeout_s; the margin covers the wrapper and interpreter start and the supervisor's kill,
# so Slurm's kill never cuts a run short that slurmadm would have ended with a verdict.
HEALTH_CHECK_TIMEOUT_MARGIN_S = 5


def has(release: Release | None, since: Release) -> bool:
    """Whether `release` (None: unknown, taken as the oldest) has a feature added in `since`."""
    return release is not None and release >= since


def health_check_timeout(periodic_timeout_s: float) -> int:
    """HealthCheckTimeout (whole seconds) for a periodic run limit."""
    import math

    return math.ceil(periodic_timeout_s) + HEALTH_CHECK_TIMEOUT_MARGIN_S


def conf_key(key: str, value: str, release: Release) -> tuple[str, str]:
    """`key = value` as `release` spells it (RENAMED_KEYS), either direction."""
    for old, (since, new, values) in RENAMED_KEYS.items():
        if key == old and release >= since:
            return new, values.get(value, value)
        if key == new and release < since:
            back = {v: k for k, v in values.items()}
            return old, back.get(value, value)
    return key, value


# Commands that print the installed release. `sinfo --version` needs a readable slurm.conf on
# 22.05 (it fails before printing), the daemons' -V does not: asked in this order.
_PROBES = (["sinfo", "--version"], ["slurmctld", "-V"], ["slurmd", "-V"])


def parse_release(text: str, *, what: str = "--release") -> Release:
    m = re.fullmatch(r"\s*(\d{2})\.(\d{1,2})(?:\.\d+)?\s*", text)
    if not m:
        raise UsageError(f"{what}: {text!r} is not a Slurm release like 22.05 or 24.11")
    release = (int(m.group(1)), int(m.group(2)))
    if release < OLDEST:
        raise UsageError(f"{what}: Slurm {text.strip()} is older than {fmt(OLDEST)}, the oldest slurmadm supports")
    return release


def fmt(release: Release) -> str:
    return f"{release[0]}.{release[1]:02d}"


def detect_release(env: Mapping[str, str] | None = None, *, timeout: float = 10.0) -> Release:
    """The installed Slurm's release (major, minor)."""
    failures = []
    for argv in _PROBES:
        try:
            proc = run(argv, timeout=timeout, env=env)
            major, minor, _ = parse_version(proc.stdout + proc.stderr)
            return major, minor
        except SlurmadmError as exc:
            failures.append(str(exc))
    raise UnreachableError(
        "cannot tell the installed Slurm release (" + "; ".join(failures) + "): "
        "set slurm.release in site.toml or pass --release"
    )


def resolve_release(site, override: str | None = None, *, env: Mapping[str, str] | None = None) -> Release:
    """--release, else slurm.release, else (auto) the installed Slurm."""
    if override:
        return parse_release(override)
    if site.slurm.release != "auto":
        return parse_release(site.slurm.release, what="slurm.release")
    return detect_release(env)
