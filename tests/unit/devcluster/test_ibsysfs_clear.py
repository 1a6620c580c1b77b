"""`dev-cluster ib-fault --clear` rewrites a node's stand-in InfiniBand tree while the monitoring
stack's traffic process (`ibsysfs.tick`, every second) writes counters into it. A counter written
while rmtree emptied its directory made rmtree fail half-way (ENOTEMPTY) and left every HCA of
the node missing, for the rest of the full suite (seen: test_monitor's clear, then every later
module's b200-002 failing `infiniband: mlx5_0 missing; ...`)."""

from __future__ import annotations

import os

import pytest

from slurmadm.devcluster import ibsysfs
from slurmadm.resources import example_site
from slurmadm.site import load_site

pytestmark = pytest.mark.unit
NODE = "b200-001"


def test_a_counter_written_during_the_clear_leaves_a_whole_tree(tmp_path, monkeypatch):
    profile = load_site(example_site()).node_profile(NODE)
    hcas = ibsysfs.write_healthy(tmp_path, NODE, profile)
    ibsysfs.ib_fault(tmp_path, NODE, hcas[0], "missing")
    real_rmdir = os.rmdir
    wrote: list[str] = []

    def rmdir_after_a_tick(path, *args, **kwargs):
        # the traffic process gets in once while rmtree is emptying a port's directory (its
        # write_atomic's temp file lands there), as it did in the suite
        if not wrote and str(path) == "counters":
            fd = os.open("port_xmit_data.tmp", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=kwargs.get("dir_fd"))
            os.close(fd)
            wrote.append(str(path))
        return real_rmdir(path, *args, **kwargs)

    monkeypatch.setattr(os, "rmdir", rmdir_after_a_tick)
    assert ibsysfs.write_healthy(tmp_path, NODE, profile) == hcas
    monkeypatch.undo()
    assert wrote, "the race was not provoked"
    base = ibsysfs.root_of(tmp_path, NODE) / "class" / "infiniband"
    for hca in hcas:
        assert (base / hca / "ports" / str(profile.nics.port) / "state").read_text() == "4: ACTIVE\n"
    assert ibsysfs.tick(tmp_path, [NODE]) == len(hcas) + 1  # every port moves again (and the RoCE one)
