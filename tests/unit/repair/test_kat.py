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
    assert v.detail == "g2: differs from the majority"
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
