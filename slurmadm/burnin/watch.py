"""What the GPUs do while the stress runs: temperature, SM clock and clock-event (throttle)
reasons, sampled through NVML (issue 45: "a board that throttles after five minutes").

The health suite judges a GPU at rest; a failing cold plate, fan or power stage shows only under
load. `Watch` samples every GPU at the start, every `interval` seconds, and at the end of the
stress (at least two samples, however slow the machine; NVML is opened and read on a thread of
its own, so a hung GPU never blocks the stress), and `judge` fails a GPU whose hardware
slowed it down in at least two samples (one sample can catch a P-state blip, as health's
clock-events check confirms with a second read).

The reasons are NVML's `nvmlClocksEventReasons` bits (nvml.h; NVML API reference, "Clocks Event
Reasons"; the same bits as the older `nvmlClocksThrottleReasons`):
- hardware slowdowns fail: HW slowdown (0x8), HW thermal slowdown (0x40), HW power brake (0x80);
- SW thermal slowdown (0x20) warns: the driver held the clocks down for temperature;
- SW power cap (0x4), idle (0x1) and the others are normal operation under a stress.

NVML missing or failing does not fail the stress: it says the GPUs were not watched.

In the dev cluster (SLURMADM_FAKE_NVML_DIR set) the stress also tells the stand-in GPUs they are
under load (`stand_in_load`): `<dir>/<node>.load` holds the second until which the stress runs,
and the stand-in library shows what a `thermal-under-load` fault hides at rest.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

# nvmlClocksEventReasons bits (nvml.h), with what a stress makes of each
FAIL_REASONS = {0x08: "HW slowdown", 0x40: "HW thermal slowdown", 0x80: "HW power brake"}
WARN_REASONS = {0x20: "SW thermal slowdown"}
CONFIRM_SAMPLES = 2
NVML_TEMPERATURE_GPU = 0  # nvmlTemperatureSensors_t
NVML_CLOCK_SM = 1  # nvmlClockType_t


class Watch:
    """Sample every GPU while the `with` block runs: `with Watch() as w: stress...; w.summary()`."""

    def __init__(self, interval: float = 1.0, nvml: Any = None):
        self.interval = max(0.05, interval)
        self._nvml = nvml
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._handles: list[tuple[int, Any, int]] = []  # (index, handle, max SM clock)
        self.per_gpu: dict[int, dict[str, Any]] = {}
        self.why_not = ""  # why the GPUs were not watched ('' = they were)
        self.samples = 0

    # ---------------------------------------------------------------- NVML
    def _open(self) -> None:
        try:
            if self._nvml is None:
                import pynvml  # nvidia-ml-py

                self._nvml = pynvml
            m = self._nvml
            m.nvmlInit()
            for i in range(m.nvmlDeviceGetCount()):
                h = m.nvmlDeviceGetHandleByIndex(i)
                try:
                    top = int(m.nvmlDeviceGetMaxClockInfo(h, NVML_CLOCK_SM))
                except Exception:
                    top = 0
                self._handles.append((i, h, top))
        except Exception as exc:  # no pynvml, no driver, no GPU: the stress still runs
            self.why_not = f"GPUs not watched: NVML: {' '.join(str(exc).split()) or type(exc).__name__}"[:200]
            self._handles = []

    def _reasons(self, h: Any) -> int:
        m = self._nvml
        fn = getattr(m, "nvmlDeviceGetCurrentClocksEventReasons", None) or m.nvmlDeviceGetCurrentClocksThrottleReasons
        return int(fn(h))

    def sample(self) -> None:
        m = self._nvml
        for index, h, top in self._handles:
            row = self.per_gpu.setdefault(index, {"samples": 0, "max_temp_c": None, "min_sm_clock_mhz": None,
                                                  "max_sm_clock_mhz": top or None, "reasons": {}})
            try:
                temp = int(m.nvmlDeviceGetTemperature(h, NVML_TEMPERATURE_GPU))
                clock = int(m.nvmlDeviceGetClockInfo(h, NVML_CLOCK_SM))
                reasons = self._reasons(h)
            except Exception as exc:
                row["error"] = f"NVML: {' '.join(str(exc).split())}"[:160]
                continue
            row["samples"] += 1
            row["max_temp_c"] = temp if row["max_temp_c"] is None else max(row["max_temp_c"], temp)
            row["min_sm_clock_mhz"] = clock if row["min_sm_clock_mhz"] is None else min(row["min_sm_clock_mhz"], clock)
            for bit, name in {**FAIL_REASONS, **WARN_REASONS}.items():
                if reasons & bit:
                    row["reasons"][name] = row["reasons"].get(name, 0) + 1
        self.samples += 1

    def _run(self) -> None:
        """The sampler thread: NVML opened here, so a hung GPU never blocks the stress itself."""
        self._open()
        if not self._handles:
            return
        self.sample()
        while not self._stop.wait(self.interval):
            self.sample()
        self.sample()  # the end of the stress: at least two samples, however slow the machine
        with contextlib.suppress(Exception):
            self._nvml.nvmlShutdown()

    # ---------------------------------------------------------------- with
    def __enter__(self) -> Watch:
        self._thread = threading.Thread(target=self._run, name="stress-watch", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=self.interval + 30)
            if self._thread.is_alive():  # an NVML call hung: what was sampled stands
                self.why_not = "NVML stopped answering during the stress (a hung GPU?)"

    def summary(self) -> dict[str, Any]:
        import json

        per_gpu = json.loads(json.dumps({str(g): r for g, r in sorted(self.per_gpu.items())}))  # a copy
        return {"samples": self.samples, "interval_s": self.interval, "why_not": self.why_not, "per_gpu": per_gpu}


def judge(summary: dict[str, Any]) -> tuple[str, list[str]]:
    """('pass' | 'warn' | 'fail' | 'skip', findings) from a `Watch.summary()`."""
    if not summary.get("per_gpu"):
        return "skip", [summary.get("why_not") or "GPUs not watched"]
    fails, warns = [], []
    for g, row in summary["per_gpu"].items():
        seen = row.get("samples", 0)
        need = min(CONFIRM_SAMPLES, max(1, seen))
        for table, out in ((FAIL_REASONS, fails), (WARN_REASONS, warns)):
            hits = {name: n for name, n in row.get("reasons", {}).items() if name in table.values() and n >= need}
            if hits:
                clock = row.get("min_sm_clock_mhz")
                top = row.get("max_sm_clock_mhz")
                where = f", SM clock down to {clock} of {top} MHz" if clock and top else ""
                out.append(f"GPU{g} {', '.join(f'{n} in {k} of {seen} samples' for n, k in hits.items())} under "
                           f"stress (peak {row.get('max_temp_c')} C{where})")
        if row.get("error"):
            warns.append(f"GPU{g} {row['error']}")
    if summary.get("why_not"):
        warns.append(summary["why_not"])
    if fails:
        return "fail", fails + warns
    if warns:
        return "warn", warns
    return "pass", []


def describe(summary: dict[str, Any]) -> str:
    """One line for a passing watch: peak temperature and lowest SM clock over the GPUs."""
    rows = [r for r in summary.get("per_gpu", {}).values() if r.get("samples")]
    if not rows:
        return summary.get("why_not") or "GPUs not watched"
    temps = [r["max_temp_c"] for r in rows if r.get("max_temp_c") is not None]
    clocks = [r["min_sm_clock_mhz"] for r in rows if r.get("min_sm_clock_mhz") is not None]
    return (f"{len(rows)} GPUs watched ({summary['samples']} samples): peak {max(temps)} C, "
            f"SM clock >= {min(clocks)} MHz, no hardware slowdown")


# ------------------------------------------------------------------------------ the dev cluster


def load_file(env: dict[str, str] | None = None) -> str:
    """`<SLURMADM_FAKE_NVML_DIR>/<node>.load`, the stand-in's under-load marker; '' outside the
    dev cluster (the variable is set only there)."""
    env = os.environ if env is None else env
    d = env.get("SLURMADM_FAKE_NVML_DIR")
    node = env.get("SLURMADM_FAKE_NVML_NODE") or env.get("SLURMD_NODENAME") or ""
    if not d or not node or "/" in node or node.startswith("."):
        return ""
    return os.path.join(d, f"{node}.load")


@contextlib.contextmanager
def stand_in_load(seconds: float, env: dict[str, str] | None = None) -> Iterator[None]:
    """Tell the dev cluster's stand-in GPUs a stress runs for `seconds` (plus a margin): the
    file holds the epoch second it ends, so a stress killed half-way stops at its deadline."""
    path = load_file(env)
    wrote = False
    if path:
        try:
            with open(path, "w", encoding="ascii") as fh:
                fh.write(f"{time.time() + seconds + 30:.0f}\n")
            wrote = True
        except OSError:
            pass
    try:
        yield
    finally:
        if wrote:
            with contextlib.suppress(OSError):
                os.unlink(path)
