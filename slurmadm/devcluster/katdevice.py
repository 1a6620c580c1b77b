"""The dev cluster's compute devices for the known-answer test (slurmadm.repair.kat): one per
stand-in GPU that NVML enumerates, running the pure-Python reference computation and applying the
stand-in GPU's state at the time it runs:
- `corrupt` (gpu-fault --kind corrupt --value BIT): the answer has that bit flipped (silent data
  corruption: the GPU reports nothing wrong);
- `missing-gpu` (lost since enumeration) and `hang`: the run fails (KatDeviceError), as a CUDA
  call on such a GPU would.
The node is the stand-in NVML's: $SLURMADM_FAKE_NVML_NODE, else $SLURMD_NODENAME, else the short
host name; the state directory is $SLURMADM_FAKE_NVML_DIR, else $SLURMADM_DEV_STATE_DIR/gpus. CUDA_VISIBLE_DEVICES (NVML indices, as
Slurm sets them for a GPU job) limits the devices as it limits CUDA's.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from pathlib import Path

from ..errors import UsageError
from ..repair.kat import KatDeviceError, reference_bytes
from . import gpus


def standin_node(env: Mapping[str, str]) -> str:
    return (env.get("SLURMADM_FAKE_NVML_NODE") or env.get("SLURMD_NODENAME")
            or socket.gethostname().split(".")[0])


class StandinDevice:
    def __init__(self, state_dir: Path, node: str, slot: int, index: int):
        self.state_dir, self.node, self.slot, self.index = Path(state_dir), node, slot, index
        self.name = f"standin:{node}:gpu{slot}"

    def run(self, seed: int) -> bytes:
        gpu = gpus.effective_gpus(gpus.read_state(self.state_dir, self.node))[self.slot]
        if not gpu["present"]:
            raise KatDeviceError(f"{self.name}: GPU is lost")
        if gpu["hang"]:
            raise KatDeviceError(f"{self.name}: GPU is not responding (hung)")
        raw = bytearray(reference_bytes(seed))
        bit = gpu.get("kat_corrupt")
        if bit:
            pos = (int(bit) - 1) % (len(raw) * 8)
            raw[pos // 8] ^= 1 << (pos % 8)
        return bytes(raw)


def standin_devices(env: Mapping[str, str] | None = None) -> list[StandinDevice]:
    env = os.environ if env is None else env
    state_dir = env.get("SLURMADM_FAKE_NVML_DIR") or (
        str(Path(env["SLURMADM_DEV_STATE_DIR"]) / "gpus") if env.get("SLURMADM_DEV_STATE_DIR") else "")
    if not state_dir:
        raise UsageError("neither SLURMADM_FAKE_NVML_DIR nor SLURMADM_DEV_STATE_DIR is set: no stand-in GPUs to test")
    node = standin_node(env)
    effective = gpus.effective_gpus(gpus.read_state(state_dir, node))
    present = [slot for slot, g in enumerate(effective) if g["present"]]
    devices = [StandinDevice(Path(state_dir), node, slot, i) for i, slot in enumerate(present)]
    visible = env.get("CUDA_VISIBLE_DEVICES")
    if visible is not None and all(v.strip().isdigit() for v in visible.split(",") if v.strip()):
        wanted = [int(v) for v in visible.split(",") if v.strip()]
        devices = [devices[i] for i in wanted if i < len(devices)]
    return devices
