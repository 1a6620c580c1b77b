"""The nightly burn-in watches the compute HCA links while its job runs (burnin/node.py `links`,
the repair qualification's link watch): a port that goes down under load, once, fails the node
(NVIDIA's Health-Validation flap threshold is 1), where the health suite's infiniband check, made
for a node in service, lets one flap in its window pass. The test runs before the health suite,
so the drain names the port (`slurmadm: burnin-links: link down while watched: mlx5_3 1x ...`)
and opens an HCA incident on it (classes.toml `burnin-links`), whose ladder reboots the node and
then watches the link in its qualification."""

from __future__ import annotations

import json
import time
from datetime import datetime, timezone

import pytest

from slurmadm.burnin import node as bnode
from slurmadm.burnin.model import TestResult
from slurmadm.burnin.sweep import JobOutcome, NodeRun, Sweep
from slurmadm.devcluster import gpus, ibsysfs
from slurmadm.repair import classes, ladder
from slurmadm.resources import example_site
from slurmadm.site import load_site

pytestmark = pytest.mark.unit
NODE = "b200-001"


@pytest.fixture()
def job(tmp_path, monkeypatch, capsys):
    """Run the burn-in node job on a node of stand-in HCAs and kernel log; `during` runs inside
    its (stubbed) stress, the job's load. Returns (run(during) -> its stdout, the spec, the port
    directory of mlx5_3, the kernel log)."""
    profile = load_site(example_site()).node_profile(NODE)
    hcas = ibsysfs.write_healthy(tmp_path, NODE, profile)
    kmsg = gpus.kmsg_path(tmp_path, NODE)
    kmsg.write_text("")
    port = tmp_path / f"{NODE}.sysfs" / "class" / "infiniband" / "mlx5_3" / "ports" / str(profile.nics.port)
    spec = {"stress_seconds": 1, "dcgm_level": 0, "collective": "gloo", "step_timeout": 10, "kat": False,
            "hcas": hcas, "hca_port": profile.nics.port, "xid_source": str(kmsg),
            "sysfs_root": str(tmp_path / f"{NODE}.sysfs")}
    for key in ("SLURMADM_FAKE_NVML_DIR", "SLURMD_NODENAME"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setattr(bnode, "local_node", lambda _: NODE)
    monkeypatch.setattr(bnode, "single_node_allreduce", lambda spec: TestResult("allreduce-node", "pass", "stub"))
    monkeypatch.setattr(bnode, "health_suite", lambda timeout: TestResult("health", "pass", "stub"))

    def run(during=lambda: None) -> str:
        def stress(*_a, **_k):
            during()
            return TestResult("stress", "pass", "stub")

        monkeypatch.setattr(bnode.stress, "stress", stress)
        assert bnode.main(["--spec", json.dumps(spec)]) == 0
        return capsys.readouterr().out

    return run, spec, port, kmsg


def _tests_of(stdout: str) -> dict[str, dict]:
    return {t["test"]: t for t in json.loads(stdout.splitlines()[-1])["tests"]}


def test_a_link_down_under_load_fails_the_node_and_its_drain_is_that_ports_incident(job):
    run, _spec, port, kmsg = job
    out = run(lambda: ibsysfs.flap_once(kmsg, NODE, "mlx5_3", port))
    ran = _tests_of(out)
    assert list(ran) == ["stress", "allreduce-node", "fabric", "links", "health"]
    assert ran["links"]["status"] == "fail", ran["links"]
    assert ran["links"]["detail"].startswith("link down while watched: mlx5_3 1x (8 port(s) watched")
    # the sweep's verdict: the links test, the first failure, even where the health suite fails too
    lines = [json.loads(x) for x in out.splitlines()]
    for t in lines[-1]["tests"]:
        if t["test"] == "health":
            t.update(status="fail", detail="infiniband: mlx5_3 link flapped 2 times in 6 h")
    node_run = NodeRun(NODE, "idle")
    Sweep(load_site(example_site()), store=object(), site_file=example_site())._judge_node(
        node_run, JobOutcome(True, 0, "\n".join(map(json.dumps, lines)), "", job_id="7"))
    assert (node_run.verdict, node_run.failed_test) == ("fail", "links")
    faults = classes.classify("burnin-links", node_run.detail)
    assert [(f.cls, f.part_kind, f.slot) for f in faults] == [("HCA", "hca", "mlx5_3")]
    assert all(f.opens_incident for f in faults)
    assert ladder.defaults().ladder("HCA").rungs[0][0] == "reboot"  # then the qualification's own watch


def test_a_quiet_link_and_a_flap_before_the_job_pass(job):
    run, _spec, port, kmsg = job
    ibsysfs.flap_once(kmsg, NODE, "mlx5_3", port, datetime.fromtimestamp(time.time() - 600, timezone.utc))
    ran = _tests_of(run())
    assert ran["links"]["status"] == "pass" and ran["links"]["detail"].startswith("no link down (8 port(s)")
    assert ran["links"]["data"]["watched_s"] >= 0 and ran["links"]["data"]["downs"] == {}


def test_a_profile_without_compute_hcas_skips_the_watch(job):
    run, spec, _port, _kmsg = job
    spec["hcas"] = []
    assert _tests_of(run())["links"]["status"] == "skip"


def test_the_sweep_tells_the_job_where_the_nodes_kernel_log_is():
    site = load_site(example_site())
    at = site.model_copy(update={"health": site.health.model_copy(update={"xid_source": "/var/log/nodes/{node}.log"})})
    spec = Sweep(at, store=object(), site_file=example_site()).node_spec(NODE)
    assert spec["xid_source"] == f"/var/log/nodes/{NODE}.log" and spec["hcas"]
    assert "link_watch_s" not in spec  # burn-in watches its own run; only the qualification waits longer
