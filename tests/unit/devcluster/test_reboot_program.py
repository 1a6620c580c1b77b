"""The dev cluster's RebootProgram runs as Slurm 26.05 runs it: through PowerAction, with an
environment holding only SLURM_NODE_NAME (no PATH, no SLURMADM_DEV_NODE). Issue 21 saw the old
script exit 2 there and the rollout canary never come back."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurmadm.devcluster.cluster import DevCluster

pytestmark = pytest.mark.unit


def _stub_python(tmp_path: Path) -> tuple[Path, Path]:
    """A stand-in for the Python the script starts: records its arguments and PATH."""
    record = tmp_path / "record"
    stub = tmp_path / "python-stub"
    stub.write_text(f"#!/bin/sh\nprintf '%s\\n' \"$@\" \"PATH=$PATH\" > {shlex.quote(str(record))}.tmp\n"
                    f"mv {shlex.quote(str(record))}.tmp {shlex.quote(str(record))}\n")
    stub.chmod(0o755)
    return stub, record


def _wait(path: Path, timeout: float = 30.0) -> str:
    deadline = time.monotonic() + timeout
    while not path.exists():
        if time.monotonic() > deadline:
            raise AssertionError(f"{path} never appeared")
        time.sleep(0.05)
    return path.read_text()


@pytest.mark.parametrize("env", [{"SLURM_NODE_NAME": "b200-002"},  # 26.05 PowerAction
                                 {"SLURMADM_DEV_NODE": "b200-002", "PATH": "/nonexistent"}])  # 22.05-25.11
def test_reboot_program_needs_only_the_node_name(tmp_path, env):
    dc = DevCluster(tmp_path / "state")
    dc.state_dir.mkdir()
    dc._write_reboot_program()
    stub, record = _stub_python(tmp_path)
    conf = dc.p("bin", "reboot.env")
    conf.write_text(conf.read_text().replace(f"SLURMADM_PYTHON={shlex.quote(sys.executable)}",
                                             f"SLURMADM_PYTHON={shlex.quote(str(stub))}"))
    proc = subprocess.run([str(dc.p("bin", "reboot"))], env=env, cwd="/", capture_output=True, text=True, timeout=30)
    assert proc.returncode == 0, proc.stderr
    args = _wait(record).splitlines()
    assert args[:6] == ["-m", "slurmadm.devcluster.fakenode", "--state-dir", str(dc.state_dir), "--node", "b200-002"]
    assert args[6] == "reboot"
    path = args[7].removeprefix("PATH=").split(os.pathsep)
    assert "/usr/bin" in path and "/usr/sbin" in path  # slurmd, nsenter, sshd can be found again


def test_reboot_program_without_a_node_name_says_so(tmp_path):
    dc = DevCluster(tmp_path / "state")
    dc.state_dir.mkdir()
    dc._write_reboot_program()
    proc = subprocess.run([str(dc.p("bin", "reboot"))], env={}, capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2 and "neither SLURMADM_DEV_NODE nor SLURM_NODE_NAME" in proc.stderr
