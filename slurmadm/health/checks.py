"""The checks: one function per stable kebab-case id, and the declarative action table.

A check returns an `Outcome` (its findings, each "fail" or "warn"; defined with `Ctx` in
outcome.py, below every module of checks); it raises `CannotRun` when it cannot tell (that is
reported as status "error", never as a hardware fault). What happens on a failure (drain, warn,
ignore), in which contexts a check runs and its severity come from CHECKS below, overridden per
site by `[health.checks.<id>]`.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ..record import record
from . import nodechecks
from . import xid as xidmod
from .config import HealthConfig
from .nvml import Nvml
from .outcome import CannotRun, Ctx, Finding, MissingTool, Outcome  # noqa: F401  (checks.Outcome, ...: re-exported)

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (a few ms of every prolog)
if TYPE_CHECKING:
    from typing import Any

ALL_CONTEXTS = ("prolog", "epilog", "periodic", "run")


@record(frozen=True)
class CheckSpec:
    """A registered check: id, contexts, default action and its function."""

    id: str
    title: str
    fn: Callable[[Ctx], Outcome]
    severity: str = "critical"
    on_fail: str = "drain"
    contexts: tuple[str, ...] = ALL_CONTEXTS
    needs_nvml: bool = True
    slow: bool = False  # has its own time limit (nccl_timeout_s), never in `periodic`


def _gpus(ctx: Ctx):
    assert ctx.nvml is not None
    return ctx.nvml.usable


# ------------------------------------------------------------------------------------ checks


def gpu_count(ctx: Ctx) -> Outcome:
    out = Outcome()
    want = ctx.cfg.gpu
    nv = ctx.nvml
    found = len(nv.gpus)
    if found != want.count:
        out.fail(f"found {found} GPUs, profile expects {want.count}")
    for g in nv.gpus:
        if g.handle is None:
            out.fail(f"GPU{g.index} unusable ({g.error})")
            continue
        name = nv.get("nvmlDeviceGetName", g.handle)
        name = name.decode() if isinstance(name, bytes) else name
        if name is not None and name != want.nvml_name:
            out.fail(f"GPU{g.index} is {name!r}, profile expects {want.nvml_name!r}")
    if ctx.state is not None:
        _remember_gpus(ctx)
    out.note = f"{found} x {want.nvml_name}"
    out.value = found
    return out


GPU_INVENTORY_KEY = "gpus"  # node_state `health.gpus`: what repair keys a GPU's incidents by (slurmadm/repair)


def _remember_gpus(ctx: Ctx) -> None:
    """Each GPU's slot and identity (index, PCI bus id, NVML serial, UUID) in the node's state,
    keyed by bus id (NVML renumbers the indexes when a GPU falls off the bus), written only when it
    changes. A GPU not enumerated now keeps its last identity with `present` false."""
    import json

    nv = ctx.nvml
    try:
        kept = {g["bus_id"]: {**g, "present": False} for g in json.loads(ctx.state.get(GPU_INVENTORY_KEY) or "[]")}
    except (ValueError, TypeError, KeyError):
        kept = {}
    for g in nv.gpus:
        if g.handle is None or not g.bus_id:
            continue
        try:
            serial, uuid = nv.get("nvmlDeviceGetSerial", g.handle), nv.get("nvmlDeviceGetUUID", g.handle)
        except Exception:  # noqa: BLE001, S112 - NVMLError of a GPU going away: keep what was read before
            continue
        kept[g.bus_id] = {"index": g.index, "bus_id": g.bus_id, "present": True,
                          "serial": serial.decode() if isinstance(serial, bytes) else serial or "",
                          "uuid": uuid.decode() if isinstance(uuid, bytes) else uuid or ""}
    rows = sorted(kept.values(), key=lambda g: (not g["present"], g["index"], g["bus_id"]))
    ctx.state.set(GPU_INVENTORY_KEY, json.dumps(rows, sort_keys=True))


def ecc_uncorrected(ctx: Ctx) -> Outcome:
    """Volatile (since the last reset) uncorrected errors fail. The aggregate (lifetime) count
    only warns past the site's threshold: it stays above zero after a row remap and reset that
    repaired the memory (row-remap and the XID recovery action judge that)."""
    out = Outcome()
    m = ctx.nvml.mod
    warn_over = ctx.cfg.thresholds.ecc_uncorrected_aggregate_warn
    total = 0
    for g in _gpus(ctx):
        mode = ctx.nvml.get("nvmlDeviceGetEccMode", g.handle)
        if mode is not None and not mode[0]:
            out.fail(f"GPU{g.index} ECC is disabled")
        vol = ctx.nvml.get("nvmlDeviceGetTotalEccErrors", g.handle, m.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                           m.NVML_VOLATILE_ECC)
        if vol:
            out.fail(f"GPU{g.index} volatile uncorrected ECC={vol}")
            total += vol
        agg = ctx.nvml.get("nvmlDeviceGetTotalEccErrors", g.handle, m.NVML_MEMORY_ERROR_TYPE_UNCORRECTED,
                           m.NVML_AGGREGATE_ECC)
        if agg is not None and agg > warn_over and not vol:
            out.warn(f"GPU{g.index} aggregate (lifetime) uncorrected ECC={agg} > {warn_over}")
    out.value = total
    return out


def ecc_corrected(ctx: Ctx) -> Outcome:
    out = Outcome()
    m = ctx.nvml.mod
    limit = ctx.cfg.thresholds.ecc_corrected_volatile_max
    worst = 0
    for g in _gpus(ctx):
        n = ctx.nvml.get("nvmlDeviceGetTotalEccErrors", g.handle, m.NVML_MEMORY_ERROR_TYPE_CORRECTED,
                         m.NVML_VOLATILE_ECC)
        if n is None:
            continue
        worst = max(worst, n)
        if n > limit:
            out.fail(f"GPU{g.index} volatile corrected ECC={n} > {limit}")
    out.value = worst
    return out


def retired_pages(ctx: Ctx) -> Outcome:
    out = Outcome()
    m = ctx.nvml.mod
    limit = ctx.cfg.thresholds.retired_pages_max
    supported = False
    for g in _gpus(ctx):
        pages = 0
        for cause in (m.NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS,
                      m.NVML_PAGE_RETIREMENT_CAUSE_DOUBLE_BIT_ECC_ERROR):
            got = ctx.nvml.get("nvmlDeviceGetRetiredPages", g.handle, cause)
            if got is not None:
                supported = True
                pages += len(got)
        if pages > limit:
            out.fail(f"GPU{g.index} {pages} retired pages > {limit}")
        pending = ctx.nvml.get("nvmlDeviceGetRetiredPagesPendingStatus", g.handle)
        if pending:
            supported = True
            out.fail(f"GPU{g.index} page retirement pending (reset the GPU)")
    if not supported:
        out.skip = "page retirement not supported (this GPU uses row remapping)"
    return out


def row_remap(ctx: Ctx) -> Outcome:
    out = Outcome()
    supported = False
    for g in _gpus(ctx):
        got = ctx.nvml.get("nvmlDeviceGetRemappedRows", g.handle)
        if got is None:
            continue
        supported = True
        corr, unc, pending, failed = got
        if failed:
            out.fail(f"GPU{g.index} row remapping failed (corrected={corr} uncorrected={unc})")
        if pending:
            out.fail(f"GPU{g.index} row remap pending (reset the GPU)")
    if not supported:
        out.skip = "row remapping not supported"
    return out


XID_ACK_KEY = "xid-ack"  # node_state: when an admin resumed a node slurmadm held for a reset-class XID
# node_state: when repair's GPU reset cleared the reset-class XIDs (repair/qualify.py writes it;
# a reboot-class line logged before it still waits for a boot or an acknowledgement)
XID_RESET_ACK_KEY = "xid-reset-ack"
# node_state: the latest time a line the xid check has read can have been logged (xid.latest): a
# run that sees the node drained has seen every line up to then, so an admin's resume after it
# acknowledges them, a whole-second stamp of the very second of the drain included (engine.HELD)
XID_READ_KEY = "xid-read"
XID_KEPT_KEY = "xid-kept"  # node_state: reset-class XID events not yet cleared (JSON)
NVML_FI_DEV_GET_GPU_RECOVERY_ACTION = 230


def _booted(cfg, now: float) -> float:
    """When the node booted: this machine's boot, or later where the log file says so."""
    boot = xidmod.boot_time()
    logged = xidmod.boot_in_log(cfg.xid_source, cfg.node, now)
    return max(boot, logged) if logged is not None else boot


