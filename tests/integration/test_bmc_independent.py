"""The same read assertions against our BMC emulator and against BMCs we did not write: OpenIPMI's
`ipmi_sim` (IPMI) and DMTF's public-rackmount1 mockup served by `sushy-static` (Redfish), each
cross-checked with a client that is not ours (Debian's ipmitool, curl). State changes stay with
our emulator (test_bmc_emulators.py, test_bmc.py); these are what slurmadm reads and sends.
Ports: tests/integration/independent_bmcs.py.
"""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import socket
import ssl
import subprocess
import sys
import time
from pathlib import Path

import pytest

from slurmadm.bmc.creds import Credentials, Secret
from slurmadm.bmc.ipmi import IpmiClient
from slurmadm.bmc.model import Target
from slurmadm.bmc.redfish import RedfishClient, TlsPolicy
from slurmadm.devcluster.daemons import wait_for
from slurmadm.devcluster.redfish_emulator import make_certificate
from slurmadm.errors import UnreachableError
from tests.integration.helpers import run_slurmadm
from tests.integration.independent_bmcs import (BASE, OURS_IPMI_PORT, OURS_REDFISH_PORT, ipmi_sim,  # noqa: F401
                                                sushy_static)

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def ours(tmp_path_factory):
    """Our emulator, one BMC (IPMI + Redfish over TLS)."""
    d = tmp_path_factory.mktemp("ours")
    password = secrets.token_urlsafe(12)
    (d / "password").write_text(password + "\n")
    os.chmod(d / "password", 0o600)
    fingerprint = make_certificate(d / "cert.pem", d / "key.pem", d / "ca.pem")
    log = open(d / "emulator.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "slurmadm.devcluster.bmc_emulator", "--bmc-dir", str(d),
                             "--nodes", "b200-001", "--ipmi-port", str(OURS_IPMI_PORT),
                             "--redfish-port", str(OURS_REDFISH_PORT), "--cert", str(d / "cert.pem"),
                             "--key", str(d / "key.pem")], stdout=log, stderr=subprocess.STDOUT)
    assert wait_for(lambda: "bmc emulator:" in (d / "emulator.log").read_text() or proc.poll() is not None, 30)
    assert proc.poll() is None, (d / "emulator.log").read_text()
    yield {"port": OURS_IPMI_PORT, "redfish_port": OURS_REDFISH_PORT, "password": password,
           "fingerprint": fingerprint, "ca": d / "ca.pem"}
    proc.terminate()
    proc.wait(10)
    log.close()


# ---------------------------------------------------------------------- IPMI: ours and ipmi_sim
@pytest.fixture(params=["ours", "ipmi_sim"])
def ipmi_bmc(request):
    return request.getfixturevalue(request.param)


