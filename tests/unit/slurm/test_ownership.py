"""slurmadm only undoes what it did: drain/resume decisions by reason owner and node state."""

from __future__ import annotations

import pytest

from slurmadm.slurm import NodeInfo, choose_backend
from slurmadm.errors import UsageError
from slurmadm.slurm.ownership import format_reason, is_ours, may_drain, may_resume, reason_check_id, reason_detail

pytestmark = pytest.mark.unit


def node(state="IDLE", flags=(), reason="", user=""):
    return NodeInfo(name="b200-003", state=state, flags=frozenset(flags), reason=reason, reason_user=user)


def test_reason_format_is_stable_and_bounded():
    r = format_reason("ecc-uncorrected", "GPU5 volatile DBE=2", "prolog")
    assert r == "slurmadm: ecc-uncorrected: GPU5 volatile DBE=2 [prolog]"
    assert reason_check_id(r) == "ecc-uncorrected"
    long = format_reason("xid", "x" * 1000, "periodic")
    assert len(long) <= 240 and long.endswith("... [periodic]")
    assert reason_check_id("admin: PSU") is None
    assert reason_detail(r) == "GPU5 volatile DBE=2"
    assert reason_detail("slurmadm: xid: GPU2 XID 79: fell off [periodic]") == "GPU2 XID 79: fell off"
    assert reason_detail("admin: PSU") == "admin: PSU"


def test_healthy_node_may_be_drained():
    assert may_drain(node()).act


@pytest.mark.parametrize(
    "n,why",
    [
        (node(flags={"DRAIN"}, reason="admin: replace PSU", user="alice"), "already drained by alice"),
        (node(flags={"DRAIN"}, reason="slurmadm: xid: GPU1 XID 79 [prolog]"), "already drained by slurmadm"),
        (node(flags={"REBOOT_REQUESTED"}), "REBOOT_REQUESTED"),
        (node(flags={"REBOOT_ISSUED"}), "REBOOT_ISSUED"),
        (node(flags={"RESERVED", "MAINTENANCE"}), "MAINTENANCE"),
        (node(flags={"POWERING_UP"}), "POWERING_UP"),
    ],
)
def test_foreign_states_are_left_alone(n, why):
    verdict = may_drain(n)
    assert not verdict.act and why in verdict.why


def test_resume_only_our_own_drains():
    ours = node(flags={"DRAIN"}, reason="slurmadm: ecc-uncorrected: GPU5 [prolog]", user="root")
    assert is_ours(ours) and may_resume(ours).act
    admin = node(flags={"DRAIN"}, reason="admin: bad fan", user="alice")
    assert not may_resume(admin).act and "alice" in may_resume(admin).why
    # a node someone has since scheduled for reboot is not resumed even if the drain is ours
    rebooting = node(flags={"DRAIN", "REBOOT_REQUESTED"}, reason="slurmadm: xid: x [periodic]")
    assert not may_resume(rebooting).act
    assert not may_resume(node()).act  # not drained


class _FakePyslurm:
    def __init__(self, version):
        self.__version__ = version


def test_backend_choice():
    assert choose_backend("auto", None, (22, 5, 8)) == "cli"
    assert choose_backend("auto", _FakePyslurm("25.11.2"), (22, 5, 8)) == "cli"
    assert choose_backend("auto", _FakePyslurm("22.5.3"), (22, 5, 8)) == "pyslurm"
    assert choose_backend("auto", _FakePyslurm("24.11.0"), (24, 11, 5)) == "pyslurm"
    assert choose_backend("cli", _FakePyslurm("22.5.3"), (22, 5, 8)) == "cli"
    with pytest.raises(UsageError, match="pyslurm is release"):
        choose_backend("pyslurm", _FakePyslurm("25.11.2"), (22, 5, 8))
    with pytest.raises(UsageError, match="not one of"):
        choose_backend("rest", None, (22, 5, 8))


# --- issue 15: reservations, DOWN-like states, admin-edited reasons -------------------------------

def test_an_ordinary_reservation_does_not_stop_enforcement():
    """Slurm flags every node of an active reservation RESERVED; only MAINT reservations (node flag
    MAINTENANCE) are someone else's maintenance. A user reservation's node is drained like any other."""
    assert may_drain(node(flags={"RESERVED"})).act
    ours = node(flags={"DRAIN", "RESERVED"}, reason="slurmadm: xid: GPU1 XID 79 [periodic]")
    assert may_resume(ours).act


@pytest.mark.parametrize("state,flags", [
    ("DOWN", ()), ("DOWN", {"NOT_RESPONDING"}), ("IDLE", {"NOT_RESPONDING"}), ("IDLE", {"FAIL"}),
    ("IDLE", {"POWERED_DOWN"}), ("IDLE", {"POWERING_DOWN"}), ("IDLE", {"POWERING_UP"}),
    ("IDLE", {"POWER_DOWN"}), ("DOWN", {"DRAIN"}), ("FUTURE", ()),
])
def test_down_like_nodes_are_never_drained_or_resumed(state, flags):
    n = node(state=state, flags=flags, reason="admin down", user="alice")
    assert not may_drain(n).act
    ours = node(state=state, flags=set(flags) | {"DRAIN"}, reason="slurmadm: xid: GPU1 XID 79 [periodic]")
    assert not may_drain(ours).act and not may_resume(ours).act


@pytest.mark.parametrize("reason", [
    "slurmadm: ecc-uncorrected: GPU5 volatile uncorrected ECC=1 [prolog] -- admin: RMA, do not resume",
    "slurmadm: ecc-uncorrected: GPU5 volatile uncorrected ECC=1 [prolog] admin",
    "slurmadm: ecc-uncorrected: GPU5 RMA do not resume",
    "slurmadm:ecc",
])
def test_an_admin_edited_reason_is_no_longer_ours(reason):
    n = node(flags={"DRAIN"}, reason=reason)
    assert not is_ours(n) and not may_resume(n).act


def test_our_reasons_stay_ours():
    for r in ("slurmadm: ecc-uncorrected: GPU5 volatile DBE=2 [prolog]",
              "slurmadm: burnin-allreduce-pair: 12 GB/s < 40 [burnin]",
              format_reason("xid", "GPU2 XID 79: fell off [weird] text", "periodic"),
              format_reason("xid", "x" * 1000, "run")):
        assert is_ours(node(flags={"DRAIN"}, reason=r)), r
