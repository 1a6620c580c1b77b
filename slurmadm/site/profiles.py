"""Node hardware profiles. `hgx-b200` is the reference node; sites may override or add profiles.

Facts and sources: ../shared/anchors/slurm-config-and-accounts.md section 1 (DGX B200 user guide,
NUMA layout from `nvidia-smi topo -m` dumps). H200/H100 profiles exist so the same checks can run
on those fleets (and on the H200 used for real-GPU checks).
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, PositiveInt, model_validator

from ..hostlist import expand
from .slurmtext import MAX_NODE_MEMORY_GIB, UINT16_MAX, SlurmWord


class Strict(BaseModel):
    """Base for every site model: unknown keys are errors, no silent type coercion."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class GpuSpec(Strict):
    count: Annotated[int, Field(ge=1, le=64)] = 8
    # Key into per-model health thresholds and the gres Type (`gpu:b200:8`).
    model: Annotated[str, Field(pattern=r"^[a-z][a-z0-9_]*$")] = "b200"
    # What NVML's nvmlDeviceGetName reports for this model.
    nvml_name: str = "NVIDIA B200"
    memory_gib: PositiveInt = 180
    # CPU socket of each GPU, by GPU index (gres.conf Cores= comes from this).
    sockets: list[Annotated[int, Field(ge=0)]] = [0, 0, 0, 0, 1, 1, 1, 1]
    # Logical core indexes (0 .. sockets*cores_per_socket-1, not OS CPU ids) near each GPU, by
    # index, e.g. "0-27" on a sub-NUMA-clustered build. Omitted: every core of the GPU's socket.
    cores: list[SlurmWord] | None = None
    # Device file of each GPU, by index; a hostlist-style pattern expanded in order.
    device_files: SlurmWord = "/dev/nvidia[0-7]"
    nvlinks: Annotated[int, Field(ge=0)] = 18
    pcie_gen: Annotated[int, Field(ge=1, le=7)] = 5
    pcie_width: Annotated[int, Field(ge=1, le=32)] = 16
    power_limit_w: PositiveInt = 1000
    # NVSwitch chips on the baseboard (HGX B200: 2; H100/H200: 4; PCIe cards: 0). With NVSwitches
    # the `fabric` health check wants every GPU's fabric registration complete and Fabric Manager up.
    nvswitches: Annotated[int, Field(ge=0, le=64)] = 2

    @model_validator(mode="after")
    def _per_gpu_lists(self) -> "GpuSpec":
        if len(self.sockets) != self.count:
            raise ValueError(f"sockets lists {len(self.sockets)} GPUs but count is {self.count}")
        if self.cores is not None and len(self.cores) != self.count:
            raise ValueError(f"cores lists {len(self.cores)} GPUs but count is {self.count}")
        files = self.files()
        if len(files) != self.count:
            raise ValueError(
                f"device_files {self.device_files!r} names {len(files)} files but count is {self.count}"
            )
        return self

    def files(self) -> list[str]:
        return expand(self.device_files, what="device_files")


class NicSpec(Strict):
    count: Annotated[int, Field(ge=0)] = 8
    gbps: PositiveInt = 400
    kind: Literal["infiniband", "ethernet"] = "infiniband"
    # The compute HCAs (a hostlist-style pattern of /sys/class/infiniband names) and the port on
    # each that the `infiniband` health check inspects. Empty: not checked.
    hcas: Annotated[str, Field(pattern=r"^[A-Za-z0-9_\-\[\],]*$")] = "mlx5_[0-7]"
    port: Annotated[int, Field(ge=1, le=255)] = 1


class NodeProfile(Strict):
    description: str = ""
    sockets: Annotated[int, Field(ge=1, le=16)]
    cores_per_socket: Annotated[int, Field(ge=1, le=1024)]
    threads_per_core: Annotated[int, Field(ge=1, le=8)]
    # Logical CPUs as `slurmd -C` reports them; must be sockets x cores_per_socket x
    # threads_per_core (checked). Omitted: that product.
    cpus: Annotated[int, Field(ge=1, le=UINT16_MAX)]  # Slurm keeps CPUs in a uint16
    # RealMemory (uint64 MiB) is derived from it.
    memory_gib: Annotated[int, Field(ge=1, le=MAX_NODE_MEMORY_GIB)]
    # Seconds from power-on until slurmd answers (slurm.resume_timeout must cover it when Slurm
    # reboots nodes). An HGX/DGX B200 takes about ten minutes.
    boot_seconds: PositiveInt = 600
    gpus: GpuSpec
    nics: NicSpec = NicSpec()
    # Populated DIMMs the `host-memory` check expects (EDAC sysfs); omitted: not counted.
    dimms: Annotated[int, Field(ge=1, le=1024)] | None = None

    @model_validator(mode="before")
    @classmethod
    def _default_cpus(cls, data: Any) -> Any:
        if isinstance(data, dict) and "cpus" not in data:
            parts = [data.get(k) for k in ("sockets", "cores_per_socket", "threads_per_core")]
            if all(type(p) is int for p in parts):
                return {**data, "cpus": parts[0] * parts[1] * parts[2]}
            # A factor is missing or not an integer: its own error names it, so keep `cpus`
            # from adding a second, misleading "missing" line (the model is rejected anyway).
            return {**data, "cpus": 1}
        return data

    @property
    def cores(self) -> int:
        return self.sockets * self.cores_per_socket

    @property
    def memory_mib(self) -> int:
        return self.memory_gib * 1024

    @model_validator(mode="after")
    def _gpu_sockets_exist(self) -> "NodeProfile":
        bad = [s for s in self.gpus.sockets if s >= self.sockets]
        if bad:
            raise ValueError(
                f"gpus.sockets names socket {bad[0]} but the profile has {self.sockets} sockets"
            )
        return self


BUILTIN_PROFILES: dict[str, NodeProfile] = {
    "hgx-b200": NodeProfile(
        description="HGX/DGX B200: 2x Xeon 8570 (56c, SMT), 2 TB, 8x B200 180 GB, 8x 400G IB",
        sockets=2,
        cores_per_socket=56,
        threads_per_core=2,
        memory_gib=2048,
        gpus=GpuSpec(),
        nics=NicSpec(),
    ),
    "hgx-h200": NodeProfile(
        description="HGX H200: 2x Xeon 8480 (56c, SMT), 2 TB, 8x H200 141 GB, 8x 400G IB",
        sockets=2,
        cores_per_socket=56,
        threads_per_core=2,
        memory_gib=2048,
        gpus=GpuSpec(model="h200", nvml_name="NVIDIA H200", memory_gib=141, pcie_gen=5, power_limit_w=700,
                     nvswitches=4),
        nics=NicSpec(),
    ),
    "hgx-h100": NodeProfile(
        description="HGX H100: 2x Xeon 8480 (56c, SMT), 2 TB, 8x H100 80 GB, 8x 400G IB",
        sockets=2,
        cores_per_socket=56,
        threads_per_core=2,
        memory_gib=2048,
        gpus=GpuSpec(
            model="h100", nvml_name="NVIDIA H100 80GB HBM3", memory_gib=80, pcie_gen=5, power_limit_w=700,
            nvswitches=4,
        ),
        nics=NicSpec(),
    ),
}
