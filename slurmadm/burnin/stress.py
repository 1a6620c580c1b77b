"""The stress phase of the per-node burn-in job (runs on the compute node).

- `gpu_stress`: every GPU at once for `seconds` (one thread per GPU), alternating a bf16 matmul
  (compute) and a large device-to-device copy (memory bandwidth). A GPU fails when it raises a
  CUDA error, when its matmul result differs from the other GPUs' (same inputs, same kernels:
  silent data corruption), or when its throughput is below `SLOW_FRACTION` of the node's median
  (a throttled or degraded GPU; no fleet-specific threshold needed).
- `dcgm_diag`: `dcgmi diag -r 2|3 -j` where DCGM is installed; any failed test fails, except where
  a known issue of that DCGM release on that GPU model says otherwise (known.py: a run that hangs
  is not started, a test that fails healthy GPUs only warns).
- `cpu_stand_in`: no CUDA device: exercises the host's CPU and memory for `seconds` and says so;
  it never claims to have stressed a GPU.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import statistics
import threading
import time
from typing import Any

from ..errors import SlurmadmError
from ..proc import run
from ..health.allreduce import import_torch
from . import known, watch
from .model import TestResult

SLOW_FRACTION = 0.80
MATMUL_N = 8192
COPY_MIB = 2048


def judge_gpus(per_gpu: dict[int, dict[str, Any]]) -> tuple[str, str]:
    """Verdict from per-GPU stress numbers: {gpu: {"tflops", "copy_gbps", "checksum", "error"}}."""
    problems = [f"GPU{g} {r['error']}" for g, r in sorted(per_gpu.items()) if r.get("error")]
    ok = {g: r for g, r in per_gpu.items() if not r.get("error")}
    sums = [r["checksum"] for r in ok.values()]
    if sums:
        common = max(set(sums), key=sums.count)
        problems += [f"GPU{g} matmul result differs from the other GPUs (silent data corruption?)"
                     for g, r in sorted(ok.items()) if r["checksum"] != common]
    for key, unit in (("tflops", "TFLOPS"), ("copy_gbps", "GB/s copy")):
        values = [r[key] for r in ok.values()]
        if len(values) < 2:
            continue
        median = statistics.median(values)
        for g, r in sorted(ok.items()):
            if r[key] < SLOW_FRACTION * median:
                problems.append(f"GPU{g} {r[key]:.0f} {unit}, {r[key] / median:.0%} of the node median {median:.0f}")
    if problems:
        return "fail", "; ".join(problems)
    lo_t = min(r["tflops"] for r in ok.values())
    lo_c = min(r["copy_gbps"] for r in ok.values())
    return "pass", f"{len(ok)} GPUs: matmul >= {lo_t:.0f} TFLOPS, copy >= {lo_c:.0f} GB/s, results identical"


def _checksum(torch: Any, c: Any) -> str:
    """Bit-exact fingerprint of a bf16 matrix, computed on its GPU (integer sums wrap, exactly)."""
    bits = c.contiguous().view(torch.int16).flatten().to(torch.int64)
    weights = torch.arange(1, bits.numel() + 1, device=bits.device, dtype=torch.int64)
    return f"{int(bits.sum())}:{int((bits * weights).sum())}"


def under_load(torch: Any, gpu: int) -> dict[str, float]:
    """The GPU's SM clock (MHz) and temperature (C) read at the end of its load, for the
    fleet-relative verdicts (burnin/fleet.py gpu-clock, gpu-temp); what torch cannot read
    (no pynvml) is left out."""
    out: dict[str, float] = {}
    for key, fn in (("sm_clock_mhz", "clock_rate"), ("temp_c", "temperature")):
        try:
            value = getattr(torch.cuda, fn)(gpu)
        except Exception:  # pynvml missing or the query unsupported: no reading, not a failure
            continue
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
            out[key] = float(value)
    return out


def gpu_stress(torch: Any, seconds: float) -> TestResult:
    count = torch.cuda.device_count()
    per_gpu: dict[int, dict[str, Any]] = {}
    gen = torch.Generator().manual_seed(1234)
    a_cpu = torch.randn(MATMUL_N, MATMUL_N, generator=gen).to(torch.bfloat16)
    b_cpu = torch.randn(MATMUL_N, MATMUL_N, generator=gen).to(torch.bfloat16)

    def worker(gpu: int) -> None:
        try:
            dev = torch.device("cuda", gpu)
            a, b = a_cpu.to(dev), b_cpu.to(dev)
            src = torch.empty(COPY_MIB << 20, dtype=torch.uint8, device=dev)
            dst = torch.empty_like(src)
            checksum = None
            flop = mm_time = 0.0
            moved = cp_time = 0.0
            deadline = time.monotonic() + seconds
            while time.monotonic() < deadline:
                t0 = time.perf_counter()
                c = a @ b
                torch.cuda.synchronize(dev)
                mm_time += time.perf_counter() - t0
                flop += 2 * MATMUL_N**3
                if checksum is None:
                    checksum = _checksum(torch, c)
                t0 = time.perf_counter()
                dst.copy_(src)
                torch.cuda.synchronize(dev)
                cp_time += time.perf_counter() - t0
                moved += 2 * src.numel()  # read + write
            load = under_load(torch, gpu)  # still hot from the loop
            again = _checksum(torch, a @ b)
            per_gpu[gpu] = {**load,
                "tflops": flop / mm_time / 1e12 if mm_time else 0.0,
                "copy_gbps": moved / cp_time / 1e9 if cp_time else 0.0,
                "checksum": checksum if again == checksum else f"unstable:{again}",
            }
        except Exception as exc:  # CUDA errors surface here (Xid, ECC, fell off the bus)
            per_gpu[gpu] = {"error": f"{type(exc).__name__}: {' '.join(str(exc).split())}"[:300]}

    threads = [threading.Thread(target=worker, args=(g,), daemon=True) for g in range(count)]
    start = time.monotonic()
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=seconds + 300)
    for g, t in enumerate(threads):
        if t.is_alive():
            per_gpu[g] = {"error": "hung: no progress within the stress time + 300 s"}
    status, detail = judge_gpus(per_gpu)
    tflops = [r["tflops"] for r in per_gpu.values() if "tflops" in r]
    return TestResult("stress", status, detail, value=min(tflops) if tflops else None, unit="TFLOPS",
                      duration_s=time.monotonic() - start,
                      data={"device": "cuda", "seconds": seconds, "per_gpu": {str(g): r for g, r in per_gpu.items()}})


def cpu_stand_in(seconds: float, reason: str) -> TestResult:
    """No GPU to stress: keep the host busy for `seconds` (hashing and large copies) and say so.

    The buffers are allocated before the clock starts and at least one round always runs, so a
    loaded machine reports a slow rate, never 0 GB/s from a budget spent allocating."""
    block = bytearray(64 << 20)
    target = bytearray(len(block))
    hashed = copied = 0
    start = time.monotonic()
    while True:
        hashlib.sha256(block).digest()
        hashed += len(block)
        target[:] = block
        copied += 2 * len(block)
        if time.monotonic() - start >= seconds:
            break
    took = max(time.monotonic() - start, 1e-9)
    return TestResult(
        "stress", "warn",
        f"GPUs not stressed ({reason}); CPU stand-in ran {took:.0f} s: "
        f"sha256 {hashed / took / 1e9:.2f} GB/s, copy {copied / took / 1e9:.2f} GB/s",
        value=copied / took / 1e9, unit="GB/s (CPU)", duration_s=took,
        data={"device": "cpu", "reason": reason},
    )


def stress(seconds: float, *, cpu_only: bool = False) -> TestResult:
    """`cpu_only`: the site runs burn-in on CPUs (burnin.collective = "gloo", the dev cluster),
    so no GPU is expected whatever build of torch is installed. Either way the GPUs' clocks,
    temperatures and throttle reasons are watched through NVML while it runs (watch.py): a
    hardware slowdown under the stress fails it."""
    with watch.stand_in_load(seconds), watch.Watch(interval=watch_interval(seconds)) as w:
        result = _stress(seconds, cpu_only=cpu_only)
    return watched(result, w.summary())


def watch_interval(seconds: float) -> float:
    """About 20 samples a stress, one every 0.5 to 5 seconds."""
    return min(5.0, max(0.5, seconds / 20))


def watched(result: TestResult, summary: dict[str, Any]) -> TestResult:
    """The stress result with what the GPUs did meanwhile: a hardware slowdown fails it, a SW
    thermal slowdown makes a pass a warning; the samples go into its data."""
    result.data["watch"] = summary
    status, findings = watch.judge(summary)
    if status == "fail":
        result.status = "fail"
        result.detail = "; ".join(findings) + "; " + result.detail
    elif status == "warn":
        if result.status == "pass" and any("slowdown" in f for f in findings):
            result.status = "warn"
        result.detail += "; " + "; ".join(findings)
    elif status == "pass":
        result.detail += "; " + watch.describe(summary)
    return result


def _stress(seconds: float, *, cpu_only: bool) -> TestResult:
    if cpu_only:
        return cpu_stand_in(seconds, "the site runs burn-in on the CPU (burnin.collective = gloo)")
    torch = import_torch()
    if torch is None:
        return cpu_stand_in(seconds, "torch is not installed")
    if torch.cuda.is_available() and torch.cuda.device_count() > 0:
        return gpu_stress(torch, seconds)
    if torch.version.cuda:  # a CUDA build that sees no GPU on a GPU node: the node is broken
        return TestResult("stress", "fail", f"torch built for CUDA {torch.version.cuda} sees no GPU",
                          data={"device": "none"})
    return cpu_stand_in(seconds, "no CUDA device: torch is a CPU build")


# ------------------------------------------------------------------------------ DCGM


def parse_dcgm(text: str, found: list | None = None) -> tuple[str, str]:
    """Verdict from `dcgmi diag -j` output (DCGM 3 "DCGM GPU Diagnostic" and DCGM 4
    "DCGM Diagnostic" shapes): any result with status Fail fails; Warn warns. `found`: the known
    issues (known.py) of this DCGM release on this GPU model: failures of the tests a false-fail
    entry names only warn, and say which entry excused them."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return "error", f"dcgmi diag: output is not JSON ({text.strip()[:100]!r})"
    root = next((v for k, v in data.items() if "Diagnostic" in k and isinstance(v, dict)), None) \
        if isinstance(data, dict) else None
    if root is None:
        return "error", "dcgmi diag: no diagnostic section in its JSON"
    fails, warns, ran = [], [], 0
    for cat in root.get("test_categories") or []:
        for test in cat.get("tests") or []:
            name = test.get("name", "?")
            for res in test.get("results") or []:
                status = str(res.get("status", "")).lower()
                ran += 1
                gpu = res.get("gpu_id", res.get("entity_id", ""))
                where = f"{name}" + (f" GPU{gpu}" if gpu not in ("", None) else "")
                text_parts = [w.get("warning", "") if isinstance(w, dict) else str(w)
                              for w in (res.get("warnings") or [])]
                msg = where + (f": {' '.join(' '.join(text_parts).split())}" if text_parts else "")
                if status.startswith("fail"):
                    fails.append(msg)
                elif status.startswith("warn"):
                    warns.append(msg)
    if fails and found:
        excused, used = known.excused(fails, found)
        if excused:
            fails = [f for f in fails if f not in excused]
            warns += [f"{f} (known issue {', '.join(i.id for i in used)}, not the GPU's)" for f in excused]
    if fails:
        return "fail", "; ".join(fails)[:600]
    if warns:
        return "warn", "; ".join(warns)[:600]
    return "pass", f"{ran} results passed"


