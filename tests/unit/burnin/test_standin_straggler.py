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


def test_the_dev_site_leaves_fleet_verdicts_off(tmp_path):
    from tests.unit.devcluster.test_devsite import derive

    site = derive(tmp_path, nodes=4)
    assert site.burnin.straggler.enabled is False
    assert site.burnin.straggler.warn_percent == 92.0  # the rest as the source site has it
