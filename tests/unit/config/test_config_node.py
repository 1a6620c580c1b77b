"""check-node: slurmd -C and NVML facts against the node's profile (pure comparison)."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurmadm.config.node import GpuFacts, compare, cpu_sockets
from slurmadm.errors import UnreachableError
from slurmadm.slurm.model import SlurmdHardware
from slurmadm.slurm.parse import parse_slurmd_c

pytestmark = pytest.mark.unit

B200_C = ("NodeName=b200-077 CPUs=224 Boards=1 SocketsPerBoard=2 CoresPerSocket=56 ThreadsPerCore=2 "
          "RealMemory=2063731\nUpTime=12-03:04:05\n")
# Linux numbering on a 2 x 56-core SMT host: socket 0 = 0-55,112-167; socket 1 = 56-111,168-223
SOCKET_OF = {c: (0 if c % 112 < 56 else 1) for c in range(224)}
SOCKET_CPUS = [frozenset(c for c in range(224) if SOCKET_OF[c] == s) for s in (0, 1)]


def healthy_gpus(name="NVIDIA B200"):
    return [GpuFacts(i, name, i, SOCKET_CPUS[0 if i < 4 else 1]) for i in range(8)]


def test_parse_slurmd_c():
    hw = parse_slurmd_c(B200_C)
    assert hw == SlurmdHardware("b200-077", 224, 2, 56, 2, 2063731)
    with pytest.raises(UnreachableError, match="slurmd -C: unexpected output"):
        parse_slurmd_c("slurmd: error: something")


def test_a_healthy_b200_matches(example):
    assert compare(example, "b200-077", parse_slurmd_c(B200_C), healthy_gpus(), SOCKET_OF, lambda p: True) == []


def test_cpu_layout_and_memory_mismatches(example):
    hw = parse_slurmd_c(B200_C.replace("ThreadsPerCore=2", "ThreadsPerCore=1").replace("CPUs=224", "CPUs=112")
                        .replace("RealMemory=2063731", "RealMemory=1031000"))
    lines = compare(example, "b200-077", hw, healthy_gpus(), SOCKET_OF, lambda p: True)
    assert lines == [
        "CPUs: slurmd -C reports 112, profile hgx-b200 declares 224",
        "ThreadsPerCore: slurmd -C reports 1, profile hgx-b200 declares 2",
        "RealMemory: slurmd -C reports 1031000 MiB, below the declared 1992294 MiB "
        "(Slurm drains the node: Low RealMemory)",
    ]


def test_a_missing_gpu_and_device_file(example):
    lines = compare(example, "b200-077", parse_slurmd_c(B200_C), healthy_gpus()[:7], SOCKET_OF,
                    lambda p: p != "/dev/nvidia7")
    assert lines == ["gres File=/dev/nvidia7: no such device",
                     "GPUs: NVML sees 7, profile hgx-b200 declares 8 (gpu:b200:8)"]


def test_wrong_model_order_and_affinity(example):
    gpus = healthy_gpus()
    gpus[2] = GpuFacts(2, "NVIDIA H100 80GB HBM3", 2, SOCKET_CPUS[0])
    gpus[3] = GpuFacts(3, "NVIDIA B200", 5, SOCKET_CPUS[0])
    gpus[6] = GpuFacts(6, "NVIDIA B200", 6, SOCKET_CPUS[0])
    lines = compare(example, "b200-077", parse_slurmd_c(B200_C), gpus, SOCKET_OF, lambda p: True)
    assert lines == [
        "GPU2 name: NVML reports 'NVIDIA H100 80GB HBM3', profile hgx-b200 expects 'NVIDIA B200'",
        "GPU3 device: NVML says /dev/nvidia5, gres.conf lists /dev/nvidia3 for it",
        "GPU6 CPU affinity: socket 0, profile hgx-b200 puts it on socket 1 (gres.conf Cores=56-111; "
        "CPUs 0-55,112-167)",
    ]


def test_cpu_sockets_from_sysfs(tmp_path):
    for cpu, pkg in ((0, 0), (1, 0), (2, 1), (10, 1)):
        d = tmp_path / f"cpu{cpu}" / "topology"
        d.mkdir(parents=True)
        (d / "physical_package_id").write_text(f"{pkg}\n")
    (tmp_path / "cpufreq").mkdir()
    assert cpu_sockets(Path(tmp_path)) == {0: 0, 1: 0, 2: 1, 10: 1}
    assert set(cpu_sockets().values()) >= {0}  # this machine
