"""A link that keeps flapping (`dev-cluster ib-fault --kind flap --every S`): the stand-in's
flapper runs as a dev-cluster daemon, logs a flap every S seconds and moves link_downed, until
`--clear` stops it (ibsysfs.stop_flapping), and a stopped flapper is gone before the clear
returns, so no flap is logged after it."""

from __future__ import annotations

import pytest

from slurmadm.devcluster import ibsysfs
from slurmadm.devcluster.daemons import Daemon, wait_for
from slurmadm.resources import example_site
from slurmadm.site import load_site

pytestmark = pytest.mark.unit
NODE = "b200-001"


def downs(kmsg) -> int:
    return sum("mlx5_2: Link down" in line for line in kmsg.read_text().splitlines()) if kmsg.exists() else 0


def test_the_flapper_flaps_until_stopped(tmp_path):
    profile = load_site(example_site()).node_profile(NODE)
    ibsysfs.write_healthy(tmp_path, NODE, profile)
    kmsg = tmp_path / f"{NODE}.kmsg"
    name = ibsysfs.flap_daemon_name(NODE, "mlx5_2")
    d = Daemon(name, tmp_path / "run" / f"{name}.dev.pid", tmp_path / "log" / f"{name}.out")
    other = Daemon("ib-flap-b200-0010.mlx5_2", tmp_path / "run" / "other.dev.pid", tmp_path / "log" / "other.out")
    d.start(ibsysfs.flapper_argv(tmp_path, NODE, "mlx5_2", profile.nics.port, kmsg, 0.5))
    try:
        assert wait_for(lambda: downs(kmsg) >= 2, 30), d.tail()
        hcas = tmp_path / f"{NODE}.sysfs" / "class" / "infiniband"
        assert int((hcas / "mlx5_2" / "ports" / "1" / "counters" / "link_downed").read_text()) >= 2
        assert (hcas / "mlx5_3" / "ports" / "1" / "counters" / "link_downed").read_text() == "0\n"
        # another node's flapper (a name that only starts like this node's) is not this node's
        assert ibsysfs.stop_flapping([other, d], NODE) == ["mlx5_2"]
        assert not d.alive()
        logged = downs(kmsg)
        assert ibsysfs.stop_flapping([d], NODE) == []  # already stopped: nothing to stop
        assert downs(kmsg) == logged
    finally:
        d.stop(timeout=5)


def test_a_link_that_goes_down_once(tmp_path):
    """`ib-fault --kind flap-once`: one flap (its Link down and Link up lines, link_downed +1),
    what burn-in's link watch fails a node for and the health check's flap window lets pass."""
    from slurmadm.health.nodechecks import link_downs

    profile = load_site(example_site()).node_profile(NODE)
    ibsysfs.write_healthy(tmp_path, NODE, profile)
    kmsg = tmp_path / f"{NODE}.kmsg"
    ibsysfs.ib_fault(tmp_path, NODE, "mlx5_2", "flap-once", port=profile.nics.port, kmsg=kmsg)
    port = tmp_path / f"{NODE}.sysfs" / "class" / "infiniband" / "mlx5_2" / "ports" / str(profile.nics.port)
    assert downs(kmsg) == 1 and (port / "counters" / "link_downed").read_text() == "1\n"
    assert link_downs(str(kmsg), NODE, 4e9, ["mlx5_2", "mlx5_3"], 0.0) == {"mlx5_2": 1}
    with pytest.raises(ibsysfs.UsageError, match="kernel log"):
        ibsysfs.ib_fault(tmp_path, NODE, "mlx5_2", "flap-once", port=profile.nics.port)
