"""IPMI (RMCP+ lanplus) adapter on pyghmi's client: the fast paths (power, sensors, SEL, boot
device, FRU). One session per BMC, logged out in close()."""

from __future__ import annotations

import datetime as dt
import re
import threading

from ..errors import UnreachableError, UsageError
from . import pyghmi_io
from .creds import Credentials
from .model import Sensor, SelEvent, Target

# pyghmi SensorReading.type -> ours
_TYPES = {"Temperature": "temperature", "Fan": "fan", "Power": "power", "Voltage": "voltage",
          "Current": "power", "Power Supply": "psu"}
# threshold order of Get Sensor Thresholds (IPMI 2.0, 35.9): mask bit i -> name
_THRESHOLDS = ("lnc", "lc", "lnr", "unc", "uc", "unr")
_BOOT = {"pxe": "network", "disk": "hd", "bios": "setup", "default": "default"}
_BOOT_BACK = {"network": "pxe", "hd": "disk", "setup": "bios", "default": "default"}
# boot flags data 2, bits 5:2 (boot device selector) -> ours; IPMI 2.0 table 28-14
_BOOT_SELECTORS = {0x0: "default", 0x1: "pxe", 0x2: "disk", 0x3: "disk", 0x5: "cdrom", 0x6: "bios", 0xF: "floppy"}
_login_lock = threading.Lock()


def _probe_oem_once(cmd) -> None:
    """pyghmi's oem_init() asks the BMC's Get Device ID again on every call until it knows an OEM
    handler for it, and it is called for each SDR record decoded and each SEL entry: on a BMC of
    a make pyghmi has no handler for (ipmi_sim, ours, many others) `bmc sel` made one extra round
    trip per record - 30 on a B200 emulator, seconds on a loaded head. The device does not change
    within a session: probe once (when first needed), then keep the handler found."""
    probe = cmd.oem_init

    def once():
        probe()
        cmd._oemknown = True

    cmd.oem_init = once


def _sel_sensor_name(e: dict) -> str:
    """The sensor a SEL entry is about. Without an SDR for it pyghmi says "Sensor 32.7.0"
    (generator.number.lun); ipmitool says "Memory #0x07" (sensor type, number): so do we."""
    name = str(e.get("component") or "")
    cid = str(e.get("component_id") or "")
    if name.startswith("Sensor ") and name[len("Sensor "):] == cid and e.get("component_type"):
        parts = cid.split(".")
        if len(parts) >= 2 and parts[1].isdigit():
            return f"{e['component_type']} #0x{int(parts[1]):02x}"
    return name


def _severity(health: int) -> str:
    if health & 0b110:  # Critical | Failed
        return "critical"
    if health & 0b1:
        return "warning"
    return "info"


