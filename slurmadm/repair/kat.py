"""Known-answer compute test (KAT): the same deterministic computation on every GPU of a node,
compared bit for bit (issue 34's qualification gate; silent data corruption no passive signal sees).

The computation is a fixed-seed matmul chain: two square matrices drawn from the seed, then
`steps` times x = (x @ b) / n. Each device returns the raw bytes of its result; the verdict
compares their SHA-256 digests:
- with an `expected` digest (a known-good device of the same model, driver and library recorded
  earlier), every device must match it;
- without one, the digest most devices agree on is the reference when more than half of them
  agree; the others fail. With no such majority every device fails (nothing says which is right),
  and a single device passes only on its own evidence (`basis` "single": run it with `expected`).
A device that disagrees is named with the size of its difference from the reference's answer
(`difference`: how many values differ, the largest distance in units in the last place, the
largest absolute difference), where the reference's bytes are at hand (a device produced them).

Devices sit behind the `ComputeDevice` protocol, so the comparison is the same everywhere:
- `TorchDevice` (real GPUs, "cuda:N"; or "cpu"): torch with TF32 off and deterministic algorithms;
- `PythonDevice`: the reference computation in pure Python floats (no dependency, bit-exact on
  any IEEE-754 machine); the dev cluster's stand-in GPUs run it;
- `slurmadm.devcluster.katdevice.StandinDevice`: a stand-in GPU; it reads the stand-in state and
  flips one bit of its answer when `dev-cluster gpu-fault --kind corrupt` is set on it.
`select_devices()` picks them: $SLURMADM_KAT_DEVICE = torch | cpu | python | standin, else the
stand-in when the stand-in NVML is configured ($SLURMADM_FAKE_NVML_DIR, or the dev cluster's
$SLURMADM_DEV_STATE_DIR: both are in `dev-cluster env`, so in every job submitted from it), else torch (every visible CUDA device; the CPU when there is none).
"""

from __future__ import annotations

import hashlib
import math
import os
import random
import struct
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Protocol, runtime_checkable

from ..errors import UsageError

DEFAULT_SEED = 20261205
# the pure-Python reference: 32x32 doubles, 4 products (~130k multiply-adds, ~50 ms)
PY_N, PY_STEPS = 32, 4
# torch: large enough to use the tensor cores' GEMM paths, small enough for a qualification job
TORCH_N, TORCH_STEPS = 2048, 8


class KatDeviceError(Exception):
    """A device could not run the computation (lost, hung, out of memory): it fails the test."""


@runtime_checkable
class ComputeDevice(Protocol):
    name: str  # "cuda:3", "cpu", "standin:b200-001:gpu3"

    def run(self, seed: int) -> bytes:
        """The raw bytes of the known-answer computation for `seed`; the same on every good device."""
        ...


def digest(raw: bytes) -> str:
    return hashlib.sha256(raw).hexdigest()


# ------------------------------------------------------------------------------ devices


def reference_bytes(seed: int, n: int = PY_N, steps: int = PY_STEPS) -> bytes:
    """The matmul chain in Python floats, in one fixed order of operations (bit-exact)."""
    rng = random.Random(seed)
    a = [[rng.uniform(-1.0, 1.0) for _ in range(n)] for _ in range(n)]
    b = [[rng.uniform(-1.0, 1.0) for _ in range(n)] for _ in range(n)]
    cols = [list(col) for col in zip(*b)]
    x = a
    for _ in range(steps):
        x = [[math.fsum(p * q for p, q in zip(row, col)) / n for col in cols] for row in x]
    return struct.pack(f"<{n * n}d", *(v for row in x for v in row))


class PythonDevice:
    """The reference computation on the CPU, no dependency."""

    fmt = "d"  # its answer's elements (struct format): doubles

    def __init__(self, name: str = "python", n: int = PY_N, steps: int = PY_STEPS):
        self.name, self.n, self.steps = name, n, steps

    def run(self, seed: int) -> bytes:
        return reference_bytes(seed, self.n, self.steps)


