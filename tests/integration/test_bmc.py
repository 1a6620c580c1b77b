"""`slurmadm bmc` against the dev cluster's BMC emulators, on real Slurm: power wired to the
fake nodes' slurmd, Slurm safety, faults, SEL, inventory, firmware, BMC health, secrets, and
dead-node recovery through Slurm's own trigger (strigger).

The session's dev cluster runs with --bmc (emulators + SlurmdTimeout=20, see conftest.py).
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from slurmadm.devcluster.daemons import wait_for
from slurmadm.devcluster.redfish_emulator import fake_image
from tests.integration.helpers import run_slurmadm

pytestmark = pytest.mark.integration

BASE = int(os.environ.get("SLURMADM_TEST_PORT_BASE", "27000"))
NODES = "b200-[001-004]"


@pytest.fixture(scope="module")
def dc(dev_cluster):
    if not (dev_cluster.record() or {}).get("bmc"):  # conftest starts it with the BMC emulators
        dev_cluster.up(nodes=4, port_base=BASE, bmc=True, timeout=180)
    yield dev_cluster


@pytest.fixture()
def env(dc):
    e = dict(os.environ)
    e.update(dc.env())
    e.pop("SLURMADM_BMC_PASSWORD", None)
    return e


def sm(env, *args, timeout=180):
    return run_slurmadm(env, *args, timeout=timeout)


def sh(env, *argv, timeout=60, check=True) -> str:
    p = subprocess.run(list(argv), env=env, capture_output=True, text=True, timeout=timeout)
    if check:
        assert p.returncode == 0, f"{argv}: {p.stderr}"
    return p.stdout


def state(env, node) -> tuple[str, str]:
    out = sh(env, "scontrol", "show", "node", node, "-o")
    kv = dict(x.split("=", 1) for x in out.split() if "=" in x)
    reason = out.split("Reason=", 1)[1].rsplit(" [", 1)[0] if "Reason=" in out else ""
    return kv.get("State", ""), reason


def password(dc) -> str:
    return (dc.p("bmc", "password")).read_text().strip()


def ipmitool(dc, node_index: int, *args) -> str:
    env = {**os.environ, "IPMI_PASSWORD": password(dc)}
    p = subprocess.run(["ipmitool", "-I", "lanplus", "-H", "127.0.0.1", "-p", str(BASE + 300 + node_index), "-U",
                        "admin", "-E", *args], env=env, capture_output=True, text=True, timeout=60)
    return p.stdout


def fault(env, node, *args):
    r = sm(env, "dev-cluster", "bmc-fault", node, *args)
    assert r.returncode == 0, r.stderr


def events(dc, action, target=None, since=0.0):
    with sqlite3.connect(str(dc.p("slurmadm.db"))) as db:
        sql = "SELECT action, target, reason, detail FROM events WHERE action LIKE ? AND ts >= ?"
        args = [action, since]
        if target:
            sql += " AND target = ?"
            args.append(target)
        return db.execute(sql, args).fetchall()


def slurmd_pid(dc, node):
    return dc.daemon(f"slurmd-{node}").pid()


def wait_idle(env, node, timeout=120):
    assert wait_for(lambda: state(env, node)[0] == "IDLE", timeout, interval=0.5), state(env, node)


# ---------------------------------------------------------------------- power
def test_power_status_matches_ipmitool(dc, env):
    r = sm(env, "bmc", "power", "status", NODES, "--json")
    assert r.returncode == 0, r.stderr
    assert [(x["node"], x["power"]) for x in json.loads(r.stdout)] == [(f"b200-00{i}", "on") for i in range(1, 5)]
    assert ipmitool(dc, 1, "power", "status").strip() == "Chassis Power is on"


def test_power_off_stops_the_nodes_slurmd_and_on_starts_it(dc, env):
    before = slurmd_pid(dc, "b200-004")
    assert before is not None
    r = sm(env, "bmc", "power", "off", "b200-004", "--reason", "test: power off")
    assert r.returncode == 0, r.stderr
    assert wait_for(lambda: slurmd_pid(dc, "b200-004") is None, 30)
    assert ipmitool(dc, 3, "power", "status").strip() == "Chassis Power is off"
    again = sm(env, "bmc", "power", "off", "b200-004", "--json")  # idempotent: nothing to do
    assert json.loads(again.stdout)["steps"][0]["action"] == "nothing (already off)"
    r = sm(env, "bmc", "power", "on", "b200-004")
    assert r.returncode == 0, r.stderr
    assert wait_for(lambda: slurmd_pid(dc, "b200-004") not in (None, before), 30)
    wait_idle(env, "b200-004")
    acts = [(a, t, why) for a, t, why, _ in events(dc, "bmc.power.%", "b200-004")]
    assert ("bmc.power.off", "b200-004", "test: power off") in acts and any(a == "bmc.power.on" for a, _, _ in acts)


def test_running_jobs_refuse_power_changes_unless_drained(dc, env):
    job = sh(env, "sbatch", "--parsable", "-o", "/dev/null", "-w", "b200-003", "--wrap", "sleep 600").strip()
    try:
        assert wait_for(lambda: sh(env, "squeue", "-h", "-j", job, "-o", "%T").strip() == "RUNNING", 60)
        pid = slurmd_pid(dc, "b200-003")
        r = sm(env, "bmc", "power", "cycle", "b200-003", "--json")
        assert r.returncode == 1
        step = json.loads(r.stdout)["steps"][0]
        assert step["action"] == "refused" and "running jobs" in step["why"]
        assert slurmd_pid(dc, "b200-003") == pid and not events(dc, "bmc.power.cycle", "b200-003")
        dry = sm(env, "bmc", "power", "reset", "b200-003", "--drain", "--dry-run", "--json")
        assert json.loads(dry.stdout)["steps"][0]["drain"] is True and state(env, "b200-003")[1] == ""
    finally:
        sh(env, "scancel", job)
    short = sh(env, "sbatch", "--parsable", "-o", "/dev/null", "-w", "b200-003", "--wrap", "sleep 4").strip()
    assert wait_for(lambda: sh(env, "squeue", "-h", "-j", short, "-o", "%T").strip() in ("RUNNING", ""), 60)
    r = sm(env, "bmc", "power", "reset", "b200-003", "--drain", "--reason", "reset after a hang")
    assert r.returncode == 0, r.stdout + r.stderr
    st, reason = state(env, "b200-003")
    assert "DRAIN" in st and reason == "slurmadm: bmc-power-reset: reset after a hang [bmc]"
    assert sh(env, "squeue", "-h", "-j", short, "-o", "%T", check=False).strip() == ""  # it ended first
    sh(env, "scontrol", "update", "nodename=b200-003", "state=resume")
    wait_idle(env, "b200-003")


def test_dead_bmc_is_one_row_and_exit_3(dc, env):
    fault(env, "b200-002", "--kind", "unreachable")
    try:
        r = sm(env, "bmc", "power", "status", NODES, "--json")
        assert r.returncode == 3
        rows = {x["node"]: x for x in json.loads(r.stdout)}
        assert rows["b200-002"]["power"] is None and "did not answer" in rows["b200-002"]["error"]
        assert all(rows[n]["power"] == "on" for n in ("b200-001", "b200-003", "b200-004"))
    finally:
        fault(env, "b200-002", "--clear")


def test_bad_input_is_one_line(env):
    r = sm(env, "bmc", "power", "status", "b200-[001-999]")
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "not in the site's nodes" in r.stderr
    r = sm(env, "dev-cluster", "bmc-fault", "b200-001", "--kind", "melted")
    assert r.returncode == 2 and "--kind" in r.stderr and "Traceback" not in r.stderr


# ---------------------------------------------------------------------- sensors, SEL, health
def test_overtemp_and_psu_faults_in_sensors_and_bmc_health(dc, env):
    fault(env, "b200-001", "--kind", "overtemp", "--value", "88")
    fault(env, "b200-002", "--kind", "psu-failed")
    try:
        r = sm(env, "bmc", "sensors", "b200-[001-002]", "--alarms", "--json")
        assert r.returncode == 1
        alarms = {x["node"]: {s["name"]: s for s in x["sensors"]} for x in json.loads(r.stdout)}
        assert alarms["b200-001"]["HGX BB Temp"]["value"] == 88.0
        assert alarms["b200-001"]["HGX BB Temp"]["thresholds"]["uc"] == 85.0
        assert list(alarms["b200-002"]) == ["PSU2 Status"]
        r = sm(env, "bmc", "health", "b200-[001-002]", "--json")
        assert r.returncode == 1, r.stderr
        assert state(env, "b200-001")[1].startswith("slurmadm: bmc-temperature: HGX BB Temp 88")
        assert state(env, "b200-002")[1].startswith("slurmadm: bmc-psu: PSU2 Status")
    finally:
        fault(env, "b200-001", "--clear")
        fault(env, "b200-002", "--clear")
    for _ in range(2):  # health.resume_after_clean_runs clean runs resume our drains
        sm(env, "bmc", "health", "b200-[001-002]")
    assert "DRAIN" not in state(env, "b200-001")[0] and "DRAIN" not in state(env, "b200-002")[0]


def test_sel_read_since_and_clear_is_audited(dc, env):
    since = time.time()
    r = sm(env, "bmc", "sel", "b200-001", "--json")
    assert r.returncode == 0
    assert any(e["sensor_type"] == "Temperature" and e["severity"] == "critical"
               for e in json.loads(r.stdout)[0]["events"])  # the overtemp event of the test above
    dry = sm(env, "bmc", "sel", "b200-001", "--clear", "--dry-run", "--json")
    assert json.loads(dry.stdout)["plan"][0]["would_clear"] > 0 and not events(dc, "bmc.sel.clear", since=since)
    r = sm(env, "bmc", "sel", "b200-001", "--clear", "--reason", "after the fan swap", "--json")
    assert r.returncode == 0 and json.loads(r.stdout)[0]["cleared"] is True
    ev = events(dc, "bmc.sel.clear", "b200-001", since)
    assert len(ev) == 1 and ev[0][2] == "after the fan swap" and json.loads(ev[0][3])["cleared"] > 0
    left = json.loads(sm(env, "bmc", "sel", "b200-001", "--json").stdout)[0]["events"]
    assert [e["event"] for e in left] == ["Log clear"]
    assert "Log area reset/cleared" in ipmitool(dc, 0, "sel", "list")


def test_inventory_and_bootdev(dc, env):
    r = sm(env, "bmc", "inventory", "b200-[001-002]", "--json")
    assert r.returncode == 0, r.stderr
    inv = {x["node"]: x["inventory"] for x in json.loads(r.stdout)}
    assert inv["b200-001"]["model"] == "SYS-A22GA-NBRT" and inv["b200-001"]["serial"] != inv["b200-002"]["serial"]
    assert inv["b200-002"]["firmware"]["HGX_FW_GPU_SXM_8"] and inv["b200-002"]["bmc_firmware"] == "1.03"
    since = time.time()
    for _ in range(2):
        r = sm(env, "bmc", "bootdev", "pxe", "b200-002", "--persist")
        assert r.returncode == 0
    assert "Force PXE" in ipmitool(dc, 1, "chassis", "bootparam", "get", "5")
    assert len(events(dc, "bmc.bootdev", "b200-002", since)) == 1  # the second run changed nothing
    sm(env, "bmc", "bootdev", "default", "b200-002")


# ---------------------------------------------------------------------- firmware
@pytest.fixture()
def image_url(tmp_path):
    (tmp_path / "bios-2.9.0.bin").write_bytes(fake_image("BIOS", "2.9.0"))
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(tmp_path))
    handler.log_message = lambda *a: None
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}/bios-2.9.0.bin"
    srv.shutdown()


def test_firmware_update_on_drained_nodes_in_waves(dc, env, image_url):
    r = sm(env, "bmc", "firmware", "status", NODES, "--json")
    assert r.returncode == 0 and json.loads(r.stdout)["drift"] == []
    sh(env, "scontrol", "update", "nodename=b200-[001-002]", "state=drain", "reason=firmware")
    try:
        args = ["bmc", "firmware", "update", "--component", "BIOS", "--image", image_url, "--version", "2.9.0"]
        plan = json.loads(sm(env, *args, "b200-[001-003]", "--dry-run", "--json").stdout)
        assert {p["node"]: p["action"] for p in plan["plan"]} == {"b200-001": "update", "b200-002": "update",
                                                                   "b200-003": "refused"}
        r = sm(env, *args, "b200-[001-002]", "--json")
        assert r.returncode == 0, r.stdout + r.stderr
        out = json.loads(r.stdout)
        assert all(x["ok"] and x["before"] == "2.1.0" and x["after"] == "2.9.0" for x in out["results"].values())
        r = sm(env, "bmc", "firmware", "status", NODES, "--json")
        assert r.returncode == 1
        assert {(d["node"], d["have"]) for d in json.loads(r.stdout)["drift"]} == {("b200-001", "2.9.0"),
                                                                                  ("b200-002", "2.9.0")}
        assert len(events(dc, "bmc.firmware.update")) >= 2
    finally:
        sh(env, "scontrol", "update", "nodename=b200-[001-002]", "state=resume")


def test_firmware_update_with_drain_waits_for_jobs_and_leaves_the_node_drained(dc, env, image_url):
    args = ["bmc", "firmware", "update", "--component", "BIOS", "--image", image_url, "--version", "2.9.0",
            "b200-003"]
    wait_idle(env, "b200-003")
    refused = sm(env, *args, "--json")  # not drained: refused without --drain
    assert refused.returncode == 1 and json.loads(refused.stdout)["plan"][0]["action"] == "refused"
    assert "--drain" in json.loads(refused.stdout)["plan"][0]["why"]
    job = sh(env, "sbatch", "--parsable", "-o", "/dev/null", "-w", "b200-003", "--wrap", "sleep 5").strip()
    assert wait_for(lambda: sh(env, "squeue", "-h", "-j", job, "-o", "%T").strip() == "RUNNING", 60)
    try:
        dry = json.loads(sm(env, *args, "--drain", "--dry-run", "--json").stdout)
        assert dry["plan"][0]["action"] == "update" and dry["plan"][0]["drain"] is True
        assert state(env, "b200-003")[1] == ""  # the dry run drained nothing
        since = time.time()
        r = sm(env, *args, "--drain", "--reason", "BIOS 2.9.0 for the boot hang", "--json")
        assert r.returncode == 0, r.stdout + r.stderr
        res = json.loads(r.stdout)["results"]["b200-003"]
        assert res["ok"] and res["after"] == "2.9.0"
        assert sh(env, "squeue", "-h", "-j", job, "-o", "%T", check=False).strip() == ""  # it ended first
        st, reason = state(env, "b200-003")
        assert "DRAIN" in st and reason == "slurmadm: bmc-firmware-update: BIOS 2.9.0 for the boot hang [bmc]"
        acts = [a for a, *_ in events(dc, "bmc.%", "b200-003", since)]
        assert acts.index("bmc.drain") < acts.index("bmc.firmware.update")
        again = sm(env, *args, "--drain", "--json")  # already there: skipped, nothing drained again
        assert again.returncode == 0 and json.loads(again.stdout)["plan"][0]["action"] == "skip"
    finally:
        sh(env, "scancel", job, check=False)
        sh(env, "scontrol", "update", "nodename=b200-003", "state=resume", check=False)
    wait_idle(env, "b200-003")


# ---------------------------------------------------------------------- slow BMCs, Redfish as the protocol
def site_variant(dc, tmp_path, **bmc) -> str:
    """The dev cluster's site with other [bmc] settings (fanout, protocol), as a file for --site."""
    import tomllib

    import tomli_w

    data = tomllib.loads(Path(dc.env()["SLURMADM_SITE"]).read_text())
    data["bmc"].update(bmc)
    path = tmp_path / "site.toml"
    path.write_text(tomli_w.dumps(data))
    return str(path)


