"""What runs inside a burn-in job: verdicts from the health suite's JSON, GPU stress numbers and
DCGM output, and the all-reduce arithmetic."""

from __future__ import annotations

import json

import pytest

from slurmadm.health import allreduce as collective
from slurmadm.burnin.node import parse_health
from slurmadm.burnin.stress import cpu_stand_in, judge_gpus, parse_dcgm

pytestmark = pytest.mark.unit


# ------------------------------------------------------------------------------ health suite

def health_report(*rows):
    return json.dumps({"node": "b200-003", "context": "run", "results": [
        {"check_id": c, "status": s, "severity": "critical", "action": a, "detail": d, "value": None,
         "duration_ms": 1.0} for c, s, a, d in rows]})


def test_health_failures_name_each_check():
    r = parse_health(health_report(("gpu-count", "pass", "none", ""),
                                   ("ecc-uncorrected", "fail", "drain", "GPU2 volatile uncorrected ECC=1"),
                                   ("xid", "fail", "drain", "GPU2 XID 79 fell off the bus (reset)")))
    assert r.test == "health" and r.status == "fail"
    assert r.detail == "ecc-uncorrected: GPU2 volatile uncorrected ECC=1; xid: GPU2 XID 79 fell off the bus (reset)"
    assert len(r.data["checks"]) == 3


def test_health_policy_warn_only_warns_and_clean_passes():
    r = parse_health(health_report(("persistence-mode", "fail", "warn", "GPU0 persistence off"),
                                   ("gpu-count", "pass", "none", "")))
    assert (r.status, r.detail) == ("warn", "persistence-mode: GPU0 persistence off")
    assert parse_health(health_report(("gpu-count", "pass", "none", ""))).status == "pass"


def test_health_error_is_reported_as_error():
    r = parse_health(health_report(("nvlink", "error", "drain", "no answer within 5 s")))
    assert (r.status, r.detail) == ("error", "nvlink: no answer within 5 s")


def test_health_output_that_is_not_a_report():
    assert parse_health("Traceback (most recent call last):") is None
    assert parse_health(json.dumps({"unexpected": 1})) is None
    assert parse_health(json.dumps([{"id": "x", "status": "pass"}])).status == "pass"  # a bare list


# ------------------------------------------------------------------------------ GPU stress

def gpu(tflops=700.0, copy=3000.0, checksum="c1"):
    return {"tflops": tflops, "copy_gbps": copy, "checksum": checksum}


def test_identical_fast_gpus_pass():
    status, detail = judge_gpus({g: gpu() for g in range(8)})
    assert status == "pass" and "8 GPUs" in detail and "identical" in detail


@pytest.mark.parametrize("bad,expect", [
    (gpu(tflops=400.0), "GPU5 400 TFLOPS, 57% of the node median 700"),
    (gpu(copy=1500.0), "GPU5 1500 GB/s copy, 50% of the node median 3000"),
    (gpu(checksum="different"), "GPU5 matmul result differs from the other GPUs"),
    ({"error": "RuntimeError: CUDA error: unspecified launch failure"}, "GPU5 RuntimeError: CUDA error"),
])
def test_one_bad_gpu_is_named(bad, expect):
    gpus = {g: gpu() for g in range(8)}
    gpus[5] = bad
    status, detail = judge_gpus(gpus)
    assert status == "fail" and expect in detail and "GPU4" not in detail


def test_cpu_stand_in_never_claims_a_gpu():
    # a zero budget (as good as a machine so loaded that the budget is gone before the first
    # round) still does one round of work and reports a rate: nothing here depends on speed
    r = cpu_stand_in(0.0, "no CUDA device: torch is a CPU build")
    assert r.status == "warn" and r.test == "stress"
    assert r.detail.startswith("GPUs not stressed (no CUDA device: torch is a CPU build); CPU stand-in ran")
    assert r.data["device"] == "cpu" and r.unit == "GB/s (CPU)" and r.value > 0


DCGM4 = {"DCGM Diagnostic": {"test_categories": [
    {"category": "Deployment", "tests": [{"name": "Denylist", "results": [{"status": "Pass"}]}]},
    {"category": "Hardware", "tests": [{"name": "Memory Bandwidth", "results": [
        {"entity_id": "0", "status": "Pass"},
        {"entity_id": "3", "status": "Fail", "warnings": [
            {"warning": "GPU 3 memory bandwidth 3100000 MB/s < 4072500 MB/s", "error_id": 42}]}]}]},
]}}
DCGM3 = {"DCGM GPU Diagnostic": {"test_categories": [
    {"category": "Integration", "tests": [{"name": "PCIe", "results": [{"gpu_id": "1", "status": "Warn",
                                                                         "warnings": ["replay rate high"]}]}]}]}}


