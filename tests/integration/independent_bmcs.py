"""BMCs slurmadm's developers did not write, for the integration test bed, started once per test
session on loopback beside the dev cluster's own emulators:

- OpenIPMI's `ipmi_sim` (Debian package `openipmi`) with tests/fixtures/bmc/ipmi_sim/ (lan.conf,
  emulator commands, the SDR source compiled by OpenIPMI's `sdrcomp`, a FRU image);
- DMTF's public-rackmount1 Redfish mockup (tests/fixtures/bmc/redfish/) served read-only over
  TLS by `sushy-static` from sushy-tools (PyPI; the `test` extra), and once more over plain HTTP
  as the backend of the certificate-switching proxy test.

Ports, from $SLURMADM_TEST_PORT_BASE (a dev cluster uses base .. base+703):
  base+720  ipmi_sim (RMCP+, UDP)
  base+721  sushy-static, HTTPS
  base+722  sushy-static, plain HTTP (behind the proxy of the pinning test)
  base+723  sushy-static, HTTPS ending each connection with close_notify (sushy_close_notify.py:
            for curl's cross-checks; base+721 closes without, as sushy-static and many BMCs do)
  base+725  our emulator's IPMI (one BMC), base+726 its Redfish (test_bmc_independent.py)
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from slurmadm.devcluster.daemons import wait_for
from slurmadm.devcluster.redfish_emulator import make_certificate

BASE = int(os.environ.get("SLURMADM_TEST_PORT_BASE", "27000"))
IPMI_SIM_PORT, SUSHY_TLS_PORT, SUSHY_PLAIN_PORT, SUSHY_CLEAN_TLS_PORT = BASE + 720, BASE + 721, BASE + 722, BASE + 723
OURS_IPMI_PORT, OURS_REDFISH_PORT = BASE + 725, BASE + 726
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "bmc"


def _need(tool: str, how: str) -> str:
    path = shutil.which(tool) or (str(Path(sys.executable).parent / tool)
                                  if (Path(sys.executable).parent / tool).exists() else None)
    if path is None:
        pytest.fail(f"{tool} is not installed ({how})")
    return path


def _stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(10)


@pytest.fixture(scope="session")
def ipmi_sim(tmp_path_factory):
    """OpenIPMI's simulator: one BMC on 127.0.0.1:base+720, user admin, a fresh password."""
    exe = _need("ipmi_sim", "Debian package openipmi: scripts/install-system-deps.sh")
    sdrcomp = _need("sdrcomp", "Debian package openipmi: scripts/install-system-deps.sh")
    _need("ipmitool", "scripts/install-system-deps.sh")
    d = tmp_path_factory.mktemp("ipmi_sim")
    password = secrets.token_hex(8)  # ipmi_sim keeps passwords of up to 16 bytes (IPMI 1.5)
    src = FIXTURES / "ipmi_sim"
    (d / "lan.conf").write_text((src / "lan.conf.in").read_text().replace("@PORT@", str(IPMI_SIM_PORT))
                                .replace("@PASSWORD@", password))
    os.chmod(d / "lan.conf", 0o600)
    sensors = d / "sensors"  # the polled sensors' raw values (slurmadm.emu.in)
    sensors.mkdir()
    (sensors / "1").write_text("40\n")  # Inlet Temp, degrees C
    (sensors / "2").write_text("60\n")  # Fan 1, x 100 RPM
    (d / "sim.emu").write_text((src / "slurmadm.emu.in").read_text()
                               .replace("@FRU@", (src / "fru.hex").read_text().strip())
                               .replace("@FRU_PS1@", (src / "fru-ps1.hex").read_text().strip())
                               .replace("@FRU_PS2@", (src / "fru-ps2.hex").read_text().strip())
                               .replace("@FRU_FAN1@", (src / "fru-fan1.hex").read_text().strip())
                               .replace("@SENSORS@", str(sensors)))
    state = d / "state" / "ipmi_sim" / "slurmadm-sim"
    state.mkdir(parents=True)
    subprocess.run([sdrcomp, "-o", str(state / "sdr.20.main"), str(src / "slurmadm.sdrs")], check=True,
                   capture_output=True, timeout=30)
    log = open(d / "ipmi_sim.log", "w")
    proc = subprocess.Popen([exe, "-c", str(d / "lan.conf"), "-f", str(d / "sim.emu"), "-s", str(d / "state"), "-n"],
                            stdout=log, stderr=subprocess.STDOUT, cwd=d)
    env = {**os.environ, "IPMI_PASSWORD": password}

    def answers() -> bool:
        p = subprocess.run(["ipmitool", "-I", "lanplus", "-H", "127.0.0.1", "-p", str(IPMI_SIM_PORT), "-U", "admin",
                            "-E", "-N", "1", "-R", "1", "power", "status"], env=env, capture_output=True, text=True,
                           timeout=30)
        if "Chassis Power is" not in p.stdout:
            return False
        # and the sensors polled once (until then 2.0.37 answers their readings with 0xCE)
        p = subprocess.run(["ipmitool", "-I", "lanplus", "-H", "127.0.0.1", "-p", str(IPMI_SIM_PORT), "-U", "admin",
                            "-E", "-N", "1", "-R", "1", "sdr", "list"], env=env, capture_output=True, text=True,
                           timeout=30)
        return "40 degrees C" in p.stdout and "6000 RPM" in p.stdout

    try:
        assert wait_for(lambda: proc.poll() is None and answers(), 60), (d / "ipmi_sim.log").read_text()
        yield {"port": IPMI_SIM_PORT, "password": password, "dir": d}
    finally:
        _stop(proc)
        log.close()