def test_slow_bmc_costs_its_deadline_not_the_others(dc, env, tmp_path):
    """The emulator's `slow` fault delays every answer after the login. A BMC slower than its
    operation deadline (login deadline timeout_s x (1 + retries) + 10 x timeout_s = 18 s with
    these settings) is given up on then, not after its own delay, and is one row (exit 3); with
    bmc.fanout = 2 the other three get their answers through the free slot meanwhile. Over
    Redfish each request has timeout_s, so the same BMC is given up on at its login. A BMC slow
    within its deadline is waited for."""
    site = site_variant(dc, tmp_path, fanout=2, timeout_s=1.5, retries=1)
    fault(env, "b200-002", "--kind", "slow", "--value", "60")
    try:
        r = sm(env, "bmc", "power", "status", NODES, "--json", "--site", site)
        assert r.returncode == 3, r.stdout + r.stderr
        rows = {x["node"]: x for x in json.loads(r.stdout)}
        slow = rows.pop("b200-002")
        assert slow["power"] is None and slow["error"] == "b200-002: BMC did not finish within 18 s"
        assert 18 <= slow["seconds"] < 60  # given up at its deadline, not after the BMC's 60 s
        assert all(x["power"] == "on" and x["seconds"] < slow["seconds"] for x in rows.values()), rows
        (tmp_path / "rf").mkdir()  # over Redfish every request has timeout_s: the login gives up first
        rf = site_variant(dc, tmp_path / "rf", protocol="redfish", fanout=2, timeout_s=1.5, retries=1)
        r = sm(env, "bmc", "power", "status", NODES, "--json", "--site", rf)
        assert r.returncode == 3, r.stdout + r.stderr
        rows = {x["node"]: x for x in json.loads(r.stdout)}
        slow = rows.pop("b200-002")
        assert slow["power"] is None and slow["error"].startswith("b200-002: BMC") and slow["seconds"] < 18, slow
        assert all(x["power"] == "on" for x in rows.values()), rows
        fault(env, "b200-002", "--kind", "slow", "--value", "0.3")  # slow, but within the deadline
        r = sm(env, "bmc", "power", "status", NODES, "--json", "--site", site)
        assert r.returncode == 0, r.stdout + r.stderr
        rows = {x["node"]: x for x in json.loads(r.stdout)}
        assert rows["b200-002"]["power"] == "on" and rows["b200-002"]["seconds"] >= 0.3  # its delayed answer
    finally:
        fault(env, "b200-002", "--clear")