def test_dcgm_verdicts_from_both_json_shapes():
    status, detail = parse_dcgm(json.dumps(DCGM4))
    assert status == "fail" and detail == "Memory Bandwidth GPU3: GPU 3 memory bandwidth 3100000 MB/s < 4072500 MB/s"
    assert parse_dcgm(json.dumps(DCGM3)) == ("warn", "PCIe GPU1: replay rate high")
    clean = {"DCGM Diagnostic": {"test_categories": [DCGM4["DCGM Diagnostic"]["test_categories"][0]]}}
    assert parse_dcgm(json.dumps(clean)) == ("pass", "1 results passed")
    assert parse_dcgm("Error: unable to connect to host engine")[0] == "error"


# ------------------------------------------------------------------------------ all-reduce

def test_busbw_follows_nccl_tests():
    assert collective.busbw(100.0, 2) == 100.0
    assert collective.busbw(100.0, 8) == 175.0
    assert collective.busbw(100.0, 16) == pytest.approx(187.5)


def test_rendezvous_port_and_master_from_the_slurm_step(monkeypatch):
    monkeypatch.setenv("SLURM_JOB_ID", "1234")
    assert collective.rendezvous_port(None, 29500) == 29534
    assert collective.rendezvous_port(31000, 29500) == 31000
    monkeypatch.setenv("SLURM_STEP_NODELIST", "b200-[007-008]")
    assert collective.master_address(None, {"b200-007": "10.1.0.7"}) == "10.1.0.7"
    assert collective.master_address(None, {}) == "b200-007"
    assert collective.master_address("127.0.0.1", {}) == "127.0.0.1"


def test_last_result_line_wins():
    out = "\n".join([json.dumps({"event": "started"}), "noise", json.dumps({"event": "result", "busbw_gbps": 1.0}),
                     json.dumps({"event": "result", "busbw_gbps": 2.0})])
    assert collective.last_result(out)["busbw_gbps"] == 2.0
    assert collective.last_result("no json here") is None


def test_clock_and_temperature_under_load_for_the_fleet_verdicts():
    from types import SimpleNamespace

    from slurmadm.burnin.stress import under_load

    def no_nvml(_gpu):
        raise ModuleNotFoundError("pynvml does not seem to be installed")

    torch = SimpleNamespace(cuda=SimpleNamespace(clock_rate=lambda g: 1965 - g, temperature=lambda g: 71))
    assert under_load(torch, 3) == {"sm_clock_mhz": 1962.0, "temp_c": 71.0}
    assert under_load(SimpleNamespace(cuda=SimpleNamespace(clock_rate=no_nvml, temperature=no_nvml)), 0) == {}
    # judge_gpus ignores the extra readings
    per = {g: {"tflops": 1000.0, "copy_gbps": 3000.0, "checksum": "a", "sm_clock_mhz": 1965.0, "temp_c": 70.0}
           for g in range(8)}
    assert judge_gpus(per)[0] == "pass"


# ------------------------------------------------------------------------------ HCA counters over the job

def test_fabric_records_each_error_counter_rise_over_the_job(tmp_path):
    from slurmadm.burnin import node as job

    def write(hca, counters, rate="400 Gb/sec (4X NDR)"):
        port = tmp_path / "class" / "infiniband" / hca / "ports" / "1"
        (port / "counters").mkdir(parents=True, exist_ok=True)
        (port / "rate").write_text(rate + "\n")
        for c, v in counters.items():
            (port / "counters" / c).write_text(f"{v}\n")

    spec = {"hcas": ["mlx5_0", "mlx5_1"], "hca_port": 1, "sysfs_root": str(tmp_path)}
    zero = dict.fromkeys(job.ERROR_COUNTERS, 0)
    write("mlx5_0", {**zero, "symbol_error": 7})
    write("mlx5_1", zero)
    before = job.read_counters(spec)
    assert before["mlx5_0"]["symbol_error"] == 7 and set(before["mlx5_1"]) == set(job.ERROR_COUNTERS)
    # under load: mlx5_0's symbol errors rise by 300, mlx5_1's counters were cleared and rose to 2
    write("mlx5_0", {**zero, "symbol_error": 307, "link_downed": 1})
    write("mlx5_1", {**zero, "port_rcv_errors": 2})
    before["mlx5_1"]["port_rcv_errors"] = 40
    r = job.fabric_rates(spec, before)
    assert r.status == "pass" and r.value == 400.0
    assert r.data["counter_rise"]["mlx5_0"] == {**zero, "symbol_error": 300, "link_downed": 1}
    assert r.data["counter_rise"]["mlx5_1"]["port_rcv_errors"] == 2
    assert "mlx5_0 symbol_error +300" in r.detail and "mlx5_0 link_downed +1" in r.detail
    # and the fleet reads the worst port's rise per counter
    from slurmadm.burnin import fleet
    vals = fleet.node_values({"node": "n", "tests": [r.to_json()]})
    assert (vals["hca-symbol-errors"], vals["hca-link-downed"], vals["hca-rcv-errors"], vals["hca-link-recovery"]) \
        == (300, 1, 2, 0)
    # without a first read (an older job) no counters are recorded
    assert "counter_rise" not in job.fabric_rates(spec).data