def xid(ctx: Ctx) -> Outcome:
    out = Outcome()
    cfg = ctx.cfg
    try:
        events = xidmod.read_events(cfg.xid_source, cfg.node, ctx.now)
    except FileNotFoundError:
        raise CannotRun(f"xid_source {cfg.xid_source.replace('{node}', cfg.node)} does not exist "
                        "(RHEL-family nodes log to /var/log/messages; or use \"kmsg\" or \"journal\")") from None
    except xidmod.XidSourceError as exc:
        raise CannotRun(str(exc)) from None
    except OSError as exc:
        raise CannotRun(f"cannot read {cfg.xid_source}: {exc.strerror or exc}") from None
    ack = reset_ack = 0.0
    if ctx.state is not None:
        events = xidmod.merge(events, xidmod.from_state(ctx.state.get(XID_KEPT_KEY)))
        try:
            ack = float(ctx.state.get(XID_ACK_KEY) or 0)
        except ValueError:
            ack = 0.0
        try:
            reset_ack = float(ctx.state.get(XID_RESET_ACK_KEY) or 0)
        except ValueError:
            reset_ack = 0.0
        dated = [xidmod.latest(e) for e in events if not e.undated and e.ts <= ctx.now + 60]
        if dated:
            ctx.state.set(XID_READ_KEY, f"{max(dated):.3f}")
    gpu_of: dict[str, int] = {}
    recovery_none: set[str] = set()
    if ctx.nvml is not None:
        for g in ctx.nvml.gpus:
            if not g.bus_id:
                continue
            pci = xidmod.pci_key_from_bus_id(g.bus_id)
            gpu_of[pci] = g.index
            if g.handle is None or ctx.nvml_broken:
                continue
            action = _field(ctx.nvml, g.handle, NVML_FI_DEV_GET_GPU_RECOVERY_ACTION)
            if action == 0:
                recovery_none.add(pci)
            elif action is not None:
                label, verdict, _needs = xidmod.RECOVERY_ACTIONS.get(action, (f"action {action}", "warn", ""))
                text = f"GPU{g.index} NVML recovery action: {label}"
                out.fail(text) if verdict == "fail" else out.warn(text)
    findings = xidmod.summarize(events, now=ctx.now, window_s=cfg.xid_window_minutes * 60,
                                overrides=cfg.xid_actions, boot=_booted(cfg, ctx.now), ack=ack, reset_ack=reset_ack,
                                recovery_none=recovery_none,
                                driver=ctx.nvml.driver_version if ctx.nvml is not None else "")
    pending = 0
    for f in findings:
        if f.verdict not in ("fail", "warn"):
            continue
        where = f"GPU{gpu_of[f.pci]}" if f.pci in gpu_of else f"PCI {f.pci}"
        if f.mig:
            where += f" (MIG {', '.join(f.mig)})"
        times = f" x{f.count}" if f.count > 1 else ""
        text = f"{where} XID {f.xid}{times} {f.name} ({f.action})"
        if f.undated:
            text += f" [logged at an unknown time: {f.undated}]"
        if f.pending and f.needs:
            pending += 1
            when = time.strftime("%Y-%m-%d %H:%M", time.localtime(f.last_ts))
            text += f" at {when}: no GPU {f.needs} seen since"
        out.fail(text) if f.verdict == "fail" else out.warn(text)
    if ctx.state is not None:
        open_needs = {(f.pci, f.xid) for f in findings if f.needs and f.verdict == "fail"}
        # an undated line is re-read from the log each run (at a new "now"): never kept
        keep = [e for e in events if (e.pci, e.xid) in open_needs and not e.undated]
        if keep or ctx.state.get(XID_KEPT_KEY):
            ctx.state.set(XID_KEPT_KEY, xidmod.to_state(keep) if keep else "")
    out.value = sum(f.count for f in findings if f.verdict in ("fail", "warn"))
    serious = sum(1 for f in findings if f.verdict in ("fail", "warn"))
    info = len(findings) - serious
    out.note = (f"{len(events)} XID line(s) in the log, {serious} serious in the last {cfg.xid_window_minutes} min"
                + (f" ({info} informational: application errors or cleared faults)" if info else ""))
    if pending:
        out.note += f", {pending} waiting for a reset"
    undated = sum(1 for e in events if e.undated)
    if undated:
        out.note += f"; {undated} logged at a time the log does not tell (seconds since a boot it does not date)"
    return out


