"""Site model: nightly burn-in sweeps."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, PositiveInt

from .accounts import SlurmName
from .profiles import Strict

HHMM = Annotated[str, Field(pattern=r"^([01]\d|2[0-3]):[0-5]\d$")]


class BurninSection(Strict):
    # Cron expression (five fields) for `burnin install-schedule`.
    schedule: Annotated[str, Field(pattern=r"^\S+\s+\S+\s+\S+\s+\S+\s+\S+$")] = "30 1 * * *"
    # Idle nodes are picked only inside this local-time window.
    window_start: HHMM = "01:00"
    window_end: HHMM = "05:00"
    # Never more than this many nodes under burn-in at once (users keep capacity).
    max_nodes: PositiveInt = 8
    partition: SlurmName | None = None  # default: the default partition
    qos: SlurmName = "burnin"
    account: SlurmName = "ops"
    reservation: str = ""  # optional Slurm reservation the jobs run in
    stress_seconds: Annotated[int, Field(ge=1, le=86400)] = 600
    job_time_limit: str = "02:00:00"
    # Multi-node all-reduce floor between two nodes, GB/s (bus bandwidth).
    pair_busbw_floor_gbps: Annotated[float, Field(gt=0)] = 40.0
    report_dir: str = "/var/lib/slurmadm/burnin"