class IpmiClient:
    def __init__(self, target: Target, creds: Credentials):
        pyghmi_io.apply()
        from pyghmi import exceptions as pexc
        from pyghmi.ipmi.command import Command

        self.node = target.node
        self.target = target
        self._creds = creds
        self._pexc = pexc
        pyghmi_io.forget_stale(target.host, creds.username, creds.password.reveal(), target.ipmi_port)
        try:
            self.cmd = Command(bmc=target.host, userid=creds.username, password=creds.password.reveal(),
                               port=target.ipmi_port, keepalive=False)
        except Exception as exc:  # pyghmi raises IpmiException, socket errors, ...
            raise self._error("login", exc) from None
        _probe_oem_once(self.cmd)
        self._closed = False

    def _error(self, what: str, exc: BaseException) -> UnreachableError:
        msg = self._creds.scrub(str(exc) or type(exc).__name__)
        return UnreachableError(f"{self.node}: BMC {self.target.host}:{self.target.ipmi_port}: {what}: {msg}")

    def _call(self, what: str, fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except UsageError:
            raise
        except Exception as exc:
            raise self._error(what, exc) from None

    # ------------------------------------------------------------------ power and boot
    def power_state(self) -> str:
        return self._call("power status", self.cmd.get_power)["powerstate"]

    def power(self, action: str) -> None:
        if action == "cycle":
            # pyghmi's set_power has no cycle: Chassis Control 02h (power cycle); an off
            # system is powered on instead (a cycle of an off system is refused by many BMCs)
            if self.power_state() == "off":
                action = "on"
            else:
                rsp = self._call("power cycle", self.cmd.raw_command, netfn=0, command=2, data=[2])
                if rsp.get("error"):
                    raise self._error("power cycle", RuntimeError(rsp["error"]))
                return
        self._call(f"power {action}", self.cmd.set_power, action, wait=False)

    def bootdev(self) -> tuple[str, bool]:
        """Get System Boot Options, parameter 5 (boot flags; IPMI 2.0, 28.13): the device selector
        as set, whether or not the BMC set the boot-flags-valid bit. pyghmi answers "default"
        whenever that bit is clear, so after `bootdev bios` on a BMC that never sets it,
        `bootdev default` found nothing to change while BIOS was still selected."""
        rsp = self._call("bootdev", self.cmd.raw_command, netfn=0, command=9, data=(5, 0, 0))
        if rsp.get("error"):
            raise self._error("bootdev", RuntimeError(rsp["error"]))
        data = bytes(rsp.get("data", b""))
        if len(data) < 4 or data[1] & 0x7F != 5:
            raise self._error("bootdev", RuntimeError(f"unexpected boot options answer {data.hex(' ')}"))
        selector = (data[3] >> 2) & 0x0F
        persistent = bool(data[2] & 0x40)
        if data[1] & 0x80 or (selector == 0 and not data[2] & 0x80):
            return "default", True  # nothing selected (as pyghmi reports it)
        return _BOOT_SELECTORS.get(selector, f"0x{selector:x}"), persistent

    def set_bootdev(self, device: str, persistent: bool) -> None:
        self._call("set bootdev", self.cmd.set_bootdev, _BOOT[device], persist=persistent)

    # ------------------------------------------------------------------ sensors
    def _readings(self) -> list:
        """pyghmi's get_sensor_data, except for a sensor the BMC answers with a completion code
        (0xCE "command response could not be provided" before its first scan, 0xD5 "not
        supported in present state" with the host off, ...): pyghmi ends the whole sweep there
        (so `bmc sensors` said the node was unreachable); ipmitool shows that sensor as "no
        reading" and goes on, and so do we. 0xCB (not present) is skipped, as pyghmi does."""
        sdr = self.cmd.init_sdr()
        readings: list = []  # pyghmi's SensorReading, or our Sensor for one that has no reading
        for number in sdr.get_sensor_numbers():
            s = sdr.sensors[number]
            rsp = self.cmd.raw_command(command=0x2D, netfn=4, rslun=s.sensor_lun, data=(s.sensor_number,))
            if "error" not in rsp:
                readings.append(s.decode_sensor_reading(self.cmd, rsp["data"]))
            elif rsp.get("code") != 0xCB:
                readings.append(Sensor(s.sensor_name, _TYPES.get(s.sensor_type, "other"), None, s.unit_suffix or "",
                                     "ok", {}, (f"no reading: {rsp['error']}",)))
        self.cmd.oem_init()
        readings += list(self.cmd._oem.get_sensor_data())
        return readings

    def sensors(self) -> list[Sensor]:
        readings = self._call("sensors", self._readings)
        sdr = self.cmd.init_sdr()
        by_name = {s.name: s for s in sdr.sensors.values()}
        out = []
        for r in readings:
            if isinstance(r, Sensor):
                out.append(r)
                continue
            entry = by_name.get(r.name)
            thresholds = self._thresholds(entry) if entry is not None and entry.has_thresholds else {}
            kind = _TYPES.get(r.type, "other")
            status = {0: "ok"}.get(r.health) or ("critical" if r.health & 0b110 else "warning")
            value = r.value
            if value is not None and status == "ok" and thresholds:
                if any(k in thresholds and (value >= thresholds[k] if k[0] == "u" else value <= thresholds[k])
                       for k in ("uc", "unr", "lc", "lnr")):
                    status = "critical"
            out.append(Sensor(r.name, kind, value, r.units or "", status, thresholds, tuple(r.states)))
        return out

    def _thresholds(self, entry) -> dict[str, float]:
        rsp = self._call("thresholds", self.cmd.raw_command, netfn=4, command=0x27, data=[entry.sensor_number])
        if rsp.get("error") or len(rsp.get("data", b"")) < 7:
            return {}
        data = rsp["data"]
        out = {}
        for bit, key in enumerate(_THRESHOLDS):
            if data[0] & (1 << bit):
                out[key] = round(entry.decode_value(self.cmd, data[1 + bit]), 3)
        return out

    # ------------------------------------------------------------------ SEL
    def sel(self, *, clear: bool = False) -> list[SelEvent]:
        # pyghmi reads, reserves, re-reads the tail and clears with the reservation: an event
        # logged in between cancels the reservation (0xC5) and the clear fails rather than lose it
        events = self._call("sel clear" if clear else "sel", self.cmd.get_event_log, clear)
        out = []
        for e in events:
            ts = None
            if e.get("timestamp"):
                try:
                    ts = dt.datetime.fromisoformat(e["timestamp"]).timestamp()
                except ValueError:
                    ts = None
            what = e.get("event") or ("OEM record" if "oemdata" in e else "event")
            if e.get("deassertion"):
                what += " (deasserted)"
            out.append(SelEvent(int(e.get("record_id", 0)), ts, _sel_sensor_name(e),
                                str(e.get("component_type") or ""), what, _severity(int(e.get("severity") or 0)),
                                not e.get("deassertion", False)))
        return out

    # ------------------------------------------------------------------ inventory
    def inventory(self) -> dict:
        fru = self._call("inventory", self.cmd.get_inventory_of_component, "System") or {}
        keep = {"Manufacturer": "manufacturer", "Product name": "model", "Serial Number": "serial",
                "Board product name": "board", "Board serial number": "board_serial",
                "firmware_version": "bmc_firmware"}
        out = {ours: fru_text(fru[theirs]) for theirs, ours in keep.items() if fru_text(fru.get(theirs))}
        out.update(self._part_frus())
        return out

    def _part_frus(self) -> dict[str, list[dict]]:
        """PSU and fan FRUs named by the SDR's FRU device locators (`PS1`, `PSU2`, `Power Supply 1`,
        `FAN1`, ...), as ipmitool's `fru print` lists them: {"psus": [...], "fans": [...]} with
        name, serial, model, part number and manufacturer as each FRU has them. One FRU that
        cannot be read is left out (ipmitool, too, prints the others)."""
        try:
            names = list(self.cmd.get_inventory_descriptions())
        except Exception:  # noqa: BLE001 - no SDR repository: no part FRUs, the System FRU stands
            return {}
        out: dict[str, list[dict]] = {}
        for name in names:
            kind = fru_kind(name)
            if kind is None:
                continue
            try:
                fru = self.cmd.get_inventory_of_component(name) or {}
            except Exception:  # noqa: BLE001
                continue
            out.setdefault(kind, []).append(part_of_fru(name, fru))
        return out

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        try:
            self.cmd.ipmi_session.logout()
        except Exception:
            pass  # a dead BMC cannot be logged out of; its session times out on its side


_PSU_RE = re.compile(r"^(PS|PSU|PWS|Power ?Supply|Pwr ?Supply)[ _#-]?\d*\b", re.I)
_FAN_RE = re.compile(r"^(FAN|Fan ?Tray|Fan ?Module)[ _#-]?\d*\b", re.I)


def fru_kind(name: str) -> str | None:
    """`psus` or `fans` for a FRU locator's name, else None."""
    name = name.strip()
    if _PSU_RE.match(name):
        return "psus"
    if _FAN_RE.match(name):
        return "fans"
    return None


def fru_text(value) -> str:
    """A FRU field as text: pyghmi gives a field of binary type (IPMI FRU type/length 00b, as a
    DIMM's serial from its SPD) as bytes; it reads as hex, the way OpenBMC shows it ("0x3447b1ae"),
    never as Python's repr. '' for a missing or blank field."""
    if value is None:
        return ""
    if isinstance(value, (bytes, bytearray)):
        return "0x" + bytes(value).hex() if value else ""
    return str(value).strip()


def part_of_fru(name: str, fru: dict) -> dict:
    """One part from a FRU as pyghmi decodes it (product area first, then board area)."""
    def first(*keys: str) -> str:
        for k in keys:
            v = fru_text(fru.get(k))
            if v:
                return v
        return ""

    row = {"name": name.strip(), "serial": first("Serial Number", "Board serial number"),
           "model": first("Product name", "Board product name", "Model"),
           "part": first("Model", "Board model", "Part Number", "Board part number"),
           "manufacturer": first("Manufacturer", "Board manufacturer")}
    return {k: v for k, v in row.items() if v}
