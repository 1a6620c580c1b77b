"""Slurm configuration from the site: render, validate, diff, apply, check a node against it.

Public surface: `render(site, release)` -> {file name: text} (validates first), `validate`,
`resolve_release`; `diff.plan(rendered, config_dir)` classifies changes (restart or
reconfigure); `apply.apply(site, rendered, reason=...)` writes them; `node.compare` checks a
compute node (slurmd -C, NVML) against its profile. Importing this package adds the config
rules to `slurmadm site validate` (site.validate.EXTRA_CHECKS).
"""

from ..site.validate import EXTRA_CHECKS
from .checks import check_known_release, check_release, check_site_config
from .release import Release, detect_release, fmt, parse_release, resolve_release
from .render import FILES, render, validate

if check_site_config not in EXTRA_CHECKS:
    EXTRA_CHECKS.append(check_site_config)
if check_known_release not in EXTRA_CHECKS:
    EXTRA_CHECKS.append(check_known_release)

__all__ = [
    "FILES",
    "Release",
    "check_release",
    "check_site_config",
    "detect_release",
    "fmt",
    "parse_release",
    "render",
    "resolve_release",
    "validate",
]
