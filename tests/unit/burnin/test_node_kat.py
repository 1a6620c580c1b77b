"""The nightly burn-in runs the known-answer compute test (burnin.known_answer): a GPU whose
answer differs is named the way health names a GPU, so its drain opens an SDC incident on that
GPU (classes.toml `burnin-kat`), whose ladder re-tests it and then sends it to RMA."""

from __future__ import annotations

import json

import pytest

from slurmadm.burnin import node as bnode
from slurmadm.burnin.sweep import Sweep
from slurmadm.devcluster import gpus
from slurmadm.repair import classes, ladder
from slurmadm.site import BUILTIN_PROFILES

pytestmark = pytest.mark.unit

B200 = BUILTIN_PROFILES["hgx-b200"]


@pytest.fixture()
def standin(tmp_path, monkeypatch):
    gpus.write_healthy(tmp_path, "node-a", B200, driver_version="570.133.20")
    for key in ("SLURMADM_KAT_DEVICE", "SLURMADM_DEV_STATE_DIR", "CUDA_VISIBLE_DEVICES", "SLURMD_NODENAME"):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("SLURMADM_FAKE_NVML_DIR", str(tmp_path))
    monkeypatch.setenv("SLURMADM_FAKE_NVML_NODE", "node-a")
    return tmp_path


def test_name_gpus_puts_the_index_in_front_of_each_disagreeing_device():
    detail = ("cuda:5: differs from the majority (1 of 4194304 values, max 1 ulp); "
              "standin:b200-004:gpu12: GPU is lost; cpu: differs from the majority")
    named = bnode.name_gpus(detail, ("cuda:5", "standin:b200-004:gpu12", "cpu"))
    assert named == ("GPU5 (cuda:5): differs from the majority (1 of 4194304 values, max 1 ulp); "
                     "GPU12 (standin:b200-004:gpu12): GPU is lost; cpu: differs from the majority")
    # a device name inside another finding's text is left alone: only a finding's head is named
    assert bnode.name_gpus("cuda:1: wrong, unlike cuda:2: ok", ("cuda:2",)) == "cuda:1: wrong, unlike cuda:2: ok"


def test_a_healthy_node_passes_and_a_corrupting_gpu_is_named(standin):
    ok = bnode.kat_test()
    assert ok.test == "kat" and ok.status == "pass" and "8 device(s) agree bit for bit" in ok.detail
    gpus.inject(standin, "node-a", 5, "corrupt")
    bad = bnode.kat_test()
    assert bad.status == "fail" and bad.data["bad"] == ["standin:node-a:gpu5"]
    assert bad.detail.startswith("GPU5 (standin:node-a:gpu5): differs from the majority (1 of 1024 values")
    assert "|" not in bad.detail  # it becomes a drain reason, which sinfo readers split on "|"
    # the drain this fails into opens an SDC incident on GPU 5, not a node-wide burn-in one
    faults = classes.classify("burnin-kat", bad.detail)
    assert [(f.cls, f.part_kind, f.slot) for f in faults] == [("SDC", "gpu", "5")]
    assert all(f.opens_incident for f in faults)


def test_nothing_to_compute_on_is_a_skip_not_a_failure(monkeypatch):
    monkeypatch.setenv("SLURMADM_KAT_DEVICE", "nonsense")
    r = bnode.kat_test()
    assert r.status == "skip" and "SLURMADM_KAT_DEVICE" in r.detail


def test_the_node_job_runs_the_test_only_when_the_spec_asks(standin, monkeypatch, capsys):
    from slurmadm.burnin.model import TestResult

    gpus.inject(standin, "node-a", 2, "corrupt")
    for name in ("stress", "dcgm_diag"):
        monkeypatch.setattr(bnode.stress, name, lambda *a, **k: TestResult("stress", "pass", "stub"))
    monkeypatch.setattr(bnode, "single_node_allreduce", lambda spec: TestResult("allreduce-node", "pass", "stub"))
    monkeypatch.setattr(bnode, "health_suite", lambda timeout: TestResult("health", "pass", "stub"))
    monkeypatch.setattr(bnode, "local_node", lambda _: "node-a")
    spec = {"stress_seconds": 1, "dcgm_level": 0, "collective": "gloo", "step_timeout": 10, "hcas": []}

    def tests(extra):
        assert bnode.main(["--spec", json.dumps({**spec, **extra})]) == 0
        lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
        return {t["test"]: t for t in lines[-1]["tests"]}

    ran = tests({"kat": True})
    assert list(ran) == ["stress", "allreduce-node", "kat", "fabric", "links", "health"]
    assert ran["kat"]["status"] == "fail" and ran["kat"]["detail"].startswith("GPU2 (standin:node-a:gpu2)")
    assert "kat" not in tests({"kat": False}) and "kat" not in tests({})


def test_the_sweep_asks_for_it_as_the_site_says():
    from slurmadm.resources import example_site
    from slurmadm.site import load_site

    site = load_site(example_site())
    assert site.burnin.known_answer is True
    node = next(iter(site.node_group_of))
    store = object()  # node_spec reads no store
    assert Sweep(site, store=store, site_file=example_site()).node_spec(node)["kat"] is True
    off = site.model_copy(update={"burnin": site.burnin.model_copy(update={"known_answer": False})})
    assert Sweep(off, store=store, site_file=example_site()).node_spec(node)["kat"] is False


def test_an_sdc_is_tested_again_then_an_rma():
    rungs = ladder.defaults().ladder("SDC").rungs
    assert rungs[0] == ("reset", "qualify", "resume") and rungs[-1] == ("rma",)