def dcgmi_release(timeout: float) -> str | None:
    """The DCGM release that runs the diagnostic (`dcgmi -v`: the host engine's where it answers,
    else the client's; None when it cannot be read)."""
    try:
        proc = run(["dcgmi", "-v"], timeout=min(timeout, 30.0), check=False)
    except SlurmadmError:
        return None
    return known.dcgmi_version(proc.stdout)


def dcgm_diag(level: int, timeout: float, model: str = "", ignore: tuple[str, ...] | list[str] = ()) -> TestResult:
    """`dcgmi diag -r LEVEL -j`, unless a known issue of this DCGM release on this GPU model says
    the run hangs (known.py): then it is not started, and the test is a skip that names the issue."""
    if not shutil.which("dcgmi"):
        return TestResult("dcgm", "skip", "dcgmi is not installed on this node")
    start = time.monotonic()
    version = dcgmi_release(timeout)
    found = known.matching("dcgmi-diag", model, version, level, ignore)
    hang = next((i for i in found if i.effect == "hang"), None)
    if hang is not None:
        return TestResult("dcgm", "skip", f"dcgmi diag -r {level} not run on {model} (DCGM {version or 'release unknown'}): "
                          f"known issue {hang.label()}", duration_s=time.monotonic() - start,
                          data={"level": level, "dcgm": version, "known_issue": hang.id})
    try:
        proc = run(["dcgmi", "diag", "-r", str(level), "-j"], timeout=timeout, check=False)
    except SlurmadmError as exc:
        return TestResult("dcgm", "error", str(exc), duration_s=time.monotonic() - start)
    status, detail = parse_dcgm(proc.stdout, found)
    return TestResult("dcgm", status, f"dcgmi diag -r {level}: {detail}", duration_s=time.monotonic() - start,
                      data={"level": level, "exit_code": proc.returncode, "dcgm": version,
                            "known_issues": [i.id for i in found]})
