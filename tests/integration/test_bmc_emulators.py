"""The BMC emulators on their own (no Slurm), cross-checked with clients that are not ours:
Debian's `ipmitool -I lanplus`, pyghmi's client, the DMTF `redfish` library and curl.

One emulator process per module: 4 BMCs (IPMI + Redfish over TLS) on 127.0.0.1 ports from
$SLURMADM_TEST_PORT_BASE + 600 / + 650.
"""

from __future__ import annotations

import functools
import http.server
import os
import secrets
import shutil
import subprocess
import sys
import threading

import pytest

from slurmadm.devcluster.bmc_state import write_faults
from slurmadm.devcluster.daemons import wait_for
from slurmadm.devcluster.redfish_emulator import fake_image, make_certificate

pytestmark = pytest.mark.integration

BASE = int(os.environ.get("SLURMADM_TEST_PORT_BASE", "27000"))
IPMI, REDFISH = BASE + 600, BASE + 650
NODES = ["b200-001", "b200-002", "b200-003", "b200-004"]


@pytest.fixture(scope="module")
def emu(tmp_path_factory):
    if shutil.which("ipmitool") is None:
        pytest.fail("ipmitool is not installed (scripts/install-system-deps.sh)")
    d = tmp_path_factory.mktemp("bmc")
    password = secrets.token_urlsafe(12)
    (d / "password").write_text(password + "\n")
    os.chmod(d / "password", 0o600)
    make_certificate(d / "cert.pem", d / "key.pem", d / "ca.pem")
    log = open(d / "emulator.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "slurmadm.devcluster.bmc_emulator", "--bmc-dir", str(d),
                             "--nodes", "b200-[001-004]", "--ipmi-port", str(IPMI), "--redfish-port", str(REDFISH),
                             "--cert", str(d / "cert.pem"), "--key", str(d / "key.pem")],
                            stdout=log, stderr=subprocess.STDOUT)
    assert wait_for(lambda: "bmc emulator:" in (d / "emulator.log").read_text() or proc.poll() is not None, 30)
    assert proc.poll() is None, (d / "emulator.log").read_text()
    yield {"dir": d, "password": password, "proc": proc}
    proc.terminate()
    proc.wait(10)
    log.close()
    assert password not in " ".join(proc.args), "the BMC password must never be in a process argument"


def ipmitool(emu, i: int, *args: str, check: bool = True) -> str:
    env = {**os.environ, "IPMI_PASSWORD": emu["password"]}  # -E: the password from the environment
    p = subprocess.run(["ipmitool", "-I", "lanplus", "-H", "127.0.0.1", "-p", str(IPMI + i), "-U", "admin", "-E",
                        "-N", "1", "-R", "2", *args], env=env, capture_output=True, text=True, timeout=60)
    if check:
        assert p.returncode == 0, p.stderr
    return p.stdout


def client(emu, i: int):
    from slurmadm.bmc.creds import Credentials, Secret
    from slurmadm.bmc.ipmi import IpmiClient
    from slurmadm.bmc.model import Target

    return IpmiClient(Target(NODES[i], "127.0.0.1", IPMI + i, REDFISH + i), Credentials("admin", Secret(emu["password"])))


# ---------------------------------------------------------------------- IPMI, ipmitool
def test_ipmitool_power_sdr_sel_fru(emu):
    assert ipmitool(emu, 0, "power", "status").strip() == "Chassis Power is on"
    sdr = ipmitool(emu, 0, "sdr", "list")
    lines = {l.split("|")[0].strip(): [x.strip() for x in l.split("|")[1:]] for l in sdr.splitlines()}
    assert lines["HGX BB Temp"] == ["46 degrees C", "ok"]
    assert lines["Total Power"] == ["6240 Watts", "ok"]
    assert lines["12V"] == ["12.06 Volts", "ok"]
    assert lines["FAN1"] == ["8400 RPM", "ok"]
    assert "System ACPI Power State" in ipmitool(emu, 0, "sel", "list")
    fru = ipmitool(emu, 0, "fru", "print")
    assert "Product Name          : SYS-A22GA-NBRT" in fru and "Product Asset Tag     : b200-001" in fru
    # thresholds as `ipmitool sensor` reads them (Get Sensor Thresholds)
    get = ipmitool(emu, 0, "sensor", "get", "HGX BB Temp")
    assert "Upper Critical        : 85.000" in get and "Upper Non-Recoverable : 90.000" in get


