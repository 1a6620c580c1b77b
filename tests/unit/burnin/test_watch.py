"""The stress watches the GPUs (burnin/watch.py, issue 45): the verdict on samples, and the real
pynvml over the stand-in library in a child process, as in a burn-in or qualification job. The
stand-in's `thermal-under-load` fault is cool at rest and throttles only while a stress runs
(`<node>.load`): the watch catches it, the health suite at rest does not."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurmadm.burnin import stress, watch
from slurmadm.burnin.model import TestResult
from slurmadm.devcluster import gpus
from slurmadm.site import BUILTIN_PROFILES

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[3]
NODE = "b200-002"
B200 = BUILTIN_PROFILES["hgx-b200"]


def summary(per_gpu, samples=3, why_not=""):
    return {"samples": samples, "interval_s": 1.0, "why_not": why_not, "per_gpu": per_gpu}


def row(samples=3, temp=60, clock=1965, top=1965, **reasons):
    return {"samples": samples, "max_temp_c": temp, "min_sm_clock_mhz": clock, "max_sm_clock_mhz": top,
            "reasons": {k.replace("_", " "): v for k, v in reasons.items()}}


# ---------------------------------------------------------------------- the verdict
def test_a_hardware_slowdown_in_two_samples_fails_naming_the_gpu_its_peak_and_clock():
    status, found = watch.judge(summary({"0": row(), "3": row(temp=95, clock=982, HW_thermal_slowdown=3)}))
    assert status == "fail" and len(found) == 1
    assert found[0].startswith("GPU3 HW thermal slowdown in 3 of 3 samples") and "peak 95 C" in found[0]
    assert "982 of 1965 MHz" in found[0]


def test_one_sample_is_a_blip_and_software_reasons_only_warn():
    assert watch.judge(summary({"1": row(HW_slowdown=1)})) == ("pass", [])
    status, found = watch.judge(summary({"1": row(SW_thermal_slowdown=2)}))
    assert status == "warn" and found[0].startswith("GPU1 SW thermal slowdown")
    # a GPU sampled once (the stress ended at once) is judged on that one sample
    assert watch.judge(summary({"1": row(samples=1, HW_power_brake=1)}, samples=1))[0] == "fail"


def test_no_nvml_is_no_verdict_on_the_gpus():
    status, found = watch.judge(summary({}, samples=0, why_not="GPUs not watched: NVML: Driver Not Loaded"))
    assert status == "skip" and "Driver Not Loaded" in found[0]
    result = stress.watched(TestResult("stress", "warn", "GPUs not stressed (x)"), summary({}, 0, "no NVML"))
    assert (result.status, result.detail) == ("warn", "GPUs not stressed (x)") and result.data["watch"]["samples"] == 0


def test_the_stress_result_takes_the_watchs_verdict():
    hot = summary({"3": row(temp=95, clock=982, HW_slowdown=3)})
    failed = stress.watched(TestResult("stress", "pass", "8 GPUs: matmul >= 900 TFLOPS"), hot)
    assert failed.status == "fail" and failed.detail.startswith("GPU3 HW slowdown") and "900 TFLOPS" in failed.detail
    ok = stress.watched(TestResult("stress", "pass", "8 GPUs: matmul >= 900 TFLOPS"), summary({"0": row(temp=71)}))
    assert ok.status == "pass" and "peak 71 C" in ok.detail and "no hardware slowdown" in ok.detail


def test_a_hung_nvml_does_not_hold_the_stress():
    class Hung:
        def nvmlInit(self):
            time.sleep(3600)

    started = time.monotonic()
    w = watch.Watch(interval=0.05, nvml=Hung())
    w.__enter__()
    w._thread.join(0)  # the stress runs meanwhile
    w._stop.set()
    w._thread.join(timeout=0.2)  # a join that gives up, as __exit__'s does after its limit
    assert w._thread.is_alive() and time.monotonic() - started < 60
    assert watch.judge(w.summary())[0] == "skip"


# ---------------------------------------------------------------------- the stand-in, through pynvml
@pytest.fixture()
def node(tmp_path, fake_nvml_lib):
    gdir = tmp_path / "gpus"
    gpus.write_healthy(gdir, NODE, B200, driver_version="570.133.20")
    env = {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), **gpus.env_for(gdir, fake_nvml_lib, NODE)}

    def run(code: str) -> dict:
        p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120,
                           cwd=REPO)
        assert p.returncode == 0, p.stderr
        return json.loads(p.stdout)

    run.gdir = gdir
    return run


STRESS = ("import json; from slurmadm.burnin import stress\n"
          "r = stress.stress(1.0, cpu_only=True)\n"
          "print(json.dumps({'status': r.status, 'detail': r.detail, 'watch': r.data['watch']}))")
AT_REST = ("import json; from slurmadm.burnin import watch\n"
           "w = watch.Watch(interval=0.1)\n"
           "with w: pass\n"
           "print(json.dumps(w.summary()))")


def test_healthy_stand_in_gpus_are_watched_through_the_stress(node):
    out = node(STRESS)
    assert out["status"] == "warn" and "GPUs not stressed" in out["detail"]  # the CPU stand-in, said so
    w = out["watch"]
    assert w["samples"] >= 2 and sorted(w["per_gpu"]) == [str(i) for i in range(8)]
    assert all(r["reasons"] == {} and r["samples"] >= 2 for r in w["per_gpu"].values())
    assert "8 GPUs watched" in out["detail"] and "no hardware slowdown" in out["detail"]
    assert not (node.gdir / f"{NODE}.load").exists()  # the load marker is gone with the stress


def test_a_gpu_that_throttles_only_under_load_fails_the_stress_and_not_at_rest(node):
    gpus.inject(node.gdir, NODE, 3, "thermal-under-load", 96)
    rest = node(AT_REST)
    assert watch.judge(rest)[0] == "pass" and rest["per_gpu"]["3"]["max_temp_c"] < 89  # cool at rest
    out = node(STRESS)
    assert out["status"] == "fail", out
    assert out["detail"].startswith("GPU3 ") and "HW thermal slowdown" in out["detail"] and "peak 96 C" in out["detail"]
    three = out["watch"]["per_gpu"]["3"]
    assert three["min_sm_clock_mhz"] * 2 <= three["max_sm_clock_mhz"]  # SM clock halved under load
    assert all(not r["reasons"] for g, r in out["watch"]["per_gpu"].items() if g != "3")
    after = node(AT_REST)  # the stress is over: cool again
    assert watch.judge(after)[0] == "pass" and after["per_gpu"]["3"]["max_temp_c"] < 89


def test_a_stale_load_marker_loads_nothing(node):
    """A stress killed half-way leaves its marker; past the second it names, the GPUs are at rest."""
    gpus.inject(node.gdir, NODE, 3, "thermal-under-load", 96)
    (node.gdir / f"{NODE}.load").write_text(f"{time.time() - 5:.0f}\n")
    assert watch.judge(node(AT_REST))[0] == "pass"
    (node.gdir / f"{NODE}.load").write_text(f"{time.time() + 600:.0f}\n")
    assert watch.judge(node(AT_REST))[0] == "fail"


def test_the_marker_is_only_written_in_the_dev_cluster(tmp_path):
    assert watch.load_file({}) == ""
    assert watch.load_file({"SLURMADM_FAKE_NVML_DIR": str(tmp_path), "SLURMD_NODENAME": "../x"}) == ""
    env = {"SLURMADM_FAKE_NVML_DIR": str(tmp_path), "SLURMD_NODENAME": NODE}
    with watch.stand_in_load(10, env):
        until = float((tmp_path / f"{NODE}.load").read_text())
        assert time.time() + 10 < until <= time.time() + 41
    assert not os.path.exists(tmp_path / f"{NODE}.load")
