"""The known-answer compute test's core: the reference computation and the verdict."""

from __future__ import annotations

import pytest

from slurmadm.errors import UsageError
from slurmadm.repair import kat

pytestmark = pytest.mark.unit


class Fixed:
    def __init__(self, name: str, raw: bytes = b"good", error: Exception | None = None):
        self.name, self.raw, self.error = name, raw, error

    def run(self, seed: int) -> bytes:
        if self.error:
            raise self.error
        return self.raw + seed.to_bytes(4, "little")


def test_reference_is_deterministic_and_seeded():
    a, b = kat.reference_bytes(1), kat.reference_bytes(1)
    assert a == b and len(a) == kat.PY_N * kat.PY_N * 8
    assert kat.reference_bytes(2) != a
    # pinned: a change to the computation changes every recorded expected digest
    assert kat.digest(kat.reference_bytes(kat.DEFAULT_SEED)) == kat.digest(kat.PythonDevice().run(kat.DEFAULT_SEED))
    assert isinstance(kat.PythonDevice(), kat.ComputeDevice)


def test_majority_names_the_odd_device():
    v = kat.known_answer([Fixed("g0"), Fixed("g1"), Fixed("g2", b"bad"), Fixed("g3")], seed=3)
    assert not v.ok and v.basis == "majority" and v.bad == ("g2",)
    assert v.reference == kat.digest(b"good" + (3).to_bytes(4, "little"))
    assert v.detail == "g2: differs from the majority (answer of 7 bytes, the reference's 8)"
    assert v.as_dict()["results"][2]["digest"] != v.reference


def test_all_agree_passes():
    v = kat.known_answer([Fixed(f"g{i}") for i in range(8)])
    assert v.ok and v.bad == () and v.basis == "majority"


def test_no_majority_fails_every_device():
    v = kat.known_answer([Fixed("g0"), Fixed("g1", b"other")])
    assert not v.ok and v.basis == "no-majority" and v.bad == ("g0", "g1")


def test_a_device_that_cannot_run_fails_with_its_error():
    v = kat.known_answer([Fixed("g0"), Fixed("g1"), Fixed("g2", error=kat.KatDeviceError("g2: GPU is lost"))])
    assert not v.ok and v.bad == ("g2",) and "GPU is lost" in v.detail
    assert v.results[2].digest is None


def test_expected_digest_holds_every_device_to_it():
    good = kat.digest(b"good" + (5).to_bytes(4, "little"))
    assert kat.known_answer([Fixed("g0")], seed=5, expected=good).ok
    v = kat.known_answer([Fixed("g0", b"bad"), Fixed("g1", b"bad")], seed=5, expected=good)
    assert not v.ok and v.basis == "expected" and v.bad == ("g0", "g1")  # a unanimous wrong answer is caught


def test_single_device_without_expected_passes_on_its_own_evidence():
    v = kat.known_answer([Fixed("g0")])
    assert v.ok and v.basis == "single" and "no other" in v.detail
    assert not kat.known_answer([]).ok


def test_select_devices():
    assert [d.name for d in kat.select_devices({"SLURMADM_KAT_DEVICE": "python"})] == ["python"]
    assert [d.name for d in kat.select_devices({"SLURMADM_KAT_DEVICE": "cpu"})] == ["cpu"]
    with pytest.raises(UsageError, match="not one of"):
        kat.select_devices({"SLURMADM_KAT_DEVICE": "tpu"})
    with pytest.raises(UsageError, match="SLURMADM_DEV_STATE_DIR"):
        kat.select_devices({"SLURMADM_KAT_DEVICE": "standin"})


def test_torch_cpu_device_is_deterministic():
    pytest.importorskip("torch")
    dev = kat.TorchDevice("cpu", n=64, steps=3)
    assert dev.run(11) == dev.run(11) != dev.run(12)
    assert len(dev.run(11)) == 64 * 64 * 4


class Flipped(kat.PythonDevice):
    """The reference answer with bits of one value flipped (the stand-in's corruption, by hand)."""

    def __init__(self, name: str, index: int, xor: int):
        super().__init__(name)
        self.index, self.xor = index, xor

    def run(self, seed: int) -> bytes:
        import struct

        raw = bytearray(super().run(seed))
        (bits,) = struct.unpack_from("<Q", raw, self.index * 8)
        struct.pack_into("<Q", raw, self.index * 8, bits ^ self.xor)
        return bytes(raw)


def test_one_device_off_by_one_ulp_is_named_with_the_size_of_its_difference():
    devs = [kat.PythonDevice(f"g{i}") for i in range(7)] + [Flipped("g7", index=100, xor=1)]
    v = kat.known_answer(devs, seed=11)
    assert not v.ok and v.bad == ("g7",)
    d = v.results[7].diff
    assert (d["values"], d["of"], d["max_ulp"], d["at"]) == (1, kat.PY_N * kat.PY_N, 1, 100)
    assert 0 < d["max_abs"] < 1e-15
    assert v.detail.startswith("g7: differs from the majority (1 of 1024 values, max 1 ulp, max abs diff ")
    assert v.as_dict()["results"][7]["diff"]["max_ulp"] == 1 and "diff" not in v.as_dict()["results"][0]


def test_all_devices_wrong_against_the_reference_each_with_its_difference():
    ref = kat.digest(kat.reference_bytes(12))
    # one good device holds the expected answer's bytes; the rest are far off (a flipped exponent bit)
    devs = [kat.PythonDevice("g0")] + [Flipped(f"g{i}", index=i, xor=1 << 60) for i in range(1, 4)]
    v = kat.known_answer(devs, seed=12, expected=ref)
    assert not v.ok and v.basis == "expected" and v.bad == ("g1", "g2", "g3")
    assert all(r.diff["values"] == 1 and r.diff["max_ulp"] == 1 << 60 for r in v.results[1:])
    assert "g1: differs from the expected answer (1 of 1024 values" in v.detail
    # every device wrong: no bytes of the expected answer here, so no size, but every one named
    v = kat.known_answer([Flipped(f"g{i}", index=0, xor=1) for i in range(4)], seed=12, expected=ref)
    assert not v.ok and v.bad == ("g0", "g1", "g2", "g3") and all(r.diff is None for r in v.results)


def test_difference_of_floats_counts_ulps_across_zero_and_ignores_nan():
    import struct

    a = struct.pack("<3f", 0.0, 1.0, float("nan"))
    b = struct.pack("<3f", -0.0, 1.0, 2.0)
    d = kat.difference(a, b, "f")
    assert (d["values"], d["max_ulp"], d["max_abs"]) == (2, 0x7FC00000 - 0x40000000, 0.0)
    assert d["at"] == 2  # the NaN's bits are far from 2.0's; -0 and +0 are 0 ulp apart
    tiny = struct.pack("<f", 1e-45)  # the smallest subnormal: one ulp above +0, two above -1e-45
    assert kat.difference(tiny, struct.pack("<f", -1e-45), "f")["max_ulp"] == 2
