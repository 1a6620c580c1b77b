"""Repair owns `slurmadm: repair: ...` drains: health never resumes them."""

from __future__ import annotations

import pytest

from slurmadm.health.actions import decide
from slurmadm.repair import ladder
from slurmadm.slurm.model import NodeInfo
from slurmadm.slurm.ownership import is_ours, owner

pytestmark = pytest.mark.unit


def test_health_leaves_repair_drains_to_repair():
    reason = ladder.reason("reset", "GPU2 serial 1655 RESET_GPU (rung 1 of 3)")
    node = NodeInfo(name="b200-001", state="IDLE", flags=frozenset({"DRAIN"}), reason=reason, partitions=("gpu",))
    assert is_ours(node) and owner(reason) == "slurmadm repair"
    plan = decide(context="periodic", results=[], node=node, everyone=[node], fraction=0.5, resume_after=1,
                  prev_clean=5)
    assert plan.action == "none" and "not a health check" in plan.reason
    lemon = ladder.reason("lemon", "3 incidents on b200-001 in 28 days")
    assert lemon.startswith("slurmadm: repair: lemon: ") and owner(lemon) == "slurmadm repair"
