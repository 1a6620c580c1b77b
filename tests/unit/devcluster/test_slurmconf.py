"""The dev cluster's Slurm files (rendered by slurmadm.config) differ by release where Slurm does."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurmadm.config import render
from slurmadm.devcluster import devsite
from slurmadm.site import load_site

pytestmark = pytest.mark.unit

EXAMPLE = Path(__file__).resolve().parents[3] / "site.example.toml"
HW = devsite.Hardware.parse("NodeName=vm CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 "
                            "ThreadsPerCore=1 RealMemory=24105")


def files(tmp_path, release, **kw):
    data = devsite.derive(load_site(EXAMPLE), nodes=4, state_dir=tmp_path, ports=devsite.Ports(17000),
                          hostname="vm", hw=HW, prolog_dir=tmp_path, release=release, **kw)
    site = devsite.write(data, tmp_path / "site.toml", source=str(EXAMPLE))
    assert site.slurm.release == f"{release[0]}.{release[1]:02d}"
    return render(site, release)


def test_cgroup_plugin_disabled_only_where_slurm_knows_it(tmp_path):
    # 24.11's slurmd loads its cgroup plugin even with proctrack/linuxproc and task/none and
    # dies without a cgroup filesystem; CgroupPlugin=disabled exists from 23.02 on.
    assert "\nCgroupPlugin=disabled\n" in files(tmp_path, (24, 11))["cgroup.conf"]
    assert "\nCgroupPlugin=disabled\n" in files(tmp_path, (23, 2))["cgroup.conf"]
    old = files(tmp_path, (22, 5))["cgroup.conf"]
    assert "\nCgroupPlugin=autodetect\n" in old and "\nConstrainDevices=no\n" in old  # task/none: no constraints


@pytest.mark.parametrize("release", [(22, 5), (24, 11)])
def test_enforce_memory_is_task_cgroup_with_constrained_ram(tmp_path, release):
    """`dev-cluster up --enforce-memory`: a step over its --mem is OOM-killed, as at a site."""
    out = files(tmp_path, release, enforce_memory=True)
    assert "\nTaskPlugin=task/cgroup\n" in out["slurm.conf"]
    assert "\nCgroupPlugin=autodetect\n" in out["cgroup.conf"] and "\nConstrainRAMSpace=yes\n" in out["cgroup.conf"]
    assert "\nConstrainDevices=no\n" in out["cgroup.conf"]  # the stand-in GPUs are plain files
    assert "\nSelectTypeParameters=CR_Core_Memory\n" in out["slurm.conf"]  # --mem is a limit to enforce
    assert "\nTaskPlugin=task/none\n" in files(tmp_path, release)["slurm.conf"]


def test_memory_cgroup_problem_names_what_the_host_lacks(tmp_path):
    assert "no cgroup v1 memory controller" in devsite.memory_cgroup_problem(tmp_path)
    (tmp_path / "memory").mkdir()
    (tmp_path / "memory" / "memory.limit_in_bytes").write_text("9223372036854771712\n")
    assert devsite.memory_cgroup_problem(tmp_path) is None  # root here: writable
    (tmp_path / "cgroup.controllers").write_text("cpuset cpu io memory pids\n")
    assert "cgroup v2" in devsite.memory_cgroup_problem(tmp_path)


def test_nodes_carry_their_features_and_gpus(tmp_path):
    conf = files(tmp_path, (22, 5))["slurm.conf"]
    node_line = next(line for line in conf.splitlines() if line.startswith("NodeName="))
    assert "Features=b200,ib400,su1 " in node_line and "Gres=gpu:b200:8 " in node_line
    assert "Port=[17011-17014]" in node_line
    assert f"File={tmp_path}/dev/nvidia[0-7] Cores=0-1" in files(tmp_path, (22, 5))["gres.conf"]
