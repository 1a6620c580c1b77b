"""Site model: out-of-band management (BMCs) and the software baseline."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, PositiveInt

from .profiles import Strict


class BmcSection(Strict):
    # BMC address of each node: `{node}` is replaced by the node name (b200-001 -> b200-001-bmc).
    host_pattern: Annotated[str, Field(pattern=r".*\{node\}.*")] = "{node}-bmc"
    protocol: Literal["ipmi", "redfish"] = "ipmi"
    port: Annotated[int, Field(ge=1, le=65535)] = 623
    username: str = "admin"
    # The password is never in site.toml: a root-only file holds it.
    password_file: str = "/etc/slurmadm/bmc.password"
    timeout_s: Annotated[float, Field(gt=0, le=120)] = 5.0
    fanout: Annotated[int, Field(ge=1, le=1024)] = 64


class SoftwareBaseline(Strict):
    """What every compute node should run. Versions are compared as strings."""

    driver_version: str = "570.133.20"
    cuda_version: str = "12.8"
    nccl_version: str = "2.25.1"
    ofed_version: str = "24.10-1.1.4.0"
    kernel: str = "6.8.0-60-generic"
    os_image: str = "ubuntu-24.04-dgx"
    extra: dict[str, str] = {}
    # Fleet rollouts: canary size, then waves with a failure budget.
    canary_nodes: PositiveInt = 2
    wave_fraction: Annotated[float, Field(gt=0, le=1)] = 0.25
    max_failed_fraction: Annotated[float, Field(ge=0, le=1)] = 0.05
