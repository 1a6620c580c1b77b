"""Parts and RMA cases on the dev cluster (issue 35), one short module on the session cluster:
a GPU fails three times (XID 79 through the real hook, each drain ingested as an incident), `repair
rma open` writes a root-only bundle whose manifest is checked and which holds no secret; the
stand-in's `gpu-fault --kind replace` puts a new serial in the slot, the swap is found and the
case is replaced; `repair run` qualifies the node, which closes the case and resumes the node; the failed GPU moved into another node
keeps its history."""

from __future__ import annotations

import json
import os
import stat
import tarfile
import time

import pytest

from slurmadm.devcluster.daemons import wait_for
from tests.integration.helpers import (
    RepairSlate,
    ensure_burnin_accounting,
    health_runs,
    hook,
    run_slurmadm,
    sh,
    slurm_node,
)

pytestmark = pytest.mark.integration

NODE, OTHER, GPU, TICKET = "b200-002", "b200-004", 5, "NV-RMA-0042"


@pytest.fixture(scope="module")
def env(dev_cluster):
    e = dict(os.environ)
    e.update(dev_cluster.env())
    ensure_burnin_accounting(e, dev_cluster.site())  # the qualification job runs under the burn-in QOS
    with RepairSlate(dev_cluster, e, (NODE, OTHER)):  # what earlier modules left is not this one's
        yield e


def ok(env, *args, timeout: float = 180) -> str:
    p = run_slurmadm(env, *args, timeout=timeout)
    assert p.returncode == 0, (args, p.stdout, p.stderr)
    return p.stdout


def js(env, *args, timeout: float = 180):
    return json.loads(ok(env, *args, "--json", timeout=timeout))


def periodic(dc, name):
    p, _ = hook(dc, "healthcheck.sh", name)
    assert p.returncode == 0, p.stderr


def responding(env, name) -> bool:
    return "NOT_RESPONDING" not in slurm_node(env, name).flags


def drain_by_health(dc, env, name, since):
    """The periodic hook drains the node for the XID. A node slurmctld flags NOT_RESPONDING (a
    missed ping on a loaded machine) is left to slurmctld by design: run it again once it answers."""
    for _ in range(3):
        assert wait_for(lambda: responding(env, name), 120, interval=0.5), slurm_node(env, name)
        periodic(dc, name)
        if slurm_node(env, name).reason.startswith("slurmadm: xid: "):
            return
    raise AssertionError((slurm_node(env, name), health_runs(dc, name, since - 1)))


def gpu_of(env, name, index):
    return next(r for r in js(env, "repair", "parts", name)["parts"] if r["kind"] == "gpu"
                and r["attrs"].get("index") == index)