def test_ipmitool_and_pyghmi_see_the_same_state(emu):
    ipmitool(emu, 1, "chassis", "bootdev", "pxe")
    c = client(emu, 1)
    try:
        assert c.bootdev() == ("pxe", False)
        ipmitool(emu, 1, "chassis", "power", "off")
        assert c.power_state() == "off"
        c.power("cycle")  # an off system: cycled means powered on
        assert ipmitool(emu, 1, "power", "status").strip() == "Chassis Power is on"
        assert c.bootdev()[0] == "default"  # a one-time override is used up by the boot
        c.set_bootdev("bios", True)
    finally:
        c.close()
    assert "Force Boot into BIOS Setup" in ipmitool(emu, 1, "chassis", "bootparam", "get", "5")


def test_faults_show_in_sensors_and_sel(emu):
    d = emu["dir"]
    write_faults(d, NODES[2], {"psu-failed": None, "overtemp": "88"})
    try:
        sdr = ipmitool(emu, 2, "sdr", "list")
        assert any(l.startswith("HGX BB Temp") and "88 degrees C" in l and l.rstrip().endswith("| cr") for l in sdr.splitlines())
        sel = ipmitool(emu, 2, "sel", "list")
        assert "Failure detected" in sel and "Upper Critical going high" in sel
        c = client(emu, 2)
        try:
            sensors = {s.name: s for s in c.sensors()}
            assert sensors["HGX BB Temp"].status == "critical" and sensors["HGX BB Temp"].thresholds["uc"] == 85.0
            assert sensors["PSU2 Status"].status != "ok" and sensors["PSU1 Status"].status == "ok"
        finally:
            c.close()
    finally:
        write_faults(d, NODES[2], {})


def test_a_sensor_without_a_reading_is_one_sensor_not_the_node(emu):
    """A BMC that cannot read one sensor (0xCE; ipmi_sim 2.0.37 before a sensor's first poll,
    many BMCs with the host off): ipmitool shows it as "no reading" and goes on; pyghmi's sweep
    stopped there and `bmc sensors` called the node unreachable."""
    d = emu["dir"]
    write_faults(d, NODES[1], {"no-reading": "CPU2 Temp"})
    try:
        sdr = {l.split("|")[0].strip(): l.split("|")[1].strip() for l in ipmitool(emu, 1, "sdr", "list").splitlines()}
        assert sdr["CPU2 Temp"] == "no reading" and sdr["CPU1 Temp"].endswith("degrees C")
        c = client(emu, 1)
        try:
            sensors = {s.name: s for s in c.sensors()}
        finally:
            c.close()
        assert set(sensors) == set(sdr)
        cpu2 = sensors["CPU2 Temp"]
        assert (cpu2.value, cpu2.type, cpu2.status) == (None, "temperature", "ok"), cpu2
        assert cpu2.states == ("no reading: Command response could not be provided",)
        assert sensors["CPU1 Temp"].value is not None and sensors["FAN1"].value is not None
    finally:
        write_faults(d, NODES[1], {})


def test_sel_clear_is_atomic_with_the_read(emu):
    """A reservation is cancelled by a new event, so a clear racing a new event fails (0xC5)
    instead of losing it; pyghmi's get_event_log(clear=True) relies on this."""
    c = client(emu, 3)
    try:
        rsv = c.cmd.raw_command(netfn=0x0A, command=0x42)["data"]
        write_faults(emu["dir"], NODES[3], {"psu-failed": "1"})  # logs an event
        assert c.sensors()  # any request lets the emulator pick up the fault
        rsp = c.cmd.raw_command(netfn=0x0A, command=0x47, data=list(rsv) + list(b"CLR") + [0xAA])
        assert rsp["code"] == 0xC5
        events = c.sel(clear=True)
        assert any("PSU1" in e.sensor for e in events)
        after = c.sel()
        assert [e.event for e in after] == ["Log clear"]  # pyghmi's words for "Log area reset/cleared"
    finally:
        write_faults(emu["dir"], NODES[3], {})
        c.close()


