"""The reference site whole, at CI size (issue 27): bench/reference_site.py on its own dev cluster
of 8 nodes in the wide port plan (the 128-node plan, `up --wide-ports`), every step's verdict
asserted (timings are the benchmark's business: bench/RESULTS.md).

Its own cluster at TEST_PORT_BASE+5000 (wide plan: +5000..+7199), clear of the session cluster
(+0..+703) and the other test clusters (+720..739, +2000..+2703, +3000..+3703, +3800..+4503); it
does not use the session cluster, so the module runs alone too. ~2.5 min on a loaded 2-core machine.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from slurmadm.devcluster import devsite
from slurmadm.health.allreduce import import_torch

from tests.integration.conftest import REPO, TEST_PORT_BASE

pytestmark = pytest.mark.integration

NODES = int(os.environ.get("SLURMADM_TEST_REFERENCE_NODES", "8"))
BASE = TEST_PORT_BASE + 5000
# every step but the burn-in sweep, which test_burnin.py and test_burnin_straggler.py run on the
# session cluster (here it once ran out of its time limits with a second test run beside it)
CI_STEPS = ["bring-up", "config", "array", "accounts", "breaker", "scrape", "top", "drift", "bmc", "ship"]


def test_the_reference_site_script_gets_every_verdict_right(tmp_path):
    if os.geteuid() != 0:
        pytest.fail("integration tests need root (they start munged, MariaDB and Slurm)")
    if import_torch() is None:
        pytest.fail("torch is required for the burn-in step: scripts/install-torch-cpu.sh .venv/bin/python")
    first, last = devsite.Ports(BASE, wide=True).span(NODES)
    for other in ((TEST_PORT_BASE, TEST_PORT_BASE + 739), (TEST_PORT_BASE + 2000, TEST_PORT_BASE + 4503)):
        assert last < other[0] or first > other[1]
    state = Path(os.environ.get("SLURMADM_TEST_STATE_DIR") or f"/tmp/slurmadm-test-{TEST_PORT_BASE}")
    state = state.with_name(state.name + "-ref")
    out = tmp_path / "ref.json"
    p = subprocess.run([sys.executable, str(REPO / "bench" / "reference_site.py"), "--nodes", str(NODES),
                        "--port-base", str(BASE), "--state-dir", str(state), "--json", str(out),
                        "--only", ",".join(CI_STEPS)],
                       capture_output=True, text=True, timeout=900, cwd=REPO)
    assert out.exists(), p.stdout[-3000:] + p.stderr[-3000:]
    result = json.loads(out.read_text())
    steps = {s["step"]: s for s in result["steps"]}
    assert list(steps) == CI_STEPS, p.stdout[-3000:]
    wrong = {k: s["verdict"] for k, s in steps.items() if not s["ok"]}
    assert not wrong, json.dumps(wrong, indent=1) + "\n" + p.stdout[-3000:] + p.stderr[-2000:]
    assert p.returncode == 0, p.stderr[-2000:]
    # the verdicts say what they checked: spot the numbers that matter
    assert steps["bring-up"]["port_plan"] == "wide"
    assert steps["array"][f"all_{NODES}"]["gpus"] == 8 * NODES
    assert steps["array"][f"all_{NODES}"]["prologs_at_once"] >= 2  # they overlapped: run at once
    assert "held back (breaker alert for" in steps["breaker"]["verdict"]
    assert f"{NODES}/{NODES} node exporters with 8 GPUs" in steps["scrape"]["verdict"]
    assert f"{NODES}/{NODES} shipped" in steps["ship"]["verdict"]
    # the run brought its cluster down
    assert not (state / "cluster.json").exists()
