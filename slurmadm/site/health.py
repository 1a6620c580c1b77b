"""Site model: health-check thresholds, per-check actions and safety valves.

Threshold sources: ../shared/anchors/health-checks.md (gcm, AzNHC, DCGM, NVIDIA XID catalog).
Check ids are validated against the health package's registry by a site check that
`slurmadm.health.sitecheck` registers (the site package never imports the health package).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, NonNegativeInt, PositiveInt, field_validator

from .profiles import Strict

Context = Literal["prolog", "epilog", "periodic", "run"]
Severity = Literal["info", "warning", "critical"]
CheckId = Annotated[str, Field(pattern=r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")]
Seconds = Annotated[float, Field(gt=0, le=3600)]


class ModelThresholds(Strict):
    """Thresholds for one GPU model (key: the profile's gpus.model, e.g. `b200`)."""

    # Single-node 8-GPU all-reduce bus bandwidth floor, GB/s. No vendor figure exists for B200;
    # run `slurmadm health calibrate` and set the floor from the fleet median.
    nccl_busbw_floor_gbps: Annotated[float, Field(gt=0)] = 300.0
    max_gpu_temp_c: Annotated[int, Field(gt=0, le=150)] = 87
    max_memory_temp_c: Annotated[int, Field(gt=0, le=150)] = 95
    # Corrected (single-bit) volatile ECC errors since boot above this fail.
    ecc_corrected_volatile_max: NonNegativeInt = 50_000_000
    retired_pages_max: NonNegativeInt = 10
    # Power draw over the enforced limit by this factor fails (a bad sensor or a runaway board).
    power_over_limit_factor: Annotated[float, Field(gt=1.0)] = 1.10
    # NVLink error counters (replay + recovery + CRC, per GPU) may rise by at most this much
    # between two periodic runs.
    nvlink_error_rise_max: NonNegativeInt = 100
    # Aggregate (lifetime) uncorrected ECC errors above this warn. The lifetime counter stays
    # above zero after a successful row remap and reset, so it never drains: volatile counts, row
    # remap pending/failed and the recovery action decide (slurmadm issue 10).
    ecc_uncorrected_aggregate_warn: NonNegativeInt = 0


XidAction = Literal["fail", "warn", "ignore"]


class CheckPolicy(Strict):
    """Per-check override of the built-in action table (`slurmadm health checks` lists it)."""

    severity: Severity | None = None
    contexts: list[Context] | None = None
    # observe: run and record it everywhere, act as on a warning; `slurmadm health observe` says
    # which nodes it would have drained (try a new check or threshold before it drains anything)
    on_fail: Literal["drain", "warn", "observe", "ignore"] | None = None
    on_error: Literal["fail", "warn"] | None = None
    timeout_s: Seconds | None = None


class MountSpec(Strict):
    """A filesystem the `mounts` check wants mounted, writable, with free space."""

    path: Annotated[str, Field(pattern=r"^/[^\x00\n]*$")]
    writable: bool = True
    min_free_gib: Annotated[float, Field(ge=0)] = 0.0


class HealthSection(Strict):
    # Time limits: each check, and the whole run per context (a hung NVML call cannot hang a job).
    check_timeout_s: Seconds = 5.0
    prolog_timeout_s: Seconds = 20.0
    epilog_timeout_s: Seconds = 120.0
    periodic_timeout_s: Seconds = 50.0
    run_timeout_s: Seconds = 300.0
    # A check that cannot run (library missing, timeout): "fail" drains like a fault (fail-safe
    # for the job), "warn" only reports. Reported as status "error", never as a hardware fault.
    on_error: Literal["fail", "warn"] = "fail"
    # NCCL all-reduce: in prolog/epilog only when no passing result is fresher than this.
    nccl_fresh_hours: Annotated[float, Field(gt=0)] = 24.0
    nccl_timeout_s: Seconds = 120.0
    nccl_size_mib: Annotated[int, Field(ge=1, le=65536)] = 4096
    nccl_iters: Annotated[int, Field(ge=1, le=1000)] = 20
    # XIDs seen in the last N minutes count; identical (gpu, xid) events are reported once.
    xid_window_minutes: PositiveInt = 60
    # Where XID lines (`NVRM: Xid (PCI:...): 79, ...`) are read from: "kmsg" (/dev/kmsg), or a
    # file such as /var/log/kern.log; `{node}` is replaced by the node name.
    xid_source: str = "kmsg"
    # Override the built-in XID classification: XID number -> fail, warn or ignore.
    xid_actions: dict[str, XidAction] = {}
    # Periodic runs resume a slurmadm drain after this many consecutive clean runs.
    resume_after_clean_runs: PositiveInt = 3
    # Never let automatic drains exceed this fraction of any partition (floor of
    # fraction x nodes); past it slurmadm alerts instead of draining.
    drain_cap_fraction: Annotated[float, Field(gt=0, le=1)] = 0.10
    # An alert a periodic run cannot act on (a fault on a node in maintenance, the breaker) is
    # recorded once, then again only when its text changes or this many minutes have passed.
    alert_repeat_minutes: Annotated[int, Field(ge=0, le=10080)] = 60
    # JSON lines of every result (one line per check per run).
    results_log: str = "/var/log/slurmadm/health.jsonl"
    models: dict[str, ModelThresholds] = {
        "b200": ModelThresholds(nccl_busbw_floor_gbps=300.0),
        "h200": ModelThresholds(nccl_busbw_floor_gbps=300.0),
        "h100": ModelThresholds(nccl_busbw_floor_gbps=300.0, max_gpu_temp_c=85),
    }
    checks: dict[CheckId, CheckPolicy] = {}
    # --- node checks beyond the GPUs (issue 10) ---
    # Root of sysfs the `infiniband` and `host-memory` checks read ({node}: the node name; tests
    # and the dev cluster point it at a tree they write).
    sysfs_root: str = "/sys"
    # InfiniBand error counters may rise at most this much between two runs (others: not judged).
    ib_counter_rise_max: dict[str, NonNegativeInt] = {
        "symbol_error": 100, "link_error_recovery": 0, "link_downed": 0, "port_rcv_errors": 100,
        "local_link_integrity_errors": 0, "excessive_buffer_overrun_errors": 0, "port_xmit_discards": 1000,
    }
    # Link flaps ("lost carrier" / "Link down" of an HCA in the kernel log): this many within the
    # window fail (Azure ND: twice in 6 h).
    ib_flaps_max: PositiveInt = 2
    ib_flap_window_hours: Annotated[float, Field(gt=0, le=720)] = 6.0
    # Filesystems that must be mounted and writable, with free space (e.g. /home, /scratch).
    mounts: list[MountSpec] = []
    # MemTotal may be this fraction below the profile's memory_gib (firmware and kernel reserve some).
    memory_tolerance_fraction: Annotated[float, Field(ge=0, lt=1)] = 0.06
    # Process name (as in /proc/<pid>/comm, 15 chars) of NVIDIA Fabric Manager on NVSwitch nodes;
    # "" = not checked.
    fabric_manager_process: str = "nv-fabricmanage"
    # A hardware clock-event reason (HW slowdown, HW thermal, power brake) must still be set after
    # this many milliseconds to fail (HW slowdown blips on P-state changes).
    clock_event_confirm_ms: Annotated[int, Field(ge=0, le=5000)] = 100
    # Epilog: processes of the job's user outside any Slurm job count as leftovers too (only where
    # users cannot log in outside jobs, e.g. pam_slurm_adopt: else their ssh shells would drain).
    leftover_outside_jobs: bool = False

    @field_validator("xid_actions")
    @classmethod
    def _xid_keys_are_numbers(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if not key.isdigit() or not 1 <= int(key) <= 999:
                raise ValueError(f"XID {key!r} is not a number from 1 to 999")
        return value

    def observed(self) -> list[str]:
        """The checks the site runs in observe mode (`[health.checks.<id>] on_fail = "observe"`):
        run and recorded everywhere, acted on as warnings, paging nobody (health/observe.py)."""
        return sorted(cid for cid, p in self.checks.items() if p.on_fail == "observe")
