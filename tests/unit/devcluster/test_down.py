"""`dev-cluster down` reports only once every process of the dev cluster has exited, and purges
only then (issue 15: it said "stopped 8 process(es)" while slurmd processes still ran, and
--purge deleted their files under them)."""

from __future__ import annotations

import os
import sys

import pytest

from slurmadm.devcluster.cluster import DevCluster
from slurmadm.devcluster.daemons import session_members

pytestmark = pytest.mark.unit

# A daemon that, like slurmd shutting down while it launches a job step or a health check, forks
# on SIGTERM: the child lives on in the daemon's session after the daemon itself has exited.
FORKS_ON_TERM = r"""
import os, signal, sys, time
ignore = sys.argv[1] == "ignore"
def term(*_):
    if os.fork() == 0:
        if ignore:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        time.sleep(120)
        os._exit(0)
    os._exit(0)
signal.signal(signal.SIGTERM, term)
print("ready", flush=True)
while True:
    time.sleep(1)
"""


@pytest.mark.parametrize("child", ["dies-on-term", "ignore"])
def test_down_waits_for_every_process_of_its_sessions(tmp_path, child):
    dc = DevCluster(tmp_path / "dc")
    dc.state_dir.mkdir()
    d = dc.daemon("munged")
    pid = d.start([sys.executable, "-c", FORKS_ON_TERM, child])
    assert d.alive()
    stopped = dc.down(purge=True, kill_after=1.0)
    assert "munged" in stopped
    # nothing of that daemon's session is left, and the state went only after that
    left = [p for p in session_members({pid}) if p != os.getpid()]
    assert left == []
    assert not dc.state_dir.exists()
