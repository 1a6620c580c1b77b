"""What the BMC adapters return: plain data, the same for IPMI and Redfish."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Protocol, runtime_checkable

POWER_ACTIONS = ("on", "off", "cycle", "reset")
BOOT_DEVICES = ("pxe", "disk", "bios", "default")
SENSOR_TYPES = ("temperature", "power", "fan", "voltage", "psu", "other")
SEVERITIES = ("info", "warning", "critical")


@dataclass(frozen=True)
class Target:
    """Where a node's BMC answers."""

    node: str
    host: str
    ipmi_port: int
    redfish_port: int


@dataclass(frozen=True)
class Sensor:
    name: str
    type: str  # one of SENSOR_TYPES
    value: float | None
    unit: str
    status: str  # ok | warning | critical (from the BMC's thresholds or states)
    thresholds: dict[str, float] = field(default_factory=dict)  # lnr lc lnc unc uc unr
    states: tuple[str, ...] = ()

    @property
    def alarm(self) -> bool:
        return self.status != "ok"

    def to_json(self) -> dict:
        d = asdict(self)
        d["states"] = list(self.states)
        d["alarm"] = self.alarm
        return d


@dataclass(frozen=True)
class SelEvent:
    record_id: int
    timestamp: float | None  # epoch seconds (None: the BMC gave only a relative time)
    sensor: str
    sensor_type: str
    event: str
    severity: str  # info | warning | critical
    asserted: bool = True
    log: str = "SEL"  # which log it came from (IPMI: the SEL; Redfish: the LogService, e.g. Systems/1/LogServices/SEL)

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class Task:
    """A Redfish task (firmware update) as last read."""

    uri: str
    state: str  # New, Running, Completed, Exception, Killed, ...
    percent: int | None
    messages: tuple[str, ...] = ()

    @property
    def done(self) -> bool:
        return self.state in ("Completed", "Exception", "Killed", "Cancelled", "Interrupted")

    @property
    def ok(self) -> bool:
        return self.state == "Completed"


@runtime_checkable
class BmcClient(Protocol):
    """One logged-in session with one BMC. `close()` always logs out (BMCs have few sessions)."""

    node: str

    def power_state(self) -> str: ...  # "on" | "off"

    def power(self, action: str) -> None: ...  # on | off | cycle | reset

    def sensors(self) -> list[Sensor]: ...

    def sel(self, *, clear: bool = False) -> list[SelEvent]: ...

    def bootdev(self) -> tuple[str, bool]: ...  # (device, persistent)

    def set_bootdev(self, device: str, persistent: bool) -> None: ...

    def inventory(self) -> dict: ...  # FRU and firmware as the protocol knows them

    def close(self) -> None: ...


@runtime_checkable
class FirmwareClient(Protocol):
    """Redfish's firmware side."""

    node: str

    def firmware(self) -> dict[str, str]: ...  # inventory id -> version

    def update_firmware(self, component: str, image_url: str, *, image: bytes | None) -> Task: ...

    def task(self, uri: str) -> Task: ...

    def close(self) -> None: ...
