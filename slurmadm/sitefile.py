"""Where the site file is: --site FILE, else $SLURMADM_SITE, else /etc/slurmadm/site.toml.

Kept outside `slurmadm.site` (which imports pydantic) so the prolog can find and hash the site
file without paying for the site model when its cached settings are still valid.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (a few ms of every prolog)
if TYPE_CHECKING:
    from pathlib import Path

DEFAULT_SITE = "/etc/slurmadm/site.toml"
ENV_SITE = "SLURMADM_SITE"


def site_file(explicit: str | os.PathLike | None = None) -> str:
    """The same as `site_path`, as a str (the prolog's path: pathlib costs it milliseconds)."""
    if explicit:
        return os.fspath(explicit)
    return os.environ.get(ENV_SITE) or DEFAULT_SITE


def site_path(explicit: str | os.PathLike | None = None) -> Path:
    from pathlib import Path

    return Path(site_file(explicit))
