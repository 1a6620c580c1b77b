"""A stand-in InfiniBand sysfs tree per dev-cluster node (`<state>/gpus/<node>.sysfs/class/infiniband`),
read by the `infiniband` health check through its `health.sysfs_root`, the same code path a real
node takes with /sys. Values as the kernel prints them (Documentation/ABI/stable/sysfs-class-infiniband):
`state` "4: ACTIVE", `phys_state` "5: LinkUp", `rate` "400 Gb/sec (4X NDR)", `link_layer` "InfiniBand".

Faults (`ib_fault`): `down` (state 1: DOWN, phys_state 3: Disabled), `rate` (200 Gb/sec HDR),
`errors` (adds to symbol_error and link_downed), `missing` (the HCA's directory is gone),
`flap` (two "mlx5_core ... Link down" lines in the node's kernel log; with `every`, a link that
keeps flapping: `flapper` below, run as a dev-cluster daemon `ib-flap-<node>.<hca>`, logs "Link
down" and "Link up" and adds 1 to link_downed every `every` seconds, across the node's reboots, until
`--clear` or `down` stops it, as a bad cable goes on flapping until it is replaced).

Beside the profile's compute HCAs each node has one RoCE port (`ROCE_HCA`, link_layer
"Ethernet", as a BlueField/ConnectX front-end NIC shows), which the `infiniband` check (profile
HCAs only) does not look at and the exporter does. Data, packet and transmit-wait counters start
at 0; `traffic` (run by the monitoring dev stack as one process) moves them every second, the
data counters past 32 bits as a kernel with PortCountersExtended shows them.
"""

from __future__ import annotations

import shutil
import uuid
from datetime import datetime, timezone
from pathlib import Path

from ..errors import UsageError
from ..files import write_atomic
from ..hostlist import expand

IB_FAULTS = ("down", "rate", "errors", "missing", "flap", "flap-once")
_RATE = {400: "400 Gb/sec (4X NDR)", 200: "200 Gb/sec (4X HDR)", 100: "100 Gb/sec (4X EDR)", 800: "800 Gb/sec (4X XDR)"}
COUNTERS = ("symbol_error", "link_error_recovery", "link_downed", "port_rcv_errors", "port_xmit_discards",
            "local_link_integrity_errors", "excessive_buffer_overrun_errors")
TRAFFIC = ("port_xmit_data", "port_rcv_data", "port_xmit_packets", "port_rcv_packets", "port_xmit_wait")
ROCE_HCA = "mlx5_bond_0"
# per second and port: 4-byte words (~2.5 GB/s), packets (4 KiB MTU), transmit-wait ticks
_STEP = {"port_xmit_data": 625_000_000, "port_rcv_data": 600_000_000, "port_xmit_packets": 610_000,
         "port_rcv_packets": 585_000, "port_xmit_wait": 1_000}


def root_of(state_dir: str | Path, node: str) -> Path:
    return Path(state_dir) / f"{node}.sysfs"


def node_guid(node: str, hca: str) -> str:
    """A stable made-up GUID per node and HCA, as sysfs writes one (`0c42:a103:00f1:2b3c`)."""
    import hashlib

    h = hashlib.sha256(f"{node}/{hca}".encode()).hexdigest()
    return ":".join(h[i:i + 4] for i in range(0, 16, 4))


def identity(node: str, hca: str) -> dict[str, str]:
    """The HCA's firmware and PSID files as a ConnectX-7 shows them (sysfs fw_ver, and board_id:
    the PSID); its node_guid is node_guid()'s."""
    return {"fw_ver": "28.43.1014", "board_id": "MT_0000000838"}


def _remove(state_dir: str | Path, node: str, tree: Path) -> None:
    """Remove a part of a node's tree that the monitoring stack's traffic process (`tick`, every
    second) may be writing counters into. A counter it wrote while rmtree emptied a directory made
    rmtree fail half-way (ENOTEMPTY), leaving the node's HCAs missing for good (`ib-fault --clear`
    in the full suite). Moved out of class/infiniband first (tick finds ports by that path; what a
    late write leaves behind is never read as an HCA), then removed."""
    old = root_of(state_dir, node) / f".removed-{uuid.uuid4().hex}"
    tree.rename(old)
    shutil.rmtree(old, ignore_errors=True)


