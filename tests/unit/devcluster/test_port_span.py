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
