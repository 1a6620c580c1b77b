"""A dev cluster spans base..base+703 (Slurm, BMC emulators, burn-in, sshd, monitoring, node
exporters): a second one whose span overlaps a running one's is refused before it starts
anything (issue 21: `--port-base 36000` and `PORT_BASE=36500` collided)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from slurmadm.devcluster import cluster, devsite
from slurmadm.devcluster.daemons import start_time
from slurmadm.errors import UsageError

pytestmark = pytest.mark.unit


def test_the_span_covers_every_port_a_dev_cluster_uses():
    ports = devsite.Ports(36000)
    first, last = ports.span(4)
    assert (first, last) == (36000, 36703)
    used = [ports.slurmctld, ports.slurmdbd, ports.mysql, ports.first_slurmd + 3, ports.bmc_ipmi, ports.bmc_redfish + 3,
            ports.burnin_rendezvous + 99, 36000 + 500 + 3, ports.monitor_alertmanager_cluster,
            ports.monitor_node_exporter(3)]
    assert all(first <= p <= last for p in used)
    assert ports.span(10)[1] == 36000 + 699 + 10


def _running(dc: cluster.DevCluster):
    """Make `dc` look up: a record with one node and a live 'slurmctld' (a sleep we own)."""
    dc.state_dir.mkdir(parents=True, exist_ok=True)
    dc.record_path.write_text(json.dumps({"nodes": 1, "node_names": ["b200-001"], "port_base": 36000}))
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    d = dc.daemon("slurmctld")
    d.pidfile.parent.mkdir(parents=True, exist_ok=True)
    d.pidfile.write_text(f"{proc.pid} {start_time(proc.pid)}")
    return proc


def test_an_overlapping_second_dev_cluster_is_refused(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURMADM_DEV_CLAIMS_DIR", str(tmp_path / "claims"))
    first = cluster.DevCluster(tmp_path / "a")
    proc = _running(first)
    try:
        first._claim_ports(devsite.Ports(36000), 4)
        second = cluster.DevCluster(tmp_path / "b")
        with pytest.raises(UsageError) as err:
            second._claim_ports(devsite.Ports(36500), 4)
        msg = str(err.value)
        assert "36500-37203 overlap" in msg and str(first.state_dir) in msg and "--port-base 36704" in msg
        second._claim_ports(devsite.Ports(36704), 4)  # 704 away: fine
        first._claim_ports(devsite.Ports(36000), 4)  # its own claim again: fine (idempotent up)
    finally:
        proc.kill()
        proc.wait()
    # the first one is down now: its claim is stale and does not block
    cluster.DevCluster(tmp_path / "c")._claim_ports(devsite.Ports(36300), 4)


def test_the_wide_plan_gives_every_node_of_200_its_own_ports_inside_its_span():
    """Above 50 nodes (or `up --wide-ports`): 200-port blocks from base+1000 (issue 27)."""
    assert devsite.Ports.plan(35000, 50).wide is False and devsite.Ports.plan(35000, 51).wide is True
    assert devsite.Ports.plan(35000, 8, wide=True).wide is True
    ports = devsite.Ports(35000, wide=True)
    first, last = ports.span(128)
    assert (first, last) == (35000, 37199) and ports.span(4) == (first, last)
    n = devsite.WIDE_MAX_NODES
    per_node = [f(i) for i in range(n) for f in (lambda i: ports.bmc_ipmi + i, lambda i: ports.bmc_redfish + i,
                                                  ports.ssh, ports.monitor_node_exporter, ports.monitor_dcgm_exporter)]
    fixed = [ports.slurmctld, ports.slurmdbd, ports.mysql, *range(ports.first_slurmd, ports.first_slurmd + n),
             *range(ports.monitor_head_exporter, ports.monitor_alertmanager_cluster + 1), *ports.job_ports()]
    every = per_node + fixed
    assert len(set(every)) == len(every) and all(first <= p <= last for p in every)
    assert ports.job_ports() == list(range(37000, 37200)) and ports.burnin_rendezvous_ports == 200
    # the small plan is what it was
    small = devsite.Ports(35000)
    assert (small.bmc_ipmi, small.bmc_redfish, small.ssh(3), small.monitor_node_exporter(3),
            small.burnin_rendezvous, small.burnin_rendezvous_ports) == (35300, 35350, 35503, 35703, 35400, 100)


def test_a_wide_test_cluster_at_base_plus_5000_misses_the_other_test_clusters():
    base = 27000
    first, last = devsite.Ports(base + 5000, wide=True).span(16)
    for other in (devsite.Ports(base).span(4), (base + 720, base + 739), devsite.Ports(base + 2000).span(4),
                  devsite.Ports(base + 3000).span(2), devsite.Ports(base + 3800).span(2)):
        assert last < other[0] or first > other[1]


def test_ports_come_back_from_the_record():
    assert devsite.Ports.of_record({"port_base": 35000, "port_plan": "wide"}) == devsite.Ports(35000, True)
    assert devsite.Ports.of_record({"port_base": 17000}) == devsite.Ports(17000)  # before issue 27: small
