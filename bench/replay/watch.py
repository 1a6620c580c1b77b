"""What runs for hours is watched: RSS and open files of long-lived processes and the store's size,
sampled once a minute during a replay, and any growth reported.

Growth is judged on the second half of the samples against the first (a process warms up: imports,
caches filled once), so a bounded process reads flat after its warm-up and a leak reads as a rise.
"""

from __future__ import annotations

import os
from pathlib import Path


def sample_pid(pid: int, proc: Path = Path("/proc")) -> dict | None:
    """RSS in KiB and open file descriptors of one process, or None when it is gone."""
    try:
        status = (proc / str(pid) / "status").read_text()
        fds = len(os.listdir(proc / str(pid) / "fd"))
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    rss = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), 0)
    return {"rss_kib": rss, "fds": fds}


def growth(series: list[float], *, min_samples: int = 6, tolerance: float = 0.10, floor: float = 0) -> dict:
    """Compare the mean of the last third with the mean of the middle third: `grew` when the later
    is more than `tolerance` (and `floor` in absolute terms) above the earlier."""
    if len(series) < min_samples:
        return {"samples": len(series), "grew": None, "why": f"fewer than {min_samples} samples"}
    k = len(series) // 3
    mid, last = series[k:2 * k], series[2 * k:]
    before, after = sum(mid) / len(mid), sum(last) / len(last)
    grew = after > before * (1 + tolerance) and after - before > floor
    return {"samples": len(series), "before": round(before, 1), "after": round(after, 1), "grew": grew}
