"""Site model: `[repair.rma]`, vendor RMA cases (slurmadm/repair/rma.py, bundle.py).

repair-core's `[repair]` section holds it as `rma: RmaSettings = RmaSettings()`.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from .profiles import Strict
from .slurmtext import SlurmPath as AbsPath


class RmaSettings(Strict):
    # Where evidence bundles are written (root-only: the directory 0700, each bundle 0600).
    bundle_dir: AbsPath = "/var/lib/slurmadm/rma"
    # nvidia-bug-report.sh over the fleet's SSH: its time limit (it takes minutes on an 8-GPU node).
    bug_report_timeout_s: Annotated[int, Field(ge=10, le=3600)] = 300
    # Look for the tool here on the node (NVIDIA's driver installs it in /usr/bin).
    bug_report_command: Annotated[str, Field(pattern=r"^/[A-Za-z0-9_./\-]+$")] = "/usr/bin/nvidia-bug-report.sh"
    # How far back the bundle's history goes (incidents, XIDs, SEL, burn-in).
    history_days: Annotated[int, Field(ge=1, le=3650)] = 90
