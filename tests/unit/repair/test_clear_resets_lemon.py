"""An admin's `repair clear` is a fresh start for a node's lemon counts (issue 44): the failed
qualifications and the incidents on the node before it no longer make the node a lemon, in the
executor's facts, the ladder's rule and `repair lemons`. A GPU serial's own count follows the
part (a reseated GPU that faults again is that part's fourth)."""

from __future__ import annotations

import pytest

from slurmadm.repair import incidents, ladder, views
from slurmadm.store import Store
from tests.unit.repair.helpers import health_drain, inventory, xid_line

pytestmark = pytest.mark.unit

NOW = 1_800_000_000.0
NODE = "b200-009"
LINE = xid_line(2, 46, "ROBUST_CHANNEL_GPU_TIMEOUT_ERROR", "RESET_GPU")
ROW_REMAP = "GPU{} row remapping failed (corrected=0 uncorrected=1)"


def _fault(store, k: int, check=("xid", LINE)):
    health_drain(store, NODE, [check], ts=NOW + k * 3600, run_id=f"r{k}")
    incidents.ingest(store, now=NOW + k * 3600 + 1)
    return incidents.list_incidents(store, node=NODE, states=["open"])[-1]


def test_failed_qualifications_before_a_clear_no_longer_count(tmp_path):
    s = ladder.settings(None)
    with Store(tmp_path / "s.db") as store:
        inventory(store, NODE, [f"s{i}" for i in range(8)])
        inc = _fault(store, 0)
        for q in range(2):
            incidents.record_qualification(store, inc.id, NODE, status="failed", now=NOW + 100 + q)
            incidents.advance(store, inc.id, "open", "qualify", outcome="failed", now=NOW + 100 + q,
                              evidence={"q": q})
        assert incidents.failed_qualifications(store, node=NODE) == 2
        again = incidents.get(store, inc.id)
        assert ladder.lemon_why(again, incidents.part_history(store, again), s, NOW + 200).startswith("2 failed")
        assert [d["name"] for d in views.lemons(store, s, NOW + 200)] == [NODE]

        incidents.clear(store, NODE, "GPU2 swapped", now=NOW + 300)
        assert incidents.failed_qualifications(store, node=NODE) == 0
        assert views.lemons(store, s, NOW + 400) == []
        new = _fault(store, 1, ("row-remap", ROW_REMAP.format(5)))
        assert ladder.lemon_why(new, incidents.part_history(store, new), s, NOW + 2 * 3600) == ""


def test_the_nodes_incident_count_starts_again_from_a_clear(tmp_path):
    s = ladder.settings(None)  # 3 incidents in 28 days
    with Store(tmp_path / "s.db") as store:
        inventory(store, NODE, [f"s{i}" for i in range(8)])
        for k, gpu in enumerate((1, 3)):
            inc = _fault(store, k, ("row-remap", ROW_REMAP.format(gpu)))
            incidents.advance(store, inc.id, "closed", "resume", outcome="ok", now=NOW + k * 3600 + 60)
        third = _fault(store, 2, ("row-remap", ROW_REMAP.format(6)))
        assert "3 incidents on b200-009" in ladder.lemon_why(third, incidents.part_history(store, third), s,
                                                             NOW + 3 * 3600)
        incidents.clear(store, NODE, "board replaced", now=NOW + 3 * 3600)
        fourth = _fault(store, 4, ("row-remap", ROW_REMAP.format(7)))
        assert ladder.lemon_why(fourth, incidents.part_history(store, fourth), s, NOW + 5 * 3600) == ""
        assert views.lemons(store, s, NOW + 5 * 3600) == []
