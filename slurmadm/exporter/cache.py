"""One read of an outside source (NVML, sysfs, the store, Slurm) per interval, with a deadline.

A scrape never waits longer than the deadline: a read still running (a hung NVML call, a slow
slurmctld) is left to finish in its own thread while the scrape answers with the last good value,
marked stale. At most one read of a source runs at a time, so a hung source costs one thread, not
one per scrape.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

T = TypeVar("T")


@dataclass
class Reading(Generic[T]):
    value: T | None  # the last good value (None before the first success)
    ts: float  # wall time of that value (0: never)
    stale: bool  # the latest read failed or did not answer in time
    error: str  # why, when stale
    duration_s: float  # how long the last finished read took


class CachedRead(Generic[T]):
    def __init__(self, name: str, fn: Callable[[], T], *, max_age_s: float, deadline_s: float,
                 clock: Callable[[], float] = time.monotonic):
        self.name = name
        self.fn = fn
        self.max_age_s = max_age_s
        self.deadline_s = deadline_s
        self.clock = clock
        self._lock = threading.Lock()
        self._value: Any = None
        self._ts = 0.0
        self._read_at = -1e18  # monotonic time of the last finished read
        self._error = ""
        self._duration = 0.0
        self._inflight: threading.Event | None = None
        self.errors_total = 0
        self.reads_total = 0

    def _run(self, done: threading.Event) -> None:
        started = self.clock()
        try:
            value = self.fn()
        except Exception as exc:  # noqa: BLE001 - any failure of a source is "stale, why"
            with self._lock:
                self._error = f"{type(exc).__name__}: {exc}"[:300]
                self.errors_total += 1
        else:
            with self._lock:
                self._value, self._ts, self._error = value, time.time(), ""
        finally:
            with self._lock:
                self._duration = self.clock() - started
                self._read_at = self.clock()
                self.reads_total += 1
                self._inflight = None
            done.set()

    def get(self) -> Reading[T]:
        with self._lock:
            fresh = self.clock() - self._read_at < self.max_age_s
            done = self._inflight
            if not fresh and done is None:
                done = self._inflight = threading.Event()
                threading.Thread(target=self._run, args=(done,), daemon=True,
                                 name=f"slurmadm-exporter-{self.name}").start()
        timed_out = False
        if done is not None and not fresh:
            timed_out = not done.wait(self.deadline_s)
        with self._lock:
            error = self._error
            if timed_out:
                error = f"no answer within {self.deadline_s:g} s"
            return Reading(self._value, self._ts, bool(error), error, self._duration)