def dmtf(dc, node_index: int):
    """The DMTF `redfish` library (not our client) on a node's Redfish emulator."""
    import redfish

    c = redfish.redfish_client(base_url=f"https://127.0.0.1:{BASE + 350 + node_index}", username="admin",
                               password=password(dc), cafile=str(dc.p("bmc", "ca.pem")))
    c.login(auth="session")
    return c


def test_redfish_power_and_sensors_through_the_cli(dc, env, tmp_path):
    """bmc.protocol = "redfish": power and sensors over Redfish, checked by the DMTF client and
    by ipmitool (one BMC state behind both protocols), and the power change reaching slurmd."""
    site = site_variant(dc, tmp_path, protocol="redfish")
    c = dmtf(dc, 3)
    try:
        r = sm(env, "bmc", "power", "status", NODES, "--json", "--site", site)
        assert r.returncode == 0, r.stderr
        assert [x["power"] for x in json.loads(r.stdout)] == ["on"] * 4
        assert c.get("/redfish/v1/Systems/1").dict["PowerState"] == "On"
        before = slurmd_pid(dc, "b200-004")
        r = sm(env, "bmc", "power", "off", "b200-004", "--site", site, "--reason", "test: redfish off")
        assert r.returncode == 0, r.stdout + r.stderr
        assert c.get("/redfish/v1/Systems/1").dict["PowerState"] == "Off"
        assert ipmitool(dc, 3, "power", "status").strip() == "Chassis Power is off"
        assert wait_for(lambda: slurmd_pid(dc, "b200-004") is None, 30)
        r = sm(env, "bmc", "power", "on", "b200-004", "--site", site)
        assert r.returncode == 0 and c.get("/redfish/v1/Systems/1").dict["PowerState"] == "On"
        assert wait_for(lambda: slurmd_pid(dc, "b200-004") not in (None, before), 30)

        fault(env, "b200-004", "--kind", "overtemp", "--value", "90")
        r = sm(env, "bmc", "sensors", "b200-004", "--type", "temperature", "--json", "--site", site)
        assert r.returncode == 1, r.stderr  # an alarm
        ours = {s["name"]: s for s in json.loads(r.stdout)[0]["sensors"]}
        theirs = {}
        chassis = c.get("/redfish/v1/Chassis/1").dict
        for m in c.get(chassis["Sensors"]["@odata.id"]).dict["Members"]:
            doc = c.get(m["@odata.id"]).dict
            if doc.get("ReadingType") == "Temperature":
                theirs[doc["Name"]] = doc
        assert set(ours) == set(theirs) and len(ours) >= 3
        for name, doc in theirs.items():
            assert ours[name]["value"] == doc["Reading"], name
            assert ours[name]["thresholds"].get("uc") == doc["Thresholds"]["UpperCritical"]["Reading"], name
        bb = [n for n in ours if theirs[n]["Reading"] == 90]
        assert len(bb) == 1 and ours[bb[0]]["status"] == "critical" and ours[bb[0]]["alarm"]
        assert sum(s["alarm"] for s in ours.values()) == 1
    finally:
        fault(env, "b200-004", "--clear")
        c.logout()
    wait_idle(env, "b200-004")