def test_sel_full(emu):
    write_faults(emu["dir"], NODES[0], {"sel-full": None})
    try:
        info = {k.strip(): v.strip() for k, _, v in (l.partition(":") for l in ipmitool(emu, 0, "sel", "info").splitlines())}
        assert info["Overflow"] == "true" and info["Percent Used"] == "100%" and info["Entries"] == "512"
    finally:
        write_faults(emu["dir"], NODES[0], {})
        c = client(emu, 0)
        c.sel(clear=True)
        c.close()


def test_session_limit_and_logout(emu):
    """Our client logs out: with room for one session, one login after another keeps working;
    with none, the login is refused (RMCP+ status 'insufficient resources')."""
    write_faults(emu["dir"], NODES[1], {"session-limit": "1"})
    try:
        for _ in range(3):
            c = client(emu, 1)
            assert c.power_state() == "on"
            c.close()
        write_faults(emu["dir"], NODES[1], {"session-limit": "0"})
        from slurmadm.errors import UnreachableError

        with pytest.raises(UnreachableError, match="b200-002"):
            client(emu, 1)
        assert ipmitool(emu, 1, "power", "status", check=False).strip() == ""
    finally:
        write_faults(emu["dir"], NODES[1], {})


def test_unreachable_bmc_does_not_stall_the_others(emu):
    write_faults(emu["dir"], NODES[0], {"unreachable": None})
    try:
        assert ipmitool(emu, 0, "power", "status", check=False).strip() == ""
        assert ipmitool(emu, 1, "power", "status").strip() == "Chassis Power is on"
    finally:
        write_faults(emu["dir"], NODES[0], {})


def test_slow_bmc_answers_each_request_as_itself(emu):
    """A `slow` BMC's late answer goes out under its own request's netfn/command/sequence, not
    under whatever the client sent since (before the fix, pyghmi read a delayed Get Device ID
    answer as Get Chassis Status: "power off")."""
    write_faults(emu["dir"], NODES[2], {"slow": 1.0})
    try:
        env = {**os.environ, "IPMI_PASSWORD": emu["password"]}
        p = subprocess.run(["ipmitool", "-I", "lanplus", "-H", "127.0.0.1", "-p", str(IPMI + 2), "-U", "admin", "-E",
                            "-N", "3", "power", "status"], env=env, capture_output=True, text=True, timeout=120)
        assert p.stdout.strip() == "Chassis Power is on", p.stderr
        c = client(emu, 2)
        try:
            for _ in range(2):
                assert c.power_state() == "on"
            assert c.bootdev()[0] == "default"
        finally:
            c.close()
    finally:
        write_faults(emu["dir"], NODES[2], {})


