"""What slurmadm makes of BMC answers that our emulators never gave: a FRU read size limit
(ipmi_sim's 0xC8), a half that failed on an IPMI + Redfish site. Fakes answer as the
independent implementations did (tests/integration/test_bmc_independent.py runs the real ones)."""

from __future__ import annotations

import importlib.util
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