def pcie_link(ctx: Ctx) -> Outcome:
    """Width below the link's max fails. A lower generation fails only while the GPU is busy
    (P0): idle GPUs legitimately train down to save power."""
    out = Outcome()
    nv = ctx.nvml
    want = ctx.cfg.gpu
    for g in _gpus(ctx):
        width = nv.get("nvmlDeviceGetCurrPcieLinkWidth", g.handle)
        max_width = nv.get("nvmlDeviceGetMaxPcieLinkWidth", g.handle)
        gen = nv.get("nvmlDeviceGetCurrPcieLinkGeneration", g.handle)
        max_gen = nv.get("nvmlDeviceGetMaxPcieLinkGeneration", g.handle)
        if width is not None and max_width and width < max_width:
            out.fail(f"GPU{g.index} PCIe x{width} < x{max_width}")
        if max_width is not None and max_width < want.pcie_width:
            out.fail(f"GPU{g.index} PCIe max width x{max_width} < profile x{want.pcie_width}")
        if max_gen is not None and max_gen < want.pcie_gen:
            out.fail(f"GPU{g.index} PCIe max Gen{max_gen} < profile Gen{want.pcie_gen}")
        if gen is not None and max_gen and gen < max_gen:
            pstate = nv.get("nvmlDeviceGetPerformanceState", g.handle)
            if pstate is None or pstate == 0:
                out.fail(f"GPU{g.index} PCIe Gen{gen} < Gen{max_gen} while busy")
    return out


