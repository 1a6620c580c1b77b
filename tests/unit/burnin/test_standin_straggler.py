"""The dev cluster's stand-in straggler (`dev-cluster gpu-fault NODE --gpu N --kind slow --value PCT`):
the fault lands in the stand-in GPU state, the per-node burn-in job reads it and reports its
stress and single-node all-reduce that much slower, saying so, and no test fails because of it."""

from __future__ import annotations

import pytest

from slurmadm.burnin import node as nodejob
from slurmadm.burnin.model import TestResult
from slurmadm.devcluster import gpus
from slurmadm.errors import UsageError
from slurmadm.site.profiles import BUILTIN_PROFILES

pytestmark = pytest.mark.unit

B200 = BUILTIN_PROFILES["hgx-b200"]


def test_the_slow_fault_reaches_the_node_job(tmp_path):
    gpus.write_healthy(tmp_path, "b200-003", B200, driver_version="570.133.20")
    env = {"SLURMADM_FAKE_NVML_DIR": str(tmp_path)}
    assert nodejob.stand_in_slowdown("b200-003", env) == 0.0
    gpus.inject(tmp_path, "b200-003", 2, "slow", "40")
    assert nodejob.stand_in_slowdown("b200-003", env) == 40.0
    assert nodejob.stand_in_slowdown("b200-001", env) == 0.0  # no state for it: not slowed
    assert nodejob.stand_in_slowdown("b200-003", {}) == 0.0  # not a dev cluster
    gpus.clear(tmp_path, "b200-003", kind="slow")
    assert nodejob.stand_in_slowdown("b200-003", env) == 0.0
    with pytest.raises(UsageError, match=r"fault slow: value 99 is outside 1..95"):
        gpus.inject(tmp_path, "b200-003", 2, "slow", "99")
    assert gpus.FAULT_KINDS["slow"].default == 30


def test_slow_down_scales_the_rates_and_says_so_without_failing():
    stress = TestResult("stress", "warn", "CPU stand-in ran 3 s: copy 0.49 GB/s", value=0.5, unit="GB/s (CPU)",
                        data={"device": "cpu"})
    ar = TestResult("allreduce-node", "pass", "gloo 2 ranks on cpu: busbw 1 GB/s (>= floor 0.01)", value=1.0,
                    unit="GB/s", data={"busbw_gbps": 1.0, "algbw_gbps": 1.0})
    health = TestResult("health", "pass", "12 checks passed")
    out = [nodejob.slow_down(t, 40.0) for t in (stress, ar, health)]
    assert out[0].value == pytest.approx(0.3) and out[0].status == "warn"
    assert out[1].value == pytest.approx(0.6) and out[1].data["busbw_gbps"] == pytest.approx(0.6)
    assert out[1].status == "pass" and "stand-in straggler: reported 40% slower" in out[1].detail
    assert out[2].detail == "12 checks passed" and "stand_in_slowdown_pct" not in out[2].data
    assert nodejob.slow_down(TestResult("stress", "pass", "x", value=2.0), 0.0).value == 2.0


def test_the_stand_in_gpus_give_a_rate_the_machine_s_load_does_not_move(tmp_path):
    """The CPU stand-in's own rate is the machine's (a loaded machine is slow); the stand-in GPUs'
    matmul rate is STANDIN_TFLOPS less their slowdown: the slowed GPU is the node's stress-tflops,
    a GPU off the bus gives none, and the CPU rate is still reported beside it."""
    from slurmadm.burnin import fleet

    gpus.write_healthy(tmp_path, "b200-003", B200, driver_version="570.133.20")
    env = {"SLURMADM_FAKE_NVML_DIR": str(tmp_path)}
    assert nodejob.stand_in_gpus("b200-003", env) == {i: 0.0 for i in range(8)}
    gpus.inject(tmp_path, "b200-003", 2, "slow", "40")
    gpus.inject(tmp_path, "b200-003", 5, "missing-gpu", None)
    standin = nodejob.stand_in_gpus("b200-003", env)
    assert standin == {0: 0.0, 1: 0.0, 2: 40.0, 3: 0.0, 4: 0.0, 6: 0.0, 7: 0.0}
    assert nodejob.stand_in_gpus("b200-001", env) is None and nodejob.stand_in_gpus("b200-003", {}) is None
    cpu = TestResult("stress", "warn", "CPU stand-in ran 3 s: copy 0.49 GB/s", value=0.5, unit="GB/s (CPU)",
                     data={"device": "cpu"})
    out = nodejob.as_stand_in(cpu, standin)
    assert out.data["per_gpu"]["2"] == {"tflops": 600.0, "stand_in": True} and "5" not in out.data["per_gpu"]
    assert out.status == "warn"  # still the labelled CPU stand-in
    values = fleet.node_values({"node": "b200-003", "tests": [out.to_json()]})
    assert values == {"stress-cpu": pytest.approx(0.3), "stress-tflops": 600.0}
    health = TestResult("health", "pass", "12 checks passed")
    assert "per_gpu" not in nodejob.stand_in_rates(health, standin).data
    plain = nodejob.as_stand_in(TestResult("stress", "warn", "x", value=2.0, data={"device": "cpu"}), None)
    assert "per_gpu" not in plain.data and plain.value == 2.0  # not a dev cluster: as it was


def test_the_dev_site_leaves_fleet_verdicts_off(tmp_path):
    from tests.unit.devcluster.test_devsite import derive

    site = derive(tmp_path, nodes=4)
    assert site.burnin.straggler.enabled is False
    assert site.burnin.straggler.warn_percent == 92.0  # the rest as the source site has it


def test_fabric_rates_from_the_stand_in_sysfs(tmp_path):
    """The node job reads each compute HCA port's rate (the dev cluster's InfiniBand stand-in tree,
    laid out as Linux's sysfs); a port trained at HDR is the node's hca-rate."""
    from slurmadm.burnin import fleet
    from slurmadm.devcluster import ibsysfs

    hcas = ibsysfs.write_healthy(tmp_path, "b200-001", B200)
    spec = {"hcas": hcas, "hca_port": 1, "sysfs_root": str(ibsysfs.root_of(tmp_path, "b200-001"))}
    t = nodejob.fabric_rates(spec)
    assert (t.status, t.value, len(t.data["per_hca"])) == ("pass", 400.0, 8)
    ibsysfs.ib_fault(tmp_path, "b200-001", hcas[3], "rate")
    t = nodejob.fabric_rates(spec)
    assert t.value == 200.0 and t.data["per_hca"][hcas[3]] == 200.0
    assert fleet.node_values({"node": "b200-001", "tests": [t.to_json()]}) == {"hca-rate": 200.0}
    assert nodejob.fabric_rates({**spec, "hcas": []}).status == "skip"
    assert nodejob.fabric_rates({**spec, "sysfs_root": str(tmp_path / "none")}).status == "skip"
