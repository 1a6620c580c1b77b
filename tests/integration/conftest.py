"""Integration fixtures: ONE real dev cluster per test session (4 fake B200 nodes).

Port base and state directory come from $SLURMADM_TEST_PORT_BASE (default 27000) and
$SLURMADM_TEST_STATE_DIR, so several sessions can run side by side on one machine.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from slurmadm.devcluster.cluster import DevCluster

TEST_PORT_BASE = int(os.environ.get("SLURMADM_TEST_PORT_BASE", "27000"))
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def dev_cluster() -> DevCluster:
    if os.geteuid() != 0:
        pytest.fail("integration tests need root (they start munged, MariaDB and Slurm)")
    state = Path(os.environ.get("SLURMADM_TEST_STATE_DIR") or f"/tmp/slurmadm-test-{TEST_PORT_BASE}")
    dc = DevCluster(state)
    dc.down(purge=True)  # never inherit jobs, drains or accounts from an earlier session
    # bmc=True: BMC emulators per node (test_bmc*.py), sshd per node (test_fleet.py); on from the start, so no module restarts Slurm
    dc.up(nodes=4, port_base=TEST_PORT_BASE, timeout=180, bmc=True, ssh=True)
    yield dc
    dc.down(purge=True)


@pytest.fixture()
def cluster_env(dev_cluster: DevCluster) -> dict[str, str]:
    env = dict(os.environ)
    env.update(dev_cluster.env())
    return env
