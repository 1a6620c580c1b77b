"""scripts/gpu-smoke.sh must pass its own dry run without a GPU: the same steps (facts through
NVML, a one-node site, every NVML check through the hook's entry point, the table) against the
stand-in NVML standing in for a single PCIe GPU."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[3]


def test_gpu_smoke_dry_run_passes(tmp_path):
    env = {**os.environ, "GPU_SMOKE_DIR": str(tmp_path / "smoke")}
    p = subprocess.run([str(REPO / "scripts" / "gpu-smoke.sh"), "--dry-run"], env=env, capture_output=True,
                       text=True, timeout=300, cwd=tmp_path)
    assert p.returncode == 0, p.stdout + p.stderr
    table = {line.split()[0]: line.split()[1] for line in p.stdout.splitlines()[1:] if line and not line[0].isdigit()}
    for cid in ("gpu-count", "ecc-uncorrected", "row-remap", "xid", "pcie-link", "thermal", "clock-events",
                "ecc-corrected", "retired-pages", "power", "driver-version", "persistence-mode"):
        assert table.get(cid) == "pass", (cid, p.stdout)
    # a single PCIe GPU: no NVLinks, no NVSwitch fabric: "not applicable", not a failure
    assert table["nvlink"] == "skip" and table["fabric"] == "skip"
    assert "14 checks, 0 failed or could not run: PASS" in p.stdout
    assert '"nvml_name": "NVIDIA H200 NVL"' in p.stderr  # the facts step read the GPU through pynvml


def test_gpu_smoke_rejects_unknown_arguments(tmp_path):
    p = subprocess.run([str(REPO / "scripts" / "gpu-smoke.sh"), "--bogus"], capture_output=True, text=True,
                       timeout=30, env={**os.environ, "GPU_SMOKE_DIR": str(tmp_path / "s")})
    assert p.returncode == 2 and "usage: scripts/gpu-smoke.sh [--dry-run]" in p.stderr