def test_progress_bar_for_people_in_a_terminal(dc, env, tmp_path):
    """In a real terminal (tmux), a long command shows a progress bar on stderr while it waits
    (a slow BMC here) and leaves only its table behind; piped or --json, no bar at all."""
    if shutil.which("tmux") is None:
        pytest.fail("tmux is not installed (scripts/install-system-deps.sh)")
    sock = f"slurmadm-test-{BASE}"
    out, piped = tmp_path / "out.json", tmp_path / "piped.txt"
    run = f"{sys.executable} -m slurmadm bmc power status {NODES}"
    cmd = (f"{run} 2>&1 | cat > {piped}; {run}; echo EXIT=$?; {run} --json > {out}; echo DONE; sleep 120")
    fault(env, "b200-002", "--kind", "slow", "--value", "1")  # long enough to see the bar
    tmux = ["tmux", "-L", sock]
    envargs = [x for k in ("SLURMADM_SITE", "SLURM_CONF", "PATH") if k in env for x in ("-e", f"{k}={env[k]}")]
    bar = re.compile(r"^power status\s+[━╸╺ ]+\s+\d/4\s+\d+:\d\d:\d\d\s*$", re.M)
    try:
        sh(env, *tmux, "new-session", "-d", "-x", "120", "-y", "50", *envargs, "sh", "-c", cmd)

        def screen() -> str:
            return sh(env, *tmux, "capture-pane", "-p", check=False)

        seen = []
        assert wait_for(lambda: seen.append(screen()) or "DONE" in seen[-1], 120, interval=0.1), seen[-1]
        assert any(bar.search(s) for s in seen), "no progress bar was drawn:\n" + "\n---\n".join(seen[-3:])
        final = seen[-1]
        assert "EXIT=0" in final and not bar.search(final)  # transient: gone, the table stays
        assert re.search(r"b200-\[001-004\] +│ +4 +│ +on", final), final  # the four agree: one row
        assert "━━ " not in piped.read_text() and "\x1b[" not in piped.read_text()  # piped: no bar
        assert "b200-[001-004]" in piped.read_text()
        data = json.loads(out.read_text())  # --json in a terminal: only the JSON on stdout
        assert [x["power"] for x in data] == ["on"] * 4
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True, timeout=30)
        fault(env, "b200-002", "--clear")


