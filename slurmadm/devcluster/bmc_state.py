"""What an emulated BMC knows about its fake node: power, boot override, sensors with thresholds,
the event log (SEL), FRU data, firmware versions, and injected faults.

Both emulators (IPMI in ipmi_emulator.py, Redfish in redfish_emulator.py) serve the same
`NodeBmc`, so a power-off over Redfish is seen over IPMI and stops the fake node's slurmd.

State lives in `<bmc_dir>/<node>.json` (written on every change, so a restarted emulator keeps
the SEL and firmware versions); faults in `<bmc_dir>/faults/<node>.json`, written by
`slurmadm dev-cluster bmc-fault` and re-read by the emulator when the file changes.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ..files import write_atomic

# Fault kinds `dev-cluster bmc-fault --kind` accepts: name -> (value meaning, what it does).
FAULT_KINDS: dict[str, tuple[str, str]] = {
    "unreachable": ("-", "the BMC answers nothing (IPMI and Redfish)"),
    "slow": ("seconds (default 3)", "every answer is delayed"),
    "session-limit": ("sessions (default 0)", "new sessions refused past this many open ones"),
    "sel-full": ("-", "the SEL is full: overflow flag set, new events are lost"),
    "psu-failed": ("PSU number (default 2)", "a power supply reports 'failure detected'"),
    "overtemp": ("degrees C (default 92)", "the GPU baseboard temperature goes over its critical threshold"),
    "no-reading": ("sensor name (default 'CPU2 Temp')",
                   "IPMI Get Sensor Reading of that sensor answers 0xCE, as a BMC before the sensor's first scan"),
}

SEL_CAPACITY = 512  # entries of 16 bytes, as many Supermicro BMCs


@dataclass(frozen=True)
class Sensor:
    number: int
    name: str  # <= 16 characters (SDR id string)
    kind: str  # temperature | fan | power | voltage | psu | acpi | sel
    sensor_type: int  # IPMI sensor type code
    entity: int
    unit: int  # IPMI base unit code (1 degrees C, 4 volts, 6 watts, 18 RPM)
    m: int = 1  # value = m * raw * 10**r_exp
    r_exp: int = 0
    nominal: float = 0.0
    # thresholds in engineering units, None where the sensor has none
    lnr: float | None = None
    lc: float | None = None
    lnc: float | None = None
    unc: float | None = None
    uc: float | None = None
    unr: float | None = None

    @property
    def threshold_based(self) -> bool:
        return self.kind in ("temperature", "fan", "power", "voltage")

    def raw(self, value: float) -> int:
        return max(0, min(255, round(value / (self.m * 10 ** self.r_exp))))

    def value(self, raw: int) -> float:
        return round(self.m * raw * 10 ** self.r_exp, 3)

    def thresholds(self) -> dict[str, float | None]:
        return {"lnr": self.lnr, "lc": self.lc, "lnc": self.lnc, "unc": self.unc, "uc": self.uc, "unr": self.unr}


def _sensors() -> list[Sensor]:
    s = [
        Sensor(0x01, "Inlet Temp", "temperature", 0x01, 0x37, 1, nominal=24, lnc=5, lc=0, unc=40, uc=45, unr=50),
        Sensor(0x02, "CPU1 Temp", "temperature", 0x01, 0x03, 1, nominal=52, unc=85, uc=95, unr=100),
        Sensor(0x03, "CPU2 Temp", "temperature", 0x01, 0x03, 1, nominal=54, unc=85, uc=95, unr=100),
        Sensor(0x04, "HGX BB Temp", "temperature", 0x01, 0x07, 1, nominal=46, unc=80, uc=85, unr=90),
    ]
    s += [Sensor(0x10 + i, f"GPU{i + 1} Temp", "temperature", 0x01, 0x0B, 1, nominal=41 + i % 3,
                 unc=83, uc=87, unr=92) for i in range(8)]
    s += [Sensor(0x20 + i, f"FAN{i + 1}", "fan", 0x04, 0x1D, 18, m=100, nominal=8400 + 100 * i,
                 lnr=300, lc=500, lnc=700) for i in range(6)]
    s += [
        Sensor(0x30, "Total Power", "power", 0x0B, 0x07, 6, m=60, nominal=6240, unc=11000, uc=12000, unr=13200),
        Sensor(0x31, "12V", "voltage", 0x02, 0x07, 4, m=6, r_exp=-2, nominal=12.06,
               lnr=10.2, lc=10.8, lnc=11.1, unc=12.9, uc=13.2, unr=13.8),
        Sensor(0x32, "3.3VCC", "voltage", 0x02, 0x07, 4, m=2, r_exp=-2, nominal=3.30,
               lnr=2.8, lc=2.96, lnc=3.04, unc=3.56, uc=3.64, unr=3.8),
    ]
    s += [Sensor(0x40 + i, f"PSU{i + 1} Status", "psu", 0x08, 0x0A, 0) for i in range(4)]
    s += [Sensor(0x50, "ACPI State", "acpi", 0x22, 0x07, 0), Sensor(0x51, "SEL Status", "sel", 0x10, 0x07, 0)]
    return s


SENSORS = _sensors()
SENSOR_BY_NUMBER = {s.number: s for s in SENSORS}
SENSOR_BY_NAME = {s.name: s for s in SENSORS}

# Firmware inventory (Redfish SoftwareInventory ids), as a Supermicro HGX B200 board shows it.
FIRMWARE = {
    "BMC": "1.03.10", "BIOS": "2.1.0", "CPLD_Motherboard": "F1.0C.06", "NIC1": "28.41.1000",
    "HGX_FW_BMC_0": "HGX-22.10-1-rc80",
    **{f"HGX_FW_GPU_SXM_{i}": "97.00.9B.00.01" for i in range(1, 9)},
    **{f"HGX_FW_NVSwitch_{i}": "96.10.6D.00.01" for i in range(4)},
}


@dataclass
class SelEntry:
    record_id: int
    timestamp: int
    sensor_type: int
    sensor_number: int
    event_type: int  # event/reading type code, bit 7 = deassertion
    data: tuple[int, int, int]

    def pack(self) -> bytes:
        return bytes([self.record_id & 0xFF, self.record_id >> 8, 0x02,
                      *self.timestamp.to_bytes(4, "little"), 0x20, 0x00, 0x04,
                      self.sensor_type, self.sensor_number, self.event_type, *self.data])


@dataclass
class NodeBmc:
    """One fake node's BMC. Thread-safe: the IPMI loop and Redfish threads share it."""

    node: str
    index: int
    state_file: Path
    faults_file: Path
    on_power: Callable[[str, str], None] | None = None  # (node, "on"|"off"|"cycle")
    power: str = "on"
    bootdev: str = "default"
    boot_persistent: bool = False
    sel: list[SelEntry] = field(default_factory=list)
    next_record: int = 1
    last_add: int = 0
    last_erase: int = 0
    firmware: dict[str, str] = field(default_factory=lambda: dict(FIRMWARE))
    faults: dict[str, str | None] = field(default_factory=dict)
    sel_reservation: int | None = None
    _reservation_counter: int = 0
    _faults_mtime: float = -1.0
    _lock: threading.RLock = field(default_factory=threading.RLock)

    # ------------------------------------------------------------------ persistence
    @classmethod
    def load(cls, node: str, index: int, bmc_dir: Path, on_power=None) -> "NodeBmc":
        bmc = cls(node, index, bmc_dir / f"{node}.json", bmc_dir / "faults" / f"{node}.json", on_power)
        try:
            data = json.loads(bmc.state_file.read_text())
        except (FileNotFoundError, json.JSONDecodeError):
            data = None
        if data:
            bmc.power = data.get("power", "on")
            bmc.bootdev = data.get("bootdev", "default")
            bmc.boot_persistent = bool(data.get("boot_persistent", False))
            bmc.sel = [SelEntry(e[0], e[1], e[2], e[3], e[4], tuple(e[5])) for e in data.get("sel", [])]
            bmc.next_record = int(data.get("next_record", len(bmc.sel) + 1))
            bmc.last_add = int(data.get("last_add", 0))
            bmc.last_erase = int(data.get("last_erase", 0))
            bmc.firmware.update(data.get("firmware", {}))
        else:
            bmc.add_event("acpi", 0x6F, (0x00, 0xFF, 0xFF))  # S0/G0 working: the node came up
        bmc.refresh_faults()
        return bmc

    def save(self) -> None:
        with self._lock:
            data = {
                "power": self.power, "bootdev": self.bootdev, "boot_persistent": self.boot_persistent,
                "sel": [[e.record_id, e.timestamp, e.sensor_type, e.sensor_number, e.event_type, list(e.data)]
                        for e in self.sel],
                "next_record": self.next_record, "last_add": self.last_add, "last_erase": self.last_erase,
                "firmware": self.firmware,
            }
        write_atomic(self.state_file, json.dumps(data) + "\n")

    def refresh_faults(self) -> None:
        """Re-read the faults file when it changed (cheap: one stat per request)."""
        try:
            mtime = self.faults_file.stat().st_mtime_ns
        except FileNotFoundError:
            mtime = 0
        if mtime == self._faults_mtime:
            return
        self._faults_mtime = mtime
        try:
            new = json.loads(self.faults_file.read_text()) if mtime else {}
        except (FileNotFoundError, json.JSONDecodeError):
            new = {}
        with self._lock:
            old = self.faults
            self.faults = new
            for kind in set(new) - set(old):
                self._fault_events(kind, new[kind])

    def _fault_events(self, kind: str, value: str | None) -> None:
        if kind == "psu-failed":
            psu = SENSOR_BY_NAME[f"PSU{self.psu_failed()} Status"]
            self.add_event(psu.name, 0x6F, (0x01, 0xFF, 0xFF))  # offset 1: failure detected
        elif kind == "overtemp":
            s = SENSOR_BY_NAME["HGX BB Temp"]
            self.add_event(s.name, 0x01, (0x50 | 0x09, s.raw(self.overtemp()), s.raw(s.uc or 0)))
        elif kind == "sel-full":
            while len(self.sel) < SEL_CAPACITY:  # correctable memory ECC, as a busy DIMM fills it
                self._append(SelEntry(self.next_record, int(time.time()), 0x0C, 0x60, 0x6F, (0x00, 0xFF, 0x01)))

    # ------------------------------------------------------------------ faults
    def fault(self, kind: str) -> bool:
        self.refresh_faults()
        return kind in self.faults

    def slow_delay(self) -> float:
        v = self.faults.get("slow")
        return float(v) if v not in (None, "") else 3.0

    def session_limit(self) -> int | None:
        if "session-limit" not in self.faults:
            return None
        v = self.faults["session-limit"]
        return int(v) if v not in (None, "") else 0

    def psu_failed(self) -> int:
        v = self.faults.get("psu-failed")
        return int(v) if v not in (None, "") else 2

    def no_reading(self) -> str | None:
        """The sensor whose reading the BMC cannot provide (fault no-reading), or None."""
        self.refresh_faults()
        if "no-reading" not in self.faults:
            return None
        return self.faults["no-reading"] or "CPU2 Temp"

    def overtemp(self) -> float:
        v = self.faults.get("overtemp")
        return float(v) if v not in (None, "") else 92.0

    # ------------------------------------------------------------------ readings
    def reading(self, sensor: Sensor) -> tuple[float | None, int]:
        """(value, state bits): threshold status bits for threshold sensors (bit0 below LNC,
        1 below LC, 2 below LNR, 3 above UNC, 4 above UC, 5 above UNR), offset bits otherwise.
        A powered-off node reads only what the BMC itself sees (inlet, PSUs)."""
        off = self.power != "on"
        if sensor.kind == "psu":
            bits = 0x01  # presence detected
            if "psu-failed" in self.faults and sensor.name == f"PSU{self.psu_failed()} Status":
                bits |= 0x02
            return None, bits
        if sensor.kind == "acpi":
            return None, 0x40 if off else 0x01  # offset 6 S5/G2 soft-off, offset 0 S0/G0 working
        if sensor.kind == "sel":
            return None, 0x10 if len(self.sel) >= SEL_CAPACITY else 0  # offset 4: SEL full
        value = sensor.nominal
        if off and sensor.kind != "temperature":
            value = 0.0 if sensor.kind in ("fan", "power") else value
        if off and sensor.kind == "temperature" and sensor.name != "Inlet Temp":
            value = 25.0
        if sensor.name == "HGX BB Temp" and "overtemp" in self.faults:
            value = self.overtemp()
        if sensor.name == "Total Power" and "psu-failed" in self.faults and not off:
            value = sensor.nominal  # the others carry the load
        value = sensor.value(sensor.raw(value))
        if off and sensor.kind in ("fan",):
            return value, 0  # fans stop with the host: no alarm
        bits = 0
        t = sensor.thresholds()
        for bit, key, below in ((0, "lnc", True), (1, "lc", True), (2, "lnr", True),
                                (3, "unc", False), (4, "uc", False), (5, "unr", False)):
            limit = t[key]
            if limit is not None and ((value < limit) if below else (value > limit)):
                bits |= 1 << bit
        return value, bits

    # ------------------------------------------------------------------ SEL
    def _append(self, entry: SelEntry) -> None:
        self.sel.append(entry)
        self.next_record = (self.next_record % 0xFFFE) + 1
        self.last_add = entry.timestamp
        self.sel_reservation = None  # any addition cancels a SEL reservation (IPMI 2.0, 31.4)

    def add_event(self, sensor: str, event_type: int, data: tuple[int, int, int]) -> bool:
        """Log an event against `sensor` (a name, or a kind like 'acpi'); False if the SEL is full."""
        s = SENSOR_BY_NAME.get(sensor) or next(x for x in SENSORS if x.kind == sensor)
        with self._lock:
            if len(self.sel) >= SEL_CAPACITY:
                return False
            self._append(SelEntry(self.next_record, int(time.time()), s.sensor_type, s.number, event_type, data))
        self.save()
        return True

    def reserve_sel(self) -> int:
        with self._lock:
            self._reservation_counter = (self._reservation_counter % 0xFFFE) + 1
            self.sel_reservation = self._reservation_counter
            return self.sel_reservation

    def clear_sel(self) -> None:
        with self._lock:
            self.sel = []
            self.last_erase = int(time.time())
            self.sel_reservation = None
            self.faults.pop("sel-full", None)
            s = SENSOR_BY_NAME["SEL Status"]
            # real BMCs log the clear itself: "Event Logging Disabled: Log area reset/cleared"
            self._append(SelEntry(self.next_record, int(time.time()), s.sensor_type, s.number, 0x6F,
                                  (0x02, 0xFF, 0xFF)))
        self.save()

    # ------------------------------------------------------------------ power and boot
    def set_power(self, action: str) -> None:
        """action: on | off | cycle | reset | shutdown."""
        with self._lock:
            was = self.power
            if action in ("off", "shutdown"):
                self.power = "off"
            elif action == "on":
                self.power = "on"
            elif action in ("cycle", "reset"):
                self.power = "on" if (was == "on" or action == "cycle") else was
            changed = self.power != was or action in ("cycle", "reset")
        if not changed:
            return
        if self.power == "off":
            self.add_event("acpi", 0x6F, (0x06, 0xFF, 0xFF))
        else:
            self.add_event("acpi", 0x6F, (0x00, 0xFF, 0xFF))
            if not self.boot_persistent and self.bootdev != "default":
                self.bootdev = "default"  # a one-time override is used up by the boot
        self.save()
        if self.on_power is not None:
            hook = "cycle" if (action in ("cycle", "reset") and was == "on") else self.power
            self.on_power(self.node, hook)

    def set_bootdev(self, device: str, persistent: bool) -> None:
        with self._lock:
            self.bootdev = device
            self.boot_persistent = persistent
        self.save()

    def set_firmware(self, component: str, version: str) -> None:
        with self._lock:
            self.firmware[component] = version
        self.save()


def write_faults(bmc_dir: Path, node: str, faults: dict[str, str | None]) -> None:
    path = bmc_dir / "faults" / f"{node}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, json.dumps(faults, sort_keys=True) + "\n")
    # a second write within the same mtime tick must still be seen: bump the mtime explicitly
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, max(st.st_mtime_ns, time.time_ns())))


def read_faults(bmc_dir: Path, node: str) -> dict[str, str | None]:
    try:
        return json.loads((bmc_dir / "faults" / f"{node}.json").read_text())
    except (FileNotFoundError, json.JSONDecodeError):
        return {}