def ipmitool(bmc, *args: str) -> str:
    env = {**os.environ, "IPMI_PASSWORD": bmc["password"]}
    p = subprocess.run(["ipmitool", "-I", "lanplus", "-H", "127.0.0.1", "-p", str(bmc["port"]), "-U", "admin", "-E",
                        "-N", "1", "-R", "3", *args], env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    return p.stdout


def ipmi_client(bmc) -> IpmiClient:
    return IpmiClient(Target("b200-001", "127.0.0.1", bmc["port"], 0), Credentials("admin", Secret(bmc["password"])))


def test_ipmi_power_and_sensors_match_ipmitool(ipmi_bmc):
    c = ipmi_client(ipmi_bmc)
    try:
        power, sensors = c.power_state(), c.sensors()
    finally:
        c.close()
    assert ipmitool(ipmi_bmc, "power", "status").strip() == f"Chassis Power is {power}"
    theirs = {}
    for line in ipmitool(ipmi_bmc, "sdr", "list").splitlines():
        name, value = (x.strip() for x in line.split("|")[:2])
        if m := re.match(r"^(-?[\d.]+) ", value):
            theirs[name] = float(m.group(1))
    mine = {s.name: s.value for s in sensors if s.value is not None}
    assert theirs and {n: mine.get(n) for n in theirs} == theirs
    kinds = {s.name: s.type for s in sensors}
    if ipmi_bmc["port"] != OURS_IPMI_PORT:  # ipmi_sim's SDR (tests/fixtures/bmc/ipmi_sim/slurmadm.sdrs)
        assert kinds["Inlet Temp"] == "temperature" and kinds["Fan 1"] == "fan"


def test_ipmi_sel_names_match_ipmitool(ipmi_bmc):
    c = ipmi_client(ipmi_bmc)
    try:
        events = c.sel()
    finally:
        c.close()
    # `sel elist`: "<sensor type> <SDR name>" where there is an SDR, else "<sensor type> #0x<number>"
    theirs = [line.split("|")[3].strip() for line in ipmitool(ipmi_bmc, "sel", "elist").splitlines()
              if line.count("|") >= 4]
    assert len(events) == len(theirs)
    for e, t in zip(events, theirs):
        assert t == e.sensor or t.endswith(" " + e.sensor), (e.sensor, t)
    assert all(e.log == "SEL" for e in events)
    if ipmi_bmc["port"] != OURS_IPMI_PORT:  # ipmi_sim's record of a sensor without an SDR
        assert theirs == ["Memory #0x07"]


def test_ipmi_fru_matches_ipmitool(ipmi_bmc):
    """ipmi_sim refuses FRU reads over 32 bytes (0xC8); ipmitool backs off, so must we."""
    c = ipmi_client(ipmi_bmc)
    try:
        inv = c.inventory()
    finally:
        c.close()
    fru = {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in
                                                 ipmitool(ipmi_bmc, "fru", "print", "0").splitlines())}
    assert inv.get("model") == fru["Product Name"]
    assert inv.get("serial") == fru["Product Serial"]


def test_ipmi_sel_probes_the_device_once(ipmi_bmc):
    """Where `bmc sel`'s time went under load: pyghmi asked Get Device ID again for every SDR
    record and SEL entry of a BMC it has no OEM handler for (30 round trips on ours)."""
    c = ipmi_client(ipmi_bmc)
    calls = []
    raw = c.cmd.raw_command

    def counting(*args, **kw):
        calls.append((kw.get("netfn"), kw.get("command")))
        return raw(*args, **kw)

    c.cmd.raw_command = counting
    try:
        t = time.monotonic()
        c.sel()
        c.sel()
        took = time.monotonic() - t
    finally:
        c.close()
    assert calls.count((6, 1)) <= 1, calls
    print(f"two SEL reads: {len(calls)} raw commands, {took:.2f} s")


# ---------------------------------------------------------------------- Redfish: ours and DMTF's mockup
@pytest.fixture(params=["ours", "sushy_static"])
def redfish_bmc(request):
    bmc = request.getfixturevalue(request.param)
    return {**bmc, "redfish_port": bmc.get("redfish_port", bmc["port"])}