# ---------------------------------------------------------------------- secrets
def test_the_bmc_password_never_leaks(dc, env, tmp_path):
    pw = password(dc)
    outputs = []
    for args in (["bmc", "power", "status", NODES, "--json"], ["bmc", "sensors", "b200-001", "--json"],
                 ["bmc", "sel", "b200-001", "--json"], ["bmc", "inventory", "b200-001", "--json"],
                 ["bmc", "power", "on", "b200-001", "--json"]):
        r = sm(env, *args)
        outputs += [r.stdout, r.stderr]
    wrong = "Wr0ng-pa55word-xyz"
    r = sm({**env, "SLURMADM_BMC_PASSWORD": wrong}, "bmc", "power", "status", "b200-001", "--json")
    assert r.returncode == 3 and "password" in r.stdout.lower()
    outputs += [r.stdout, r.stderr]
    with sqlite3.connect(str(dc.p("slurmadm.db"))) as db:
        outputs += [" ".join(map(str, row)) for row in db.execute("SELECT * FROM events")]
    for f in dc.p("log").glob("*"):
        if f.is_file():
            outputs.append(f.read_text(errors="replace"))
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                outputs.append((proc / "cmdline").read_bytes().decode(errors="replace"))
            except OSError:
                pass
    blob = "\n".join(outputs)
    assert pw not in blob and wrong not in blob


