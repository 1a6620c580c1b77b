"""Integration fixtures: ONE real dev cluster per test session (4 fake B200 nodes).

Port base and state directory come from $SLURMADM_TEST_PORT_BASE (default 27000) and
$SLURMADM_TEST_STATE_DIR, so several sessions can run side by side on one machine.
"""

from __future__ import annotations

import os
import subprocess
import sys
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
    dc.up(nodes=4, port_base=TEST_PORT_BASE, timeout=180)
    yield dc
    dc.down(purge=True)


@pytest.fixture()
def cluster_env(dev_cluster: DevCluster) -> dict[str, str]:
    env = dict(os.environ)
    env.update(dev_cluster.env())
    return env


def run_slurmadm(env: dict[str, str], *args: str, timeout: float = 120, input: str | None = None
                 ) -> subprocess.CompletedProcess[str]:
    """The real console entry point in a child process, with the dev cluster's environment."""
    return subprocess.run([sys.executable, "-m", "slurmadm", *args], env=env, capture_output=True,
                          text=True, timeout=timeout, input=input)