class TorchDevice:
    """The chain in float32 with torch on `device` ("cuda:N" or "cpu"). Inputs are drawn on the
    CPU from the seed, so every device gets the same bits; TF32 and reduced-precision reductions
    are off so a GEMM's result depends only on the hardware model, driver and library."""

    fmt = "f"  # float32

    def __init__(self, device: str, n: int = TORCH_N, steps: int = TORCH_STEPS):
        self.name, self.n, self.steps = device, n, steps

    def run(self, seed: int) -> bytes:
        import torch

        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_fp16_reduced_precision_reduction = False
        torch.backends.cuda.matmul.allow_bf16_reduced_precision_reduction = False
        gen = torch.Generator(device="cpu").manual_seed(seed)
        a = torch.rand((self.n, self.n), generator=gen, dtype=torch.float32) * 2 - 1
        b = torch.rand((self.n, self.n), generator=gen, dtype=torch.float32) * 2 - 1
        try:
            x, bb = a.to(self.name), b.to(self.name)
            for _ in range(self.steps):
                x = (x @ bb) / self.n
            if self.name.startswith("cuda"):
                torch.cuda.synchronize(self.name)
            out = x.cpu().contiguous()
        except RuntimeError as e:  # CUDA errors (Xid, ECC, OOM) arrive as RuntimeError
            raise KatDeviceError(f"{self.name}: {str(e).splitlines()[0] if str(e) else type(e).__name__}") from None
        try:
            return out.numpy().tobytes()
        except (RuntimeError, ImportError):  # a torch without numpy
            return struct.pack(f"<{out.numel()}f", *out.flatten().tolist())


def torch_devices() -> list[ComputeDevice]:
    """Every CUDA device torch sees (CUDA_VISIBLE_DEVICES applies), else the CPU."""
    try:
        import torch
    except ImportError:
        raise UsageError("the known-answer test needs torch on this node (pip install 'slurmadm[burnin]')") from None
    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    return [TorchDevice(f"cuda:{i}") for i in range(count)] or [TorchDevice("cpu")]


def select_devices(env: Mapping[str, str] | None = None) -> list[ComputeDevice]:
    """The devices of this node (see the module docstring for the choice)."""
    env = os.environ if env is None else env
    standin = env.get("SLURMADM_FAKE_NVML_DIR") or env.get("SLURMADM_DEV_STATE_DIR")
    kind = env.get("SLURMADM_KAT_DEVICE") or ("standin" if standin else "torch")
    if kind == "standin":
        from ..devcluster.katdevice import standin_devices

        return standin_devices(env)
    if kind == "torch":
        return torch_devices()
    if kind == "cpu":
        return [TorchDevice("cpu")]
    if kind == "python":
        return [PythonDevice()]
    raise UsageError(f"SLURMADM_KAT_DEVICE={kind!r}: not one of torch, cpu, python, standin")


# ------------------------------------------------------------------------------ the verdict


@dataclass(frozen=True)
class DeviceResult:
    device: str
    digest: str | None  # None: the device failed to run
    error: str = ""
    seconds: float = 0.0
    # how far a disagreeing answer is from the reference's (`difference`), when both are at hand
    diff: dict | None = None


def _ordered(bits: int, width: int) -> int:
    """An IEEE-754 value's bits as an integer in the order of the values (-0 and +0 both 0), so
    the distance of two values in units in the last place is the difference of theirs."""
    sign = 1 << (width - 1)
    return -(bits & (sign - 1)) if bits & sign else bits


