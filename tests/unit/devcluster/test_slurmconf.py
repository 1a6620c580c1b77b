"""The dev cluster's Slurm files differ by release where Slurm does."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurmadm.devcluster import devsite, slurmconf
from slurmadm.site import load_site

pytestmark = pytest.mark.unit

EXAMPLE = Path(__file__).resolve().parents[3] / "site.example.toml"
HW = devsite.Hardware.parse("NodeName=vm CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 "
                            "ThreadsPerCore=1 RealMemory=24105")


@pytest.fixture()
def site(tmp_path):
    data = devsite.derive(load_site(EXAMPLE), nodes=4, state_dir=tmp_path, ports=devsite.Ports(17000),
                          hostname="vm", hw=HW, prolog_dir=tmp_path)
    return devsite.write(data, tmp_path / "site.toml", source=str(EXAMPLE))


def test_cgroup_plugin_disabled_only_where_slurm_knows_it(site):
    # 24.11's slurmd loads its cgroup plugin even with proctrack/linuxproc and task/none and
    # dies without a cgroup filesystem; CgroupPlugin=disabled exists from 23.02 on.
    assert slurmconf.slurm_files(site, (24, 11, 5))["cgroup.conf"] == "CgroupPlugin=disabled\n"
    assert slurmconf.slurm_files(site, (23, 2, 0))["cgroup.conf"] == "CgroupPlugin=disabled\n"
    assert "cgroup.conf" not in slurmconf.slurm_files(site, (22, 5, 8))


def test_nodes_carry_their_features_and_gpus(site):
    conf = slurmconf.slurm_files(site, (22, 5, 8))["slurm.conf"]
    node_line = next(line for line in conf.splitlines() if line.startswith("NodeName="))
    assert "Features=b200,ib400 " in node_line and "Gres=gpu:b200:8 " in node_line
    assert "Port=[17011-17014]" in node_line
