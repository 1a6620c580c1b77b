"""Issue 36's OOM-killed step on a real Slurm: a dev cluster that enforces memory as a site does
(`dev-cluster up --enforce-memory`: task/cgroup, ConstrainRAMSpace) kills a step over its --mem,
Slurm ends it OUT_OF_MEMORY, and `jobs failures` calls it the user's: `user: out of memory ...,
no node signal`.

Two runs on one node: a batch script over its limit (the job ends OUT_OF_MEMORY) and an srun step
over it inside a job that goes on to fail (step 0 OUT_OF_MEMORY, the job FAILED), as sacct shows
real ones (tests/fixtures/slurm/public/). Its own one-node cluster at $SLURMADM_TEST_PORT_BASE +
9000, beside the session's (whose slurmd enforce nothing). A host without a writable cgroup v1
memory controller cannot enforce a limit: the module says so and skips.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from slurmadm.devcluster import devsite
from slurmadm.devcluster.cluster import DevCluster
from tests.integration.conftest import TEST_PORT_BASE
from tests.integration.helpers import run_slurmadm, sh, wait_until

pytestmark = pytest.mark.integration

GROW = "x = bytearray(400 * 1024 * 1024); print(len(x))"  # 400 MiB, touched, against a 64 MiB limit


@pytest.fixture(scope="module")
def dc():
    if os.geteuid() != 0:
        pytest.fail("integration tests need root (they start munged, MariaDB and Slurm)")
    why = devsite.memory_cgroup_problem()
    if why:
        pytest.skip(f"this host cannot enforce a step's memory: {why}")
    state = Path(os.environ.get("SLURMADM_TEST_STATE_DIR") or f"/tmp/slurmadm-test-{TEST_PORT_BASE}")
    cluster = DevCluster(state.with_name(state.name + "-oom"))
    cluster.down(purge=True)
    cluster.up(nodes=1, port_base=TEST_PORT_BASE + 9000, timeout=180, bmc=False, ssh=False, enforce_memory=True)
    yield cluster
    cluster.down(purge=True)


def states(env, job: str) -> dict[str, str]:
    out = sh(env, "sacct", "-n", "-P", "-j", job, "-o", "JobID,State")
    return dict(line.split("|", 1) for line in out.splitlines() if "|" in line)


def test_an_oom_killed_step_is_the_users(dc):
    env = {**os.environ, **dc.env(), "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    conf = Path(dc.slurm_conf).read_text()
    assert "\nTaskPlugin=task/cgroup\n" in conf, "the cluster does not enforce memory"
    py = sys.executable
    batch = sh(env, "sbatch", "--parsable", "-o", "/dev/null", "-w", "b200-001", "--gres=gpu:1", "--mem=64M",
               "-J", "oom-batch", "--wrap", f"{py} -c '{GROW}'").strip()
    step = sh(env, "sbatch", "--parsable", "-o", "/dev/null", "-w", "b200-001", "--gres=gpu:1", "--mem=64M",
              "-J", "oom-step", "--wrap", f"srun {py} -c '{GROW}'").strip()
    wait_until(lambda: states(env, batch).get(batch) == "OUT_OF_MEMORY", 180, "the batch job to end OUT_OF_MEMORY")
    wait_until(lambda: states(env, step).get(f"{step}.0") == "OUT_OF_MEMORY", 180, "step 0 to end OUT_OF_MEMORY")
    assert states(env, step).get(step) == "FAILED", states(env, step)  # srun's non-zero exit fails the job

    def verdicts():
        p = run_slurmadm(env, "jobs", "failures", "--since", "1h", "--json", timeout=180)
        assert p.returncode in (0, 1), p.stderr
        got = {f["job_id"]: f for f in json.loads(p.stdout)["failures"]}
        return got if batch in got and step in got else None

    got = wait_until(verdicts, 120, "both runs among the failures", interval=3)
    for job in (batch, step):
        print(f"job {job} {got[job]['state']}: {got[job]['line']} ({got[job]['gpu_hours']} GPU-h)")
    assert got[batch]["state"] == "OUT_OF_MEMORY", got[batch]
    assert got[batch]["verdict"] == "user" and got[batch]["line"].startswith("user: out of memory"), got[batch]
    assert got[batch]["line"].endswith("no node signal"), got[batch]
    assert got[step]["verdict"] == "user" and "out of memory (step 0)" in got[step]["line"], got[step]
    assert got[batch]["gpus"] == 1 and got[step]["gpus"] == 1
