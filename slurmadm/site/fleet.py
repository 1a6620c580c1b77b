"""Site model: out-of-band management (BMCs) and the software baseline."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import Field, PositiveInt, model_validator

from .bmc import BmcHealth, BmcRecover
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
    # --- slurmadm bmc (site/bmc.py) ---
    retries: Annotated[int, Field(ge=0, le=10)] = 1  # per BMC call, after the first try
    # the dev cluster's BMCs share one address (in place of host_pattern): node i (site order)
    # listens on port + i and redfish_port + i
    shared_address: Annotated[str, Field(pattern=r"^[0-9A-Za-z.:\-]+$")] | None = None
    redfish: bool = True  # the BMCs also speak Redfish (inventory, firmware)
    redfish_port: Annotated[int, Field(ge=1, le=65535)] = 443
    # Redfish TLS: a CA file, or the server certificate's SHA-256 fingerprint (hex); no
    # certificate check only with tls_insecure = true
    tls_ca_file: Annotated[str, Field(pattern=r"^/")] | None = None
    tls_fingerprint: Annotated[str, Field(pattern=r"^([0-9a-fA-F]{2}:?){31}[0-9a-fA-F]{2}$")] | None = None  # SHA-256, AB:CD:...
    tls_insecure: bool = False
    drain_timeout_s: Annotated[float, Field(gt=0, le=86400)] = 600.0  # --drain: wait for idle
    firmware: dict[Annotated[str, Field(pattern=r"^[A-Za-z0-9_.\-]+$")], str] = {}  # component -> version
    recover: BmcRecover = BmcRecover()
    health: BmcHealth = BmcHealth()

    @model_validator(mode="after")
    def _one_address_per_node(self) -> "BmcSection":
        if not re.fullmatch(r"[A-Za-z0-9.\-]*\{node\}[A-Za-z0-9.\-]*", self.host_pattern):
            raise ValueError(f"host_pattern {self.host_pattern!r}: only letters, digits, '.', '-' and one {{node}}")
        if self.tls_insecure and (self.tls_ca_file or self.tls_fingerprint):
            raise ValueError("tls_insecure = true contradicts tls_ca_file/tls_fingerprint: pick one")
        return self


class SoftwareBaseline(Strict):
    """What every compute node should run. Versions are compared as strings."""

    driver_version: str = "570.133.20"
    cuda_version: str = "12.8"
    nccl_version: str = "2.25.1"
    ofed_version: str = "24.10-1.1.4.0"
    kernel: str = "6.8.0-60-generic"  # uname -r
    os_image: str = "ubuntu-24.04-dgx"
    extra: dict[str, str] = {}
    # Files whose sha256 `slurmadm fleet facts` reports (globs allowed): drift shows the odd ones.
    hash_files: list[Annotated[str, Field(pattern=r"^/[A-Za-z0-9_./*?\-]+$")]] = [
        "/etc/slurm/slurm.conf",
        "/etc/security/limits.d/*",
    ]
    # Fleet rollouts: canary size, then waves with a failure budget.
    canary_nodes: PositiveInt = 2
    wave_fraction: Annotated[float, Field(gt=0, le=1)] = 0.25
    max_failed_fraction: Annotated[float, Field(ge=0, le=1)] = 0.05


class FleetSection(Strict):
    """How `slurmadm fleet` reaches the nodes: SSH (paramiko), key-based, host keys checked."""

    user: Annotated[str, Field(pattern=r"^[a-z_][a-z0-9_\-]{0,31}$")] = "root"
    # SSH address of each node: `{node}` is replaced by the node name.
    host_pattern: Annotated[str, Field(pattern=r"^[A-Za-z0-9.\-]*\{node\}[A-Za-z0-9.\-]*$|^[0-9.]+$")] = "{node}"
    port: Annotated[int, Field(ge=1, le=65535)] = 22
    # Per-node ports (several nodes behind one address, e.g. the dev cluster on 127.0.0.1).
    ports: dict[str, Annotated[int, Field(ge=1, le=65535)]] = {}
    # The private key (root-only file); never printed, never in argv.
    key_file: Annotated[str, Field(pattern=r"^/")] = "/root/.ssh/id_ed25519"
    # Host keys are checked against this file; an unknown or changed key is an error, never accepted.
    known_hosts: Annotated[str, Field(pattern=r"^/")] = "/etc/ssh/ssh_known_hosts"
    fanout: Annotated[int, Field(ge=1, le=1024)] = 64
    connect_timeout_s: Annotated[float, Field(gt=0, le=300)] = 10.0
    command_timeout_s: Annotated[float, Field(gt=0, le=86400)] = 60.0
    # Rollouts: how long a node may take to drain, reboot and register again.
    drain_timeout_s: Annotated[float, Field(gt=0, le=7 * 86400)] = 4 * 3600.0
    reboot_timeout_s: Annotated[float, Field(gt=0, le=86400)] = 1800.0
