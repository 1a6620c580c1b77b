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