# ---------------------------------------------------------------------- recovery
def test_dead_node_recovered_through_its_bmc_by_slurms_trigger(dc, env):
    script = dc.p("bmc", "recover-trigger.sh")
    r = sm(env, "bmc", "recover", "install-trigger", "--path", str(script), "--log", str(dc.p("log", "bmc-recover.log")))
    assert r.returncode == 0, r.stderr
    again = sm(env, "bmc", "recover", "install-trigger", "--path", str(script), "--log", str(dc.p("log", "x.log")),
               "--dry-run")
    assert "strigger --set" not in again.stdout  # registered once
    try:
        since = time.time()
        frozen = slurmd_pid(dc, "b200-004")
        os.kill(frozen, signal.SIGSTOP)  # the OS "hangs": slurmd stops answering
        assert wait_for(lambda: events(dc, "bmc.recover.resume", "b200-004", since), 240, interval=1.0), \
            dc.p("log", "bmc-recover.log").read_text()
        assert events(dc, "bmc.recover.cycle", "b200-004", since)
        assert slurmd_pid(dc, "b200-004") not in (None, frozen)  # power-cycled: a new slurmd
        wait_idle(env, "b200-004")
        assert "DRAIN" not in state(env, "b200-004")[0]

        # a second failure inside bmc.recover.window_s: left drained, SEL evidence in the reason
        since = time.time()
        frozen = slurmd_pid(dc, "b200-004")
        os.kill(frozen, signal.SIGSTOP)
        assert wait_for(lambda: events(dc, "bmc.recover.give-up", "b200-004", since), 240, interval=1.0)
        st, reason = state(env, "b200-004")
        assert "DRAIN" in st and reason.startswith("slurmadm: bmc-recover: failed again within") and "SEL:" in reason
        assert not events(dc, "bmc.recover.cycle", "b200-004", since)
    finally:
        ids = [line.split()[0] for line in sh(env, "strigger", "--get", "--node", "--down", check=False).splitlines()
               if str(script) in line]
        for trig in ids:
            sh(env, "strigger", "--clear", f"--id={trig}", check=False)
        pid = slurmd_pid(dc, "b200-004")
        if pid is not None:
            os.kill(pid, signal.SIGKILL)  # our own frozen fake slurmd
        sm(env, "bmc", "power", "cycle", "b200-004", "--force")
        assert wait_for(lambda: slurmd_pid(dc, "b200-004") is not None, 30)
        sh(env, "scontrol", "update", "nodename=b200-004", "state=resume", check=False)
        wait_idle(env, "b200-004", timeout=120)
