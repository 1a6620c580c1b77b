"""Which GPU a failed qualification blames (repair/blame.py), and two failed qualifications that
blame the same GPU make that GPU (by serial) a lemon, wherever it sits (issue 45)."""

from __future__ import annotations

import pytest

from slurmadm.repair import blame, incidents, ladder, views
from slurmadm.repair.qualify import Qualification
from slurmadm.store import Store
from tests.unit.repair.helpers import health_drain, inventory, xid_line

pytestmark = pytest.mark.unit

NOW = 1_800_000_000.0
NODE = "b200-004"
SERIALS = [f"165232510000{i}" for i in range(8)]


def kat(*bad, status="fail"):
    return {"test": "kat", "status": status, "detail": "x", "data": {"bad": list(bad)}}


def test_the_known_answer_test_blames_its_disagreeing_devices():
    assert blame.gpus([kat("standin:b200-004:gpu5")]) == [5]
    assert blame.gpus([kat("cuda:2", "cuda:7")]) == [2, 7]
    assert blame.gpus([kat("cpu")]) == []  # the CPU fallback is no GPU


def test_other_tests_blame_the_gpus_their_detail_names_and_passing_tests_none():
    tests = [{"test": "stress", "status": "fail", "detail": "GPU3 HW slowdown in 7 of 7 samples under stress; "
                                                            "GPU3 SW thermal slowdown; 8 GPUs watched"},
             {"test": "health", "status": "fail", "detail": "xid: GPU1 XID 79 ROBUST_CHANNEL (RESTART_BM)"},
             {"test": "allreduce-node", "status": "pass", "detail": "GPU6 fine"},
             kat("cuda:3")]
    assert blame.gpus(tests) == [3, 1]
    assert blame.gpus([{"test": "allreduce-node", "status": "fail", "detail": "busbw 12 GB/s < 300"}]) == []


def test_the_blamed_index_is_the_part_in_the_nodes_inventory():
    inv = [{"index": i, "serial": s, "uuid": f"GPU-{s}", "bus_id": f"00000000:{0x18 + i:02X}:00.0"}
           for i, s in enumerate(SERIALS)]
    got = blame.parts([kat("cuda:5")], inv)
    assert got == [{"slot": "5", "serial": SERIALS[5], "uuid": f"GPU-{SERIALS[5]}", "bus_id": "00000000:1D:00.0"}]
    assert blame.describe(got) == f"GPU5 (serial {SERIALS[5]})"
    assert blame.parts([kat("cuda:9")], inv) == [{"slot": "9", "serial": "", "uuid": "", "bus_id": ""}]


def _failed(store, inc_id, gpu, k):
    q = Qualification(NODE, "fail", f"kat: gpu{gpu} differs", "kat", tests=[kat(f"cuda:{gpu}")])
    q.blamed = blame.parts(q.tests, incidents.gpu_inventory(store, NODE))
    incidents.record_qualification(store, inc_id, NODE, status="failed", evidence=[q.to_json()], now=NOW + 100 + k)


def test_two_failed_qualifications_blaming_one_gpu_make_its_serial_a_lemon(tmp_path):
    s = ladder.settings(None)  # lemon at 2 failed qualifications
    with Store(tmp_path / "s.db") as store:
        inventory(store, NODE, SERIALS)
        health_drain(store, NODE, [("xid", xid_line(5, 46, "ROBUST_CHANNEL_GPU_TIMEOUT_ERROR", "RESET_GPU"))],
                     ts=NOW, run_id="r1")
        incidents.ingest(store, now=NOW + 1)
        (inc,) = incidents.list_incidents(store, node=NODE)
        _failed(store, inc.id, 5, 0)
        assert [d["kind"] for d in views.lemons(store, s, NOW + 200)] == []
        _failed(store, inc.id, 5, 1)
        got = {(d["kind"], d["name"]): d for d in views.lemons(store, s, NOW + 200)}
        assert set(got) == {("node", NODE), ("gpu", SERIALS[5])}
        assert got[("gpu", SERIALS[5])]["why"] == f"2 failed qualifications blame it ({NODE} GPU5)"
        # failures that blame two different GPUs make neither a lemon (the node still is one)
        other = Store(tmp_path / "t.db")
        inventory(other, NODE, SERIALS)
        health_drain(other, NODE, [("xid", xid_line(5, 46, "X", "RESET_GPU"))], ts=NOW, run_id="r1")
        incidents.ingest(other, now=NOW + 1)
        (inc2,) = incidents.list_incidents(other, node=NODE)
        _failed(other, inc2.id, 5, 0)
        _failed(other, inc2.id, 6, 1)
        assert [d["kind"] for d in views.lemons(other, s, NOW + 200)] == ["node"]
        other.close()
        # an admin's clear is a fresh start for the GPU's count too
        incidents.clear(store, NODE, "GPU5 reseated", now=NOW + 300)
        assert views.lemons(store, s, NOW + 400) == []