def nvlink(ctx: Ctx) -> Outcome:
    out = Outcome()
    nv = ctx.nvml
    m = nv.mod
    links = ctx.cfg.gpu.nvlinks
    if links == 0:
        out.skip = "profile has no NVLinks"
        return out
    rise_max = ctx.cfg.thresholds.nvlink_error_rise_max
    counters = [m.NVML_NVLINK_ERROR_DL_REPLAY, m.NVML_NVLINK_ERROR_DL_RECOVERY, m.NVML_NVLINK_ERROR_DL_CRC_FLIT]
    inactive_total = 0
    for g in _gpus(ctx):
        down = []
        errors = 0
        for link in range(links):
            try:
                state = m.nvmlDeviceGetNvLinkState(g.handle, link)
            except m.NVMLError_NotSupported:
                state = None
            except m.NVMLError as exc:  # an invalid link index is as bad as a down link
                down.append(f"{link}({exc})")
                continue
            if state is not None and state != m.NVML_FEATURE_ENABLED:
                down.append(str(link))
                continue
            for c in counters:
                errors += nv.get("nvmlDeviceGetNvLinkErrorCounter", g.handle, link, c) or 0
        if down:
            inactive_total += len(down)
            out.fail(f"GPU{g.index} {len(down)}/{links} NVLinks inactive (links {','.join(down)})")
        if ctx.state is not None:
            key = f"nvlink-errors-gpu{g.index}"
            before = ctx.state.get(key)
            if before is not None and errors - int(before) > rise_max:
                out.fail(f"GPU{g.index} NVLink errors rose by {errors - int(before)} (> {rise_max})")
            if before is None or int(before) != errors:
                ctx.state.set(key, str(errors))
    out.value = inactive_total
    return out


