"""The pyslurm backend speaks pyslurm's object API. pyslurm cannot be built against the Slurm
here (it only builds against its own release), so this pins the calls it makes on a stand-in
module with the same surface: Node.load(name).modify(Node(state=..., reason=...)), Nodes.load()."""

from __future__ import annotations

import pytest

from slurmadm.errors import UnreachableError
from slurmadm.slurm import PyslurmBackend

pytestmark = pytest.mark.unit


class RPCError(Exception):
    pass


class FakePyslurm:
    __version__ = "22.5.3"
    RPCError = RPCError

    def __init__(self):
        self.db = {
            "b200-001": dict(state="IDLE", reason=None, reason_user=None, configured_gres={"gpu:b200": 8},
                             partitions=["gpu"], total_cpus=224, real_memory=1992294),
        }
        fake = self

        class Node:
            def __init__(self, name=None, **changes):
                self.name = name
                self.changes = changes
                for k, v in fake.db.get(name, {}).items():
                    setattr(self, k, v)

            @classmethod
            def load(cls, name):
                if name not in fake.db:
                    raise RPCError("Invalid node name specified")
                return cls(name)

            def modify(self, other):
                rec = fake.db[self.name]
                state = other.changes.get("state")
                if state == "DRAIN":
                    rec["state"] = rec["state"].split("+")[0] + "+DRAIN"
                    rec["reason"], rec["reason_user"] = other.changes["reason"], "root"
                elif state == "RESUME":
                    rec["state"], rec["reason"], rec["reason_user"] = rec["state"].split("+")[0], None, None
                elif "reason" in other.changes:
                    rec["reason"] = other.changes["reason"]

        class Nodes:
            @staticmethod
            def load():
                return {n: Node(n) for n in fake.db}

        self.Node = Node
        self.Nodes = Nodes


def test_drain_resume_round_trip():
    mod = FakePyslurm()
    backend = PyslurmBackend(mod, (22, 5, 8))
    backend.drain(["b200-001"], "slurmadm: xid: GPU2 XID 79 [periodic]")
    n = backend.nodes(["b200-001"])[0]
    assert n.drained and n.reason.startswith("slurmadm: xid") and n.reason_user == "root"
    assert n.gpus == 8 and n.cpus == 224
    backend.resume(["b200-001"])
    assert not backend.nodes()[0].drained


def test_rpc_errors_become_one_line():
    backend = PyslurmBackend(FakePyslurm(), (22, 5, 8))
    with pytest.raises(UnreachableError, match="pyslurm load node: Invalid node name specified"):
        backend.drain(["b200-999"], "slurmadm: x: y [run]")


def test_active_maintenance_reservation_marks_nodes_at_once():
    """slurmctld sets MAINTENANCE on a node only at its next reservation pass; until then the node
    reads as plain IDLE. Both backends read reservations and mark its nodes themselves, so a health
    run in that window does not drain a node that is under maintenance."""
    from slurmadm.slurm.model import Reservation

    mod = FakePyslurm()
    mod.db["b200-002"] = dict(mod.db["b200-001"])
    active = Reservation("admin_maint", "b200-002", "root", frozenset({"MAINT", "IGNORE_JOBS"}), "ACTIVE")
    later = Reservation("next_week", "b200-001", "root", frozenset({"MAINT"}), "INACTIVE")
    backend = PyslurmBackend(mod, (22, 5, 8), lambda: [active, later])
    by_name = {n.name: n for n in backend.nodes()}
    assert {"MAINTENANCE", "RESERVED"} <= by_name["b200-002"].flags
    assert not by_name["b200-001"].flags  # an inactive reservation holds nothing yet
    assert {"MAINTENANCE", "RESERVED"} <= backend.nodes(["b200-002"])[0].flags
