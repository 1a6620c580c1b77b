"""slurmadm.repair.reset (NVIDIA's reset rule as data, the script, its parse) and qualify (the
job's verdict). The known-answer test's own tests are tests/unit/repair/test_kat.py."""

from __future__ import annotations

import json
import subprocess

import pytest

from slurmadm.repair import reset
from slurmadm.repair.qualify import judge

pytestmark = pytest.mark.unit


def test_every_reset_rule_names_its_sources_and_b200_keeps_fabric_manager_running():
    for rule in reset.RULES:
        assert rule.sources and all(s in reset.SOURCES for s in rule.sources)
    b200 = reset.rule_for("b200", 2)
    assert b200.nvswitch and b200.single_gpu and b200.fabric_manager == "keep-running"
    assert b200.persistence_mode == "disable-and-restore"
    assert reset.rule_for("a100", 6).fabric_manager == "required"
    assert reset.rule_for("x9000", 4).fabric_manager == "required"  # unknown NVSwitch model: strictest
    assert reset.rule_for("l40s", 0).name == "pcie"


def test_reset_script_turns_persistence_off_and_back_and_parses(tmp_path):
    rule = reset.rule_for("b200", 2)
    text = reset.script([2, 5], rule)
    # run the script against a fake nvidia-smi: GPU 5's reset fails
    smi = tmp_path / "nvidia-smi"
    smi.write_text(f"#!/bin/sh\necho \"$@\" >> {tmp_path}/calls\n"
                   "case \"$*\" in *--query-gpu*) echo Enabled;; *'--gpu-reset -i 5'*) echo 'In use'; exit 3;; esac\n")
    smi.chmod(0o755)
    proc = subprocess.run(["sh", "-c", text], capture_output=True, text=True, check=False, env={"PATH": f"{tmp_path}:/usr/bin:/bin"})
    calls = (tmp_path / "calls").read_text().splitlines()
    assert calls[:4] == ["-i 2 --query-gpu=persistence_mode --format=csv,noheader", "-i 2 -pm 0",
                         "--gpu-reset -i 2", "-i 2 -pm 1"]
    res = reset.parse("n1", proc.returncode, proc.stdout, [2, 5], rule)
    assert not res.ok and res.detail == "GPU5 reset failed: In use"
    assert [(g.slot, g.ok, g.persistence_mode) for g in res.gpus] == [(2, True, "Enabled"), (5, False, "Enabled")]
    # persistence mode unreadable (an nvidia-smi without --query-gpu): off for the reset, on after
    smi.write_text(f"#!/bin/sh\necho \"$@\" >> {tmp_path}/calls2\necho '==== NVSMI LOG ===='\n")
    proc = subprocess.run(["sh", "-c", reset.script([1], rule)], capture_output=True, text=True, check=False,
                          env={"PATH": f"{tmp_path}:/usr/bin:/bin"})
    assert (tmp_path / "calls2").read_text().splitlines()[1:] == ["-i 1 -pm 0", "--gpu-reset -i 1", "-i 1 -pm 1"]
    assert reset.parse("n1", proc.returncode, proc.stdout, [1], rule).gpus[0].persistence_mode == "unknown"
    ok = reset.parse("n1", 0, "slurmadm-reset 2 Disabled 0 \n", [2], rule)
    assert ok.ok and ok.detail.startswith("GPU 2 reset")
    assert not reset.parse("n1", 0, "", [2], rule).ok  # no report of the GPU: not a success


def _line(obj):
    return json.dumps(obj)


def test_qualification_verdict_from_the_job_lines():
    ok = "\n".join([_line({"event": "started", "job_id": "7"}),
                    _line({"event": "result", "tests": [{"test": "stress", "status": "pass"},
                                                          {"test": "kat", "status": "pass"}]})])
    q = judge("n1", ok, "", 0)
    assert q.passed and q.job_id == "7"
    bad = "\n".join([_line({"event": "started", "job_id": "8"}),
                     _line({"event": "result", "tests": [{"test": "kat", "status": "fail", "detail": "GPU 2 differs"}]})])
    q = judge("n1", bad, "", 0)
    assert (q.status, q.failed_test, q.detail) == ("fail", "kat", "kat: GPU 2 differs")
    assert judge("n1", "", "srun: error: Unable to allocate resources", 1).status == "error"
    cut = _line({"event": "started", "job_id": "9"})
    assert judge("n1", cut, "killed", 137).status == "error"
