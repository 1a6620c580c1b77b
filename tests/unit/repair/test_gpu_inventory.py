"""Part identity from the health run itself: gpu-count keeps each GPU's index, bus id, NVML serial
and UUID in node_state (stand-in NVML through the real pynvml, in a child process), and a real
XID finding maps to that serial."""

from __future__ import annotations

import json
import sqlite3

import pytest

from slurmadm.devcluster import gpus
from slurmadm.repair import classes, incidents
from tests.unit.health.test_checks_standin import NODE, node  # noqa: F401 - the stand-in node fixture

pytestmark = pytest.mark.unit


def inventory(run) -> list[dict]:
    db = sqlite3.connect(run.tmp / "slurmadm.db")
    row = db.execute("SELECT value FROM node_state WHERE node=? AND key='health.gpus'", (NODE,)).fetchone()
    db.close()
    return json.loads(row[0]) if row else []


def test_gpu_count_keeps_the_gpus_identity_and_an_xid_maps_to_its_serial(node):  # noqa: F811
    assert node("gpu-count", dry_run=False)["by_id"]["gpu-count"]["status"] == "pass"
    inv = inventory(node)
    state = gpus.read_state(node.gdir, NODE)["gpus"]
    assert [(g["index"], g["serial"], g["uuid"]) for g in inv] == [
        (i, s["serial"], s["uuid"]) for i, s in enumerate(state)]
    assert all(g["bus_id"] for g in inv)

    gpus.inject(node.gdir, NODE, 3, "xid", "46")
    r = node("xid")["by_id"]["xid"]
    assert r["status"] == "fail", r
    faults = [f for f in classes.classify("xid", r["detail"]) if f.opens_incident]
    assert [(f.cls, f.slot) for f in faults] == [("RESET_GPU", "3")], r["detail"]
    key, slot, ident = incidents.part_of(NODE, faults[0], inv)
    assert (key, slot, ident["uuid"]) == (state[3]["serial"], "3", state[3]["uuid"])

    # GPU5 falls off the bus: NVML renumbers the rest (the old GPU6 is index 5 now); the inventory is
    # keyed by bus id, the lost GPU keeps its identity, and gpu-count's finding maps to its serial
    gpus.inject(node.gdir, NODE, 5, "missing-gpu")
    lost = node("gpu-count", dry_run=False)["by_id"]["gpu-count"]
    assert lost["status"] == "fail", lost
    inv = inventory(node)
    assert sorted(g["serial"] for g in inv) == sorted(s["serial"] for s in state)
    assert [g["serial"] for g in inv if not g["present"]] == [state[5]["serial"]]
    (f,) = [f for f in classes.classify("gpu-count", lost["detail"]) if f.opens_incident]
    assert incidents.part_of(NODE, f, inv)[0] == state[5]["serial"], lost["detail"]


def test_infiniband_keeps_each_hcas_guid(node):  # noqa: F811
    from slurmadm.devcluster import ibsysfs

    assert node("infiniband", dry_run=False)["by_id"]["infiniband"]["status"] == "pass"
    db = sqlite3.connect(node.tmp / "slurmadm.db")
    (text,) = db.execute("SELECT value FROM node_state WHERE node=? AND key='health.hcas'", (NODE,)).fetchone()
    db.close()
    pairs = dict(w.split("=") for w in text.split())
    assert pairs and all(g == ibsysfs.node_guid(NODE, h) for h, g in pairs.items())
