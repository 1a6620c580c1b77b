"""A stand-in InfiniBand sysfs tree per dev-cluster node (`<state>/gpus/<node>.sysfs/class/infiniband`),
read by the `infiniband` health check through its `health.sysfs_root`, the same code path a real
node takes with /sys. Values as the kernel prints them (Documentation/ABI/stable/sysfs-class-infiniband):
`state` "4: ACTIVE", `phys_state` "5: LinkUp", `rate` "400 Gb/sec (4X NDR)", `link_layer` "InfiniBand".

Faults (`ib_fault`): `down` (state 1: DOWN, phys_state 3: Disabled), `rate` (200 Gb/sec HDR),
`errors` (adds to symbol_error and link_downed), `missing` (the HCA's directory is gone),
`flap` (two "mlx5_core ... Link down" lines in the node's kernel log).
"""

from __future__ import annotations

import shutil
from datetime import datetime, timezone
from pathlib import Path

from ..errors import UsageError
from ..files import write_atomic
from ..hostlist import expand

IB_FAULTS = ("down", "rate", "errors", "missing", "flap")
_RATE = {400: "400 Gb/sec (4X NDR)", 200: "200 Gb/sec (4X HDR)", 100: "100 Gb/sec (4X EDR)", 800: "800 Gb/sec (4X XDR)"}
COUNTERS = ("symbol_error", "link_error_recovery", "link_downed", "port_rcv_errors", "port_xmit_discards",
            "local_link_integrity_errors", "excessive_buffer_overrun_errors")


def root_of(state_dir: str | Path, node: str) -> Path:
    return Path(state_dir) / f"{node}.sysfs"


def write_healthy(state_dir: str | Path, node: str, profile) -> list[str]:
    """Every compute HCA of the profile ACTIVE at its rate, zero error counters. Returns the HCAs."""
    nics = profile.nics
    hcas = expand(nics.hcas, what="nics.hcas") if nics.hcas and nics.count else []
    base = root_of(state_dir, node) / "class" / "infiniband"
    if base.exists():
        shutil.rmtree(base)
    for hca in hcas:
        port = base / hca / "ports" / str(nics.port)
        (port / "counters").mkdir(parents=True, exist_ok=True)
        files = {"state": "4: ACTIVE", "phys_state": "5: LinkUp",
                 "rate": _RATE.get(nics.gbps, f"{nics.gbps} Gb/sec"),
                 "link_layer": "InfiniBand" if nics.kind == "infiniband" else "Ethernet"}
        for name, text in files.items():
            (port / name).write_text(text + "\n")
        for c in COUNTERS:
            (port / "counters" / c).write_text("0\n")
    return hcas


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
        shutil.rmtree(base)
    elif kind == "flap":
        if kmsg is None:
            raise UsageError("fault flap needs the node's kernel log")
        when = (now or datetime.now(timezone.utc)).astimezone(timezone.utc).isoformat(timespec="seconds")
        with open(kmsg, "a", encoding="utf-8") as fh:
            for _ in range(2):
                fh.write(f"{when} {node} kernel: mlx5_core 0000:0c:00.0 {hca}: Link down\n")
