"""Real IPMI FRU images (tests/fixtures/bmc/fru-real/SOURCES.md: what each one is, and where it
comes from) go through pyghmi's FRU decoder the same way slurmadm's IpmiClient gets them: Get FRU
Inventory Area Info and Read FRU Data answered by a BMC, read by pyghmi_io's fetch_fru. The result
then goes through slurmadm's part_of_fru and the System FRU mapping of IpmiClient.inventory().
The expected values are the ones the sources show."""

from __future__ import annotations

import hashlib
from pathlib import Path
from types import SimpleNamespace

import pytest

from slurmadm.bmc import pyghmi_io
from slurmadm.bmc.ipmi import fru_kind, part_of_fru

pytestmark = pytest.mark.unit

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "bmc" / "fru-real"

ASROCK = "python-ipmi-issue186-asrockrack.bin"
QUANTA = "python-ipmi-issue66-quanta-qumulo.bin"
DIMM = "hostboot-issue94-witherspoon-dimm3.bin"

# SOURCES.md lists these: the bytes as the sources show them, changed by no one
SHA256 = {
    ASROCK: "80f756ad296463ccd3ade6613ed5b5f60520ced1339fd74f7ba334b431ff16ec",
    QUANTA: "032c2e34d7ba59969b61bda42647bdd4e3d4a1934c4b2aa66cea25a204e4e05d",
    DIMM: "41b3acd0ddee0b305c60930ce11d24dcc512f0fe6001a2186474198bcf038b8f",
}


def image(name: str) -> bytes:
    return (FIXTURES / name).read_bytes()


class FruDevice:
    """A BMC's FRU device holding one image: Get FRU Inventory Area Info (0Ah/10h) and Read FRU
    Data (0Ah/11h), answered the way a BMC answers them."""

    def __init__(self, data: bytes):
        self.data = data
        self.reads: list[tuple[int, int]] = []

    def raw_command(self, netfn, command, data=()):
        assert netfn == 0x0A
        if command == 0x10:
            return {"code": 0, "data": bytes([len(self.data) & 0xFF, len(self.data) >> 8, 0])}
        assert command == 0x11
        _, lo, hi, count = data
        off = lo | hi << 8
        self.reads.append((off, count))
        chunk = self.data[off:off + count]
        return {"code": 0, "data": bytes([len(chunk)]) + chunk}


def decode(name: str, sdr=None) -> tuple[dict, FruDevice, bytes]:
    """pyghmi's FRU(ipmicmd=..., fruid=..., sdr=...).info, the call that Command.get_inventory_of_component
    makes (sdr=None for the System FRU 0; a FRU device locator's type for a part FRU), with
    slurmadm's fetch_fru in place, followed by the generic OEM handler's pass-through."""
    from pyghmi.ipmi import fru

    pyghmi_io.apply()
    dev = FruDevice(image(name))
    f = fru.FRU(ipmicmd=dev, fruid=0, sdr=sdr)
    info = dict(f.info)
    info["oem_parser"] = None  # pyghmi.ipmi.oem.generic.OEMHandler.process_fru
    return info, dev, bytes(f.rawfru)


# a FRU device locator SDR for a logical FRU device (type 10h, modifier 00h): how a BMC names a
# PSU or fan FRU. pyghmi decodes the image as it does for FRU 0.
LOGICAL_FRU = SimpleNamespace(fru_type_and_modifier=0x1000)


def _area_sums(data: bytes) -> dict[str, int]:
    out = {"header": sum(data[:8]) % 256}
    for i, area in ((2, "chassis"), (3, "board"), (4, "product")):
        if data[i]:
            off = data[i] * 8
            out[area] = sum(data[off:off + data[off + 1] * 8]) % 256
    return out


def ipmi_client(cmd):
    from slurmadm.bmc.creds import Credentials, Secret
    from slurmadm.bmc.ipmi import IpmiClient
    from slurmadm.bmc.model import Target

    c = IpmiClient.__new__(IpmiClient)
    c.node, c.target, c._creds, c.cmd, c._closed = ("n1", Target("n1", "10.0.0.9", 623, 443),
                                                    Credentials("admin", Secret("pw")), cmd, True)
    return c


class SystemOnly:
    """Command.get_inventory_of_component("System") answering with a real FRU 0, and no SDR FRU
    locators (no part FRUs)."""

    def __init__(self, info: dict):
        self.info = info

    def get_inventory_of_component(self, component):
        assert component == "System"
        return dict(self.info)

    def get_inventory_descriptions(self):
        return iter(())


# ---------------------------------------------------------------------- the fixtures themselves
@pytest.mark.parametrize("name", sorted(SHA256))
def test_fixture_is_the_image_the_source_shows(name):
    assert hashlib.sha256(image(name)).hexdigest() == SHA256[name]


def test_area_checksums_are_as_the_sources_report():
    # the checksums guard the transcription: every area of the Quanta and DIMM images sums to 0
    assert _area_sums(image(QUANTA)) == {"header": 0, "chassis": 0, "board": 0, "product": 0}
    assert _area_sums(image(DIMM)) == {"header": 0, "product": 0}
    # the ASRock Rack board area does not: python-ipmi#186 is about exactly this
    sums = _area_sums(image(ASROCK))
    assert sums["header"] == 0 and sums["product"] == 0 and sums["board"] != 0


