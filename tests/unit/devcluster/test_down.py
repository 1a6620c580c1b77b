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


def test_down_of_128_nodes_names_the_stopped_daemons_as_hostlists(monkeypatch):
    """`dev-cluster down` of the reference site printed 394 names on one line; folded, each kind
    of per-node daemon is one hostlist (issue 27)."""
    from click.testing import CliRunner

    from slurmadm.cli import cli
    from slurmadm.cli import dev_cluster as dc_cli

    names = ([f"slurmd-b200-{i:03d}" for i in range(128, 0, -1)] + [f"sshd-b200-{i:03d}" for i in range(1, 129)]
             + ["slurmctld", "slurmdbd", "mariadbd", "munged"])

    class Fake:
        state_dir = "/tmp/x"

        def down(self, purge=False, progress=None):
            return names

    monkeypatch.setattr(dc_cli, "_cluster", lambda state_dir: Fake())
    r = CliRunner().invoke(cli, ["dev-cluster", "down"])
    assert r.exit_code == 0, r.output
    assert r.output.split() == ["stopped", "260", "process(es):",
                                "mariadbd,munged,slurmctld,slurmd-b200-[001-128],slurmdbd,sshd-b200-[001-128]"]