def _field(nv: Nvml, handle: Any, field_id: int) -> int | None:
    """One NVML field value (unsigned), or None when unsupported."""
    got = nv.get("nvmlDeviceGetFieldValues", handle, [field_id])
    if not got or got[0].nvmlReturn != 0:
        return None
    return int(got[0].value.ullVal if got[0].valueType == nv.mod.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
               else got[0].value.uiVal)


def thermal(ctx: Ctx) -> Outcome:
    out = Outcome()
    nv = ctx.nvml
    m = nv.mod
    limit = ctx.cfg.thresholds.max_gpu_temp_c
    mem_limit = ctx.cfg.thresholds.max_memory_temp_c
    hottest = 0
    for g in _gpus(ctx):
        temp = nv.get("nvmlDeviceGetTemperature", g.handle, m.NVML_TEMPERATURE_GPU)
        if temp is not None:
            hottest = max(hottest, temp)
            if temp > limit:
                out.fail(f"GPU{g.index} {temp} C > {limit} C")
        hbm = _field(nv, g.handle, m.NVML_FI_DEV_MEMORY_TEMP)
        if hbm is not None and hbm > mem_limit:
            out.fail(f"GPU{g.index} HBM {hbm} C > {mem_limit} C")
    out.value = hottest
    return out


def power(ctx: Ctx) -> Outcome:
    out = Outcome()
    nv = ctx.nvml
    factor = ctx.cfg.thresholds.power_over_limit_factor
    want_w = ctx.cfg.gpu.power_limit_w
    top = 0.0
    for g in _gpus(ctx):
        usage = nv.get("nvmlDeviceGetPowerUsage", g.handle)
        limit = nv.get("nvmlDeviceGetEnforcedPowerLimit", g.handle)
        if usage is None or not limit:
            continue
        top = max(top, usage / 1000)
        if usage > limit * factor:
            out.fail(f"GPU{g.index} draws {usage / 1000:.0f} W > {factor:g} x limit {limit / 1000:.0f} W")
        if abs(limit / 1000 - want_w) > 1:
            out.warn(f"GPU{g.index} power limit {limit / 1000:.0f} W, profile expects {want_w} W")
    out.value = top
    return out


def persistence_mode(ctx: Ctx) -> Outcome:
    out = Outcome()
    m = ctx.nvml.mod
    for g in _gpus(ctx):
        mode = ctx.nvml.get("nvmlDeviceGetPersistenceMode", g.handle)
        if mode is not None and mode != m.NVML_FEATURE_ENABLED:
            out.fail(f"GPU{g.index} persistence mode off")
    return out


def driver_version(ctx: Ctx) -> Outcome:
    out = Outcome()
    have = ctx.nvml.driver_version
    want = ctx.cfg.driver_version
    if have != want:
        out.fail(f"driver {have}, site baseline {want}")
    out.note = have
    return out


