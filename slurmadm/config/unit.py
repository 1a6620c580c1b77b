"""`config slurmd-unit`: a systemd drop-in that orders slurmd after the units creating the GPU
device files (slurm.slurmd_after, default nvidia-persistenced.service).

slurmd stats every File= of gres.conf when it starts; on a node booting with slurmd before the
NVIDIA driver has made /dev/nvidia*, it exits ("fatal: can't stat gres.conf file /dev/nvidia0").
The drop-in adds After= and Wants= for those units, so slurmd waits for them instead.
"""

from __future__ import annotations

from pathlib import Path

from ..site import Site
from ..units import SYSTEMD_DIR, PlannedFile

DROPIN = "slurmd.service.d/slurmadm.conf"


def dropin_text(site: Site) -> str:
    files = sorted({site.profile(g.profile).gpus.device_files for g in site.nodes})
    after = " ".join(site.slurm.slurmd_after)
    lines = [
        f"# slurmd drop-in for Slurm cluster {site.cluster.name}: written by `slurmadm config slurmd-unit`.",
        f"# gres.conf names {', '.join(files)}: slurmd exits when they do not exist yet, so it starts",
        "# after the units that create them (slurm.slurmd_after in the site).",
        "[Unit]",
    ]
    if after:
        lines += [f"After={after}", f"Wants={after}"]
    return "\n".join(lines) + "\n"


def plan(site: Site, dest: str | None = None) -> list[PlannedFile]:
    return [PlannedFile(Path(dest or SYSTEMD_DIR) / DROPIN, dropin_text(site))]
