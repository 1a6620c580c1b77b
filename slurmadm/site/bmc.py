"""Site model: the `[bmc]` settings slurmadm bmc adds beyond address and credentials
(TLS for Redfish, retries, recovery, the firmware baseline). BmcSection (fleet.py) holds them."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field

from .profiles import Strict

Seconds = Annotated[float, Field(gt=0, le=86400)]


class BmcRecover(Strict):
    """`slurmadm bmc recover`: power-cycle nodes Slurm has had DOWN/NOT_RESPONDING too long."""

    grace_s: Seconds = 300.0  # DOWN at least this long before a power-cycle
    window_s: Seconds = 3600.0  # a node failing again within this window is left drained
    max_cycles_per_hour: Annotated[int, Field(ge=0, le=10000)] = 4  # fleet-wide
    boot_timeout_s: Seconds = 600.0  # power-cycle -> slurmd registered
    # health checks run on a recovered node before it is resumed (ids from `slurmadm health checks`)
    health_checks: list[Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9\-]*$")]] = []


class BmcHealth(Strict):
    """BMC sensors as a head-node health check (`slurmadm bmc health`)."""

    # sensors whose critical-threshold crossing drains the node (names as the BMC reports them;
    # glob patterns allowed). Fans and PSUs are always checked.
    temperature_sensors: list[str] = ["Inlet Temp", "HGX BB Temp", "GPU* Temp"]
    # SEL events of at least this severity since the last run drain the node
    sel_severity: Annotated[str, Field(pattern=r"^(warning|critical)$")] = "critical"
