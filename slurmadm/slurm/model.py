"""What the Slurm adapters return: plain data, the same for every backend and Slurm release."""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Protocol, runtime_checkable

from ..hostlist import expand
from .nodestate import BASE_STATES as _BASE_STATES

# Flags that mean "someone else is handling this node": slurmadm neither drains, resumes nor
# re-reasons it. Not RESERVED: Slurm flags every node of any active reservation RESERVED, and an
# ordinary (user) reservation is no reason to stop enforcing health; only a MAINT reservation
# (node flag MAINTENANCE) is someone else's maintenance.
FOREIGN_FLAGS = frozenset(
    {
        "REBOOT_REQUESTED",
        "REBOOT_ISSUED",
        "POWERING_UP",
        "POWERING_DOWN",
        "POWERED_DOWN",
        "POWER_DOWN",
        "POWER_UP",
        "POWER_DRAIN",
        "DYNAMIC_FUTURE",
        "MAINTENANCE",
        "FAIL",
        "NOT_RESPONDING",
    }
)
# Base states nobody may drain or resume: an admin's (or slurmctld's) DOWN, a FUTURE node.
FOREIGN_STATES = frozenset({"DOWN", "FUTURE"})
# slurm.h's base states; COMPLETING, PLANNED, DRAIN and the rest are flags (nodestate.py)
BASE_STATES = frozenset(_BASE_STATES)


_GRES_PAREN = re.compile(r"\([^)]*\)")
_GRES_COUNT = re.compile(r"^(\d+)([KMGTP]?)$", re.IGNORECASE)
_GRES_SCALE = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4, "P": 1024**5}


def gres_gpus(gres: str) -> int:
    """GPUs in a node's `Gres` or `GresUsed` string, every release and shape (real samples in
    tests/fixtures/slurm/public/): `gpu:b200:8`, `gpu:4(S:0-1)`, several types
    `gpu:h100:2,gpu:h200:4`, MIG profiles as types `gpu:1g.10gb:7`, GresUsed's
    `gpu:b200:8(IDX:0-7)` and `gpu:(null):4(IDX:0,2-3)`, pyslurm's `gpu:h100:2`; other GRES
    (`mps:400`, `shard:...`, `bandwidth:lustre:no_consume:4G`) are not GPUs."""
    if not gres or gres in ("(null)", "N/A"):
        return 0
    total = 0
    for entry in _GRES_PAREN.sub("", gres).split(","):
        fields = entry.strip().split(":")
        if fields[0] != "gpu":
            continue
        m = _GRES_COUNT.match(fields[-1]) if len(fields) > 1 else None
        if m:
            total += int(m.group(1)) * _GRES_SCALE[m.group(2).upper()]
        elif len(fields) <= 2:  # `gpu` or `gpu:<type>`: Slurm's default count of 1
            total += 1
    return total


@dataclass(frozen=True)
class NodeInfo:
    name: str
    state: str  # base state, upper case: IDLE, MIXED, ALLOCATED, DOWN, UNKNOWN, FUTURE ...
    flags: frozenset[str] = frozenset()  # DRAIN, NOT_RESPONDING, REBOOT_REQUESTED, ...
    reason: str = ""
    reason_user: str = ""
    gres: str = ""
    partitions: tuple[str, ...] = ()
    features: tuple[str, ...] = ()
    cpus: int = 0
    real_memory: int = 0
    reason_time: float = field(default=0.0, compare=False)  # when the reason was set (Unix time; 0: unknown)
    gres_used: str = field(default="", compare=False)  # GresUsed (`gpu:b200:4(IDX:0-3)`), where the read has it

    @property
    def drained(self) -> bool:
        """Drain requested (DRAINING while jobs finish, DRAINED once idle)."""
        return "DRAIN" in self.flags

    @property
    def state_text(self) -> str:
        return "+".join([self.state, *sorted(self.flags)])

    @property
    def gpus(self) -> int:
        """Every `gpu` entry of Gres summed: `gpu:h100:2,gpu:h200:4` is 6."""
        return gres_gpus(self.gres)

    @property
    def gpus_used(self) -> int:
        return gres_gpus(self.gres_used)


@dataclass(frozen=True)
class SlurmdHardware:
    """What `slurmd -C` reports for the machine it runs on."""

    node_name: str
    cpus: int
    sockets: int  # Boards x SocketsPerBoard
    cores_per_socket: int
    threads_per_core: int
    real_memory: int  # MiB


@dataclass(frozen=True)
class JobInfo:
    job_id: str
    name: str = ""
    state: str = ""  # PENDING, RUNNING, COMPLETED, FAILED, ...
    reason: str = ""
    nodes: str = ""
    partition: str = ""
    account: str = ""
    user: str = ""
    qos: str = ""
    exit_code: str = ""
    extra: dict = field(default_factory=dict, compare=False)


@dataclass(frozen=True)
class Reservation:
    name: str
    nodes: str  # hostlist
    users: str
    flags: frozenset[str]
    state: str  # ACTIVE, INACTIVE

    @property
    def maintenance(self) -> bool:
        return self.state == "ACTIVE" and "MAINT" in self.flags


def with_maintenance(nodes: list[NodeInfo], reservations: list[Reservation]) -> list[NodeInfo]:
    """Mark nodes of an ACTIVE maintenance reservation MAINTENANCE+RESERVED at once: slurmctld
    sets those node flags only at its next reservation pass (seconds later on 24.11), and nobody
    may drain a node for a fault meanwhile as if it were free. Both backends read nodes through
    this."""
    held: set[str] = set()
    for res in reservations:
        if res.maintenance and res.nodes:
            held.update(expand(res.nodes))
    return [replace(n, flags=n.flags | {"MAINTENANCE", "RESERVED"}) if n.name in held else n for n in nodes]


@runtime_checkable
class SlurmBackend(Protocol):
    """What capabilities may ask of Slurm. Two implementations: `cli` and `pyslurm`."""

    name: str

    def version(self) -> tuple[int, int, int]: ...

    def nodes(self, names: list[str] | None = None) -> list[NodeInfo]: ...

    def drain(self, nodes: list[str], reason: str) -> None: ...

    def resume(self, nodes: list[str]) -> None: ...

    def set_reason(self, nodes: list[str], reason: str) -> None: ...