def write_mockup(dest: Path) -> Path:
    """The recorded DMTF resources back out as a mockup tree (<path>/index.json)."""
    docs = json.loads((FIXTURES / "redfish" / "public-rackmount1.json").read_text())
    for path, doc in docs.items():
        d = dest / path[len("/redfish/v1"):].lstrip("/")
        d.mkdir(parents=True, exist_ok=True)
        (d / "index.json").write_text(json.dumps(doc, indent=1))
    return dest


def _sushy(exe: str, mockup: Path, port: int, d: Path, tls: tuple[Path, Path] | None, *,
           close_notify: bool = False) -> subprocess.Popen:
    argv = [exe, "-i", "127.0.0.1", "-p", str(port), "-m", str(mockup)]
    if close_notify:  # the same sushy-static, its TLS connections ended cleanly
        argv[0:1] = [sys.executable, str(Path(__file__).with_name("sushy_close_notify.py"))]
    if tls:
        argv += ["-c", str(tls[0]), "-k", str(tls[1])]
    log = open(d / f"sushy-{port}.log", "w")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    log.close()
    return proc


@pytest.fixture(scope="session")
def sushy_static(tmp_path_factory):
    """DMTF's mockup served by sushy-static: HTTPS on base+721 (its certificate pinned by
    fingerprint, and its CA), plain HTTP on base+722, and HTTPS with close_notify on base+723
    (`clean_port`, for curl)."""
    exe = _need("sushy-static", "pip: the test extra (sushy-tools)")
    d = tmp_path_factory.mktemp("sushy")
    mockup = write_mockup(d / "mockup")
    fingerprint = make_certificate(d / "cert.pem", d / "key.pem", d / "ca.pem")
    procs = [_sushy(exe, mockup, SUSHY_TLS_PORT, d, (d / "cert.pem", d / "key.pem")),
             _sushy(exe, mockup, SUSHY_PLAIN_PORT, d, None),
             _sushy(exe, mockup, SUSHY_CLEAN_TLS_PORT, d, (d / "cert.pem", d / "key.pem"), close_notify=True)]

    def up(url: str, **kw) -> bool:
        try:
            with urllib.request.urlopen(url, timeout=5, **kw) as r:  # noqa: S310 (loopback)
                return r.status == 200
        except OSError:
            return False

    import ssl

    ctx = ssl.create_default_context(cafile=str(d / "ca.pem"))
    try:
        assert wait_for(lambda: all(p.poll() is None for p in procs)
                        and up(f"https://127.0.0.1:{SUSHY_TLS_PORT}/redfish/v1", context=ctx)
                        and up(f"https://127.0.0.1:{SUSHY_CLEAN_TLS_PORT}/redfish/v1", context=ctx)
                        and up(f"http://127.0.0.1:{SUSHY_PLAIN_PORT}/redfish/v1"), 60), \
            "".join(f.read_text() for f in d.glob("sushy-*.log"))
        yield {"port": SUSHY_TLS_PORT, "plain_port": SUSHY_PLAIN_PORT, "clean_port": SUSHY_CLEAN_TLS_PORT,
               "fingerprint": fingerprint,
               "ca": d / "ca.pem", "mockup": mockup, "dir": d}
    finally:
        for p in procs:
            _stop(p)
