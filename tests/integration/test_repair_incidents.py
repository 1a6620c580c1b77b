"""Repair incidents on the real dev cluster (issue 34): a reset-class XID on a stand-in GPU drains
the node through the health hook, and ingest opens one incident keyed by that GPU's NVML serial;
an application-class XID (45) opens none. The session's dev cluster (tests/integration/conftest.py)."""

from __future__ import annotations

import json
import os

import pytest

from slurmadm.store import Store
from tests.integration.helpers import RepairSlate, hook, run_slurmadm, slurm_node

pytestmark = pytest.mark.integration

NODE, APP_NODE, GPU = "b200-002", "b200-001", "3"


@pytest.fixture(scope="module")
def env(dev_cluster):
    e = {**os.environ, **dev_cluster.env()}
    with RepairSlate(dev_cluster, e, (NODE, APP_NODE)):
        yield e


def slurmadm(env, *args):
    p = run_slurmadm(env, *args)
    assert p.returncode == 0, f"{args}: {p.stdout}{p.stderr}"
    return p.stdout


def test_reset_class_xid_opens_one_incident_by_gpu_serial_and_xid_45_none(dev_cluster, env):
    slurmadm(env, "dev-cluster", "gpu-fault", APP_NODE, "--gpu", "1", "--kind", "xid", "--value", "45")
    slurmadm(env, "dev-cluster", "gpu-fault", NODE, "--gpu", GPU, "--kind", "xid", "--value", "46")
    for n in (APP_NODE, NODE):
        p, _ = hook(dev_cluster, "healthcheck.sh", n)
        assert p.returncode == 0, p.stderr
    info = slurm_node(env, NODE)
    assert info.drained and info.reason.startswith(f"slurmadm: xid: GPU{GPU} "), info.reason

    rows = json.loads(slurmadm(env, "repair", "status", "--json"))
    mine = [r for r in rows if r["node"] in (NODE, APP_NODE)]
    assert len(mine) == 1, mine  # Xid 45 opened none
    inc = mine[0]
    with Store(dev_cluster.site().store.local_path(NODE)) as store:
        inv = json.loads(store.get_node_state(NODE, "health.gpus"))
    serial = next(g["serial"] for g in inv if str(g["index"]) == GPU)
    assert serial and (inc["node"], inc["class"], inc["slot"], inc["part_key"], inc["serial"]) == (
        NODE, "RESET_GPU", GPU, serial, serial)
    assert inc["next"] == "reset" and "XID 46" in inc["last_signal"]
    # a second look adds nothing; the GPU's history is there by serial
    assert len([r for r in json.loads(slurmadm(env, "repair", "status", "--json")) if r["node"] == NODE]) == 1
    hist = json.loads(slurmadm(env, "repair", "history", "--gpu", serial, "--json"))
    assert [h["id"] for h in hist] == [inc["id"]]
    cleared = json.loads(slurmadm(env, "repair", "clear", NODE, "--reason", "reset GPU3 by hand", "--json"))
    assert cleared["cleared"] == [inc["id"]]