def write_healthy(state_dir: str | Path, node: str, profile) -> list[str]:
    """Every compute HCA of the profile ACTIVE at its rate, zero error counters. Returns the HCAs."""
    nics = profile.nics
    hcas = expand(nics.hcas, what="nics.hcas") if nics.hcas and nics.count else []
    base = root_of(state_dir, node) / "class" / "infiniband"
    if base.exists():
        _remove(state_dir, node, base)
    for hca in hcas:
        port = base / hca / "ports" / str(nics.port)
        (port / "counters").mkdir(parents=True, exist_ok=True)
        for name, text in identity(node, hca).items():
            (base / hca / name).write_text(text + "\n")
        files = {"state": "4: ACTIVE", "phys_state": "5: LinkUp",
                 "rate": _RATE.get(nics.gbps, f"{nics.gbps} Gb/sec"),
                 "link_layer": "InfiniBand" if nics.kind == "infiniband" else "Ethernet"}
        for name, text in files.items():
            (port / name).write_text(text + "\n")
        for c in (*COUNTERS, *TRAFFIC):
            (port / "counters" / c).write_text("0\n")
        (base / hca / "node_guid").write_text(node_guid(node, hca) + "\n")
    roce = base / ROCE_HCA / "ports" / "1"
    (roce / "counters").mkdir(parents=True, exist_ok=True)
    for name, text in {"state": "4: ACTIVE", "phys_state": "5: LinkUp", "rate": "200 Gb/sec (4X HDR)",
                       "link_layer": "Ethernet"}.items():
        (roce / name).write_text(text + "\n")
    for c in (*COUNTERS, *TRAFFIC):
        (roce / "counters" / c).write_text("0\n")
    return hcas


def tick(state_dir: str | Path, nodes: list[str], seconds: float = 1.0) -> int:
    """Move every ACTIVE port's data, packet and wait counters by `seconds` of traffic. Returns
    the ports moved (a port that is down or missing moves nothing)."""
    moved = 0
    for node in nodes:
        base = root_of(state_dir, node) / "class" / "infiniband"
        for pdir in sorted(base.glob("*/ports/*")):
            try:
                if not (pdir / "state").read_text().startswith("4"):
                    continue
                for i, c in enumerate(TRAFFIC):
                    f = pdir / "counters" / c
                    step = int(_STEP[c] * seconds * (1 + 0.1 * ((moved + i) % 3)))
                    write_atomic(f, f"{int(f.read_text().strip() or 0) + step}\n")
                moved += 1
            except (OSError, ValueError):
                continue
    return moved


def traffic_forever(state_dir: str, nodes: list[str], interval: float = 1.0) -> None:
    """`python -m slurmadm.devcluster.ibsysfs STATE_DIR NODE...`: tick until killed."""
    import time

    last = time.monotonic()
    while True:
        time.sleep(interval)
        now = time.monotonic()
        tick(state_dir, nodes, now - last)
        last = now


FLAP_DAEMON = "ib-flap"
FLAP_MAX_S = 86400.0  # a flapper left behind stops by itself (bounded kernel-log growth)


def flap_daemon_name(node: str, hca: str) -> str:
    """The dev-cluster daemon of one flapping link (its pid file under the cluster's run/)."""
    return f"{FLAP_DAEMON}-{node}.{hca}"


def flap_lines(node: str, hca: str, when: datetime) -> list[str]:
    """One flap as mlx5_core logs it: the link goes down, and comes back up."""
    stamp = when.astimezone(timezone.utc).isoformat(timespec="microseconds")
    return [f"{stamp} {node} kernel: mlx5_core 0000:0c:00.0 {hca}: Link down\n",
            f"{stamp} {node} kernel: mlx5_core 0000:0c:00.0 {hca}: Link up\n"]


