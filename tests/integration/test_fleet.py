"""`slurmadm fleet` against the dev cluster's real sshd per fake node (own mount+UTS namespace,
own software stack) and real Slurm reboots (RebootProgram restarts the node's slurmd and sshd),
with the BMC emulators (`--bmc`: firmware facts, firmware steps, power cycles of a node whose
slurmd is gone). The module's cluster runs ReturnToService=1, so the rollouts take Slurm's
documented update path, `scontrol reboot ASAP nextstate=DOWN reason=...`, for real.

Every test leaves the nodes as it found them: the baseline stack, idle, no rollout drains.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import tomllib
from pathlib import Path

import pytest
import tomli_w

from slurmadm.devcluster.cluster import DevCluster
from slurmadm.devcluster.daemons import wait_for
from slurmadm.devcluster.redfish_emulator import fake_image
from slurmadm.resources import example_site
from slurmadm.slurm.cli_backend import CliBackend
from slurmadm.store import Store
from tests.integration.conftest import TEST_PORT_BASE
from tests.integration.helpers import delete_reservation, run_slurmadm

pytestmark = pytest.mark.integration
NODES = ["b200-001", "b200-002", "b200-003", "b200-004"]


@pytest.fixture(scope="module")
def dev_cluster():
    """A dev cluster of this module's own (sshd per node): rollouts reboot nodes through Slurm,
    and the state other modules leave on the session's cluster (drains, reservations, power
    cycles through the BMC emulators) made them fail there. Ports TEST_PORT_BASE+2000 on."""
    state = Path(os.environ.get("SLURMADM_TEST_STATE_DIR") or f"/tmp/slurmadm-test-{TEST_PORT_BASE}")
    dc = DevCluster(state.with_name(state.name + "-fleet"))
    dc.down(purge=True)
    # the example site, but ReturnToService=1: a node rebooted with nextstate=DOWN stays DOWN
    # until the rollout resumes it (with 2, Slurm returns it to service when it registers)
    src = tomllib.loads(example_site().read_text())
    src["slurm"]["return_to_service"] = 1
    dc.state_dir.mkdir(parents=True, exist_ok=True)
    site_file = dc.state_dir.with_name(dc.state_dir.name + "-site.toml")
    site_file.write_text(tomli_w.dumps(src))
    dc.up(nodes=4, port_base=TEST_PORT_BASE + 2000, timeout=180, ssh=True, bmc=True, site_file=str(site_file))
    yield dc
    dc.down(purge=True)


@pytest.fixture()
def env(cluster_env):
    return cluster_env


def nodeinfo(env, name):
    return CliBackend(env={"SLURM_CONF": env["SLURM_CONF"]}).nodes([name])[0]


def baseline(dev_cluster):
    sw = dev_cluster.site().software
    return {"nccl": sw.nccl_version, "cudnn": "9.8.0.87", "mpi": "4.1.7"}


def _resume_all(env) -> None:
    subprocess.run(["scancel", "--full", "-u", "root"], env=env, capture_output=True, timeout=30)
    for n in NODES:
        info = nodeinfo(env, n)
        if info.drained or info.state == "DOWN":
            subprocess.run(["scontrol", "update", f"nodename={n}", "state=resume"], env=env, capture_output=True,
                           timeout=30)


@pytest.fixture()
def clean_nodes(dev_cluster, env):
    """Idle nodes before the test (an earlier module may have left a drain of its own, e.g. a
    burn-in verdict, that a rollout rightly refuses to touch); the baseline stack and idle after."""
    for n in NODES:
        dev_cluster.p("nodes", n, "installs.log").unlink(missing_ok=True)
    _resume_all(env)
    assert wait_for(lambda: not any(nodeinfo(env, n).drained or nodeinfo(env, n).state == "DOWN" for n in NODES),
                    timeout=120, interval=1.0), "a node stayed drained or down before the test"
    yield
    for n in NODES:
        dev_cluster.set_software(n, baseline(dev_cluster))
    _resume_all(env)
    dev_cluster.up(timeout=120)  # restores host keys / known_hosts and any stopped sshd


def installs(dev_cluster, node) -> int:
    log = dev_cluster.p("nodes", node, "installs.log")
    return len(log.read_text().splitlines()) if log.exists() else 0


def test_facts_come_from_each_nodes_own_namespace(dev_cluster, env, clean_nodes):
    dev_cluster.set_software("b200-002", {"nccl": "2.21.5"})
    p = run_slurmadm(env, "fleet", "facts", "--json")
    assert p.returncode == 0, p.stderr
    got = {n["node"]: n for n in json.loads(p.stdout)["nodes"]}
    assert set(got) == set(NODES)
    assert got["b200-002"]["facts"]["nccl"] == "2.21.5"
    assert got["b200-001"]["facts"]["nccl"] == dev_cluster.site().software.nccl_version
    for n in NODES:
        f = got[n]["facts"]
        assert f["hostname"] == n  # its own UTS namespace
        assert f["driver"] == dev_cluster.site().software.driver_version  # /proc/driver/nvidia/version
        assert f["os_image"] == "ubuntu-24.04-dgx" and f["kernel"] == "6.8.0-60-generic"
        assert f["ofed"] == dev_cluster.site().software.ofed_version and f["cuda"] == "12.8"
        assert any(k.startswith("file:") for k in f)
        assert got[n]["ts"] is not None
    # stored with their time
    with Store.for_site(dev_cluster.site()) as store:
        row = store.db.execute("SELECT value, ts FROM fleet_facts WHERE node='b200-002' AND fact='nccl'").fetchone()
    assert row["value"] == "2.21.5" and row["ts"] > 0


def test_drift_found_grouped_and_drained_then_resumed(dev_cluster, env, clean_nodes):
    want = dev_cluster.site().software.nccl_version
    for n in ("b200-001", "b200-003"):
        dev_cluster.set_software(n, {"nccl": "2.21.5"})
    dev_cluster.set_software("b200-004", {"mpi": "4.1.6"})  # no baseline: the fleet's most common wins
    p = run_slurmadm(env, "fleet", "drift", "--json")
    assert p.returncode == 1, p.stderr
    drift = {(d["fact"], d["nodes"]): d for d in json.loads(p.stdout)["drift"]}
    assert drift[("nccl", "b200-[001,003]")]["want"] == want and drift[("nccl", "b200-[001,003]")]["source"] == "baseline"
    assert drift[("mpi", "b200-004")]["want"] == "4.1.7" and drift[("mpi", "b200-004")]["source"] == "fleet"
    text = run_slurmadm(env, "fleet", "drift").stdout
    assert "b200-[001,003]" in text and "2.21.5" in text

    p = run_slurmadm(env, "fleet", "drift", "--drain")
    assert p.returncode == 1, p.stderr
    r1 = nodeinfo(env, "b200-001")
    assert r1.drained and r1.reason == f"slurmadm: drift: nccl 2.21.5 != {want} [fleet]"
    assert not nodeinfo(env, "b200-002").drained
    # the breaker (dev site: half of a partition) held the third drain back
    assert sum(nodeinfo(env, n).drained for n in NODES) == 2
    with Store.for_site(dev_cluster.site()) as store:
        assert store.events(action="node.drain", target="b200-001")

    for n in NODES:
        dev_cluster.set_software(n, baseline(dev_cluster))
    p = run_slurmadm(env, "fleet", "drift", "--drain")
    assert p.returncode == 0, p.stdout + p.stderr
    assert not any(nodeinfo(env, n).drained for n in NODES)  # its own drains lifted


def test_unreachable_node_and_changed_host_key_are_one_row_each(dev_cluster, env, clean_nodes):
    dev_cluster.daemon("sshd-b200-003").stop()
    dev_cluster.regenerate_host_key("b200-004")
    p = run_slurmadm(env, "fleet", "facts", "--json")
    assert p.returncode == 3, p.stderr
    got = {n["node"]: n for n in json.loads(p.stdout)["nodes"]}
    assert got["b200-003"]["kind"] == "unreachable" and "refused" in got["b200-003"]["error"].lower()
    assert got["b200-004"]["kind"] == "hostkey" and "CHANGED" in got["b200-004"]["error"]
    assert got["b200-001"]["facts"]["nccl"] and got["b200-002"]["facts"]["nccl"]
    assert "BEGIN OPENSSH" not in p.stdout + p.stderr


def test_run_folds_outputs_and_reports_exits_and_time_limit(dev_cluster, env):
    p = run_slurmadm(env, "fleet", "run", "b200-[001-004]", "--json", "--",
                     "cat /proc/sys/kernel/osrelease; [ $(hostname) = b200-002 ] && exit 3; true")
    assert p.returncode == 1, p.stderr
    out = json.loads(p.stdout)
    groups = {g["nodes"]: g for g in out["groups"]}
    assert groups["b200-[001,003-004]"]["exit"] == 0 and groups["b200-[001,003-004]"]["output"] == "6.8.0-60-generic\n"
    assert groups["b200-002"]["exit"] == 3
    p = run_slurmadm(env, "fleet", "run", "b200-001", "--timeout", "1", "--", "sleep 30")
    assert p.returncode == 3 and "1 s limit" in p.stdout
    with Store.for_site(dev_cluster.site()) as store:
        assert store.events(action="fleet.run")


def plan(tmp_path, name, *, expect_nccl="2.26.2", install="2.26.2", extra=""):
    path = tmp_path / f"{name}.toml"
    path.write_text(textwrap.dedent(f"""\
        name = "{name}"
        canary_nodes = 1
        wave_fraction = 0.5
        max_failed_fraction = 0.0
        health_command = "slurmadm health run --dry-run --json --checks gpu-count,ecc-uncorrected,xid,nvlink,driver-version"
        {extra}
        [[steps]]
        run = "dev-software install nccl={install}"
        timeout_s = 60
        [expect]
        nccl = "{expect_nccl}"
        """))
    return str(path)


def facts_of(env, node):
    p = run_slurmadm(env, "fleet", "facts", node, "--json")
    return json.loads(p.stdout)["nodes"][0]["facts"]


def test_canary_failing_verification_stops_with_others_untouched(dev_cluster, env, tmp_path, clean_nodes):
    base = dev_cluster.site().software.nccl_version
    p = run_slurmadm(env, "fleet", "rollout", plan(tmp_path, "bad-canary", expect_nccl="9.9.9"), timeout=300)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "stopped" in p.stdout and "canary failed" in p.stdout
    c = nodeinfo(env, "b200-001")
    assert c.drained and "FAILED verify: nccl 2.26.2 != 9.9.9" in c.reason
    for n in NODES[1:]:
        assert not nodeinfo(env, n).drained and installs(dev_cluster, n) == 0
        assert facts_of(env, n)["nccl"] == base
    st = json.loads(run_slurmadm(env, "fleet", "rollout", "status", "bad-canary", "--json").stdout)["rollouts"][0]
    assert st["state"] == "stopped"
    assert {n["node"]: n["phase"] for n in st["nodes"]} == {"b200-001": "failed", "b200-002": "pending",
                                                            "b200-003": "pending", "b200-004": "pending"}


def test_good_plan_goes_canary_then_waves_and_resumes_everyone(dev_cluster, env, tmp_path, clean_nodes):
    path = plan(tmp_path, "nccl-good")
    dry = run_slurmadm(env, "fleet", "rollout", path, "--dry-run", "--json")
    assert [w["nodes"] for w in json.loads(dry.stdout)["waves"]] == ["b200-001", "b200-[002-003]", "b200-004"]
    assert installs(dev_cluster, "b200-001") == 0  # the dry run changed nothing
    p = run_slurmadm(env, "fleet", "rollout", path, timeout=400)
    assert p.returncode == 0, p.stdout + p.stderr
    for n in NODES:
        info = nodeinfo(env, n)
        assert not info.drained and info.state == "IDLE", info
        assert facts_of(env, n)["nccl"] == "2.26.2"
    with Store.for_site(dev_cluster.site()) as store:
        reboots = store.events(action="node.reboot")
        ctld = dev_cluster.p("log", "slurmctld.log").read_text()
    assert {e.target for e in reboots} >= set(NODES)
    assert "reboot request queued for nodes b200-004" in ctld  # Slurm's own reboot, not a shortcut
    # a second run is a no-op: every node is done
    again = run_slurmadm(env, "fleet", "rollout", path, timeout=60)
    assert again.returncode == 0 and all(installs(dev_cluster, n) == 1 for n in NODES)


def test_rollout_killed_midway_continues_without_redoing_nodes(dev_cluster, env, tmp_path, clean_nodes):
    path = plan(tmp_path, "nccl-resume")
    proc = subprocess.Popen([sys.executable, "-m", "slurmadm", "fleet", "rollout", path], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    store = Store.for_site(dev_cluster.site())

    def canary_done():
        row = store.db.execute("SELECT phase FROM fleet_rollout_nodes WHERE rollout='nccl-resume' AND "
                               "node='b200-001'").fetchone()
        return row is not None and row["phase"] == "done"

    try:
        assert wait_for(canary_done, 180, interval=0.2)
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    store.close()
    p = run_slurmadm(env, "fleet", "rollout", path, timeout=400)
    assert p.returncode == 0, p.stdout + p.stderr
    assert installs(dev_cluster, "b200-001") == 1  # the finished canary was not redone
    for n in NODES:
        assert facts_of(env, n)["nccl"] == "2.26.2" and not nodeinfo(env, n).drained


def test_node_with_a_running_job_is_not_touched_until_free(dev_cluster, env, tmp_path, clean_nodes):
    job = subprocess.run(["sbatch", "--parsable", "-w", "b200-001", "-N1", "-t", "10", "--wrap", "sleep 300"],
                         env=env, capture_output=True, text=True, timeout=30)
    assert job.returncode == 0, job.stderr
    jobid = job.stdout.strip().split(";")[0]
    assert wait_for(lambda: nodeinfo(env, "b200-001").state in ("ALLOCATED", "MIXED"), 60)
    path = plan(tmp_path, "nccl-busy")
    proc = subprocess.Popen([sys.executable, "-m", "slurmadm", "fleet", "rollout", path], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert wait_for(lambda: nodeinfo(env, "b200-001").drained, 60)  # draining: the job runs on
        with Store.for_site(dev_cluster.site()) as store:
            assert wait_for(lambda: store.db.execute(
                "SELECT phase FROM fleet_rollout_nodes WHERE rollout='nccl-busy' AND node='b200-001'"
            ).fetchone()["phase"] == "draining", 30)
        assert installs(dev_cluster, "b200-001") == 0 and proc.poll() is None
        subprocess.run(["scancel", jobid], env=env, timeout=30, check=True)
        out, err = proc.communicate(timeout=400)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, out + err
    assert installs(dev_cluster, "b200-001") == 1 and facts_of(env, "b200-001")["nccl"] == "2.26.2"


# ---------------------------------------------------------------------- with the BMCs (slurmadm bmc)


def events(dev_cluster, action, target=None, since=0.0):
    with Store.for_site(dev_cluster.site()) as store:
        return [e for e in store.events(action=action, target=target, since=since)]


def test_facts_carry_each_bmcs_firmware_inventory(dev_cluster, env):
    p = run_slurmadm(env, "fleet", "facts", "--json")
    assert p.returncode == 0, p.stderr
    got = {n["node"]: n for n in json.loads(p.stdout)["nodes"]}
    want = dev_cluster.site().bmc.firmware
    assert want, "the dev site names a firmware baseline"
    for n in NODES:
        fw = {k.removeprefix("fw:"): v for k, v in got[n]["facts"].items() if k.startswith("fw:")}
        # read from the node's own BMC (Redfish FirmwareInventory), the baseline's components
        assert {k: fw.get(k) for k in want} == want, (n, fw)
        assert got[n]["bmc_error"] == ""
    # the firmware facts take part in drift (none now: every BMC runs the baseline)
    p = run_slurmadm(env, "fleet", "drift", "--json")
    assert not [d for d in json.loads(p.stdout)["drift"] if d["fact"].startswith("fw:")], p.stdout


@pytest.fixture()
def bios_images(tmp_path):
    """BIOS images on a local HTTP server the BMC emulators fetch from (SimpleUpdate)."""
    for v in ("2.9.0", "2.1.0"):
        (tmp_path / f"bios-{v}.bin").write_bytes(fake_image("BIOS", v))
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    handler.log_message = lambda *a: None
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield lambda v: f"http://127.0.0.1:{srv.server_address[1]}/bios-{v}.bin"
    srv.shutdown()


def test_rollout_firmware_step_goes_through_the_bmc(dev_cluster, env, tmp_path, clean_nodes, bios_images):
    base = dev_cluster.site().bmc.firmware["BIOS"]
    path = tmp_path / "bios.toml"
    path.write_text(textwrap.dedent(f"""\
        name = "bios-2.9.0"
        nodes = "b200-001"
        canary_nodes = 1
        health_command = ""
        [[steps]]
        firmware = {{ component = "BIOS", image = "{bios_images('2.9.0')}", version = "2.9.0" }}
        timeout_s = 120
        [expect]
        "fw:BIOS" = "2.9.0"
        """))
    dry = json.loads(run_slurmadm(env, "fleet", "rollout", str(path), "--dry-run", "--json").stdout)
    assert dry["steps"] == [f"bmc firmware update --component BIOS --image {bios_images('2.9.0')} --version 2.9.0"]
    try:
        p = run_slurmadm(env, "fleet", "rollout", str(path), timeout=300)
        assert p.returncode == 0, p.stdout + p.stderr
        assert facts_of(env, "b200-001")["fw:BIOS"] == "2.9.0"  # what its BMC now reports
        assert facts_of(env, "b200-002")["fw:BIOS"] == base  # only the plan's node
        ev = events(dev_cluster, "bmc.firmware.update", "b200-001")
        assert ev and ev[-1].detail["before"] == base and ev[-1].detail["after"] == "2.9.0"
        assert not nodeinfo(env, "b200-001").drained
        drift = json.loads(run_slurmadm(env, "fleet", "drift", "--json").stdout)["drift"]
        assert [(d["fact"], d["nodes"], d["have"], d["want"]) for d in drift if d["fact"] == "fw:BIOS"] == [
            ("fw:BIOS", "b200-001", "2.9.0", base)]
    finally:
        r = run_slurmadm(env, "bmc", "firmware", "update", "--component", "BIOS", "--image", bios_images(base),
                         "--version", base, "--force", "b200-001", timeout=300)
        assert r.returncode == 0, r.stdout + r.stderr


def test_rollout_power_cycles_through_the_bmc_when_slurmd_is_gone(dev_cluster, env, tmp_path, clean_nodes):
    dev_cluster.daemon("slurmd-b200-002").stop()  # slurmd crashed: Slurm cannot run its RebootProgram
    assert wait_for(lambda: "NOT_RESPONDING" in nodeinfo(env, "b200-002").flags, 180, interval=1.0)
    since = time.time()
    ctld_log = dev_cluster.p("log", "slurmctld.log")
    ctld_from = ctld_log.stat().st_size
    path = plan(tmp_path, "nccl-dead-slurmd", extra='nodes = "b200-002"')
    p = run_slurmadm(env, "fleet", "rollout", path, timeout=400)
    assert p.returncode == 0, p.stdout + p.stderr
    cycles = events(dev_cluster, "bmc.power.cycle", "b200-002", since)
    assert len(cycles) == 1 and cycles[0].detail["ok"]
    assert [e.detail.get("via") for e in events(dev_cluster, "node.reboot", "b200-002", since)] == ["bmc"]
    # resuming a DOWN node, Slurm flags it NOT_RESPONDING until its next ping answers
    assert wait_for(lambda: (lambda i: i.state == "IDLE" and not i.drained and "NOT_RESPONDING" not in i.flags)(
        nodeinfo(env, "b200-002")), 60, interval=0.5), nodeinfo(env, "b200-002")
    assert facts_of(env, "b200-002")["nccl"] == "2.26.2"  # the staged library, booted by the power cycle
    with open(ctld_log) as fh:  # not through Slurm (it could not have worked): this rollout's log part
        fh.seek(ctld_from)
        assert "reboot request queued for nodes b200-002" not in fh.read()


def test_reservation_rollout_reboots_asap_nextstate_down(dev_cluster, env, tmp_path, clean_nodes):
    """A maintenance window instead of drains: the nodes of an active MAINT reservation made for
    the test; Slurm's `scontrol reboot ASAP nextstate=DOWN` brings each back DOWN (seen by a
    watcher) until the rollout verified and resumed it."""
    rsv = "fleet-mw"
    r = subprocess.run(["scontrol", "create", "reservation", f"ReservationName={rsv}", "StartTime=now",
                        "Duration=60", "Nodes=b200-[003-004]", "Flags=MAINT,IGNORE_JOBS", "Users=root"],
                       env=env, capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    seen: set[tuple[str, str, str]] = set()
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            for n in ("b200-003", "b200-004"):
                try:
                    i = nodeinfo(env, n)
                    seen.add((n, i.state, i.reason))
                except Exception:
                    pass
            stop.wait(0.2)

    watcher = threading.Thread(target=watch, daemon=True)
    try:
        path = plan(tmp_path, "nccl-window", extra='nodes = "b200-[003-004]"')
        dry = json.loads(run_slurmadm(env, "fleet", "rollout", path, "--reservation", rsv, "--dry-run", "--json").stdout)
        assert dry["hold"] == f"reservation {rsv}" and "reboot ASAP nextstate=DOWN" in dry["reboot_command"]
        since = time.time()
        watcher.start()
        p = run_slurmadm(env, "fleet", "rollout", path, "--reservation", rsv, timeout=400)
        assert p.returncode == 0, p.stdout + p.stderr
        stop.set()
        watcher.join(10)
        ctld = dev_cluster.p("log", "slurmctld.log").read_text()
        for n in ("b200-003", "b200-004"):
            assert f"reboot request queued for nodes {n}" in ctld
            # back from the reboot DOWN with the rollout's reason, as nextstate=DOWN says
            assert any(s == (n, "DOWN", s[2]) and s[2].startswith("slurmadm: rollout: nccl-window")
                       for s in seen), sorted(seen)
            info = nodeinfo(env, n)
            assert info.state in ("IDLE", "MAINT") or info.state.startswith("IDLE"), info
            assert not info.drained and facts_of(env, n)["nccl"] == "2.26.2"
        assert not events(dev_cluster, "node.drain", None, since)  # the window held them, no drain
        assert rsv in subprocess.run(["scontrol", "show", "reservation", rsv], env=env, capture_output=True,
                                     text=True, timeout=30).stdout
        assert not nodeinfo(env, "b200-001").drained and installs(dev_cluster, "b200-001") == 0
    finally:
        stop.set()
        delete_reservation(env, rsv)


def test_worker_process_fan_out_gives_the_same_answers(dev_cluster):
    """The multi-process fan-out (used from PROCESS_MIN_NODES nodes per CPU; forced here on
    four nodes): every node answers from its own namespace, a down node is its own row."""
    from slurmadm.fleet.ssh import ParamikoRemote

    site = dev_cluster.site()
    seen = []
    with ParamikoRemote(site.fleet, processes=2) as remote:
        replies = remote.run(NODES, "hostname; exit 7", timeout=60, on_reply=lambda r: seen.append(r.node))
    assert [(r.node, r.exit, r.output.strip()) for r in replies] == [(n, 7, n) for n in NODES]
    assert sorted(seen) == sorted(NODES)
