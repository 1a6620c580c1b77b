"""The fleet replay's CI variant (issue 37): bench/fleet_replay.py as a subprocess on 8 nodes,
policy (a) only, on the fixed schedules tests/fixtures/replay/{faults,jobs}-8.csv, and the issue's
targets asserted from its replay.json: every injected fault class with a node-level signal
detected, no job started on a known-faulty node, no false drain.

The replay brings up its own dev cluster (8 nodes, BMCs, sshd) at $SLURMADM_TEST_PORT_BASE+1000
(the small plan: +1000..+1707, clear of the session cluster's base..+739 and of the other
modules' clusters from +2000), in a state directory beside the session's; the session cluster
stays up meanwhile. The schedule (its header says how) spaces its faults 15 replay seconds apart
within the drain breaker's cap, leaves GPU faults to the repair ladder and repairs the others after
30-45 s, so the periodic health runs (every 10 s) and the BMC sweep find each one even on a loaded
2-core machine. Nothing here times anything: the only clock is the subprocess's deadline. On a
failure the replay's report, health results and slurmctld log stay in pytest's tmp directory
(named in the message).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.conftest import REPO, TEST_PORT_BASE

# the module's one replay runs in the first test's setup: its deadline, not pytest's 600 s per test
pytestmark = [pytest.mark.integration, pytest.mark.timeout(900)]

FIXTURES = REPO / "tests" / "fixtures" / "replay"
FAULTS = FIXTURES / "faults-8.csv"
JOBS = FIXTURES / "jobs-8.csv"
PORT_BASE = TEST_PORT_BASE + 1000
MINUTES = 3.5  # the last fault at 150 s, and time for the ladder and `bmc recover` to act
DEADLINE_S = 780  # bring-up, the run (210 s) and the teardown; a hung replay fails here, its cluster taken down


def schedule_classes() -> dict[str, bool]:
    """The classes the fixed schedule injects, and whether each has a node-level signal (the mix)."""
    from bench.replay import schedule

    signal = {r.cls: r.signal == "node" for r in schedule.load_mix()}
    nodes = {f"b200-{i:03d}" for i in range(1, 9)}
    return {f.cls: signal[f.cls] for f in schedule.read_faults(FAULTS.read_text(), str(FAULTS), nodes)}


@pytest.fixture(scope="module")
def replay(tmp_path_factory) -> dict:
    if os.geteuid() != 0:
        pytest.fail("the fleet replay needs root (it starts munged, MariaDB and Slurm)")
    session = Path(os.environ.get("SLURMADM_TEST_STATE_DIR") or f"/tmp/slurmadm-test-{TEST_PORT_BASE}")
    state = session.with_name(session.name + "-replay")
    out = tmp_path_factory.mktemp("replay")
    argv = [sys.executable, str(REPO / "bench" / "fleet_replay.py"), "--nodes", "8", "--minutes", str(MINUTES),
            "--policies", "a", "--jobs", str(JOBS), "--faults", str(FAULTS), "--out", str(out),
            "--port-base", str(PORT_BASE), "--state-dir", str(state), "--watch-every", "20",
            # no nightly burn-in: the fixed schedule has no fault only it finds (no SDC), and its
            # sweeps would hold nodes the schedule's faults are laid out on (bench/RESULTS.md has
            # the runs with it)
            "--burnin-every", "0"]
    try:
        proc = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=DEADLINE_S)
    finally:
        # the replay takes its cluster down itself; this is for a replay killed at the deadline
        subprocess.run([sys.executable, "-m", "slurmadm", "dev-cluster", "down", "--purge",
                        "--state-dir", str(state / "a")], cwd=REPO, capture_output=True, timeout=300)
    assert proc.returncode == 0, f"fleet_replay exit {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    rep = json.loads((out / "replay.json").read_text())
    rep["_out"] = out
    return rep


def test_the_schedule_covers_every_injector_and_classes_without_a_signal():
    classes = schedule_classes()
    assert {c for c, s in classes.items() if s} >= {"faulty-gpu", "gpu-hbm", "gpu-gsp", "network", "nic", "thermal",
                                                    "psu", "fan", "host"}
    assert not classes["software"]  # a job's own bug: no node signal, and no drain may follow it


def test_every_signalled_class_is_detected(replay):
    a = replay["results"]["a"]
    why = (f"drains seen: {replay['timeline']['a']['drains']}; errors: {replay['errors']['a']}; "
           f"report and logs: {replay['_out']}")
    for cls, signalled in schedule_classes().items():
        row = a["per_class"][cls]
        assert row["injected"] >= 1, cls
        if signalled:
            # the schedule gives every fault a node of its own that is in service: none lands on a
            # node already out, so each one is a detection to make
            assert row["already_out"] == 0, f"{cls}: landed on a node already out; {why}"
            assert row["detected"] == row["injected"], f"{cls}: {row}; {why}"
    assert a["undetected_classes"] == []
    assert replay["compare"]["targets"]["every signalled class detected"] is True


def test_no_job_started_on_a_known_faulty_node(replay):
    jobs = replay["results"]["a"]["jobs"]
    assert jobs["runs"] > 0, "no job ran: the job stream did not reach Slurm"
    # known: a drain had followed the fault (bench/replay/measure.py). A run started between the
    # injection and the first check (a prolog that refused it is such a run, requeued) is harm
    # the report shows, not this target
    assert jobs["started_on_known_faulty_node"] == 0, (jobs["started_on_known_faulty_names"],
                                                       replay["timeline"]["a"], replay["_out"])
    assert replay["compare"]["targets"]["no job started on a known-faulty node"] is True


def test_no_false_drain(replay):
    drains = replay["results"]["a"]["drains"]
    assert drains["false"] == 0, f"{drains['false_nodes']}: {drains['false_reasons']} ({replay['_out']})"
    assert replay["compare"]["targets"]["no false drain"] is True


def test_the_run_went_as_scheduled_and_wrote_its_report(replay):
    assert replay["errors"]["a"] == []  # every injection, repair run and bmc sweep answered
    out = replay["_out"]
    page = (out / "report.html").read_text()
    assert "<svg" in page and "<script" not in page
    assert (out / "report.md").read_text().startswith("fleet replay: 8 nodes")
