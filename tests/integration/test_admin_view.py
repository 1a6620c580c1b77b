"""What an admin sees on the real dev cluster: `slurmadm doctor` (every check against the real
daemons, the stand-in NVML as a node sees it, a broken hook setup failing with exit 1), and
drain reasons readable in full (`health status`, the documented `sinfo -R -o` format)."""

from __future__ import annotations

import json
import os
import subprocess
import tomllib
from pathlib import Path

import pytest
import tomli_w

from slurmadm.devcluster.daemons import wait_for

from tests.integration.helpers import run_slurmadm

pytestmark = pytest.mark.integration

# A burn-in drain: health's periodic runs never lift it (they could lift a health drain mid-test).
REASON = ("slurmadm: burnin-health: ecc-uncorrected: GPU5 volatile uncorrected ECC=2 aggregate ECC=7 since the "
          "last reset [burnin]")
# The `sinfo -R` format README.md documents: the whole reason (the default shows 20 characters).
SINFO_R = "%70E %9u %19H %N"


@pytest.fixture(scope="module")
def env(dev_cluster) -> dict[str, str]:
    e = dict(os.environ)
    e.update(dev_cluster.env())
    return e


def sh(env, *argv) -> str:
    return subprocess.run(list(argv), env=env, capture_output=True, text=True, timeout=60, check=True).stdout


def test_doctor_on_the_dev_cluster(env, dev_cluster):
    r = run_slurmadm(env, "doctor", "--json")
    out = json.loads(r.stdout)
    by = {f["check"]: f for f in out["findings"]}
    assert r.returncode == 0 and out["ok"] is True, r.stdout
    assert by["site"]["status"] == "ok" and by["site"]["data"]["path"] == env["SLURMADM_SITE"]
    assert len(by["site"]["data"]["sha256"]) == 64
    release = sh(env, "scontrol", "--version").split()[1]
    assert by["slurm"]["status"] == "ok" and by["slurm"]["data"]["release"] == release
    assert by["slurm"]["data"]["backend"] in ("cli", "pyslurm") and "backend" in by["slurm"]["summary"]
    assert by["slurmctld"]["status"] == "ok" and "UP" in by["slurmctld"]["summary"]
    assert by["slurmdbd"]["status"] == "ok" and dev_cluster.site().cluster.name in by["slurmdbd"]["data"]["clusters"]
    assert by["store"]["status"] in ("ok", "warn") and by["store"]["data"]["path"] == dev_cluster.site().store.path
    assert by["hooks"]["status"] == "ok" and by["hooks"]["data"]["config_source"] == "scontrol show config"
    assert by["gpu-tres"]["status"] == "ok" and by["gpu-tres"]["data"]["tracked"] is True  # the dev site tracks it
    assert "pyslurm_built_for" in by["slurm"]["data"]
    assert by["schedule"]["status"] in ("ok", "warn")
    assert all(f["status"] in ("ok", "warn", "skip") for f in out["findings"])
    # the session's dev cluster runs a BMC emulator (IPMI + Redfish) and an sshd per node
    assert by["bmc"]["status"] == "ok" and "all 4 answer" in by["bmc"]["summary"], by["bmc"]
    assert by["bmc-redfish"]["status"] == "ok", by["bmc-redfish"]
    assert by["ssh"]["status"] == "ok" and "all 4 answer" in by["ssh"]["summary"], by["ssh"]

    # NVML as a compute node sees it: the stand-in library of the dev cluster, 8 GPUs
    r = run_slurmadm(env, "doctor", "--node", "b200-002", "--check", "site", "--check", "nvml", "--json")
    nvml = {f["check"]: f for f in json.loads(r.stdout)["findings"]}["nvml"]
    assert r.returncode == 0 and nvml["status"] == "ok", nvml
    assert nvml["data"]["gpus"] == 8 and nvml["data"]["driver"]
    assert any(lib.startswith(str(dev_cluster.state_dir)) for lib in nvml["data"]["library"])

    # people's output: one line per check, the fix under each warning
    r = run_slurmadm(env, "doctor")
    assert r.returncode == 0
    lines = r.stdout.splitlines()
    assert lines[0].startswith("ok    site") and any(ln.startswith("ok    slurmctld") for ln in lines)


def test_doctor_fails_with_exit_1_and_the_fix_when_the_hooks_are_not_where_the_site_says(env, dev_cluster, tmp_path):
    data = tomllib.loads(Path(env["SLURMADM_SITE"]).read_text())
    data["slurm"]["prolog_dir"] = str(tmp_path / "not-installed")
    site = tmp_path / "site.toml"
    site.write_text(tomli_w.dumps(data))
    r = run_slurmadm(env, "doctor", "--site", str(site))
    assert r.returncode == 1, r.stdout + r.stderr
    line = next(ln for ln in r.stdout.splitlines() if ln.startswith("fail  hooks"))
    assert f"{tmp_path}/not-installed/prolog.sh missing" in line
    assert "Prolog is " in line and "in scontrol show config" in line
    assert "fix: " in r.stdout and "slurmadm config apply" in r.stdout
    assert "Traceback" not in r.stderr


def test_whole_drain_reasons(env, dev_cluster):
    sh(env, "scontrol", "update", "nodename=b200-004", "state=drain", f"reason={REASON}")
    try:
        out = sh(env, "sinfo", "-R", "-h", "-n", "b200-004", "-o", SINFO_R)
        assert out.startswith("slurmadm: burnin-health: ecc-uncorrected: GPU5")  # the check ids, whole
        default = sh(env, "sinfo", "-R", "-h", "-n", "b200-004")
        assert default.startswith("slurmadm: burnin-hea ")  # what the default cuts it to

        r = run_slurmadm(env, "health", "status", "--nodes", "b200-004")
        assert r.returncode in (0, 1), r.stderr
        line = next(ln for ln in r.stdout.splitlines() if ln.startswith("b200-004") and "DRAIN" in ln)
        assert line.rstrip().endswith(REASON)  # whole, one line, `[prolog]` kept
        # every result row of the node carries the reason (the periodic hook has recorded some by now)
        assert wait_for(lambda: json.loads(run_slurmadm(env, "health", "status", "--nodes", "b200-004",
                                                        "--json").stdout), 90, interval=1)
        rows = json.loads(run_slurmadm(env, "health", "status", "--nodes", "b200-004", "--json").stdout)
        assert rows and all(row["slurm_reason"] == REASON for row in rows)
    finally:
        sh(env, "scontrol", "update", "nodename=b200-004", "state=resume")