def test_many_clients_at_once(emu):
    """ipmitool processes and pyghmi sessions in threads against all BMCs at the same time (the
    emulator's per-port sessions and the I/O fix)."""
    errors: list[str] = []

    def pyghmi_worker(i):
        try:
            for _ in range(3):
                c = client(emu, i)
                assert c.power_state() == "on" and len(c.sensors()) > 20
                c.close()
        except Exception as exc:  # noqa: BLE001
            errors.append(repr(exc))

    threads = [threading.Thread(target=pyghmi_worker, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    outs = [ipmitool(emu, i % 4, "sdr", "list") for i in range(8)]
    for t in threads:
        t.join(120)
    assert not errors
    assert all("HGX BB Temp" in o for o in outs)


# ---------------------------------------------------------------------- Redfish, DMTF client and curl
@pytest.fixture(scope="module")
def image_server(tmp_path_factory):
    d = tmp_path_factory.mktemp("images")
    (d / "bios-2.3.0.bin").write_bytes(fake_image("BIOS", "2.3.0"))
    (d / "junk.bin").write_bytes(b"not firmware")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(d))
    handler.log_message = lambda *a: None
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()


def redfish_client(emu, i: int):
    import redfish

    c = redfish.redfish_client(base_url=f"https://127.0.0.1:{REDFISH + i}", username="admin",
                               password=emu["password"], cafile=str(emu["dir"] / "ca.pem"))
    c.login(auth="session")
    return c


def _follow(c, uri: str) -> dict:
    state = {}

    def done() -> bool:
        state.update(c.get(uri).dict)
        return state["TaskState"] in ("Completed", "Exception")

    assert wait_for(done, 60, interval=0.2)
    return state


def test_redfish_power_boot_inventory_with_dmtf_client(emu):
    c = redfish_client(emu, 2)
    try:
        system = c.get("/redfish/v1/Systems/1").dict
        assert system["PowerState"] == "On"
        assert c.post("/redfish/v1/Systems/1/Actions/ComputerSystem.Reset", body={"ResetType": "ForceOff"}).status == 204
        assert ipmitool(emu, 2, "power", "status").strip() == "Chassis Power is off"  # one state, two protocols
        c.post("/redfish/v1/Systems/1/Actions/ComputerSystem.Reset", body={"ResetType": "On"})
        assert c.patch("/redfish/v1/Systems/1", body={"Boot": {"BootSourceOverrideTarget": "Pxe",
                                                               "BootSourceOverrideEnabled": "Once"}}).status == 204
        assert "Force PXE" in ipmitool(emu, 2, "chassis", "bootparam", "get", "5")
        inv = [m["@odata.id"].rsplit("/", 1)[1] for m in c.get("/redfish/v1/UpdateService/FirmwareInventory").dict["Members"]]
        assert {"BMC", "BIOS", "CPLD_Motherboard", "NIC1", "HGX_FW_BMC_0"} <= set(inv)
        assert sum(x.startswith("HGX_FW_GPU_SXM_") for x in inv) == 8 and sum("NVSwitch" in x for x in inv) == 4
        sensor = c.get("/redfish/v1/Chassis/1/Sensors/HGX_BB_Temp").dict
        assert sensor["ReadingUnits"] == "Cel" and sensor["Thresholds"]["UpperCritical"]["Reading"] == 85
        psus = c.get("/redfish/v1/Chassis/1/Power").dict["PowerSupplies"]
        assert len(psus) == 4 and all(p["Status"]["Health"] == "OK" for p in psus)
        entries = c.get("/redfish/v1/Managers/1/LogServices/SEL/Entries").dict["Members"]
        assert any("S4/S5: soft-off" in e["Message"] for e in entries)
        assert c.post("/redfish/v1/Managers/1/LogServices/SEL/Actions/LogService.ClearLog", body={}).status == 204
        entries = c.get("/redfish/v1/Managers/1/LogServices/SEL/Entries").dict["Members"]
        assert [e["Message"] for e in entries] == ["SEL Status: Log area reset/cleared"]
    finally:
        c.logout()


def test_redfish_simple_update_and_push(emu, image_server):
    c = redfish_client(emu, 3)
    try:
        bios = "/redfish/v1/UpdateService/FirmwareInventory/BIOS"
        r = c.post("/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate",
                   body={"ImageURI": f"{image_server}/bios-2.3.0.bin", "TransferProtocol": "HTTP", "Targets": [bios]})
        assert r.status == 202
        task = _follow(c, r.getheader("Location"))
        assert task["TaskState"] == "Completed" and task["PercentComplete"] == 100
        assert c.get(bios).dict["Version"] == "2.3.0"
        r = c.post("/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate",
                   body={"ImageURI": f"{image_server}/junk.bin", "TransferProtocol": "HTTP", "Targets": [bios]})
        assert _follow(c, r.getheader("Location"))["TaskState"] == "Exception"
    finally:
        c.logout()
    # multipart push with curl (what open-nvfwupd and Supermicro's docs do)
    img = emu["dir"] / "gpu1.bin"
    img.write_bytes(fake_image("HGX_FW_GPU_SXM_1", "97.00.A1.00.01"))
    out = subprocess.run(
        ["curl", "-sS", "-i", "--cacert", str(emu["dir"] / "ca.pem"), "-u", f"admin:{emu['password']}",
         "-F", 'UpdateParameters={"Targets":["/redfish/v1/UpdateService/FirmwareInventory/HGX_FW_GPU_SXM_1"]};type=application/json',
         "-F", f"UpdateFile=@{img};type=application/octet-stream",
         f"https://127.0.0.1:{REDFISH + 3}/redfish/v1/UpdateService/upload"],
        capture_output=True, text=True, timeout=60)
    assert " 202 " in out.stdout.splitlines()[0]
    location = next(l.split(":", 1)[1].strip() for l in out.stdout.splitlines() if l.lower().startswith("location:"))
    c = redfish_client(emu, 3)
    try:
        assert _follow(c, location)["TaskState"] == "Completed"
        assert c.get("/redfish/v1/UpdateService/FirmwareInventory/HGX_FW_GPU_SXM_1").dict["Version"] == "97.00.A1.00.01"
    finally:
        c.logout()


def test_redfish_tls_and_auth(emu):
    url = f"https://127.0.0.1:{REDFISH}/redfish/v1/Systems/1"
    # no CA: curl refuses the self-signed chain; wrong password: 401
    assert subprocess.run(["curl", "-sS", "-o", "/dev/null", url], capture_output=True, timeout=30).returncode != 0
    code = subprocess.run(["curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--cacert", str(emu["dir"] / "ca.pem"),
                           "-u", "admin:wrong", url], capture_output=True, text=True, timeout=30).stdout
    assert code == "401"
    write_faults(emu["dir"], NODES[0], {"session-limit": "0"})
    try:
        import redfish
        from redfish.rest.v1 import SessionCreationError

        c = redfish.redfish_client(base_url=f"https://127.0.0.1:{REDFISH}", username="admin",
                                   password=emu["password"], cafile=str(emu["dir"] / "ca.pem"))
        with pytest.raises(SessionCreationError):
            c.login(auth="session")
    finally:
        write_faults(emu["dir"], NODES[0], {})


def test_our_redfish_client_tls_policies_and_firmware_push(emu):
    """slurmadm's Redfish adapter: the CA file, a pinned fingerprint (right and wrong), no
    check only when asked; sensors with thresholds, SEL, power, boot, and a multipart push."""
    import hashlib
    import ssl

    from slurmadm.bmc.creds import Credentials, Secret
    from slurmadm.bmc.model import Target
    from slurmadm.bmc.redfish import RedfishClient, TlsPolicy
    from slurmadm.errors import UnreachableError

    target = Target(NODES[1], "127.0.0.1", IPMI + 1, REDFISH + 1)
    creds = Credentials("admin", Secret(emu["password"]))
    der = ssl.PEM_cert_to_DER_cert((emu["dir"] / "cert.pem").read_text())
    pin = ":".join(f"{b:02x}" for b in hashlib.sha256(der).digest())
    with pytest.raises(UnreachableError, match="certificate not trusted"):
        RedfishClient(target, creds, TlsPolicy(ca_file=None, fingerprint=None, insecure=False), timeout=10)
    with pytest.raises(UnreachableError, match="fingerprint does not match"):
        RedfishClient(target, creds, TlsPolicy(ca_file=None, fingerprint="00" * 32, insecure=False), timeout=10)
    with pytest.raises(UnreachableError, match="login refused"):
        RedfishClient(target, Credentials("admin", Secret("wrong")),
                      TlsPolicy(ca_file=str(emu["dir"] / "ca.pem"), fingerprint=None, insecure=False), timeout=10)
    RedfishClient(target, creds, TlsPolicy(ca_file=None, fingerprint=None, insecure=True), timeout=10).close()
    c = RedfishClient(target, creds, TlsPolicy(ca_file=None, fingerprint=pin, insecure=False), timeout=10)
    try:
        sensors = {s.name: s for s in c.sensors()}
        assert sensors["HGX BB Temp"].thresholds["uc"] == 85 and sensors["HGX BB Temp"].status == "ok"
        assert sensors["PSU1 Status"].type == "psu" and sensors["FAN1"].unit == "RPM"
        assert c.power_state() == "on"
        c.set_bootdev("pxe", False)
        assert c.bootdev() == ("pxe", False)
        img = fake_image("NIC1", "28.43.1014")
        task = c.update_firmware("NIC1", "file:///unused", image=img)
        assert wait_for(lambda: c.task(task.uri).done, 60, interval=0.2)
        assert c.task(task.uri).ok and c.firmware()["NIC1"] == "28.43.1014"
        assert any("ACPI" in e.sensor for e in c.sel())
    finally:
        c.close()
    # the session was deleted: the emulator holds none for us now
    d = emu["dir"]
    write_faults(d, NODES[1], {"session-limit": "1"})
    try:
        RedfishClient(target, creds, TlsPolicy(ca_file=str(d / "ca.pem"), fingerprint=None, insecure=False),
                      timeout=10).close()
    finally:
        write_faults(d, NODES[1], {})