def gpu_processes(ctx: Ctx) -> Outcome:
    """Processes still holding GPUs after a job. Slurm has just killed the job, so give them a
    moment (within the check's time limit) to go before calling them leftovers."""
    out = Outcome()
    nv = ctx.nvml
    deadline = time.monotonic() + min(3.0, ctx.cfg.check_timeout_s / 2)
    while True:
        held = {}
        for g in _gpus(ctx):
            procs = list(nv.get("nvmlDeviceGetComputeRunningProcesses", g.handle) or [])
            procs += list(nv.get("nvmlDeviceGetGraphicsRunningProcesses", g.handle) or [])
            if procs:
                held[g.index] = sorted({p.pid for p in procs})
        if not held or time.monotonic() >= deadline:
            break
        time.sleep(0.2)
    for index, pids in held.items():
        out.fail(f"GPU{index} held by pid {','.join(map(str, pids))}")
    out.value = sum(len(p) for p in held.values())
    return out


def software_drift(ctx: Ctx) -> Outcome:
    """The node's cheap software facts (OS image, kernel, loaded driver, NCCL) against the site's
    [software] baseline; `slurmadm fleet drift` covers the rest across the fleet."""
    from pathlib import Path

    from ..fleet.collector import local_facts

    out = Outcome()
    want = ctx.cfg.software_baseline
    if not want:
        out.skip = "no [software] baseline"
        return out
    if not Path("/proc/driver/nvidia/version").exists():
        out.skip = "no NVIDIA kernel module loaded (not a GPU node)"
        return out
    have = local_facts()
    for fact, value in sorted(want.items()):
        if have.get(fact, "(none)") != value:
            out.fail(f"{fact} {have.get(fact, '(none)')} != {value}")
    out.note = ", ".join(f"{k} {v}" for k, v in sorted(have.items()))
    return out


def nccl_allreduce(ctx: Ctx) -> Outcome:
    from . import nccl

    return nccl.check(ctx)


CHECKS: list[CheckSpec] = [
    CheckSpec("gpu-count", "GPU count and model match the node profile", gpu_count),
    CheckSpec("ecc-uncorrected", "no volatile uncorrected ECC errors (lifetime count warns past a threshold)",
              ecc_uncorrected),
    CheckSpec("row-remap", "no pending or failed row remapping", row_remap),
    CheckSpec("xid", "no serious XID in the kernel log within the window", xid, needs_nvml=False),
    CheckSpec("nvlink", "every NVLink active, error counters not rising", nvlink),
    CheckSpec("pcie-link", "PCIe link at full width and generation", pcie_link),
    CheckSpec("thermal", "GPU and HBM temperature below limits", thermal),
    CheckSpec("clock-events", "no hardware clock-event reason (HW slowdown, HW thermal, power brake) on two samples",
              nodechecks.clock_events),
    CheckSpec("fabric", "NVSwitch fabric registration complete and healthy, Fabric Manager running",
              nodechecks.fabric),
    CheckSpec("ecc-corrected", "corrected ECC errors below the threshold", ecc_corrected, severity="warning"),
    CheckSpec("retired-pages", "retired pages below the threshold, none pending", retired_pages),
    CheckSpec("power", "power draw within the enforced limit", power, severity="warning"),
    CheckSpec("driver-version", "driver matches the site baseline", driver_version, severity="warning"),
    CheckSpec("persistence-mode", "persistence mode on", persistence_mode, severity="warning", on_fail="warn"),
    CheckSpec("software-drift", "OS image, kernel, driver and NCCL match the [software] baseline", software_drift,
              severity="warning", on_fail="warn", contexts=("periodic", "run"), needs_nvml=False),
    CheckSpec("gpu-processes", "no process holds a GPU after the job", gpu_processes, contexts=("epilog",)),
    CheckSpec("infiniband", "each compute HCA port ACTIVE/LinkUp at the profile's rate, error counters and "
              "link flaps within limits", nodechecks.infiniband, needs_nvml=False),
    CheckSpec("host-memory", "memory size and DIMMs match the profile, no uncorrected EDAC errors",
              nodechecks.host_memory, needs_nvml=False),
    CheckSpec("mounts", "required filesystems mounted, writable, with free space", nodechecks.mounts,
              needs_nvml=False),
    CheckSpec("leftover-processes", "no process of the finished job's user left behind", nodechecks.leftover_processes,
              contexts=("epilog",), needs_nvml=False),
    CheckSpec("nccl-allreduce", "8-GPU all-reduce bus bandwidth above the model's floor", nccl_allreduce,
              contexts=("prolog", "epilog"), slow=True),
]
BY_ID: dict[str, CheckSpec] = {c.id: c for c in CHECKS}

