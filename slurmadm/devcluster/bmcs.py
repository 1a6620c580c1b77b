"""The dev cluster's BMCs (`slurmadm dev-cluster up --bmc`): one emulator process
(bmc_emulator.py) serving an IPMI and a Redfish BMC per fake node, wired to the fake nodes'
power: off kills the node's slurmd (a power cut, no shutdown), on starts it, cycle does both.

<state>/bmc/ holds the BMC password (0600), the CA and the Redfish server certificate, each
node's BMC state (<node>.json: power, boot device, SEL, firmware versions) and injected faults
(faults/<node>.json, written by `slurmadm dev-cluster bmc-fault`).
"""

from __future__ import annotations

import os
import secrets
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from ..errors import UsageError
from ..hostlist import compress
from .bmc_state import FAULT_KINDS, read_faults, write_faults
from .daemons import start_time, wait_for

if TYPE_CHECKING:
    from .cluster import DevCluster
    from .devsite import Ports

EMULATOR = "bmc-emulator"


def bmc_dir(dc: "DevCluster") -> Path:
    return dc.p("bmc")


def prepare(dc: "DevCluster") -> None:
    """Password and TLS material, once (kept across `up`s so clients keep trusting the CA)."""
    d = bmc_dir(dc)
    d.mkdir(parents=True, exist_ok=True)
    os.chmod(d, 0o700)
    pw = d / "password"
    if not pw.exists():
        fd = os.open(pw, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as fh:
            fh.write(secrets.token_urlsafe(15) + "\n")  # 20 characters: the IPMI 2.0 maximum
    if not (d / "cert.pem").exists():
        from .redfish_emulator import make_certificate

        make_certificate(d / "cert.pem", d / "key.pem", d / "ca.pem")


def start(dc: "DevCluster", nodes: list[str], ports: "Ports", progress, *, restart: bool = False) -> None:
    d = dc.daemon(EMULATOR)
    if d.alive() and not restart:
        return
    if d.alive():
        d.stop()
    prepare(dc)
    progress(f"starting BMC emulators for {len(nodes)} node(s) (IPMI from port {ports.bmc_ipmi}, "
             f"Redfish from {ports.bmc_redfish})")
    log_size = d.logfile.stat().st_size if d.logfile.exists() else 0
    bd = bmc_dir(dc)
    d.start([sys.executable, "-m", "slurmadm.devcluster.bmc_emulator", "--bmc-dir", str(bd),
             "--nodes", compress(nodes), "--ipmi-port", str(ports.bmc_ipmi), "--redfish-port", str(ports.bmc_redfish),
             "--cert", str(bd / "cert.pem"), "--key", str(bd / "key.pem"), "--dev-cluster", str(dc.state_dir)])

    def ready() -> bool:
        if not d.alive():
            raise UsageError(f"BMC emulator died: {d.tail()}")
        try:
            with open(d.logfile, "rb") as fh:
                fh.seek(log_size)
                return b"bmc emulator:" in fh.read()
        except FileNotFoundError:
            return False

    # a BMC port a passing connection holds is tried again for up to 60 s (bind_retrying); 128
    # nodes' emulators start in ~10 s on a loaded 2-core machine
    limit = 90 + 0.25 * len(nodes)
    if not wait_for(ready, limit, interval=0.1):
        raise UsageError(f"BMC emulator did not come up in {limit:g} s (log: {d.logfile})")


def node_power(dc: "DevCluster", node: str, what: str) -> None:
    """What a fake node does when its BMC switches its power: off kills its slurmd at once
    (SIGKILL, also when it is frozen with SIGSTOP), on starts it; cycle does both."""
    d = dc.daemon(f"slurmd-{node}")
    ssh = dc.has_ssh()  # --ssh: the whole fake node (sshd too) goes, and boots its staged stack
    if what in ("off", "cycle"):
        pid = d.pid()
        if pid is not None:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            wait_for(lambda: start_time(pid) is None, 10, reap=getattr(d, "_popen", None))
        d.pidfile.unlink(missing_ok=True)
        if ssh:
            dc.daemon(f"sshd-{node}").stop()
    if ssh and what in ("on", "cycle") and not d.alive():
        dc.boot_node(node)
        return
    if what in ("on", "cycle") and not d.alive():
        dc.p("spool", "d", node).mkdir(parents=True, exist_ok=True)
        d.start(["slurmd", "-D", "-N", node], env={"SLURM_CONF": str(dc.slurm_conf)})


def set_fault(dc: "DevCluster", node: str, kind: str, value: str | None) -> dict:
    if kind not in FAULT_KINDS:
        raise UsageError(f"--kind: {kind!r} is not one of {', '.join(FAULT_KINDS)}")
    if value is not None and FAULT_KINDS[kind][0] == "-":
        raise UsageError(f"--value: the {kind} fault takes no value")
    if value is not None:
        try:
            float(value)
        except ValueError:
            raise UsageError(f"--value: {value!r} is not a number") from None
    faults = read_faults(bmc_dir(dc), node)
    faults[kind] = value
    write_faults(bmc_dir(dc), node, faults)
    return {"node": node, "kind": kind, "value": value}


def clear_faults(dc: "DevCluster", node: str, kind: str | None) -> list[str]:
    faults = read_faults(bmc_dir(dc), node)
    removed = [k for k in faults if kind is None or k == kind]
    for k in removed:
        del faults[k]
    write_faults(bmc_dir(dc), node, faults)
    return removed