def difference(raw: bytes, ref: bytes, fmt: str = "d") -> dict:
    """The size of the difference of two answers: how many values differ, the largest distance
    in units in the last place, the largest absolute difference, and where (the first such index)."""
    from array import array

    width = struct.calcsize(fmt) * 8
    if len(raw) != len(ref) or len(raw) % (width // 8):
        return {"values": None, "detail": f"answer of {len(raw)} bytes, the reference's {len(ref)}"}
    ints = "Q" if width == 64 else "I"
    va, vb = array(fmt, raw), array(fmt, ref)
    ia, ib = array(ints, raw), array(ints, ref)
    differ, max_ulp, max_abs, at = 0, 0, 0.0, -1
    for k in range(len(ia)):
        if ia[k] == ib[k]:
            continue
        differ += 1
        ulp = abs(_ordered(ia[k], width) - _ordered(ib[k], width))
        delta = abs(va[k] - vb[k])
        if ulp > max_ulp:
            max_ulp, at = ulp, k
        if delta == delta and delta > max_abs:  # NaN never counts as larger
            max_abs = delta
    return {"values": differ, "of": len(ia), "max_ulp": max_ulp, "max_abs": max_abs, "at": at}


def describe_difference(d: dict | None) -> str:
    if not d:
        return ""
    if d.get("values") is None:
        return d.get("detail", "")
    return f"{d['values']} of {d['of']} values, max {d['max_ulp']} ulp, max abs diff {d['max_abs']:.3g} (index {d['at']})"


@dataclass(frozen=True)
class KatVerdict:
    ok: bool
    basis: str  # "expected" | "majority" | "single" | "no-majority" | "none"
    reference: str | None  # the digest the devices were held to
    results: tuple[DeviceResult, ...]
    bad: tuple[str, ...] = ()  # devices that disagree with the reference or failed to run
    seed: int = DEFAULT_SEED
    detail: str = field(default="")

    def as_dict(self) -> dict:
        return {"ok": self.ok, "basis": self.basis, "reference": self.reference, "seed": self.seed,
                "bad": list(self.bad), "detail": self.detail,
                "results": [{"device": r.device, "digest": r.digest, "error": r.error,
                             "seconds": round(r.seconds, 3), **({"diff": r.diff} if r.diff else {})}
                            for r in self.results]}


def run_devices(devices: Sequence[ComputeDevice], seed: int = DEFAULT_SEED,
                answers: dict[str, tuple[bytes, str]] | None = None) -> list[DeviceResult]:
    """Run the computation on each device in turn; a device that raises is a result with an error.
    `answers`: filled with digest -> (raw bytes, element format) of the first device with each
    answer (a good node keeps one answer, not one per device)."""
    out = []
    for dev in devices:
        t0 = time.monotonic()
        try:
            raw = dev.run(seed)
            d = digest(raw)
            if answers is not None and d not in answers:
                answers[d] = (raw, getattr(dev, "fmt", "d"))
            out.append(DeviceResult(dev.name, d, seconds=time.monotonic() - t0))
        except Exception as e:  # noqa: BLE001 - any failure of a device is that device's verdict
            out.append(DeviceResult(dev.name, None, f"{type(e).__name__}: {e}", time.monotonic() - t0))
    return out


def judge(results: Sequence[DeviceResult], expected: str | None = None, seed: int = DEFAULT_SEED) -> KatVerdict:
    """Compare the digests (see the module docstring)."""
    results = tuple(results)
    failed = [r.device for r in results if r.digest is None]
    if not results:
        return KatVerdict(False, "none", None, results, seed=seed, detail="no compute device to test")
    if expected is not None:
        bad = tuple(r.device for r in results if r.digest != expected)
        return KatVerdict(not bad, "expected", expected, results, bad, seed,
                          _detail(bad, results, "differs from the expected answer"))
    counts = Counter(r.digest for r in results if r.digest is not None)
    top, n = counts.most_common(1)[0] if counts else (None, 0)
    if len(results) == 1:
        return KatVerdict(not failed, "single", top, results, tuple(failed), seed,
                          _detail(tuple(failed), results, "") or "one device: no other to compare with")
    if n * 2 <= len(results):
        return KatVerdict(False, "no-majority", None, results, tuple(r.device for r in results), seed,
                          f"no answer shared by more than half of {len(results)} devices "
                          f"({len(counts)} different answers, {len(failed)} failed)")
    bad = tuple(r.device for r in results if r.digest != top)
    return KatVerdict(not bad, "majority", top, results, bad, seed, _detail(bad, results, "differs from the majority"))


def _detail(bad: tuple[str, ...], results: tuple[DeviceResult, ...], differs: str) -> str:
    errors = {r.device: r.error for r in results if r.error}
    diffs = {r.device: describe_difference(r.diff) for r in results if r.diff}
    return "; ".join(f"{d}: {errors[d]}" if d in errors else
                     f"{d}: {differs}" + (f" ({diffs[d]})" if diffs.get(d) else "") for d in bad)


def with_differences(verdict: KatVerdict, answers: Mapping[str, tuple[bytes, str]]) -> KatVerdict:
    """The verdict with the size of each disagreeing answer's difference from the reference's,
    where both answers are at hand (an `expected` digest no device reproduced has no bytes here)."""
    ref = answers.get(verdict.reference or "")
    if ref is None or not verdict.bad:
        return verdict
    results = tuple(replace(r, diff=difference(answers[r.digest][0], ref[0], ref[1]))
                    if r.device in verdict.bad and r.digest in answers else r for r in verdict.results)
    differs = "differs from the expected answer" if verdict.basis == "expected" else "differs from the majority"
    return replace(verdict, results=results, detail=_detail(verdict.bad, results, differs))


def known_answer(devices: Sequence[ComputeDevice] | None = None, *, seed: int = DEFAULT_SEED,
                 expected: str | None = None) -> KatVerdict:
    """Run the known-answer test on `devices` (default: `select_devices()`) and judge it; a device
    that disagrees is named with the size of its difference."""
    devs = select_devices() if devices is None else list(devices)
    answers: dict[str, tuple[bytes, str]] = {}
    return with_differences(judge(run_devices(devs, seed, answers), expected, seed), answers)
