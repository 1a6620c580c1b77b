"""`config check-node`: does this compute node match the profile the site declares for it?

Compares `slurmd -C` (CPU layout, memory) and NVML (GPU count, names, device minor numbers,
CPU affinity) with the node's profile, so a node that Slurm would mark INVAL or drain ("Low
socket*core*thread count", "gres/gpu count reported lower than configured") is caught before
it joins, with one line per mismatch.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

from ClusterShell.RangeSet import RangeSet

from ..errors import UnreachableError
from ..proc import run
from ..site import Site
from ..slurm.model import SlurmdHardware
from ..slurm.parse import parse_slurmd_c
from .build import gpu_cores, real_memory

SYS_CPU = Path("/sys/devices/system/cpu")


@dataclass(frozen=True)
class GpuFacts:
    """One GPU as NVML reports it."""

    index: int
    name: str
    minor: int | None  # /dev/nvidia<minor>
    cpus: frozenset[int] | None  # OS CPU ids of its CPU affinity


def read_slurmd(timeout: float = 30.0) -> SlurmdHardware:
    return parse_slurmd_c(run(["slurmd", "-C"], timeout=timeout).stdout)


def _nvml_gpus() -> list[GpuFacts]:
    import pynvml

    pynvml.nvmlInit()
    try:
        words = max(1, ((os.cpu_count() or 1) + 63) // 64)
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            name = pynvml.nvmlDeviceGetName(h)
            name = name.decode() if isinstance(name, bytes) else name
            try:
                minor = pynvml.nvmlDeviceGetMinorNumber(h)
            except pynvml.NVMLError:
                minor = None
            try:
                masks = pynvml.nvmlDeviceGetCpuAffinity(h, words)
                cpus = frozenset(w * 64 + b for w, mask in enumerate(masks) for b in range(64) if mask >> b & 1)
            except pynvml.NVMLError:
                cpus = None
            gpus.append(GpuFacts(i, name, minor, cpus))
        return gpus
    finally:
        pynvml.nvmlShutdown()


def read_gpus(timeout: float = 20.0) -> list[GpuFacts]:
    """The GPUs through NVML, under the health runner's deadline (a worker thread), so a hung
    driver cannot hang the command."""
    from ..health.runner import TimedOut, call_with_deadline

    try:
        return call_with_deadline(_nvml_gpus, timeout)
    except TimedOut:
        raise UnreachableError(f"NVML: no answer within {timeout:g} s") from None
    except Exception as exc:  # NVMLError, or pynvml failing to load the library
        raise UnreachableError(f"NVML: {exc}") from None


def cpu_sockets(sys_cpu: Path = SYS_CPU) -> dict[int, int]:
    """OS CPU id -> physical socket, from sysfs."""
    out = {}
    for topo in sys_cpu.glob("cpu[0-9]*/topology/physical_package_id"):
        out[int(topo.parent.parent.name[3:])] = int(topo.read_text())
    return out


def compare(site: Site, node: str, slurmd: SlurmdHardware, gpus: list[GpuFacts], socket_of: Mapping[int, int],
            exists: Callable[[str], bool] = os.path.exists) -> list[str]:
    """One line per way this node differs from its declared profile."""
    group = site.node_group_of[node]
    prof = site.profile(group.profile)
    where = f"profile {group.profile}"
    out = []
    for label, have, want in (("CPUs", slurmd.cpus, prof.cpus), ("Sockets", slurmd.sockets, prof.sockets),
                              ("CoresPerSocket", slurmd.cores_per_socket, prof.cores_per_socket),
                              ("ThreadsPerCore", slurmd.threads_per_core, prof.threads_per_core)):
        if have != want:
            out.append(f"{label}: slurmd -C reports {have}, {where} declares {want}")
    declared = real_memory(site, prof)
    if slurmd.real_memory < declared:
        out.append(f"RealMemory: slurmd -C reports {slurmd.real_memory} MiB, below the declared {declared} MiB "
                   f"(Slurm drains the node: Low RealMemory)")

    spec = prof.gpus
    files = spec.files()
    for path in files:
        if not exists(path):
            out.append(f"gres File={path}: no such device")
    if len(gpus) != spec.count:
        out.append(f"GPUs: NVML sees {len(gpus)}, {where} declares {spec.count} (gpu:{spec.model}:{spec.count})")
        return out  # per-GPU comparisons would pair the wrong GPUs
    cores = gpu_cores(prof)
    for gpu, want_socket, path, core_list in zip(gpus, spec.sockets, files, cores):
        label = f"GPU{gpu.index}"
        if gpu.name != spec.nvml_name:
            out.append(f"{label} name: NVML reports {gpu.name!r}, {where} expects {spec.nvml_name!r}")
        m = re.search(r"nvidia(\d+)$", path)
        if m and gpu.minor is not None and gpu.minor != int(m.group(1)):
            out.append(f"{label} device: NVML says /dev/nvidia{gpu.minor}, gres.conf lists {path} for it")
        if gpu.cpus:
            sockets = sorted({socket_of[c] for c in gpu.cpus if c in socket_of})
            if sockets and sockets != [want_socket]:
                out.append(f"{label} CPU affinity: socket {','.join(map(str, sockets))}, {where} puts it on "
                           f"socket {want_socket} (gres.conf Cores={core_list}; CPUs {RangeSet(gpu.cpus)})")
    return out