def test_gpu_fails_three_times_rma_bundle_swap_and_move(dev_cluster, env, tmp_path):
    site = dev_cluster.site()
    for n in (NODE, OTHER):
        assert wait_for(lambda n=n: responding(env, n), 120, interval=0.5), slurm_node(env, n)
        periodic(dev_cluster, n)  # the health run records each GPU's identity
    serial = gpu_of(env, NODE, GPU)["part_key"]

    # ---- the GPU fails three times: XID 79, drained by the hook, ingested, cleared, resumed
    # (one XID 79 may open more than one incident: GPU lost, and NVML's reboot recovery action)
    seen = 0
    for i in range(3):
        t = time.time()
        ok(env, "dev-cluster", "gpu-fault", NODE, "--gpu", str(GPU), "--kind", "xid", "--value", "79")
        drain_by_health(dev_cluster, env, NODE, t)
        hist = js(env, "repair", "history", "--gpu", serial)
        assert len(hist) > seen, hist
        seen = len(hist)
        if i < 2:
            ok(env, "repair", "clear", NODE, "--reason", f"reseated GPU{GPU} ({i + 1})")
            ok(env, "dev-cluster", "gpu-fault", NODE, "--gpu", str(GPU), "--clear")
            sh(env, "scontrol", "update", f"nodename={NODE}", "state=resume")
            assert wait_for(lambda: not slurm_node(env, NODE).drained, 30, interval=0.5)
            periodic(dev_cluster, NODE)  # acknowledges the admin's resume
            assert not slurm_node(env, NODE).drained, slurm_node(env, NODE).reason

    # ---- the RMA: a bundle, root-only, manifest with sha256 per file, no secret in it
    plan = js(env, "repair", "rma", "open", NODE, "--gpu", str(GPU), "--ticket", TICKET, "--dry-run")
    assert plan["part_key"] == serial and plan["incidents"] == seen >= 3
    out = js(env, "repair", "rma", "open", NODE, "--gpu", str(GPU), "--ticket", TICKET)
    path = out["bundle"]
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(os.path.dirname(path)).st_mode) == 0o700
    info = slurm_node(env, NODE)
    assert info.drained and info.reason.startswith(f"slurmadm: repair: rma {TICKET}: gpu {GPU} {serial}"), info
    with tarfile.open(path) as tar:
        blobs = {m.name.split("/", 1)[1]: tar.extractfile(m).read() for m in tar.getmembers()}
    manifest = json.loads(blobs["manifest.json"])
    import hashlib

    assert {f["name"]: f["sha256"] for f in manifest["files"]} == \
        {n: hashlib.sha256(b).hexdigest() for n, b in blobs.items() if n != "manifest.json"}
    assert len(json.loads(blobs["incidents.json"])) == seen
    assert b"79" in blobs["xid.txt"] and serial.encode() in blobs["part.json"]
    missing = {m["name"]: m["why"] for m in manifest["missing"]}
    assert "nvidia-bug-report" in missing, manifest  # the fake node has no nvidia-bug-report.sh
    secrets = []
    for f in (site.bmc.password_file, site.store.password_file, getattr(site.database, "password_file", None)):
        if f and os.path.isfile(f):
            with open(f) as fh:
                secrets += [line.strip().encode() for line in fh.read().splitlines() if len(line.strip()) >= 4]
    assert secrets, "the dev cluster has a BMC password file"
    everything = b"".join(blobs.values())
    assert not [s for s in secrets if s in everything]
    # a second case for the same part names the first
    p = run_slurmadm(env, "repair", "rma", "open", NODE, "--gpu", str(GPU), "--ticket", "NV-OTHER")
    assert p.returncode == 2 and TICKET in p.stderr and p.stderr.count("\n") == 1, p.stderr
    p = run_slurmadm(env, "repair", "rma", "show", "NV-NOPE")
    assert p.returncode == 2 and p.stderr.count("\n") == 1

    # ---- shipped; the vendor's part goes in: the swap is found and the case is replaced
    ok(env, "repair", "rma", "ship", TICKET, "--reason", "UPS 1Z999")
    t0 = time.time()
    ok(env, "dev-cluster", "gpu-fault", NODE, "--gpu", str(GPU), "--kind", "replace")
    ok(env, "dev-cluster", "gpu-fault", NODE, "--gpu", str(GPU), "--clear")
    periodic(dev_cluster, NODE)
    case = next(c for c in js(env, "repair", "rma", "list")["cases"] if c["ticket"] == TICKET)
    new = gpu_of(env, NODE, GPU)["part_key"]
    assert new != serial and case["state"] == "replaced" and case["new_key"] == new, case
    swaps = [e for e in js(env, "audit", "log", "--action", "repair.part.swapped", "--target", NODE)
             if e["ts"] >= t0 - 1]
    assert [(e["detail"]["old"], e["detail"]["new"]) for e in swaps] == [(serial, new)]
    # the replaced part's incidents are due a qualification: `repair run` runs it (a Slurm job on
    # the node); the passed qualification closes the case, and the node is back in service
    run = js(env, "repair", "run", timeout=900)
    case = js(env, "repair", "rma", "show", TICKET)["case"]
    assert case["state"] == "closed", (case, run)
    assert wait_for(lambda: not slurm_node(env, NODE).drained, 60, interval=0.5), slurm_node(env, NODE)
    assert set(case["times"]) == {"open", "shipped", "replaced", "qualifying", "closed"}
    figs = js(env, "repair", "rma", "list")["figures"]
    assert figs["vendor_turnaround"]["n"] >= 1 and figs["per_gpu_model"]

    # ---- the failed GPU, repaired by the vendor, goes into another node: it keeps its past
    ok(env, "dev-cluster", "gpu-fault", OTHER, "--gpu", "0", "--kind", "replace", "--value", serial)
    periodic(dev_cluster, OTHER)
    assert gpu_of(env, OTHER, 0)["part_key"] == serial
    shown = js(env, "repair", "rma", "show", TICKET)
    assert [(s["node"], s["removed"] is None) for s in shown["stays"]] == [(NODE, False), (OTHER, True)]
    assert len(js(env, "repair", "history", "--gpu", serial)) == seen
