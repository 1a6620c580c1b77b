"""What slurmadm makes of BMC answers that our emulators never gave: a FRU read size limit
(ipmi_sim's 0xC8), a half that failed on an IPMI + Redfish site. Fakes answer as the
independent implementations did (tests/integration/test_bmc_independent.py runs the real ones)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from slurmadm.bmc import ops, pyghmi_io
from slurmadm.bmc.fanout import Row
from slurmadm.errors import UnreachableError

pytestmark = pytest.mark.unit

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "bmc" / "ipmi_sim"


def _fru_image() -> bytes:
    spec = importlib.util.spec_from_file_location("make_fru", FIXTURES / "make_fru.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.image()


class LimitedFru:
    """Get FRU Inventory Area Info / Read FRU Data as ipmi_sim answers them: 0xC8 above `limit`."""

    def __init__(self, data: bytes, limit: int = 32, code: int = 0xC8):
        self.data, self.limit, self.code = data, limit, code
        self.counts: list[int] = []

    def raw_command(self, netfn, command, data=()):
        if command == 0x10:
            return {"code": 0, "data": bytes([len(self.data) & 0xFF, len(self.data) >> 8, 0])}
        _, lo, hi, count = data
        self.counts.append(count)
        if count > self.limit:
            return {"code": self.code, "error": "Request data field length limit exceeded"}
        off = lo | hi << 8
        chunk = self.data[off:off + count]
        return {"code": 0, "data": bytes([len(chunk)]) + chunk}


@pytest.mark.parametrize("code", [0xC8, 0xC9, 0xCA])
def test_fru_read_backs_off_on_size_limit_codes(code):
    from pyghmi.ipmi import fru

    pyghmi_io.apply()
    image = _fru_image()
    cmd = LimitedFru(image, code=code)
    f = fru.FRU.__new__(fru.FRU)
    f.ipmicmd = cmd
    f.fetch_fru(0)
    assert bytes(f.rawfru) == image
    first_ok = next(i for i, n in enumerate(cmd.counts) if n <= 32)
    assert cmd.counts[0] == len(image) and first_ok <= 3  # backed off ...
    assert max(cmd.counts[first_ok:]) <= 32  # ... and stayed at the size that worked


class _Conn:
    def __init__(self, ipmi_inv=None, ipmi_err=None, rf_err=None):
        self.node = "n1"
        self._ipmi_inv, self._ipmi_err, self._rf_err = ipmi_inv, ipmi_err, rf_err
        self.bmc = self
        self.redfish = _Redfish(rf_err)

    def inventory(self):
        if self._ipmi_err:
            raise UnreachableError(self._ipmi_err)
        return dict(self._ipmi_inv)


class _Redfish:
    def __init__(self, err):
        self.err = err

    def firmware(self):
        if self.err:
            raise UnreachableError(self.err)
        return {"BIOS": "1.2", "BMC": "3.4"}

    def inventory(self):
        return {"model": "from-redfish", "bios_firmware": "1.2"}


class _Fleet:
    def __init__(self, conn, protocol="ipmi"):
        from types import SimpleNamespace

        self.conn = conn
        self.site = SimpleNamespace(bmc=SimpleNamespace(redfish=True, protocol=protocol))

    def run(self, nodes, fn):
        try:
            return [Row("n1", True, fn(self.conn))]
        except UnreachableError as exc:
            return [Row("n1", False, error=str(exc))]


def test_inventory_keeps_the_redfish_half_when_ipmi_fru_fails():
    rows = ops.read_inventory(_Fleet(_Conn(ipmi_err="n1: BMC 127.0.0.1:623: inventory: limit exceeded")), ["n1"],
                              redfish=True)
    assert rows[0].ok
    assert rows[0].value["firmware"] == {"BIOS": "1.2", "BMC": "3.4"} and rows[0].value["model"] == "from-redfish"
    assert ops.inventory_errors(rows) == [("n1", "n1: BMC 127.0.0.1:623: inventory: limit exceeded")]


def test_inventory_keeps_the_ipmi_half_when_redfish_fails():
    rows = ops.read_inventory(_Fleet(_Conn(ipmi_inv={"model": "M", "serial": "S"}, rf_err="n1: BMC x: HTTP 500")),
                              ["n1"], redfish=True)
    assert rows[0].ok and rows[0].value["model"] == "M" and "firmware" not in rows[0].value
    assert ops.inventory_errors(rows) == [("n1", "n1: BMC x: HTTP 500")]


def test_inventory_nothing_answered_is_one_error_row():
    rows = ops.read_inventory(_Fleet(_Conn(ipmi_err="ipmi down", rf_err="redfish down")), ["n1"], redfish=True)
    assert not rows[0].ok and rows[0].error == "ipmi down; redfish down"


# ---------------------------------------------------------------------- Redfish, DMTF's mockup
REDFISH = Path(__file__).resolve().parents[2] / "fixtures" / "bmc" / "redfish" / "public-rackmount1.json"


class _Resp:
    def __init__(self, status: int, body: bytes):
        self.status, self._body = status, body

    def read(self):
        return self._body

    def getheaders(self):
        return [("Content-Type", "application/json")]


class FakeService:
    """The transport under RedfishClient: answers from a dict of path -> document (or bytes, or
    (status, bytes)), records the requests."""

    def __init__(self, docs: dict):
        self.docs = docs
        self.requests: list[tuple[str, str]] = []
        self._next = None

    def request(self, method, path, body=None, headers=None):
        self.requests.append((method, path))
        doc = self.docs.get(path.split("?")[0], (404, b'{"error": {"message": "not found"}}'))
        if method != "GET":
            doc = (204, b"")
        if isinstance(doc, tuple):
            self._next = _Resp(*doc)
        elif isinstance(doc, bytes):
            self._next = _Resp(200, doc)
        else:
            self._next = _Resp(200, json.dumps(doc).encode())

    def getresponse(self):
        return self._next

    def close(self):
        pass


def redfish_client(docs: dict):
    from slurmadm.bmc.creds import Credentials, Secret
    from slurmadm.bmc.model import Target
    from slurmadm.bmc.redfish import RedfishClient

    c = RedfishClient.__new__(RedfishClient)
    c.node, c.target = "b200-001", Target("b200-001", "10.0.0.9", 623, 443)
    c._creds, c._tls, c._timeout = Credentials("admin", Secret("pw")), None, 5.0
    c._token, c._session_uri, c._system_uri = "tok", None, None
    c._conn = FakeService(docs)
    return c


def mockup() -> dict:
    return json.loads(REDFISH.read_text())


def test_redfish_sensor_types_from_reading_type_then_units_then_parent():
    sensors = redfish_client(mockup()).sensors()
    by = {s.name: s.type for s in sensors}
    temps = [s.name for s in sensors if s.type == "temperature"]
    # ReadingUnits "Cel" without a ReadingType (7 of them) and the one with ReadingType Temperature
    assert len(temps) == 8 and "Ambient Temperature" in temps and "Battery #1 Temperature" in temps
    # fans in Percent: typed from the ThermalSubsystem/Fans resources that read from them
    assert sorted(n for n, t in by.items() if t == "fan") == ["CPU #1 Fan Speed", "CPU #2 Fan Speed",
                                                              "Chassis Fan #1", "Chassis Fan #2"]
    assert by["Battery #1 State of Health"] == "other"  # Percent, but no fan reads from it
    assert by["Power Supply #1 Input Voltage"] == "voltage" and by["Power Supply #1 Input Power"] == "power"


def test_redfish_sel_reads_the_system_and_manager_logs_sel_first():
    c = redfish_client(mockup())
    events = c.sel()
    assert [(e.log, e.record_id) for e in events] == [("Systems/437XR1138R2/LogServices/Log1", 1),
                                                      ("Systems/437XR1138R2/LogServices/Log1", 2),
                                                      ("Managers/BMC/LogServices/Log", 1)]
    assert events[0].event == "Temperature threshold exceeded" and events[0].severity == "critical"
    assert events[2].event == "System May be Melting"
    # the mockup's nextLink points past the end (Members@odata.count reached): not followed
    assert not any("skiptoken" in p for _, p in c._conn.requests)


def test_redfish_sel_clear_clears_each_log_read():
    c = redfish_client(mockup())
    c.sel(clear=True)
    posts = [p for m, p in c._conn.requests if m == "POST"]
    assert posts == ["/redfish/v1/Systems/437XR1138R2/LogServices/Log1/Actions/LogService.ClearLog",
                     "/redfish/v1/Managers/BMC/LogServices/Log/Actions/LogService.ClearLog"]


@pytest.mark.parametrize("change, call, expect", [
    ({"/redfish/v1/Systems": b"{not json"}, "inventory",
     "b200-001: BMC 10.0.0.9:443: GET /redfish/v1/Systems: answered HTTP 200 with a body that is not JSON "
     "('{not json')"),
    ({"/redfish/v1/Systems": {"Members": []}}, "power_state",
     "b200-001: BMC 10.0.0.9:443: GET /redfish/v1/Systems: answered an empty collection (no ComputerSystem)"),
    ({"/redfish/v1/UpdateService": {"Id": "UpdateService"}}, "firmware",
     "b200-001: BMC 10.0.0.9:443: GET /redfish/v1/UpdateService: answered a resource without FirmwareInventory"),
    ({"/redfish/v1/Systems": (500, b"")}, "inventory",
     "b200-001: BMC 10.0.0.9:443: GET /redfish/v1/Systems: HTTP 500 Internal Server Error"),
    ({"/redfish/v1/Systems": (500, b'{"error": {"message": "backend down"}}')}, "inventory",
     "b200-001: BMC 10.0.0.9:443: GET /redfish/v1/Systems: HTTP 500 Internal Server Error: backend down"),
    ({"/redfish/v1/Systems": [1, 2]}, "inventory",
     "b200-001: BMC 10.0.0.9:443: GET /redfish/v1/Systems: answered HTTP 200 with JSON that is not an object "
     "('[1, 2]')"),
])
def test_redfish_bad_answers_are_one_line_naming_node_and_bmc(change, call, expect):
    docs = {**mockup(), **change}
    with pytest.raises(UnreachableError) as err:
        getattr(redfish_client(docs), call)()
    assert str(err.value) == expect


def test_unexpected_shape_through_the_fleet_is_one_line_without_python_text():
    from slurmadm.bmc.fanout import _Watched

    docs = mockup()
    docs["/redfish/v1/Systems/437XR1138R2"] = {**docs["/redfish/v1/Systems/437XR1138R2"], "Boot": "weird"}
    w = _Watched(redfish_client(docs), lambda: None)
    with pytest.raises(UnreachableError) as err:
        w.bootdev()
    assert str(err.value) == "b200-001: BMC 10.0.0.9:443: bootdev: answered with a shape it cannot read"


# ---------------------------------------------------------------------- IPMI: SEL names, boot flags
def test_sel_record_without_sdr_is_named_by_sensor_type_like_ipmitool():
    from slurmadm.bmc.ipmi import _sel_sensor_name

    assert _sel_sensor_name({"component": "Sensor 32.7.0", "component_id": "32.7.0",
                             "component_type": "Memory"}) == "Memory #0x07"
    assert _sel_sensor_name({"component": "Inlet Temp", "component_id": "32.1.0",
                             "component_type": "Temperature"}) == "Inlet Temp"
    assert _sel_sensor_name({"component": None, "component_id": 0}) == ""


class BootFlags:
    """Get/Set System Boot Options as a BMC that never sets the boot-flags-valid bit answers."""

    def __init__(self, flags: tuple[int, int]):
        self.flags = flags  # (data 1, data 2) of parameter 5
        self.set_calls: list[tuple[str, bool]] = []

    def raw_command(self, netfn, command, data=()):
        assert (netfn, command, tuple(data)) == (0, 9, (5, 0, 0))
        return {"code": 0, "data": bytes([1, 5, *self.flags, 0, 0, 0])}

    def set_bootdev(self, device, persist=False):
        self.set_calls.append((device, persist))
        self.flags = (0x00, 0x00)


def ipmi_client(cmd):
    from slurmadm.bmc.creds import Credentials, Secret
    from slurmadm.bmc.ipmi import IpmiClient
    from slurmadm.bmc.model import Target

    c = IpmiClient.__new__(IpmiClient)
    c.node, c.target, c._creds, c.cmd, c._closed = ("b200-001", Target("b200-001", "10.0.0.9", 623, 443),
                                                    Credentials("admin", Secret("pw")), cmd, True)
    return c


@pytest.mark.parametrize("flags, want", [
    ((0x00, 0x18), ("bios", False)),  # BIOS selected, valid bit never set
    ((0x80, 0x18), ("bios", False)),
    ((0xC0, 0x04), ("pxe", True)),
    ((0x80, 0x08), ("disk", False)),
    ((0x00, 0x00), ("default", True)),
])
def test_bootdev_reads_the_device_selector_not_only_the_valid_bit(flags, want):
    assert ipmi_client(BootFlags(flags)).bootdev() == want


def test_bootdev_default_after_bios_on_a_bmc_without_the_valid_bit_changes_it():
    cmd = BootFlags((0x00, 0x18))
    c = ipmi_client(cmd)

    class Store:
        events: list = []

        def audit_many(self, events):
            self.events += events

    fleet = _Fleet(type("C", (), {"bmc": c, "node": "b200-001"})())
    rows, changed = ops.set_bootdev(fleet, ["n1"], "default", False, Store(), "test")
    assert changed == ["n1"] and rows[0].value["was"] == "bios"
    assert cmd.set_calls == [("default", False)]
    assert c.bootdev() == ("default", True)


# ---------------------------------------------------------------------- pyghmi's lost wake-up
def test_io_wait_finds_an_answer_queued_while_it_registered(monkeypatch):
    """The answer came in while the caller registered with the I/O thread: pyghmi's caller slept
    until its retransmit deadline (0.5-1 s per round trip on a loaded head, nobody to wake it);
    ours looks at its session's queue after registering."""
    import collections
    import threading

    import pyghmi.ipmi.private.session as S

    addr = ("127.0.0.9", 623)
    sess = type("Sess", (), {})()
    sess.pktqueue = collections.deque()

    class Racing(collections.deque):
        def append(self, item):  # the I/O thread queues the answer just as the caller registers
            super().append(item)
            sess.pktqueue.append("answer")

    monkeypatch.setitem(S.Session.bmc_handlers, addr, {40000: sess})
    monkeypatch.setattr(S, "ioqueue", Racing())
    monkeypatch.setattr(S, "selectdeadline", 0)  # no wake byte to send (no I/O thread here)
    t = threading.Thread(target=pyghmi_io._io_wait, args=(1.0, addr), daemon=True)
    t.start()
    t.join(2.0)
    assert not t.is_alive(), "slept although its answer was queued"
    sess.pktqueue.clear()
    sess.pktqueue.append("early answer")
    t = threading.Thread(target=pyghmi_io._io_wait, args=(1.0, addr), daemon=True)
    t.start()
    t.join(2.0)
    assert not t.is_alive()