@pytest.mark.parametrize("name", sorted(SHA256))
def test_pyghmi_reads_each_image_whole(name):
    _, dev, raw = decode(name)
    assert raw == image(name)
    assert dev.reads[0] == (0, min(len(image(name)), pyghmi_io.FRU_FIRST_CHUNK))


# ---------------------------------------------------------------------- Quanta / Qumulo (python-ipmi#66)
def test_quanta_qumulo_decodes_as_the_image_says():
    info, _, _ = decode(QUANTA)
    # python-ipmi failed on this image (its MultiRecord offset points into the chassis area);
    # pyghmi skips the MultiRecord area, and decodes the rest
    assert {k: info[k] for k in ("Chassis type", "Chassis part number", "Chassis serial number")} == {
        "Chassis type": "Rack Mount Chassis", "Chassis part number": "1S1QUZZ0STW",
        "Chassis serial number": "QTFCPY823000A"}
    assert {k: info[k] for k in ("Board manufacturer", "Board product name", "Board serial number",
                                 "Board model", "Board FRU Id")} == {
        "Board manufacturer": "Quanta Cloud Technology Inc.", "Board product name": "SD1Q-1ULH-6 cores MB",
        "Board serial number": "GPY82000008", "Board model": "31S1QMB0060", "Board FRU Id": "FRU v0.10"}
    assert {k: info[k] for k in ("Manufacturer", "Product name", "Model", "Hardware Version",
                                 "Serial Number", "Asset Number", "FRU ID")} == {
        "Manufacturer": "Qumulo", "Product name": "QK-Series 1U", "Model": "95-10B01-01 rev01",
        "Hardware Version": "1.0", "Serial Number": "S0501825Q007", "Asset Number": None, "FRU ID": "FRU v0.10"}


def test_quanta_qumulo_part_takes_the_product_area_first():
    info, _, _ = decode(QUANTA, sdr=LOGICAL_FRU)
    assert part_of_fru("System", info) == {"name": "System", "serial": "S0501825Q007", "model": "QK-Series 1U",
                                           "part": "95-10B01-01 rev01", "manufacturer": "Qumulo"}


def test_quanta_qumulo_system_inventory():
    info, _, _ = decode(QUANTA)
    assert ipmi_client(SystemOnly(info)).inventory() == {
        "manufacturer": "Qumulo", "model": "QK-Series 1U", "serial": "S0501825Q007",
        "board": "SD1Q-1ULH-6 cores MB", "board_serial": "GPY82000008"}


# ---------------------------------------------------------------------- ASRock Rack (python-ipmi#186)
def test_asrockrack_blank_fields_give_no_serial_model_or_part():
    # every field but the manufacturer is empty (C0h) in both areas; the board area checksum is
    # wrong, and pyghmi decodes it anyway (it checks no area checksum)
    info, _, _ = decode(ASROCK, sdr=LOGICAL_FRU)
    assert info["Board manufacturer"] == "ASRockRack" and info["Manufacturer"] == "ASRockRack"
    assert all(info[k] is None for k in ("Board product name", "Board serial number", "Board model",
                                         "Product name", "Model", "Serial Number", "Asset Number"))
    assert part_of_fru("System", info) == {"name": "System", "manufacturer": "ASRockRack"}


def test_asrockrack_system_inventory_is_the_manufacturer_alone():
    info, _, _ = decode(ASROCK)
    assert ipmi_client(SystemOnly(info)).inventory() == {"manufacturer": "ASRockRack"}


# ---------------------------------------------------------------------- Witherspoon DIMM (hostboot#94)
def test_witherspoon_dimm_text_field_loses_its_padding():
    # the one text field (Part/Model Number): the source's BMC shows "M393A4K40BB2-CTD    ";
    # the space padding does not reach slurmadm
    info, _, _ = decode(DIMM, sdr=LOGICAL_FRU)
    assert info["Model"] == "M393A4K40BB2-CTD"
    assert part_of_fru("dimm3", info)["part"] == "M393A4K40BB2-CTD"
    assert fru_kind("dimm3") is None  # not a PSU or fan: _part_frus would not list it


def test_witherspoon_dimm_binary_fields_reach_pyghmi_as_bytes():
    # Manufacturer, Product Name and Serial Number are binary fields (type 00b). pyghmi hands
    # them over undecoded; the source's BMC shows them as 0xce80, 0x0c, 0x3447b1ae
    info, _, _ = decode(DIMM, sdr=LOGICAL_FRU)
    assert info["Manufacturer"] == bytearray(b"\xce\x80")
    assert info["Product name"] == bytearray(b"\x0c")
    assert info["Serial Number"] == bytearray(bytes.fromhex("3447b1ae"))


def test_witherspoon_dimm_binary_fields_read_as_hex_as_openbmc_shows_them():
    """Binary-typed fields (the DIMM's serial, manufacturer and name from its SPD) come from
    pyghmi as bytearrays: they read as OpenBMC's readout shows them, never as a Python repr."""
    info, _, _ = decode(DIMM, sdr=LOGICAL_FRU)
    part = part_of_fru("dimm3", info)
    assert not [v for v in part.values() if "bytearray(" in v], part
    assert (part["serial"], part["manufacturer"], part["model"]) == ("0x3447b1ae", "0xce80", "0x0c"), part
