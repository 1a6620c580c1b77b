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


def files(tmp_path, release):
    data = devsite.derive(load_site(EXAMPLE), nodes=4, state_dir=tmp_path, ports=devsite.Ports(17000),
                          hostname="vm", hw=HW, prolog_dir=tmp_path, release=release)
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


def test_nodes_carry_their_features_and_gpus(tmp_path):
    conf = files(tmp_path, (22, 5))["slurm.conf"]
    node_line = next(line for line in conf.splitlines() if line.startswith("NodeName="))
    assert "Features=b200,ib400,su1 " in node_line and "Gres=gpu:b200:8 " in node_line
    assert "Port=[17011-17014]" in node_line
    assert f"File={tmp_path}/dev/nvidia[0-7] Cores=0-1" in files(tmp_path, (22, 5))["gres.conf"]