def curl(bmc, path: str) -> dict:
    """curl's view; of sushy-static the instance that ends TLS with close_notify (curl 8 refuses a
    close-delimited body without it: sushy_close_notify.py), the same mockup and certificate."""
    port = bmc.get("clean_port", bmc["redfish_port"])
    p = subprocess.run(["curl", "-sS", "--fail", "--cacert", str(bmc["ca"]), "-u", f"admin:{bmc['password']}"
                        if "password" in bmc else "admin:x", f"https://127.0.0.1:{port}{path}"],
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def redfish_client(bmc) -> RedfishClient:
    tls = TlsPolicy(ca_file=None, fingerprint=bmc["fingerprint"], insecure=False)
    return RedfishClient(Target("b200-001", "127.0.0.1", 0, bmc["redfish_port"]),
                         Credentials("admin", Secret(bmc.get("password", "x"))), tls, timeout=10)


def test_redfish_power_inventory_firmware_match_curl(redfish_bmc):
    c = redfish_client(redfish_bmc)
    try:
        power, inv, fw = c.power_state(), c.inventory(), c.firmware()
    finally:
        c.close()
    system = curl(redfish_bmc, curl(redfish_bmc, "/redfish/v1/Systems")["Members"][0]["@odata.id"])
    assert power == ("on" if system["PowerState"] == "On" else "off")
    assert inv["model"] == system["Model"] and inv["serial"] == system["SerialNumber"]
    items = curl(redfish_bmc, "/redfish/v1/UpdateService/FirmwareInventory")["Members"]
    theirs = {}
    for m in items:
        doc = curl(redfish_bmc, m["@odata.id"])
        theirs[doc["Id"]] = doc.get("Version", "")
    assert fw == theirs


def test_redfish_sensors_typed_by_units_and_parent(redfish_bmc):
    c = redfish_client(redfish_bmc)
    try:
        sensors = c.sensors()
    finally:
        c.close()
    chassis = curl(redfish_bmc, curl(redfish_bmc, "/redfish/v1/Chassis")["Members"][0]["@odata.id"])
    docs = [curl(redfish_bmc, m["@odata.id"]) for m in curl(redfish_bmc, chassis["Sensors"]["@odata.id"])["Members"]]
    by_name = {s.name: s for s in sensors}
    for d in docs:
        s = by_name[d["Name"]]
        assert s.value == d.get("Reading")
        if d.get("ReadingUnits") == "Cel":
            assert s.type == "temperature", d["Name"]
        if d.get("ReadingUnits") == "RPM":
            assert s.type == "fan", d["Name"]
    if redfish_bmc["port"] != OURS_REDFISH_PORT and "plain_port" in redfish_bmc:  # DMTF's mockup
        assert len([s for s in sensors if s.type == "temperature"]) == 8
        assert sorted(s.name for s in sensors if s.type == "fan") == ["CPU #1 Fan Speed", "CPU #2 Fan Speed",
                                                                      "Chassis Fan #1", "Chassis Fan #2"]


def test_redfish_sel_reads_every_log_service(redfish_bmc):
    c = redfish_client(redfish_bmc)
    try:
        events = c.sel()
    finally:
        c.close()
    owners = [curl(redfish_bmc, "/redfish/v1/Systems")["Members"][0]["@odata.id"]]
    owners += [m["@odata.id"] for m in curl(redfish_bmc, "/redfish/v1/Managers")["Members"]]
    services = []
    for o in owners:
        doc = curl(redfish_bmc, o)
        if "LogServices" in doc:
            services += [m["@odata.id"] for m in curl(redfish_bmc, doc["LogServices"]["@odata.id"])["Members"]
                         if m["@odata.id"] not in services]
    expected = {}
    for uri in services:
        entries = curl(redfish_bmc, curl(redfish_bmc, uri)["Entries"]["@odata.id"])["Members"]
        expected[uri[len("/redfish/v1/"):]] = len(entries)
    got = {}
    for e in events:
        got[e.log] = got.get(e.log, 0) + 1
    assert got == {k: v for k, v in expected.items() if v}
    if "plain_port" in redfish_bmc:  # DMTF: the system's SEL entries first, then the manager's log
        assert [e.log for e in events] == ["Systems/437XR1138R2/LogServices/Log1"] * 2 + ["Managers/BMC/LogServices/Log"]


def _ends_with_close_notify(port: int, ca: Path) -> bool:
    """One GET; whether the server ended TLS with close_notify (else the read hits a bare EOF)."""
    ctx = ssl.create_default_context(cafile=str(ca))
    ctx.check_hostname = False
    with socket.create_connection(("127.0.0.1", port), timeout=10) as raw:
        with ctx.wrap_socket(raw, suppress_ragged_eofs=False) as tls:
            tls.sendall(b"GET /redfish/v1 HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
            try:
                while tls.recv(65536):
                    pass
            except ssl.SSLEOFError:
                return False
    return True


def test_slurmadm_reads_a_bmc_that_closes_tls_without_close_notify(sushy_static):
    """sushy-static, as many BMCs, ends its HTTP/1.0 close-delimited answers with a TCP close and
    no TLS close_notify (curl 8 refuses those: its cross-checks use the clean instance). slurmadm's
    client reads every answer of it whole; the clean instance is the same server otherwise."""
    assert not _ends_with_close_notify(sushy_static["port"], sushy_static["ca"])
    assert _ends_with_close_notify(sushy_static["clean_port"], sushy_static["ca"])
    c = redfish_client({**sushy_static, "redfish_port": sushy_static["port"]})
    try:
        systems = c.get("/redfish/v1/Systems")
        assert systems["Members"] and c.get(systems["Members"][0]["@odata.id"])["PowerState"]
    finally:
        c.close()


def test_pinning_holds_on_every_reconnect_to_sushy_static(sushy_static, tmp_path):
    """The issue's proxy: the pinned certificate on connection 1, another self-signed one after,
    in front of sushy-static (HTTP/1.0, one connection per request)."""
    from tests.unit.bmc.test_redfish_tls_pin import SwitchingProxy

    def ctx(name):
        make_certificate(tmp_path / f"{name}.pem", tmp_path / f"{name}.key", tmp_path / f"{name}-ca.pem")
        c = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        c.load_cert_chain(tmp_path / f"{name}.pem", tmp_path / f"{name}.key")
        return c

    pinned = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    pinned.load_cert_chain(sushy_static["dir"] / "cert.pem", sushy_static["dir"] / "key.pem")
    switching = SwitchingProxy(sushy_static["plain_port"], pinned, ctx("other"))
    steady = SwitchingProxy(sushy_static["plain_port"], pinned, pinned)
    password = "never-over-an-unpinned-link"
    try:
        tls = TlsPolicy(ca_file=None, fingerprint=sushy_static["fingerprint"], insecure=False)
        with pytest.raises(UnreachableError, match="fingerprint does not match"):
            RedfishClient(Target("b200-001", "127.0.0.1", 0, switching.port), Credentials("admin", Secret(password)),
                          tls, timeout=10).inventory()
        assert len(switching.received) >= 2
        assert all(password.encode() not in bytes(b) for b in switching.received)
        assert all(bytes(b) == b"" for b in switching.received[1:])
        c = RedfishClient(Target("b200-001", "127.0.0.1", 0, steady.port), Credentials("admin", Secret(password)),
                          tls, timeout=10)
        try:
            assert c.inventory()["model"] == "3500"
        finally:
            c.close()
        assert len(steady.received) >= 5  # a TLS connection per request, each one pinned
    finally:
        switching.close()
        steady.close()


# ---------------------------------------------------------------------- the CLI against them
EXAMPLE = Path(__file__).resolve().parents[2] / "site.example.toml"
NO_SLURMCTLD_PORT = BASE + 727  # nothing of the test bed listens here (independent_bmcs.py)


def site_for(d: Path, *, protocol: str, port: int, redfish_port: int, password: str,
             fingerprint: str | None = None, redfish: bool = True) -> Path:
    """site.example.toml with its store in `d` and one BMC address for its nodes (the first node,
    b200-001, on `port` / `redfish_port`), the password in a root-only file."""
    (d / "bmc.password").write_text(password + "\n")
    os.chmod(d / "bmc.password", 0o600)
    text = EXAMPLE.read_text()
    for old, new in [('path = "/var/lib/slurmadm/slurmadm.db"', f'path = "{d}/s.db"'),
                     ('audit_log = "/var/log/slurmadm/audit.jsonl"', f'audit_log = "{d}/audit.jsonl"'),
                     ('host_pattern = "{node}-bmc"', 'host_pattern = "{node}-bmc"\nshared_address = "127.0.0.1"'),
                     ('protocol = "ipmi"', f'protocol = "{protocol}"'), ("port = 623 ", f"port = {port} "),
                     ('password_file = "/etc/slurmadm/bmc.password"', f'password_file = "{d}/bmc.password"'),
                     ("redfish = true ", f"redfish = {'true' if redfish else 'false'} "),
                     ("redfish_port = 443 ", f"redfish_port = {redfish_port} "),
                     ('# tls_fingerprint = "30:4b:..."', f'tls_fingerprint = "{fingerprint}"' if fingerprint else "")]:
        assert text.count(old) == 1, old
        text = text.replace(old, new)
    (d / "site.toml").write_text(text)
    return d / "site.toml"


def audit(d: Path, action: str) -> list[dict]:
    path = d / "audit.jsonl"
    lines = path.read_text().splitlines() if path.exists() else []
    return [e for e in map(json.loads, lines) if e.get("action") == action]


@pytest.fixture()
def slurm_gone(dev_cluster, tmp_path):
    """The dev cluster's slurm.conf (its munge, its cluster) with slurmctld moved to a port where
    nothing listens: Slurm as the head sees it when its slurmctld is down."""
    with pytest.raises(OSError):  # connection refused: nothing listens there
        socket.create_connection(("127.0.0.1", NO_SLURMCTLD_PORT), timeout=2).close()
    text = dev_cluster.slurm_conf.read_text()
    assert re.search(r"^SlurmctldPort=\S+$", text, flags=re.M)
    conf = dev_cluster.slurm_conf.with_name("slurm-no-slurmctld.conf")  # beside it: its relative paths hold
    conf.write_text(re.sub(r"^SlurmctldHost=.*$", "SlurmctldHost=localhost(127.0.0.1)",
                           re.sub(r"^SlurmctldPort=\S+$", f"SlurmctldPort={NO_SLURMCTLD_PORT}", text, flags=re.M),
                           flags=re.M))
    env = {**os.environ, **dev_cluster.env(), "SLURM_CONF": str(conf)}
    for k in ("SLURMADM_SITE", "SLURMADM_BMC_PASSWORD"):
        env.pop(k, None)
    # sinfo and scontrol through a wrapper that logs each call's argv (one line) and runs the real one
    shims, calls = tmp_path / "slurm-shims", tmp_path / "slurm-calls.log"
    shims.mkdir()
    for cmd in ("sinfo", "scontrol"):
        real = shutil.which(cmd, path=env["PATH"])
        assert real, cmd
        (shims / cmd).write_text(f'#!/bin/sh\necho "{cmd} $*" >> "{calls}"\nexec "{real}" "$@"\n')
        (shims / cmd).chmod(0o755)
    env["PATH"] = f"{shims}:{env['PATH']}"
    env[SLURM_CALLS] = str(calls)
    try:
        yield env
    finally:
        conf.unlink()


SLURM_CALLS = "SLURMADM_TEST_SLURM_CALLS"


def slurm_queries(env: dict[str, str]) -> list[str]:
    """The Slurm calls logged since the last look (and forgets them), less `sinfo --version`
    (local: it asks no slurmctld) and `scontrol ping` (one connect try: at once when none listens)."""
    log = Path(env[SLURM_CALLS])
    lines = log.read_text().splitlines() if log.exists() else []
    log.unlink(missing_ok=True)
    return [c for c in lines if c not in ("sinfo --version", "scontrol ping")]


def test_power_off_and_on_force_without_slurm_reach_the_bmc(ours, slurm_gone, tmp_path):
    """Defect 5 with Slurm really unreachable: `bmc power off|on --force` acts on the BMC
    (ipmitool sees the change), warns once that it skipped the job check, audits it; without
    --force, off is refused and the BMC is left alone."""
    site = site_for(tmp_path, protocol="ipmi", port=ours["port"], redfish_port=ours["redfish_port"],
                    password=ours["password"], redfish=False)
    assert ipmitool(ours, "power", "status").strip() == "Chassis Power is on"
    refused = run_slurmadm(slurm_gone, "bmc", "power", "off", "b200-001", "--site", str(site), "--json")
    assert refused.returncode == 1, refused.stderr
    assert json.loads(refused.stdout)["steps"][0]["action"] == "refused" and "Traceback" not in refused.stderr
    assert ipmitool(ours, "power", "status").strip() == "Chassis Power is on"
    assert len(slurm_queries(slurm_gone)) == 1, "one query that waits for slurmctld, not a second one after it"
    try:
        off = run_slurmadm(slurm_gone, "bmc", "power", "off", "b200-001", "--force", "--site", str(site), "--json",
                           "--reason", "slurmctld down: power off by hand")
        assert off.returncode == 0, off.stdout + off.stderr
        assert ipmitool(ours, "power", "status").strip() == "Chassis Power is off"
        assert off.stderr.count("warning:") == 1 and "Slurm did not answer" in off.stderr, off.stderr
        assert "without the job check" in off.stderr and "Traceback" not in off.stderr
        # why, as Slurm says it (22.05's sinfo --json exits 0 with no nodes there and does not say
        # why: scontrol ping does; not "does not know"), after one query that waits for slurmctld
        assert re.search(r"Unable to contact slurm controller|scontrol ping: Slurmctld\(primary\) at \S+ is DOWN",
                         off.stderr) and "does not know" not in off.stderr, off.stderr
        assert len(slurm_queries(slurm_gone)) == 1
        step = json.loads(off.stdout)["steps"][0]
        assert (step["do"], step["no_slurm"], step["slurm"]) == (True, True, "unreachable"), step
        [event] = audit(tmp_path, "bmc.power.off")
        assert (event["target"], event["reason"]) == ("b200-001", "slurmctld down: power off by hand")
        assert event["detail"]["slurm_unreachable"] and event["detail"]["forced"] and event["detail"]["was"] == "on"
    finally:
        on = run_slurmadm(slurm_gone, "bmc", "power", "on", "b200-001", "--force", "--site", str(site))
    assert on.returncode == 0, on.stdout + on.stderr
    assert ipmitool(ours, "power", "status").strip() == "Chassis Power is on"
    assert on.stderr.count("warning:") == 1 and "Slurm did not answer" in on.stderr
    assert len(slurm_queries(slurm_gone)) == 1, "one query for on, as for off"
    [event] = audit(tmp_path, "bmc.power.on")
    assert event["detail"]["slurm_unreachable"] and event["detail"]["was"] == "off"


# ---------------------------------------------------------------------- DMTF's own client
def dmtf_client(bmc):
    """DMTF's python-redfish-library (pip `redfish`) on the mockup: not our HTTP, not our parsing."""
    import redfish

    c = redfish.redfish_client(base_url=f"https://127.0.0.1:{bmc['redfish_port']}", username="admin",
                               password=bmc.get("password", "x"), cafile=str(bmc["ca"]))
    c.login(auth="basic")
    return c


def members(c, uri: str) -> list[dict]:
    return [c.get(m["@odata.id"]).dict for m in c.get(uri).dict["Members"]]


@pytest.fixture()
def dmtf_site(sushy_static, tmp_path):
    bmc = {**sushy_static, "redfish_port": sushy_static["port"]}
    site = site_for(tmp_path, protocol="redfish", port=623, redfish_port=sushy_static["port"], password="x",
                    fingerprint=sushy_static["fingerprint"])
    env = {k: v for k, v in os.environ.items() if k not in ("SLURMADM_SITE", "SLURMADM_BMC_PASSWORD")}
    c = dmtf_client(bmc)
    try:
        yield {"site": site, "env": env, "client": c}
    finally:
        c.logout()


def cli_json(dmtf_site, *args: str):
    r = run_slurmadm(dmtf_site["env"], "bmc", *args, "b200-001", "--site", str(dmtf_site["site"]), "--json")
    assert r.returncode in (0, 1), r.stdout + r.stderr
    [row] = json.loads(r.stdout)
    assert row["node"] == "b200-001" and row["error"] is None, row
    return row


def test_inventory_json_agrees_with_dmtf_client(dmtf_site):
    c = dmtf_site["client"]
    [system] = members(c, "/redfish/v1/Systems")
    manager = members(c, "/redfish/v1/Managers")[0]
    firmware = {d["Id"]: d.get("Version", "") for d in members(c, "/redfish/v1/UpdateService/FirmwareInventory")}
    inv = cli_json(dmtf_site, "inventory")["inventory"]
    assert (inv["model"], inv["serial"]) == (system["Model"], system["SerialNumber"])
    assert (inv.get("bios_firmware"), inv.get("bmc_firmware")) == (system.get("BiosVersion"),
                                                                   manager.get("FirmwareVersion"))
    assert firmware and inv["firmware"] == firmware


def test_sel_json_agrees_with_dmtf_client(dmtf_site):
    """Every entry of every log service of the system and the managers, as DMTF's client reads
    them: same log, id, message and Redfish severity (OK/Warning/Critical)."""
    c = dmtf_site["client"]
    [system] = members(c, "/redfish/v1/Systems")
    expected = []
    for owner in [system, *members(c, "/redfish/v1/Managers")]:
        for service in members(c, owner["LogServices"]["@odata.id"]) if "LogServices" in owner else []:
            log = service["@odata.id"][len("/redfish/v1/"):]
            for e in c.get(service["Entries"]["@odata.id"]).dict["Members"]:  # entries come expanded
                expected.append((log, int(e["Id"]) if str(e["Id"]).isdigit() else 0, e.get("Message", ""),
                                 {"OK": "info", "Warning": "warning", "Critical": "critical"}[e.get("Severity", "OK")]))
    events = cli_json(dmtf_site, "sel")["events"]
    assert expected and sorted((e["log"], e["record_id"], e["event"], e["severity"]) for e in events) == sorted(expected)


def test_sensors_json_agrees_with_dmtf_client(dmtf_site):
    c = dmtf_site["client"]
    [chassis] = members(c, "/redfish/v1/Chassis")[:1]
    theirs = {d["Name"]: d for d in members(c, chassis["Sensors"]["@odata.id"])}
    mine = {s["name"]: s for s in cli_json(dmtf_site, "sensors")["sensors"]}
    assert set(theirs) <= set(mine), set(theirs) - set(mine)
    for name, d in theirs.items():
        assert mine[name]["value"] == d.get("Reading"), name
        unit = {"Cel": "temperature", "RPM": "fan", "V": "voltage", "W": "power"}.get(d.get("ReadingUnits"))
        if unit:
            assert mine[name]["type"] in (unit, "psu" if unit == "power" else unit), (name, mine[name])


# ---------------------------------------------------------------------- parts: PSUs and fans (issue 35)
def test_ipmi_sim_psu_and_fan_frus_fill_the_parts_inventory(ipmi_sim, tmp_path):
    """OpenIPMI's ipmi_sim names FRU devices 1-3 PS1, PS2 and FAN1 in its SDR (FRU device
    locators, tests/fixtures/bmc/ipmi_sim/slurmadm.sdrs): inventory() reads them as ipmitool's
    `fru print` does, and what `bmc inventory` records fills `repair parts`."""
    from slurmadm.bmc.fanout import Row
    from slurmadm.bmc.ops import record_inventory
    from slurmadm.repair import parts
    from slurmadm.store import Store

    c = ipmi_client(ipmi_sim)
    try:
        inv = c.inventory()
    finally:
        c.close()
    # ipmitool prints a 6-bit packed locator name as raw bytes (`fru print` copies the id string
    # as it is), so its view is asked per FRU device id: 1-3 are PS1, PS2, FAN1 (slurmadm.sdrs)
    theirs = {}
    for device, name in ((1, "PS1"), (2, "PS2"), (3, "FAN1")):
        fields = {k.strip(): v.strip() for k, _, v in (line.partition(":") for line in
                                                       ipmitool(ipmi_sim, "fru", "print", str(device)).splitlines())}
        theirs[name] = fields.get("Product Serial")
    assert [p["name"] for p in inv["psus"]] == ["PS1", "PS2"] and [p["name"] for p in inv["fans"]] == ["FAN1"]
    for p in inv["psus"] + inv["fans"]:
        assert p["serial"] == theirs[p["name"]], (p, theirs)
    with Store(tmp_path / "s.db") as store:
        record_inventory(store, [Row("b200-001", True, inv)])
        parts.refresh(store)
        got = {(r["kind"], r["slot"]): r["part_key"] for r in parts.inventory(store, "b200-001")}
    assert got[("psu", "PS1")] == "P3K04GA10001" and got[("psu", "PS2")] == "P3K04GA10002"
    assert got[("fan", "FAN1")] == "FAN0206L40001" and got[("board", "board")] == inv.get("board_serial", inv.get("serial"))


def test_redfish_mockup_psus_and_fans_as_curl_shows_them(sushy_static):
    sushy_static = {**sushy_static, "redfish_port": sushy_static["port"]}
    c = redfish_client(sushy_static)
    try:
        inv = c.inventory()
    finally:
        c.close()
    power = curl(sushy_static, "/redfish/v1/Chassis/1U/Power")
    assert [(p["name"], p["serial"]) for p in inv["psus"]] == \
        [(p["Name"], p["SerialNumber"]) for p in power["PowerSupplies"]]
    fans = [curl(sushy_static, m["@odata.id"]) for m in
            curl(sushy_static, "/redfish/v1/Chassis/1U/ThermalSubsystem/Fans")["Members"]]
    assert [f["id"] for f in inv["fans"]] == [f["Id"] for f in fans]
    assert {f["model"] for f in inv["fans"]} == {f["Model"] for f in fans}
