"""The hook's time limit holds whatever the Slurm backend does (issue 15, item 7).

pyslurm cannot be built here (it needs its own Slurm release), so a stand-in `pyslurm` module
does what the real one was measured doing: its calls block inside a C function *without
releasing the GIL* (ctypes.PyDLL calling libc's sleep, as libslurm retrying an unreachable
controller inside pyslurm's Cython), and its import ends the process (exit, not an exception)
when there is no SLURM_CONF, as libslurm's fatal() does."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest
import tomli_w

from slurmadm.devcluster import gpus
from slurmadm.site import BUILTIN_PROFILES

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[3]
NODE = "b200-003"
BLOCK_S = 60

STANDIN = '''
import ctypes, ctypes.util, os
__version__ = os.environ["STANDIN_PYSLURM_VERSION"]
if not os.environ.get("SLURM_CONF"):
    os._exit(1)  # libslurm: "fatal: Could not establish a configuration source" -> exit(1)

class RPCError(Exception):
    pass

def _block():
    # a C call that keeps the GIL: no Python thread of this process runs meanwhile
    ctypes.PyDLL(ctypes.util.find_library("c")).sleep(int(os.environ.get("STANDIN_PYSLURM_BLOCK_S", "60")))

class Node:
    def __init__(self, **kw):
        self.__dict__.update(kw)
    @staticmethod
    def load(name):
        _block()

class Nodes:
    @staticmethod
    def load():
        _block()
'''


@pytest.fixture()
def world(tmp_path, fake_nvml_lib):
    (tmp_path / "standin").mkdir()
    (tmp_path / "standin" / "pyslurm.py").write_text(STANDIN)
    conf = tmp_path / "slurm" / "slurm.conf"
    conf.parent.mkdir()
    # a controller nobody listens for: what an unreachable slurmctld looks like to a client
    conf.write_text("ClusterName=x\nSlurmctldHost=localhost\nSlurmctldPort=1\nTCPTimeout=1\nMessageTimeout=1\n"
                    "NodeName=b200-003 CPUs=1\n"
                    "PartitionName=gpu Nodes=b200-003\n")
    version = subprocess.run(["sinfo", "--version"], env={**os.environ, "SLURM_CONF": str(conf)},
                             capture_output=True, text=True, check=True).stdout.split()[-1]
    major, minor, patch = (int(x) for x in version.split("."))
    data = tomllib.loads((REPO / "site.example.toml").read_text())
    data["store"] = {"path": str(tmp_path / "slurmadm.db")}
    data["health"].update(results_log=str(tmp_path / "health.jsonl"), xid_source=str(tmp_path / "gpus/{node}.kmsg"),
                          check_timeout_s=2.0, prolog_timeout_s=4.0, on_error="fail")
    data["health"]["checks"]["nccl-allreduce"] = {"contexts": ["run"]}
    site = tmp_path / "site.toml"
    site.write_text(tomli_w.dumps(data))
    gdir = tmp_path / "gpus"
    gpus.write_healthy(gdir, NODE, BUILTIN_PROFILES["hgx-b200"], driver_version="570.133.20")
    gpus.inject(gdir, NODE, 5, "ecc-uncorrected")  # a fault: the prolog must call Slurm to drain
    env = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "SLURMADM_SITE": str(site), "SLURM_CONF": str(conf),
           "SLURMADM_CACHE_DIR": str(tmp_path / "cache"), "SLURMD_NODENAME": NODE,
           "PYTHONPATH": os.pathsep.join([str(tmp_path / "standin"), str(REPO)]),
           "STANDIN_PYSLURM_VERSION": f"{major}.{minor}.{patch}", "STANDIN_PYSLURM_BLOCK_S": str(BLOCK_S),
           "SLURMADM_REFUSE_EXIT": "86", **gpus.env_for(gdir, fake_nvml_lib)}
    return tmp_path, env


def test_standin_really_holds_the_gil(world):
    """The premise: while the stand-in blocks, a Python watchdog thread cannot run."""
    tmp, env = world
    code = ("import threading, time, pyslurm; t0 = time.monotonic(); ticks = []\n"
            "th = threading.Thread(target=lambda: [ticks.append(time.monotonic()) or time.sleep(0.05) for _ in range(20)],"
            " daemon=True); th.start(); time.sleep(0.01)\n"
            "import ctypes, ctypes.util; ctypes.PyDLL(ctypes.util.find_library('c')).sleep(1)\n"
            "print(sum(1 for t in ticks if t - t0 > 0.1 and t - t0 < 0.95))")
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)
    assert p.stdout.strip() == "0", p.stderr


def test_prolog_limit_holds_while_pyslurm_blocks_holding_the_gil(world):
    tmp, env = world
    started = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "slurmadm.health", "prolog"], env={**env, "SLURMADM_SLURM_BACKEND": "pyslurm"},
                       capture_output=True, text=True, timeout=BLOCK_S - 10, cwd=tmp)
    took = time.monotonic() - started
    assert took < BLOCK_S / 2, took  # the limit is 4 s (+1 s grace); the stand-in blocks for 60 s
    # on_error = fail: a prolog that could not finish keeps the job off the node
    assert p.returncode == 86, p.stderr
    assert "gave up at the run's limit of 4 s" in p.stderr
    # and the alert is recorded where alerts go, not only printed
    lines = [json.loads(x) for x in (tmp / "health.jsonl").read_text().splitlines()]
    assert any(x.get("event") == "alert" and "limit" in x.get("reason", "") for x in lines), lines


def test_scontrol_path_is_bounded_the_same_way(world):
    tmp, env = world
    started = time.monotonic()
    p = subprocess.run([sys.executable, "-m", "slurmadm.health", "prolog"], env={**env, "SLURMADM_SLURM_BACKEND": "cli"},
                       capture_output=True, text=True, timeout=BLOCK_S - 10, cwd=tmp)
    assert time.monotonic() - started < BLOCK_S / 2
    assert p.returncode == 86, p.stderr  # Slurm unreachable: the fault still keeps the job off


def test_auto_backend_without_slurm_conf_probes_before_importing_pyslurm(world):
    """`import pyslurm` exits the process when libslurm finds no configuration; `auto` must
    find that out in a child process and go on (here: to the cli backend's own clear error)."""
    tmp, env = world
    env = {k: v for k, v in env.items() if k != "SLURM_CONF"}
    code = ("from slurmadm.slurm import get_backend\nfrom slurmadm.errors import SlurmadmError\n"
            "try:\n    print('backend', get_backend('auto', timeout=5).name)\n"
            "except SlurmadmError as exc:\n    print('error', exc)\n")
    p = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60, cwd=tmp)
    assert p.returncode == 0 and p.stdout.startswith(("backend cli", "error")), (p.returncode, p.stdout, p.stderr)
    # with a configuration, the same stand-in is picked (the probe passes)
    code = "from slurmadm.slurm import get_backend\nprint(get_backend('auto', timeout=5).name)\n"
    p = subprocess.run([sys.executable, "-c", code], env=world[1], capture_output=True, text=True, timeout=60, cwd=tmp)
    assert p.stdout.strip() == "pyslurm", p.stderr
