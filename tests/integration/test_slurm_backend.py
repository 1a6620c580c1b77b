"""The cli Slurm backend against the real dev cluster (22.05 on Debian 12, 24.11 on Debian 13):
drain, set_reason and resume round trips, and the JSON and text forms reading the same."""

from __future__ import annotations

import pytest

from slurmadm.devcluster.daemons import wait_for
from slurmadm.errors import UnreachableError
from slurmadm.proc import run
from slurmadm.slurm import CliBackend
from slurmadm.slurm.ownership import format_reason, is_ours, may_resume
from slurmadm.slurm.parse import nodes_from_scontrol_text

pytestmark = pytest.mark.integration

NODE = "b200-004"


@pytest.fixture()
def backend(dev_cluster):
    b = CliBackend(env={"SLURM_CONF": str(dev_cluster.slurm_conf)})
    yield b
    if b.nodes([NODE])[0].drained:  # leave the node as the other tests expect it
        b.resume([NODE])
    assert wait_for(lambda: b.nodes([NODE])[0].state_text == "IDLE", 30, interval=0.2)


def test_drain_set_reason_resume_round_trip(backend):
    reason = format_reason("ecc-uncorrected", "GPU5 volatile DBE=2, SBE=17", "prolog")
    backend.drain([NODE], reason)
    node = backend.nodes([NODE])[0]
    assert node.drained and node.reason == reason and node.reason_user == "root"
    assert is_ours(node) and may_resume(node).act

    newer = format_reason("ecc-uncorrected", "GPU5 volatile DBE=3", "periodic")
    backend.set_reason([NODE], newer)
    node = backend.nodes([NODE])[0]
    assert node.drained and node.reason == newer

    backend.resume([NODE])
    assert wait_for(lambda: not backend.nodes([NODE])[0].drained, 30, interval=0.2)
    assert backend.nodes([NODE])[0].reason == ""


def test_json_and_text_forms_agree(backend, dev_cluster):
    backend.drain([NODE], "admin: replace PSU 2 [ticket=4711]")
    text = run(["scontrol", "show", "node", "-o"], env={"SLURM_CONF": str(dev_cluster.slurm_conf)}).stdout
    from_text = {n.name: n for n in nodes_from_scontrol_text(text)}
    from_json = {n.name: n for n in backend.nodes()}
    assert from_text == from_json and set(from_json) == set(dev_cluster.nodes())
    assert from_json[NODE].reason == "admin: replace PSU 2 [ticket=4711]" and not is_ours(from_json[NODE])


def test_unknown_node_is_one_clear_error(backend):
    with pytest.raises(UnreachableError, match="does not know node.*b200-999"):
        backend.nodes(["b200-999"])


def test_a_node_in_an_active_maintenance_reservation_is_foreign_at_once(backend, dev_cluster):
    """slurmctld sets MAINTENANCE/RESERVED on the node only at its next reservation pass (seconds
    later on 24.11); the adapter reports them from the moment the reservation is active, so no
    health check drains a node someone holds for maintenance."""
    from slurmadm.slurm.ownership import may_drain

    env = {"SLURM_CONF": str(dev_cluster.slurm_conf)}
    run(["scontrol", "create", "reservation", "ReservationName=maint_test", "StartTime=now",
         "Duration=UNLIMITED", f"Nodes={NODE}", "Users=root", "Flags=MAINT,IGNORE_JOBS"], env=env)
    try:
        node = backend.nodes([NODE])[0]
        assert {"MAINTENANCE", "RESERVED"} <= node.flags
        assert not may_drain(node).act and "MAINTENANCE" in may_drain(node).why
        assert not {"MAINTENANCE", "RESERVED"} & backend.nodes(["b200-001"])[0].flags
    finally:
        run(["scontrol", "delete", "ReservationName=maint_test"], env=env)
    # ...and the node is free again once it ends (slurmctld may clear its own flags a pass later)
    assert wait_for(lambda: not {"MAINTENANCE"} & backend.nodes([NODE])[0].flags, 30, interval=0.5)