def flap_once(kmsg: Path, node: str, hca: str, port_dir: Path, now: datetime | None = None) -> None:
    """One more flap: its kernel-log lines, and link_downed up by one (at most 255, the counter's
    width) where the port is there (a node whose tree was rewritten still logs the flap)."""
    with open(kmsg, "a", encoding="utf-8") as fh:
        fh.writelines(flap_lines(node, hca, now or datetime.now(timezone.utc)))
    f = port_dir / "counters" / "link_downed"
    try:
        write_atomic(f, f"{min(int(f.read_text().strip() or 0) + 1, 255)}\n")
    except (OSError, ValueError):
        pass


def flapper(kmsg: str, node: str, hca: str, port_dir: str, every: float, max_s: float = FLAP_MAX_S) -> None:
    """`python -m slurmadm.devcluster.ibsysfs --flap KMSG NODE HCA PORT_DIR EVERY`: a flap every
    EVERY seconds until stopped (SIGTERM) or FLAP_MAX_S have passed."""
    import time

    end = time.monotonic() + max_s
    while time.monotonic() < end:
        time.sleep(every)
        flap_once(Path(kmsg), node, hca, Path(port_dir))


def stop_flapping(daemons, node: str) -> list[str]:
    """Stop NODE's flapping links (their `flap_daemon_name` daemons among `daemons`), each gone
    before this returns (no flap is logged after it). Returns the HCAs stopped."""
    prefix = f"{FLAP_DAEMON}-{node}."
    stopped = []
    for d in daemons:
        if d.name.startswith(prefix) and d.stop():
            stopped.append(d.name[len(prefix):])
    return sorted(stopped)


def flapper_argv(state_dir: str | Path, node: str, hca: str, port: int, kmsg: Path, every: float) -> list[str]:
    import sys

    port_dir = root_of(state_dir, node) / "class" / "infiniband" / hca / "ports" / str(port)
    return [sys.executable, "-m", "slurmadm.devcluster.ibsysfs", "--flap", str(kmsg), node, hca, str(port_dir),
            f"{every:g}"]


def ib_fault(state_dir: str | Path, node: str, hca: str, kind: str, *, port: int = 1, kmsg: Path | None = None,
             now: datetime | None = None) -> None:
    if kind not in IB_FAULTS:
        raise UsageError(f"unknown InfiniBand fault {kind!r} (known: {', '.join(IB_FAULTS)})")
    base = root_of(state_dir, node) / "class" / "infiniband" / hca
    if not base.is_dir():
        raise UsageError(f"{node} has no stand-in HCA {hca!r}")
    pdir = base / "ports" / str(port)
    if kind == "down":
        write_atomic(pdir / "state", "1: DOWN\n")
        write_atomic(pdir / "phys_state", "3: Disabled\n")
    elif kind == "rate":
        write_atomic(pdir / "rate", "200 Gb/sec (4X HDR)\n")
    elif kind == "errors":
        for c, n in (("symbol_error", 5000), ("link_downed", 3)):
            f = pdir / "counters" / c
            write_atomic(f, f"{min(int(f.read_text()) + n, 65535 if c == 'symbol_error' else 255)}\n")
    elif kind == "missing":
        _remove(state_dir, node, base)
    elif kind == "flap-once":  # down once and back: one flap's lines, link_downed +1
        if kmsg is None:
            raise UsageError("fault flap-once needs the node's kernel log")
        flap_once(kmsg, node, hca, pdir, now)
    elif kind == "flap":
        if kmsg is None:
            raise UsageError("fault flap needs the node's kernel log")
        # stamped to the microsecond, as flap_lines: a whole-second stamp counts as logged at the end
        # of its second, past an admin's acknowledgement made in that same second (CI, stop 57)
        when = (now or datetime.now(timezone.utc)).astimezone(timezone.utc).isoformat(timespec="microseconds")
        with open(kmsg, "a", encoding="utf-8") as fh:
            for _ in range(2):
                fh.write(f"{when} {node} kernel: mlx5_core 0000:0c:00.0 {hca}: Link down\n")


if __name__ == "__main__":
    import sys

    if sys.argv[1:2] == ["--flap"]:
        flapper(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5], float(sys.argv[6]))
    else:
        traffic_forever(sys.argv[1], sys.argv[2:])
