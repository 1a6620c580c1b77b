"""The dev site is a valid site derived from the source site for one machine."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurmadm.devcluster import devsite
from slurmadm.errors import UsageError
from slurmadm.site import load_site

pytestmark = pytest.mark.unit

EXAMPLE = Path(__file__).resolve().parents[3] / "site.example.toml"
HW = devsite.Hardware.parse("NodeName=vm CPUs=2 Boards=1 SocketsPerBoard=1 CoresPerSocket=2 "
                            "ThreadsPerCore=1 RealMemory=24105\nUpTime=0-00:08:40")


def derive(tmp_path, nodes=4, base=17000):
    src = load_site(EXAMPLE)
    data = devsite.derive(src, nodes=nodes, state_dir=tmp_path, ports=devsite.Ports(base), hostname="vm",
                          hw=HW, prolog_dir=Path("/opt/pe"), release=(22, 5))
    return devsite.write(data, tmp_path / "site.toml", source=str(EXAMPLE))


def test_hardware_parse():
    assert (HW.sockets, HW.cores_per_socket, HW.threads_per_core, HW.real_memory_mib) == (1, 2, 1, 24105)
    with pytest.raises(UsageError, match="slurmd -C: unexpected output"):
        devsite.Hardware.parse("garbage")


def test_dev_site_keeps_the_first_nodes_and_their_shape(tmp_path):
    site = derive(tmp_path)
    assert site.node_names == ["b200-001", "b200-002", "b200-003", "b200-004"]
    group = site.nodes[0]
    assert (group.addr, group.hostname, group.port) == ("127.0.0.1", "vm", 17011)
    prof = site.node_profile("b200-003")
    assert prof.cpus == 2 and prof.gpus.count == 8 and prof.gpus.model == "b200"
    assert prof.gpus.files() == [f"{tmp_path}/dev/nvidia{i}" for i in range(8)]
    assert prof.gpus.sockets == [0] * 8  # one-socket machine: every GPU on socket 0
    assert [(n, m) for n, m in site.scalable_units] == [("su1", site.node_names)]
    assert {p.name for p in site.partitions} == {"gpu", "debug"}
    assert site.slurm.config_dir == f"{tmp_path}/etc" and site.slurm.munge_socket.startswith(str(tmp_path))
    assert site.store.path == f"{tmp_path}/slurmadm.db"


def test_quotas_are_clipped_to_the_dev_cluster(tmp_path):
    site = derive(tmp_path, nodes=2)
    assert site.total_gpus == 16
    quotas = [p.gpu_quota for p in site.projects if p.gpu_quota] + [q.max_gpus_per_user for q in site.qos
                                                                    if q.max_gpus_per_user]
    assert quotas and max(quotas) <= 16
    caps = [c for p in site.projects for c in p.member_gpu_caps.values()]
    assert caps and max(caps) <= 16  # per-member caps too (the example gives bob 32)
    assert {p.name for p in site.partitions} == {"gpu", "debug"}  # debug clipped to b200-[001-002]
    assert site.burnin.max_nodes == 2


def test_bad_requests(tmp_path):
    src = load_site(EXAMPLE)
    with pytest.raises(UsageError, match="more than the site's 128 nodes"):
        devsite.derive(src, nodes=129, state_dir=tmp_path, ports=devsite.Ports(17000), hostname="vm", hw=HW,
                       prolog_dir=tmp_path, release=(22, 5))
    with pytest.raises(UsageError, match="leaves no room"):
        devsite.derive(src, nodes=4, state_dir=tmp_path, ports=devsite.Ports(65530), hostname="vm", hw=HW,
                       prolog_dir=tmp_path, release=(22, 5))


def test_the_port_check_covers_every_daemon_port_and_the_job_ports_apart():
    from slurmadm.devcluster.cluster import _ranges

    ports = devsite.Ports(17000)
    assert ports.daemon_ports(4) == [17000, 17001, 17002, 17011, 17012, 17013, 17014]
    assert ports.job_ports()[0] == 17400 and ports.job_ports()[-1] == 17499
    assert _ranges([17000, 17011, 17012, 17013, 17400]) == "17000, 17011-17013, 17400"
    assert ports.daemon_ports(2, bmc=True, ssh=True)[-4:] == [17350, 17351, 17500, 17501]
    from slurmadm.devcluster import fakenode
    assert fakenode.ssh_port(17000, 1) == 17501


def test_a_128_node_dev_site_in_the_wide_plan(tmp_path):
    src = load_site(EXAMPLE)
    ports = devsite.Ports.plan(35000, 128)
    data = devsite.derive(src, nodes=128, state_dir=tmp_path, ports=ports, hostname="vm", hw=HW,
                          prolog_dir=Path("/opt/pe"), release=(22, 5), ssh=True)
    site = devsite.write(data, tmp_path / "site.toml", source=str(EXAMPLE))
    assert len(site.node_names) == 128
    assert site.fleet.ports["b200-001"] == 36400 and site.fleet.ports["b200-128"] == 36527
    assert (site.burnin.rendezvous_port, site.burnin.rendezvous_ports) == (37000, 200)
    assert site.monitor.node_listen == "127.0.0.1:36600"
    # one machine's 2 cores carry 128 nodes' hooks: spread and longer limits
    assert site.slurm.health_check_interval == 256 and "CYCLE" in site.slurm.health_check_node_state
    assert site.health.prolog_timeout_s == pytest.approx(38.4)
    (tmp_path / "small").mkdir()
    small = derive(tmp_path / "small")
    assert small.slurm.health_check_interval == 30 and small.health.prolog_timeout_s == 10.0
