"""Where the site file is: --site FILE, else $SLURMADM_SITE, else /etc/slurmadm/site.toml.

Kept outside `slurmadm.site` (which imports pydantic) so the prolog can find and hash the site
file without paying for the site model when its cached settings are still valid.
"""

from __future__ import annotations

import os
from pathlib import Path

DEFAULT_SITE = "/etc/slurmadm/site.toml"
ENV_SITE = "SLURMADM_SITE"


def site_path(explicit: str | os.PathLike | None = None) -> Path:
    if explicit:
        return Path(explicit)
    env = os.environ.get(ENV_SITE)
    if env:
        return Path(env)
    return Path(DEFAULT_SITE)