# The site settings each check reads besides [health.checks.<id>] (shown by `slurmadm health checks`).
SETTINGS: dict[str, tuple[str, ...]] = {
    "gpu-count": ("profiles.*.gpus.count", "profiles.*.gpus.nvml_name"),
    "ecc-uncorrected": ("health.models.*.ecc_uncorrected_aggregate_warn",),
    "xid": ("health.xid_source", "health.xid_window_minutes", "health.xid_actions"),
    "nvlink": ("profiles.*.gpus.nvlinks", "health.models.*.nvlink_error_rise_max"),
    "pcie-link": ("profiles.*.gpus.pcie_gen", "profiles.*.gpus.pcie_width"),
    "thermal": ("health.models.*.max_gpu_temp_c", "health.models.*.max_memory_temp_c"),
    "clock-events": ("health.clock_event_confirm_ms",),
    "fabric": ("profiles.*.gpus.nvswitches", "health.fabric_manager_process"),
    "ecc-corrected": ("health.models.*.ecc_corrected_volatile_max",),
    "retired-pages": ("health.models.*.retired_pages_max",),
    "power": ("profiles.*.gpus.power_limit_w", "health.models.*.power_over_limit_factor"),
    "driver-version": ("software.driver_version",),
    "nccl-allreduce": ("health.models.*.nccl_busbw_floor_gbps", "health.nccl_fresh_hours", "health.nccl_size_mib"),
    "infiniband": ("profiles.*.nics.hcas", "profiles.*.nics.port", "profiles.*.nics.gbps", "health.sysfs_root",
                   "health.ib_counter_rise_max", "health.ib_flaps_max", "health.ib_flap_window_hours"),
    "host-memory": ("profiles.*.memory_gib", "profiles.*.dimms", "health.memory_tolerance_fraction"),
    "mounts": ("health.mounts",),
    "leftover-processes": ("health.leftover_outside_jobs",),
}


@record(frozen=True)
class Policy:
    """A check's effective action table entry for one site."""

    spec: CheckSpec
    severity: str
    on_fail: str
    on_error: str
    contexts: tuple[str, ...]
    timeout_s: float


def policy(spec: CheckSpec, cfg: HealthConfig) -> Policy:
    over = cfg.policies.get(spec.id, {})
    default_timeout = cfg.nccl_timeout_s if spec.slow else cfg.check_timeout_s
    return Policy(
        spec=spec,
        severity=over.get("severity", spec.severity),
        on_fail=over.get("on_fail", spec.on_fail),
        on_error=over.get("on_error", cfg.on_error),
        contexts=tuple(over.get("contexts", spec.contexts)),
        timeout_s=float(over.get("timeout_s", default_timeout)),
    )


def select(cfg: HealthConfig, context: str, only: list[str] | None = None) -> list[Policy]:
    """The checks to run: those whose contexts include `context`, or exactly `only`."""
    from ..errors import UsageError

    if only:
        unknown = [c for c in only if c not in BY_ID]
        if unknown:
            raise UsageError(f"--checks: unknown check id(s) {', '.join(unknown)} (known: {', '.join(BY_ID)})")
        return [policy(BY_ID[c], cfg) for c in BY_ID if c in only]
    return [p for p in (policy(c, cfg) for c in CHECKS) if context in p.contexts]
