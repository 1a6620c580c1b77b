"""Site model: health-check thresholds, per-check actions and safety valves.

Threshold sources: ../shared/anchors/health-checks.md (gcm, AzNHC, DCGM, NVIDIA XID catalog).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, NonNegativeInt, PositiveInt

from .profiles import Strict

Context = Literal["prolog", "epilog", "periodic", "run", "burnin"]
Severity = Literal["info", "warning", "critical"]
CheckId = Annotated[str, Field(pattern=r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")]


class ModelThresholds(Strict):
    """Thresholds for one GPU model (key: the profile's gpus.model, e.g. `b200`)."""

    # Single-node 8-GPU all-reduce bus bandwidth floor, GB/s. No vendor figure exists for B200;
    # run `slurmadm health calibrate` and set the floor from the fleet median.
    nccl_busbw_floor_gbps: Annotated[float, Field(gt=0)] = 300.0
    max_gpu_temp_c: Annotated[int, Field(gt=0, le=150)] = 87
    max_memory_temp_c: Annotated[int, Field(gt=0, le=150)] = 95
    ecc_corrected_volatile_max: NonNegativeInt = 50_000_000
    retired_pages_max: NonNegativeInt = 10
    # Power draw over the enforced limit by this factor fails (a bad sensor or a runaway board).
    power_over_limit_factor: Annotated[float, Field(gt=1.0)] = 1.10
    min_sm_clock_mhz: NonNegativeInt = 0


class CheckPolicy(Strict):
    """Per-check override of the built-in action table."""

    severity: Severity | None = None
    contexts: list[Context] | None = None
    on_fail: Literal["drain", "warn", "ignore"] | None = None


class HealthSection(Strict):
    # Time limits: each check, and the whole run per context (a hung NVML call cannot hang a job).
    check_timeout_s: Annotated[float, Field(gt=0, le=600)] = 5.0
    prolog_timeout_s: Annotated[float, Field(gt=0, le=600)] = 20.0
    epilog_timeout_s: Annotated[float, Field(gt=0, le=3600)] = 120.0
    periodic_timeout_s: Annotated[float, Field(gt=0, le=3600)] = 50.0
    # A check that cannot run (library missing, timeout): "fail" drains like a fault (fail-safe
    # for the job), "warn" only reports. Reported distinctly from hardware faults either way.
    on_error: Literal["fail", "warn"] = "fail"
    # NCCL in prolog/epilog only when no passing result is fresher than this.
    nccl_fresh_hours: Annotated[float, Field(gt=0)] = 24.0
    # XIDs seen in the last N minutes count; identical (gpu, xid) events are reported once.
    xid_window_minutes: PositiveInt = 60
    # Where XID lines (`NVRM: Xid (PCI:...): 79, ...`) are read from: a file, or "kmsg".
    xid_source: str = "kmsg"
    # Periodic runs resume a slurmadm drain after this many consecutive clean runs.
    resume_after_clean_runs: PositiveInt = 3
    # Never let automatic drains exceed this fraction of any partition; alert instead.
    drain_cap_fraction: Annotated[float, Field(gt=0, le=1)] = 0.10
    # JSON lines of every result (one line per check per run).
    results_log: str = "/var/log/slurmadm/health.jsonl"
    models: dict[str, ModelThresholds] = {
        "b200": ModelThresholds(nccl_busbw_floor_gbps=300.0),
        "h200": ModelThresholds(nccl_busbw_floor_gbps=300.0),
        "h100": ModelThresholds(nccl_busbw_floor_gbps=300.0, max_gpu_temp_c=85),
    }
    checks: dict[CheckId, CheckPolicy] = {}
