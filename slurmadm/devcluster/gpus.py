"""Stand-in GPUs: per-node NVML state with injectable faults, served by a fake libnvidia-ml.so.1.

`build_library()` compiles `fakenvml/fakenvml.c` into `libnvidia-ml.so.1`. With the variables from
`env_for()` (LD_LIBRARY_PATH, SLURMADM_FAKE_NVML_DIR, optionally SLURMADM_FAKE_NVML_NODE) the real
pynvml loads it, and every NVML call answers from `<dir>/<node>.state`. Slurm sets SLURMD_NODENAME
for prologs, epilogs and jobs, so one directory serves every node of the dev cluster.

Files per node in the state directory:
- `<node>.json`  canonical state: the healthy baseline of each GPU plus the injected faults.
- `<node>.state` rendered from the JSON after every change (flat key=value, atomic rename); the
                 library re-reads it whenever it changes, so running processes see new faults.
- `<node>.kmsg`  kernel-log lines (journalctl short-iso style) for XID faults. Clearing an `xid`
                 fault does not remove its lines: a real kernel log does not forget; the health
                 check's time window (`health.xid_window_minutes`) ages them out. Point
                 `health.xid_source` at `<dir>/{node}.kmsg`.

GPU numbers in `inject`/`clear` are physical slots (minor number, /dev/nvidiaN). When a GPU is
missing, NVML enumerates the others without it, so the NVML index of later GPUs shifts down, as
on real hardware. Faults are orthogonal: an `xid` 79 only writes the log line; combine it with
`missing-gpu` or `hang` for the full picture.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..files import write_atomic
from ..proc import run
from ..site import NodeProfile

LIB_NAME = "libnvidia-ml.so.1"
SOURCE = Path(__file__).parent / "fakenvml" / "fakenvml.c"
CFLAGS = ["-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Wl,-soname," + LIB_NAME]
STATE_FORMAT = 1

# Clock event (throttle) reason bits, as in nvml.h / pynvml.
SW_POWER_CAP = 0x04
HW_SLOWDOWN = 0x08
SW_THERMAL = 0x20
HW_THERMAL = 0x40
HW_POWER_BRAKE = 0x80
SUPPORTED_REASONS = 0x1FF
# healthMask of a healthy fabric GPU: degraded bw / route recovery / route unhealthy / access
# timeout recovery all FALSE (2), incorrect configuration NONE (1) (pynvml NVML_GPU_FABRIC_HEALTH_MASK_*)
FABRIC_HEALTHY = 2 | 2 << 2 | 2 << 4 | 2 << 6 | 1 << 8

_NODE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]*$")
_SERIAL_RE = re.compile(r"^[A-Za-z0-9]{4,30}$")
_UUID_NS = uuid.UUID("4f0b6f8e-6c53-4d0c-9d8e-5e1f2a7c9b10")
_GIB = 1 << 30
_MIB = 1 << 20


@dataclass(frozen=True)
class _Model:
    arch: int  # nvmlDeviceArchitecture_t
    cc: tuple[int, int]
    pci_device_id: int
    sm_max: int
    mem_max: int
    video_max: int
    nvlink_version: int  # nvmlNvlinkVersion_t
    vbios: str
    reserved_mib: int
    board_part: str  # nvidia-smi -q "Board Part Number" (tests/fixtures/parts/SOURCES.md)


# Facts per profile `gpus.model`; models not listed get the B200 facts.
_MODELS = {
    # board part numbers: B200 and H100 SXM from public `nvidia-smi -q` output (see
    # tests/fixtures/parts/SOURCES.md); the H200's is the H100 SXM board's pattern, not from a sample
    "b200": _Model(10, (10, 0), 0x290110DE, 1965, 3996, 1965, 7, "97.00.82.00.0F", 672, "692-2G525-0225-001"),
    "h200": _Model(9, (9, 0), 0x233510DE, 1980, 3201, 1965, 6, "96.00.AF.00.01", 566, "692-2G520-0280-000"),
    "h100": _Model(9, (9, 0), 0x233010DE, 1980, 2619, 1755, 6, "96.00.99.00.01", 566, "692-2G520-0200-000"),
}
# PCI bus numbers of the 8 GPUs on an HGX B200 baseboard (as nvidia-smi lists them).
_HGX_BUSES = [0x1B, 0x43, 0x52, 0x61, 0x9D, 0xC3, 0xD1, 0xDF]
_BRAND_NVIDIA = 14


# ------------------------------------------------------------------------------ the library


def build_library(out_dir: str | os.PathLike[str]) -> Path:
    """Compile the stand-in NVML into `out_dir/libnvidia-ml.so.1`; only when the source changed.

    Safe when several processes build at once: each compiles to its own temp file and renames it
    into place, so a process that already loaded the library keeps its copy.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    lib = out_dir / LIB_NAME
    stamp = out_dir / (LIB_NAME + ".sha256")
    digest = hashlib.sha256(SOURCE.read_bytes() + " ".join(CFLAGS).encode()).hexdigest()
    if lib.exists() and stamp.exists() and stamp.read_text().strip() == digest:
        return lib
    gcc = shutil.which("gcc")
    if gcc is None:
        raise UsageError("gcc not found: install gcc (apt-get install gcc) to build the stand-in NVML library")
    fd, tmp = tempfile.mkstemp(dir=out_dir, prefix=f".{LIB_NAME}.", suffix=".tmp")
    os.close(fd)
    try:
        run([gcc, *CFLAGS, "-o", tmp, str(SOURCE), "-lpthread"], timeout=120)
        os.chmod(tmp, 0o755)
        os.replace(tmp, lib)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    # Loaders that open the unversioned name (Rust nvml-wrapper, used by GCM's gni_lib) find it too.
    link_tmp = out_dir / f".libnvidia-ml.so.{os.getpid()}.tmp"
    with contextlib.suppress(FileNotFoundError):
        link_tmp.unlink()
    link_tmp.symlink_to(LIB_NAME)
    os.replace(link_tmp, out_dir / "libnvidia-ml.so")
    write_atomic(stamp, digest + "\n")
    return lib


def env_for(
    state_dir: str | os.PathLike[str], lib_dir: str | os.PathLike[str], node: str | None = None
) -> dict[str, str]:
    """Environment that makes pynvml load the stand-in and read `state_dir` (as `node`, if given;
    else SLURMD_NODENAME or the short hostname). Paths are made absolute: Slurm runs prologs and
    jobs in other directories."""
    ld = os.environ.get("LD_LIBRARY_PATH")
    env = {
        "LD_LIBRARY_PATH": os.path.abspath(lib_dir) + (":" + ld if ld else ""),
        "SLURMADM_FAKE_NVML_DIR": os.path.abspath(state_dir),
    }
    if node is not None:
        env["SLURMADM_FAKE_NVML_NODE"] = _check_node(node)
    return env


# ------------------------------------------------------------------------------ healthy state


def healthy_gpu(node: str, index: int, profile: NodeProfile) -> dict[str, Any]:
    """The baseline of one GPU: stable identity per node/GPU, healthy idle readings."""
    spec = profile.gpus
    model = _MODELS.get(spec.model, _MODELS["b200"])
    h = int(hashlib.sha256(f"{node}/{index}".encode()).hexdigest(), 16)
    temp = 35 + h % 11
    limit_mw = spec.power_limit_w * 1000
    socket = spec.sockets[index]
    return {
        "present": 1,
        "hang": 0,
        "name": spec.nvml_name,
        "uuid": f"GPU-{uuid.uuid5(_UUID_NS, f'{node}/{index}')}",
        "serial": f"1655{h % 10**9:09d}",
        "board_part_number": model.board_part,
        "pci_bus_id": f"00000000:{_pci_bus(index, spec.count):02X}:00.0",
        "pci_device_id": model.pci_device_id,
        "pci_subsystem_id": (model.pci_device_id & 0xFFFF) | 0x17000000,
        "vbios": model.vbios,
        "minor": index,
        "arch": model.arch,
        "brand": _BRAND_NVIDIA,
        "cc_major": model.cc[0],
        "cc_minor": model.cc[1],
        "mem_total": spec.memory_gib * _GIB,
        "mem_used": 0,
        "mem_reserved": model.reserved_mib * _MIB,
        "temp_gpu": temp,
        "temp_mem": temp + 3 + h % 5,
        "temp_shutdown": 92,
        "temp_slowdown": 89,
        "temp_gpu_max": 87,
        "temp_mem_max": 95,
        "power_mw": limit_mw * 12 // 100 + (h >> 8) % 20_000,
        "power_limit_mw": limit_mw,
        "power_enforced_mw": limit_mw,
        "power_default_mw": limit_mw,
        "power_min_mw": limit_mw // 5,
        "power_max_mw": limit_mw,
        "energy_mj": 10**9 + (h >> 16) % 10**9,
        "energy_epoch": 0,  # set by write_healthy
        "clock_sm": model.sm_max,
        "clock_sm_max": model.sm_max,
        "clock_mem": model.mem_max,
        "clock_mem_max": model.mem_max,
        "clock_video": model.video_max,
        "clock_video_max": model.video_max,
        "clock_app_sm": model.sm_max,
        "clock_app_mem": model.mem_max,
        "clock_reasons": 0,
        "clock_reasons_supported": SUPPORTED_REASONS,
        "util_gpu": 0,
        "util_mem": 0,
        "pstate": 0,
        "persistence": 1,
        "ecc_mode": 1,
        "ecc_sbe_vol": 0,
        "ecc_dbe_vol": 0,
        "ecc_sbe_agg": 0,
        "ecc_dbe_agg": 0,
        "retired_sbe": 0,
        "retired_dbe": 0,
        "retired_pending": 0,
        "remap_cor": 0,
        "remap_unc": 0,
        "remap_pending": 0,
        "remap_failure": 0,
        "pcie_gen": spec.pcie_gen,
        "pcie_gen_max": spec.pcie_gen,
        "pcie_gen_gpu_max": spec.pcie_gen,
        "pcie_width": spec.pcie_width,
        "pcie_width_max": spec.pcie_width,
        "pcie_replay": 0,
        "nvlink_count": spec.nvlinks,
        "nvlink_version": model.nvlink_version,
        "nvlink_up": "1" * spec.nvlinks,
        "nvlink_err": {},
        "numa_node": socket,
        "cpus": socket_cpulist(profile, socket),
        "procs": [],
        "graphics_procs": [],
        # NVSwitch fabric (NVML_GPU_FABRIC_STATE_COMPLETED, success, every health field "false"/none)
        "fabric_state": 3 if spec.nvswitches else 0,
        "fabric_status": 0,
        "fabric_health": FABRIC_HEALTHY,
        "recovery_action": 0,
    }


def _pci_bus(index: int, count: int) -> int:
    if count == len(_HGX_BUSES):
        return _HGX_BUSES[index]
    return 0x18 + index * (0xE0 // count)


def socket_cpulist(profile: NodeProfile, socket: int) -> str:
    """Linux CPU numbering: all sockets' first hardware threads, then the SMT siblings."""
    per, total = profile.cores_per_socket, profile.cores
    ranges = [(t * total + socket * per, t * total + (socket + 1) * per - 1) for t in range(profile.threads_per_core)]
    return ",".join(f"{lo}-{hi}" if hi > lo else str(lo) for lo, hi in ranges)


def write_healthy(
    state_dir: str | os.PathLike[str],
    node: str,
    profile: NodeProfile,
    *,
    driver_version: str,
    cuda_version: str = "12.8",
    now: datetime | None = None,
) -> dict[str, Any]:
    """(Re)write `node` as healthy: every GPU present, no faults. Keeps the kernel log."""
    node = _check_node(node)
    cuda = re.fullmatch(r"(\d+)\.(\d+)", cuda_version)
    if not cuda:
        raise UsageError(f"cuda_version {cuda_version!r} is not MAJOR.MINOR (e.g. 12.8)")
    if not re.fullmatch(r"\d+(\.\d+)+", driver_version):
        raise UsageError(f"driver_version {driver_version!r} is not a driver version (e.g. 570.133.20)")
    epoch = int((now or datetime.now(timezone.utc)).timestamp())
    gpus = [healthy_gpu(node, i, profile) for i in range(profile.gpus.count)]
    for g in gpus:
        g["energy_epoch"] = epoch
    state = {
        "format": STATE_FORMAT,
        "node": node,
        "model": profile.gpus.model,
        "driver_version": driver_version,
        "nvml_version": f"{cuda.group(1)}.{driver_version}",
        "cuda_driver_version": int(cuda.group(1)) * 1000 + int(cuda.group(2)) * 10,
        "gpus": gpus,
        "faults": [],
    }
    d = Path(state_dir)
    d.mkdir(parents=True, exist_ok=True)
    with _locked(d, node):
        _save(d, node, state)
        kmsg_path(d, node).touch()
    return state


# ------------------------------------------------------------------------------ fault kinds


@dataclass(frozen=True)
class FaultKind:
    name: str
    help: str
    # Changes one GPU's rendered state, given the canonical value.
    apply: Callable[[dict[str, Any], Any], None]
    # What the value means; None: the kind takes no value.
    value: str | None = None
    # Used when no value is given; None: a value is required; a callable derives it from the GPU.
    default: Any = None
    # Largest integer value (a callable: from the GPU).
    hi: int | Callable[[dict[str, Any]], int] = 10**12
    # For values that are not integers: (kind, value, gpu) -> canonical value.
    parse_value: Callable[[FaultKind, Any, dict[str, Any]], Any] | None = None
    # What a GPU reset (`nvidia-smi --gpu-reset`) does to the fault: "keep" (hardware or the
    # environment: a reset does not help), "clear" (volatile state), or a callable
    # value -> "keep" | "clear" | {counter: n} (cleared, leaving lifetime counters behind; see `reset`).
    reset: str | Callable[[Any], str | dict[str, int]] = "keep"

    def parse(self, value: Any, gpu: dict[str, Any]) -> Any:
        """Check the user's value (None, int or str); return the canonical (JSON) value."""
        if self.value is None:
            if value is not None:
                raise UsageError(f"fault {self.name} takes no value (got {value!r})")
            return None
        if value is None:
            if self.default is None:
                raise UsageError(f"fault {self.name} needs a value ({self.value})")
            value = self.default(gpu) if callable(self.default) else self.default
        if self.parse_value is not None:
            return self.parse_value(self, value, gpu)
        return self._int(value, self.hi(gpu) if callable(self.hi) else self.hi)

    def _int(self, value: Any, hi: int) -> int:
        bad = UsageError(f"fault {self.name}: value {value!r} is not a number ({self.value})")
        if isinstance(value, bool) or not isinstance(value, (int, str)):
            raise bad
        try:
            n = int(value)
        except ValueError:
            raise bad from None
        if not 1 <= n <= hi:
            raise UsageError(f"fault {self.name}: value {n} is outside 1..{hi} ({self.value})")
        return n


def _pcie_link(kind: FaultKind, value: Any, gpu: dict[str, Any]) -> str:
    m = re.fullmatch(r"(?:gen)?(\d+)\s*x\s*(\d+)", str(value).strip().lower())
    if not m:
        raise UsageError(f"fault {kind.name}: value {value!r} is not GENxWIDTH (e.g. 3x8)")
    gen, width = int(m.group(1)), int(m.group(2))
    top = (gpu["pcie_gen_max"], gpu["pcie_width_max"])
    if not 1 <= gen <= top[0] or width not in (1, 2, 4, 8, 16, 32) or width > top[1]:
        raise UsageError(f"fault {kind.name}: {gen}x{width} is not a link this GPU can train to (max {top[0]}x{top[1]})")
    if (gen, width) == top:
        raise UsageError(f"fault {kind.name}: {gen}x{width} is the healthy link, not a degraded one")
    return f"{gen}x{width}"


def _add(*keys: str) -> Callable[[dict[str, Any], int], None]:
    def apply(gpu: dict[str, Any], n: int) -> None:
        for k in keys:
            gpu[k] += n

    return apply


def _set(**values: Any) -> Callable[[dict[str, Any], Any], None]:
    def apply(gpu: dict[str, Any], _value: Any) -> None:
        gpu.update(values)

    return apply


def _set_value(key: str) -> Callable[[dict[str, Any], Any], None]:
    def apply(gpu: dict[str, Any], value: Any) -> None:
        gpu[key] = value

    return apply


def _slow(gpu: dict[str, Any], reasons: int) -> None:
    gpu["clock_reasons"] |= reasons
    gpu["clock_sm"] = min(gpu["clock_sm"], gpu["clock_sm_max"] // 2)


def _apply_thermal(gpu: dict[str, Any], temp: int) -> None:
    gpu["temp_gpu"] = temp
    _slow(gpu, SW_THERMAL | HW_THERMAL | HW_SLOWDOWN)


LOADED = "loaded."  # `gpu.N.loaded.KEY`: what GPU N shows only under load (fakenvml.c, `<node>.load`)


def _apply_thermal_under_load(gpu: dict[str, Any], temp: int) -> None:
    """Cool and unthrottled at rest, so every health check passes; under a stress (the node's
    `<node>.load` file, written by the burn-in's stress) over temperature with thermal and HW
    slowdown, SM clock halved: a board with a failing cold plate or fan."""
    gpu[LOADED + "temp_gpu"] = temp
    gpu[LOADED + "clock_reasons"] = gpu["clock_reasons"] | SW_THERMAL | HW_THERMAL | HW_SLOWDOWN
    gpu[LOADED + "clock_sm"] = min(gpu["clock_sm"], gpu["clock_sm_max"] // 2)


def _apply_power(gpu: dict[str, Any], watts: int) -> None:
    gpu["power_mw"] = watts * 1000
    gpu["clock_reasons"] |= SW_POWER_CAP


def _apply_pcie(gpu: dict[str, Any], link: str) -> None:
    gen, width = link.split("x")
    gpu["pcie_gen"], gpu["pcie_width"] = int(gen), int(width)


def _apply_nvlink_down(gpu: dict[str, Any], n: int) -> None:
    gpu["nvlink_up"] = "0" * n + gpu["nvlink_up"][n:]


def _apply_nvlink_errors(gpu: dict[str, Any], n: int) -> None:
    counters = gpu["nvlink_err"].setdefault("0", [0, 0, 0, 0, 0])  # replay, recovery, CRC flit, CRC data, ECC
    counters[0] += n
    counters[2] += n


def _apply_retired(gpu: dict[str, Any], n: int) -> None:
    gpu["retired_dbe"] += n
    gpu["retired_pending"] = 1


_FABRIC = {
    "not-started": {"fabric_state": 1},
    "in-progress": {"fabric_state": 2},
    "failed": {"fabric_state": 3, "fabric_status": 999},
    "degraded": {"fabric_health": (FABRIC_HEALTHY & ~0x3) | 1},  # DEGRADED_BW_TRUE
    "route-recovery": {"fabric_health": (FABRIC_HEALTHY & ~0xC) | 1 << 2},  # ROUTE_RECOVERY_TRUE (warn)
}
_CLOCK_EVENTS = {"hw-slowdown": HW_SLOWDOWN, "hw-thermal": HW_THERMAL, "power-brake": HW_POWER_BRAKE,
                 "sw-power-cap": SW_POWER_CAP}


def _choice(table: dict[str, Any]) -> Callable[[FaultKind, Any, dict[str, Any]], str]:
    def parse(kind: FaultKind, value: Any, _gpu: dict[str, Any]) -> str:
        if str(value) not in table:
            raise UsageError(f"fault {kind.name}: value {value!r} is not one of {', '.join(table)}")
        return str(value)

    return parse


def _apply_fabric(gpu: dict[str, Any], what: str) -> None:
    if gpu["fabric_state"] == 0:
        raise UsageError("fault fabric: this GPU's profile has no NVSwitches (gpus.nvswitches = 0)")
    gpu.update(_FABRIC[what])


def _apply_clock_event(gpu: dict[str, Any], what: str) -> None:
    gpu["clock_reasons"] |= _CLOCK_EVENTS[what]
    if what != "sw-power-cap":
        gpu["clock_sm"] = min(gpu["clock_sm"], gpu["clock_sm_max"] // 2)


_XID_VALUE = re.compile(r"^(\d{1,3})(?::(mig|reset|reboot|none|[A-Z][A-Z0-9_]*:0x[0-9a-fA-F]{1,8}(?::fatal)?))?$")


def _xid_value(kind: FaultKind, value: Any, _gpu: dict[str, Any]) -> Any:
    """`79`, `94:mig` (MIG-attributed line), `144:SAW_MVB:0x8[:fatal]` (NVLink5 sub-code),
    `154:reset|reboot|none` (recovery action changed to ...)."""
    if isinstance(value, int) and not isinstance(value, bool):
        value = str(value)
    m = _XID_VALUE.match(str(value).strip()) if isinstance(value, str) else None
    if not m or not 1 <= int(m.group(1)) <= 999:
        raise UsageError(f"fault {kind.name}: value {value!r} is not a number or XID form (e.g. 79, 94:mig, "
                         "144:SAW_MVB:0x8, 154:reset)")
    if m.group(2) in ("reset", "reboot", "none") and m.group(1) != "154":
        raise UsageError(f"fault {kind.name}: {m.group(2)} only goes with XID 154 (recovery action)")
    return int(m.group(1)) if m.group(2) is None else f"{m.group(1)}:{m.group(2)}"


def _apply_xid(gpu: dict[str, Any], value: Any) -> None:
    """As a driver with Xid 154 linkage (R565+) does: an XID whose catalog action is a reset or
    reboot also sets NVML's recovery-action field; `154:none` (a reset) clears it."""
    from ..health import xid as xidmod

    code, _, variant = str(value).partition(":")
    if code == "154":
        gpu["recovery_action"] = {"none": 0, "reset": 1, "reboot": 2}.get(variant, gpu["recovery_action"])
        return
    entry = xidmod.catalog().get(int(code))
    if entry is None or not entry.linkage:
        return
    text = ""
    if variant and variant != "mig":
        unit, status, *fatal = variant.split(":")
        text = f"{unit} {'Fatal' if fatal else 'Nonfatal'} XC0 i0 Link 0 (0x00000001 0x{int(status, 16):08x})"
    needs = xidmod.classify_event(int(code), text).needs
    if needs:
        gpu["recovery_action"] = max(gpu["recovery_action"], 2 if needs == "reboot" else 1)


def _apply_busy(gpu: dict[str, Any], percent: int) -> None:
    gpu["util_gpu"], gpu["util_mem"] = percent, percent // 2


def _apply_leftover(gpu: dict[str, Any], pid: int) -> None:
    gpu["procs"].append([pid, _GIB])


def _xid_on_reset(value: Any) -> str:
    """A reset clears an XID's pending state (and the recovery action it set), unless the catalog
    says only a node reboot recovers from it."""
    from ..health import xid as xidmod

    code, _, variant = str(value).partition(":")
    if code == "154":
        return "keep" if variant == "reboot" else "clear"
    text = ""
    if variant and variant != "mig":
        unit, status, *fatal = variant.split(":")
        text = f"{unit} {'Fatal' if fatal else 'Nonfatal'} XC0 i0 Link 0 (0x00000001 0x{int(status, 16):08x})"
    return "keep" if xidmod.classify_event(int(code), text).needs == "reboot" else "clear"


def _kept_by_reset(_gpu: dict[str, Any], counters: dict[str, int]) -> None:
    for key, n in counters.items():
        gpu_value = _gpu.get(key, 0)
        _gpu[key] = gpu_value + n


def _not_injectable(kind: FaultKind, _value: Any, _gpu: dict[str, Any]) -> Any:
    raise UsageError(f"fault {kind.name}: written by a GPU reset, not injected")


def _corrupt(gpu: dict[str, Any], bit: int) -> None:
    gpu["kat_corrupt"] = bit


def _replace_only(_gpu: dict[str, Any], _value: Any) -> None:
    raise AssertionError("replace changes the slot's part; it is never a fault record")


def _serial_value(kind: FaultKind, value: Any, _gpu: dict[str, Any]) -> str:
    text = str(value).strip()
    if not _SERIAL_RE.match(text):
        raise UsageError(f"fault {kind.name}: value {value!r} is not a GPU serial (digits and letters, 4-30)")
    return text


_KINDS = [
    FaultKind("ecc-uncorrected", "uncorrectable (DBE) ECC errors, volatile and aggregate; a reset clears the volatile count",
              _add("ecc_dbe_vol", "ecc_dbe_agg"), "error count", 1, reset=lambda n: {"ecc_dbe_agg": n}),
    FaultKind("ecc-corrected", "correctable (SBE) ECC errors, volatile and aggregate; a reset clears the volatile count",
              _add("ecc_sbe_vol", "ecc_sbe_agg"), "error count", 60_000_000, reset=lambda n: {"ecc_sbe_agg": n}),
    FaultKind("row-remap-pending", "an uncorrectable row marked for remapping, GPU reset pending (a reset applies it)",
              _set(remap_pending=1, remap_unc=1), reset=lambda _v: {"remap_unc": 1}),
    FaultKind("row-remap-failed", "row remapping failed (no spare rows left); a reset does not help",
              _set(remap_failure=1, remap_unc=1)),
    FaultKind("retired-pages", "pages retired for DBEs, retirement pending (a reset retires them)", _apply_retired,
              "page count", 11, 512, reset=lambda n: {"retired_dbe": n}),
    FaultKind("xid", "an XID line in the node's kernel log; a reset/reboot-class XID also sets NVML's recovery action "
              "(a reset clears all but reboot-class ones)",
              _apply_xid,
              "XID: 79, 94:mig, 144:SAW_MVB:0x8[:fatal], 154:reset|reboot|none", 79, 999, parse_value=_xid_value,
              reset=_xid_on_reset),
    FaultKind("ecc-aggregate", "lifetime (aggregate) uncorrectable ECC errors only, as after a repaired row remap",
              _add("ecc_dbe_agg"), "error count", 1),
    FaultKind("fabric", "NVSwitch fabric registration state or health (a reset registers the GPU again)", _apply_fabric,
              "not-started, in-progress, failed, degraded, route-recovery", "not-started",
              parse_value=_choice(_FABRIC), reset="clear"),
    FaultKind("clock-event", "a clock-event reason without over-temperature (SM clock halved unless sw-power-cap)",
              _apply_clock_event, "hw-slowdown, hw-thermal, power-brake, sw-power-cap", "power-brake",
              parse_value=_choice(_CLOCK_EVENTS)),
    FaultKind("recovery-action", "NVML's GPU recovery action field (1 GPU reset, 2 node reboot, 4 drain and reset); "
              "a reset clears all but 2 and 7", _set_value("recovery_action"), "recovery action", 1, 7,
              reset=lambda v: "keep" if v in (2, 7) else "clear"),  # 2, 7: a node or system reboot
    FaultKind("pcie-degraded", "PCIe link trained below its maximum", _apply_pcie, "GENxWIDTH", "3x8",
              parse_value=_pcie_link),
    FaultKind("pcie-replay", "PCIe replay counter (a reset zeroes it)", _add("pcie_replay"), "replay count", 1000,
              2**32 - 1, reset="clear"),
    FaultKind("nvlink-down", "NVLinks inactive, counting from link 0", _apply_nvlink_down, "links down", 1,
              lambda g: g["nvlink_count"]),
    FaultKind("nvlink-errors", "NVLink replay and CRC errors on link 0 (a reset zeroes them)", _apply_nvlink_errors,
              "error count", 100, reset="clear"),
    FaultKind("thermal", "GPU over temperature; thermal and HW slowdown active, SM clock halved", _apply_thermal,
              "degrees C", 95, 150),
    FaultKind("thermal-under-load", "cool at rest (health passes); under the burn-in's stress over temperature, "
              "thermal and HW slowdown active, SM clock halved (a failing cold plate or fan)",
              _apply_thermal_under_load, "degrees C under load", 95, 150),
    FaultKind("memory-thermal", "HBM over temperature", _set_value("temp_mem"), "degrees C", 100, 150),
    FaultKind("power", "power draw over the enforced limit; SW power cap active", _apply_power, "watts",
              lambda g: g["power_enforced_mw"] * 5 // 4000, 10_000),
    FaultKind("clocks-throttle", "HW slowdown active, SM clock halved", lambda g, _v: _slow(g, HW_SLOWDOWN)),
    FaultKind("persistence-off", "persistence mode disabled", _set(persistence=0)),
    FaultKind("leftover-process", "a compute process holding 1 GiB of the GPU (a reset is refused: in use)",
              _apply_leftover, "pid of the process", None, 4_194_304),
    FaultKind("busy", "a workload keeps the GPU busy (utilisation, and memory-controller load at half of it)",
              _apply_busy, "utilisation percent", 90, 100),
    FaultKind("missing-gpu", "the GPU fell off the bus: not enumerated, old handles report GPU lost (a reset fails)",
              _set(present=0)),
    FaultKind("hang", "every NVML call on the GPU blocks until cleared (or an hour) or the GPU is reset", _set(hang=1),
              reset="clear"),
    # a straggler: passes every check, only slower (read by slurmadm.burnin.node, STANDIN_SLOWDOWN_KEY)
    FaultKind("slow", "the node's burn-in stress throughput and single-node all-reduce are this many percent "
              "slower (a straggler: no check fails; on any GPU, it slows the node)",
              _set_value("burnin_slowdown_pct"), "percent slower", 30, 95),
    # issue 34: the repair ladder's reset step and its qualification gate
    FaultKind("reset-fail", "the next GPU reset of this GPU fails (nvidia-smi exit 255) and changes nothing",
              lambda _g, _v: None),
    FaultKind("corrupt", "silent data corruption: the GPU's known-answer compute result has this bit flipped "
              "(1 = lowest bit of the first byte; slurmadm.repair.kat); a reset does not help",
              _corrupt, "bit number", 1, 8 * 8 * 32 * 32),
    FaultKind("replace", "the GPU in this slot is swapped: a new serial, UUID and board part number, the old part's "
              "faults go with it (--clear does not bring it back); --value SERIAL installs that part (a part "
              "removed from any node keeps its UUID and board part number: a GPU moved between nodes)",
              _replace_only, "serial (optional)", parse_value=_serial_value),
    FaultKind("after-reset", "(written by a GPU reset) lifetime counters a reset leaves behind: aggregate ECC, "
              "applied row remaps, retired pages", _kept_by_reset, "counters", None,
              parse_value=_not_injectable),
]
FAULT_KINDS: dict[str, FaultKind] = {k.name: k for k in _KINDS}


# ------------------------------------------------------------------------------ XIDs

# Message texts as the NVIDIA driver logs them, and whether the driver names the process (pid=, name=).
_XID_TEXT: dict[int, tuple[str, bool]] = {
    13: ("Graphics SM Warp Exception on (GPC 0, TPC 0, SM 0): Out Of Range Address", True),
    31: ("Ch 00000010, intr 10000000. MMU Fault: ENGINE GRAPHICS GPCCLIENT_T1_0 faulted @ 0x7f12_34560000. "
         "Fault is of type FAULT_PDE ACCESS_TYPE_VIRT_READ", True),
    43: ("Ch 00000010", True),
    45: ("Ch 00000010", True),
    48: ("An uncorrectable double bit error (DBE) has been detected on GPU in the framebuffer at partition 6, "
         "subpartition 0.", False),
    61: ("0cc4(3bb0): 00000000 00000000", False),
    62: ("0cc4(3bb0): 00000000 00000000", False),
    63: ("Row Remapper: New row (0x0000000001b5a6c0) marked for remapping, reset gpu to activate.", False),
    64: ("Row Remapper: Failed to mark row (0x0000000001b5a6c0) for remapping.", False),
    74: ("NVLink: fatal error detected on link 0(0x0, 0x0, 0x10000, 0x0, 0x0, 0x0, 0x0)", False),
    79: ("GPU has fallen off the bus.", False),
    92: ("High single-bit ECC error rate detected", False),
    94: ("Contained: SM (0x1). RST: No, D-RST: No", True),
    95: ("Uncontained: FBHUB. RST: Yes, D-RST: No", False),
    109: ("Ch 00000010, errorString CTX SWITCH TIMEOUT, Info 0x3c046", True),
    119: ("Timeout after 6s of waiting for RPC response from GPU0 GSP! Expected function 76 (GSP_RM_CONTROL) "
          "(0x20802a02 0x8).", False),
    120: ("GSP task timeout @ pc:0x11b8f4c, task: 1", False),
    140: ("An uncorrectable ECC error detected (possible firmware handling failure) DRAM:-1840691426, LTC:0, "
          "MMU:0, PCIE:0", False),
}


def kmsg_path(state_dir: str | os.PathLike[str], node: str) -> Path:
    return Path(state_dir) / f"{_check_node(node)}.kmsg"


_RECOVERY_TEXT = {"none": "0x0 (None)", "reset": "0x1 (GPU Reset Required)", "reboot": "0x2 (Node Reboot Required)"}


def xid_line(node: str, pci_bus_id: str, xid: int | str, when: datetime, pid: int = 0) -> str:
    """One kernel-log line for an XID, journalctl short-iso style, in the driver's shapes: MIG
    attribution (`94:mig`), NVLink5 sub-codes (`144:SAW_MVB:0x8[:fatal]`), Xid 154 (`154:reset`)."""
    domain, bus, dev = pci_bus_id.split(".")[0].split(":")
    code, _, variant = str(xid).partition(":")
    number = int(code)
    where = f"PCI:{int(domain, 16):04x}:{bus.lower()}:{dev.lower()}"
    text, job = _XID_TEXT.get(number, ("Unspecified error reported by the GPU", False))
    if variant == "mig":
        where += " GPU-I:01 GPU-CI:00"
    elif variant in _RECOVERY_TEXT:
        text, job = f"GPU recovery action changed from 0x0 (None) to {_RECOVERY_TEXT[variant]}", False
        if variant == "none":
            text = "GPU recovery action changed from 0x1 (GPU Reset Required) to 0x0 (None)"
    elif variant:
        unit, status, *fatal = variant.split(":")
        flag = "Fatal" if fatal else "Nonfatal"
        return (f"{when.astimezone(timezone.utc).isoformat(timespec='seconds')} {node} kernel: NVRM: Xid ({where}): "
                f"{number}, {unit} {flag} XC0 i0 Link 0 (0x00000001 0x{int(status, 16):08x} 0x00000000 0x00000000 "
                "0x00000000 0x00000000)")
    who = f"pid={pid}, name=python, " if job else ("" if variant in _RECOVERY_TEXT else "pid='<unknown>', name=<unknown>, ")
    stamp = when.astimezone(timezone.utc).isoformat(timespec="seconds")
    return f"{stamp} {node} kernel: NVRM: Xid ({where}): {number}, {who}{text}"


# ------------------------------------------------------------------------------ inject / clear


def inject(
    state_dir: str | os.PathLike[str],
    node: str,
    gpu: int,
    kind: str,
    value: Any = None,
    *,
    now: datetime | None = None,
) -> dict[str, Any]:
    """Add (or replace) fault `kind` on physical GPU `gpu` of `node`; returns the fault record.

    Injecting the same kind on the same GPU again replaces it (idempotent); an `xid` also appends
    one kernel-log line each time, as a real recurrence would.
    """
    d = Path(state_dir)
    fk = _check_kind(kind)
    when = now or datetime.now(timezone.utc)
    if kind == "replace":
        return replace(d, node, gpu, value, now=when)
    with _locked(d, node):
        state = _load(d, node)
        g = _check_gpu(state, gpu)
        record = {"gpu": gpu, "kind": kind, "value": fk.parse(value, state["gpus"][g]),
                  "since": when.astimezone(timezone.utc).isoformat(timespec="seconds")}
        state["faults"] = [f for f in state["faults"] if (f["gpu"], f["kind"]) != (gpu, kind)] + [record]
        _save(d, node, state)
        if kind == "xid":
            line = xid_line(node, state["gpus"][g]["pci_bus_id"], record["value"], when, pid=20000 + gpu)
            with open(kmsg_path(d, node), "a", encoding="utf-8") as f:
                f.write(line + "\n")
    return record


def clear(
    state_dir: str | os.PathLike[str], node: str, gpu: int | None = None, kind: str | None = None
) -> list[dict[str, Any]]:
    """Remove faults on `node` (all, or those of one GPU and/or one kind); returns what was removed.
    Kernel-log lines stay (see the module docstring)."""
    d = Path(state_dir)
    if kind is not None:
        _check_kind(kind)
    with _locked(d, node):
        state = _load(d, node)
        if gpu is not None:
            _check_gpu(state, gpu)

        def match(f: dict[str, Any]) -> bool:
            return (gpu is None or f["gpu"] == gpu) and (kind is None or f["kind"] == kind)

        removed = [f for f in state["faults"] if match(f)]
        if removed:
            state["faults"] = [f for f in state["faults"] if not match(f)]
            _save(d, node, state)
    return removed


# ------------------------------------------------------------------------------ GPU reset (issue 34)


@dataclass(frozen=True)
class ResetOutcome:
    """What one GPU's reset did. `error`: "" (reset), "in-use" (a process or persistence mode
    holds the GPU), "reset-fail" (an injected failure), "lost" (fell off the bus)."""

    gpu: int
    pci_bus_id: str
    error: str = ""
    cleared: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        return not self.error


def reset(
    state_dir: str | os.PathLike[str], node: str, gpus: list[int], *, now: datetime | None = None
) -> list[ResetOutcome]:
    """Reset physical GPUs `gpus` of `node`, as `nvidia-smi --gpu-reset` does; each on its own.

    A GPU that fell off the bus (`missing-gpu`) stays lost; one a process or persistence mode
    holds is refused ("In use by another client", NVIDIA/NVSentinel#1690); an injected
    `reset-fail` makes this attempt fail and is used up, nothing else changes. Otherwise every
    fault whose kind's `reset` is not "keep" goes; lifetime counters it leaves behind (aggregate
    ECC, the remap or retirement a reset completes) go into one `after-reset` record. When the
    GPU had a recovery action or a reset-class XID pending, the kernel log gets the Xid 154 line
    "GPU recovery action changed from ... to 0x0 (None)" (what `health.xid` takes as the reset).
    Every attempt is counted per GPU (`reset_counts`)."""
    d = Path(state_dir)
    when = now or datetime.now(timezone.utc)
    out: list[ResetOutcome] = []
    with _locked(d, node):
        state = _load(d, node)
        for g in gpus:
            _check_gpu(state, g)
        effective = effective_gpus(state)
        log: list[str] = []
        for g in gpus:
            gpu = effective[g]
            mine = [f for f in state["faults"] if f["gpu"] == g]
            error = ""
            if not gpu["present"]:
                error = "lost"
            elif gpu["procs"] or gpu["graphics_procs"] or gpu["persistence"]:
                error = "in-use"
            elif any(f["kind"] == "reset-fail" for f in mine):
                error = "reset-fail"
                state["faults"] = [f for f in state["faults"] if not (f["gpu"] == g and f["kind"] == "reset-fail")]
            cleared: list[str] = []
            if not error:
                kept, cleared = _fold(g, mine, when, reboot=False)
                state["faults"] = [f for f in state["faults"] if f["gpu"] != g] + kept
                if gpu["recovery_action"] or "xid" in cleared:
                    still = effective_gpus(state)[g]["recovery_action"]
                    if not still:
                        log.append(_recovered_line(node, gpu, when))
            counts = state.setdefault("resets", {}).setdefault(str(g), {"ok": 0, "failed": 0})
            counts["ok" if not error else "failed"] += 1
            counts.update(last=error or "ok", last_ts=_iso(when))
            out.append(ResetOutcome(g, gpu["pci_bus_id"], error, tuple(cleared)))
        _save(d, node, state)
        if log:
            with open(kmsg_path(d, node), "a", encoding="utf-8") as fh:
                fh.write("".join(line + "\n" for line in log))
    return out


# What a node reboot (or power cycle) clears beyond a reset: every XID and recovery action (the
# driver starts afresh), a GPU that fell off the bus (it enumerates again: XID 79's catalog action
# is a reboot), and a pending injected reset failure. Hardware faults stay.
_CLEARED_BY_REBOOT = frozenset({"xid", "recovery-action", "missing-gpu", "reset-fail"})


def _fold(g: int, mine: list[dict[str, Any]], when: datetime, *, reboot: bool) -> tuple[list[dict[str, Any]], list[str]]:
    """GPU `g`'s faults after a reset (or a reboot): those kept, and the kinds cleared; lifetime
    counters the cleared ones leave go into the GPU's one `after-reset` record."""
    kept: list[dict[str, Any]] = []
    cleared: list[str] = []
    residue: dict[str, int] = {}
    for f in mine:
        rule = FAULT_KINDS[f["kind"]].reset
        what = rule(f["value"]) if callable(rule) else rule
        if reboot and f["kind"] in _CLEARED_BY_REBOOT and what == "keep":
            what = "clear"
        if what == "keep":
            kept.append(f)
            continue
        cleared.append(f["kind"])
        if isinstance(what, dict):
            for key, n in what.items():
                residue[key] = residue.get(key, 0) + n
    after = next((f for f in kept if f["kind"] == "after-reset"), None)
    if residue:
        if after is None:
            after = {"gpu": g, "kind": "after-reset", "value": {}, "since": _iso(when)}
            kept.append(after)
        for key, n in residue.items():
            after["value"][key] = after["value"].get(key, 0) + n
    return kept, cleared


def reboot(state_dir: str | os.PathLike[str], node: str, *, now: datetime | None = None) -> list[dict[str, Any]]:
    """What the node's reboot (Slurm's RebootProgram, a BMC power cycle) does to its GPUs: every
    GPU as a reset leaves it, plus `_CLEARED_BY_REBOOT`; persistence mode on again (the
    persistence daemon starts at boot). The kernel log keeps its lines (a persistent kern.log)
    and gains the kernel's banner, the first line of a boot (health.xid.boot_in_log dates the
    boot by it); `<node>.boot` records when the node booted. Returns the faults removed."""
    d = Path(state_dir)
    when = now or datetime.now(timezone.utc)
    with _locked(d, node):
        state = _load(d, node)
        before = list(state["faults"])
        faults: list[dict[str, Any]] = []
        for g in range(len(state["gpus"])):
            kept, _ = _fold(g, [f for f in before if f["gpu"] == g], when, reboot=True)
            faults += kept
            state["gpus"][g]["persistence"] = 1
        state["faults"] = faults
        _save(d, node, state)
        write_atomic(d / f"{node}.boot", f"{when.timestamp():.6f}\n")
        stamp = when.astimezone(timezone.utc).isoformat(timespec="microseconds")
        with open(kmsg_path(d, node), "a", encoding="utf-8") as fh:
            fh.write(f"{stamp} {node} kernel: Linux version 6.1.0-stand-in (slurmadm dev cluster) #1 SMP\n")
    return [f for f in before if f not in faults]


def _recovered_line(node: str, gpu: dict[str, Any], when: datetime) -> str:
    """The Xid 154 line of a recovery action going back to none, stamped to the microsecond (a
    reset in the same second as its XID must still come after it)."""
    line = xid_line(node, gpu["pci_bus_id"], "154:none", when)
    prev = gpu["recovery_action"]
    if prev and prev != 1:
        from ..health import xid as xidmod

        name = xidmod.RECOVERY_ACTIONS.get(prev, ("Unknown",))[0]
        line = line.replace("from 0x1 (GPU Reset Required)", f"from 0x{prev:x} ({name})")
    stamp = when.astimezone(timezone.utc).isoformat(timespec="seconds")
    return line.replace(stamp, when.astimezone(timezone.utc).isoformat(timespec="microseconds"), 1)


def reset_counts(state_dir: str | os.PathLike[str], node: str) -> dict[int, dict[str, Any]]:
    """Resets per physical GPU: {gpu: {"ok": n, "failed": n, "last": "ok"|error, "last_ts": iso}}."""
    return {int(g): dict(c) for g, c in _load(Path(state_dir), node).get("resets", {}).items()}


def set_persistence(state_dir: str | os.PathLike[str], node: str, gpus: list[int], on: bool) -> None:
    """`nvidia-smi -pm 0|1 -i N`: the GPU's persistence mode (a setting, not a fault: `--clear`
    leaves it, `write_healthy` turns it on)."""
    d = Path(state_dir)
    with _locked(d, node):
        state = _load(d, node)
        for g in gpus:
            state["gpus"][_check_gpu(state, g)]["persistence"] = int(on)
        _save(d, node, state)


# ------------------------------------------------------------------------------ part swaps (issue 35)


def replace(
    state_dir: str | os.PathLike[str], node: str, gpu: int, serial: str | None = None, *,
    now: datetime | None = None,
) -> dict[str, Any]:
    """Swap the GPU in physical slot `gpu` of `node`: a new part (serial, UUID, board part number)
    with none of the old part's faults. The old part goes to the node's `removed_parts`, from where
    `serial=` can install it in any node's slot (a GPU moved between nodes keeps its UUID and board
    part number). A serial never seen gets a UUID derived from it. Installing the serial already in
    the slot changes nothing; one installed in another slot is refused."""
    d = Path(state_dir)
    fk = _check_kind("replace")
    when = now or datetime.now(timezone.utc)
    if serial is not None and serial != "":
        serial = fk.parse(serial, {})
    else:
        serial = None
    nodes = sorted({_check_node(node)} | {p.stem for p in d.glob("*.json")})
    with contextlib.ExitStack() as stack:
        for n in nodes:  # every node's file, in one order: the part may come from any of them
            stack.enter_context(_locked(d, n))
        states = {n: _load(d, n) for n in nodes}
        state = states[node]
        _check_gpu(state, gpu)
        slot = state["gpus"][gpu]
        record = {"gpu": gpu, "kind": "replace", "since": _iso(when), "old_serial": slot["serial"]}
        if serial == slot["serial"]:
            return {**record, "value": serial, "uuid": slot["uuid"], "changed": False}
        part: dict[str, Any] | None = None
        if serial is not None:
            for n, st in states.items():
                for i, g in enumerate(st["gpus"]):
                    if g["serial"] == serial:
                        raise UsageError(f"GPU serial {serial} is installed in {n} GPU {i}: replace it there first")
                for j, removed in enumerate(st.get("removed_parts", [])):
                    if removed["serial"] == serial:
                        part = st["removed_parts"].pop(j)
                        if n != node:
                            _save(d, n, st)
                        break
                if part is not None:
                    break
        if part is None:
            n_new = sum(len(st.get("removed_parts", [])) for st in states.values()) + len(state.get("replaced", []))
            if serial is None:
                h = int(hashlib.sha256(f"{node}/{gpu}/{slot['serial']}/{n_new}".encode()).hexdigest(), 16)
                serial = f"1655{h % 10**9:09d}"
            part = {"serial": serial, "uuid": f"GPU-{uuid.uuid5(_UUID_NS, f'serial/{serial}')}",
                    "board_part_number": slot.get("board_part_number", ""), "vbios": slot["vbios"]}
        old = {k: slot.get(k, "") for k in ("serial", "uuid", "board_part_number", "vbios")}
        state.setdefault("removed_parts", []).append({**old, "from": f"{node}/{gpu}", "removed": _iso(when)})
        state.setdefault("replaced", []).append({"gpu": gpu, "old": old["serial"], "new": part["serial"],
                                                 "ts": _iso(when)})
        slot.update({k: part[k] for k in ("serial", "uuid", "board_part_number", "vbios") if part.get(k)})
        state["faults"] = [f for f in state["faults"] if f["gpu"] != gpu]
        _save(d, node, state)
        return {**record, "value": slot["serial"], "uuid": slot["uuid"],
                "board_part_number": slot.get("board_part_number", ""), "changed": True}


def _iso(when: datetime) -> str:
    return when.astimezone(timezone.utc).isoformat(timespec="seconds")


def read_state(state_dir: str | os.PathLike[str], node: str) -> dict[str, Any]:
    """The canonical state of `node`: healthy baseline per GPU plus the list of faults."""
    return _load(Path(state_dir), node)


def list_faults(state_dir: str | os.PathLike[str], node: str) -> list[dict[str, Any]]:
    return sorted(_load(Path(state_dir), node)["faults"], key=lambda f: (f["gpu"], f["kind"]))


# ------------------------------------------------------------------------------ rendering


def effective_gpus(state: dict[str, Any]) -> list[dict[str, Any]]:
    """Each GPU's baseline with its faults applied (in injection order)."""
    gpus = json.loads(json.dumps(state["gpus"]))  # deep copy of plain JSON data
    for f in state["faults"]:
        FAULT_KINDS[f["kind"]].apply(gpus[f["gpu"]], f["value"])
    return gpus


def render(state: dict[str, Any]) -> str:
    """The flat key=value text the C library reads."""
    lines = [
        f"# stand-in NVML state of {state['node']}; written by slurmadm.devcluster.gpus, edit via inject/clear",
        f"driver_version={state['driver_version']}",
        f"nvml_version={state['nvml_version']}",
        f"cuda_driver_version={state['cuda_driver_version']}",
    ]
    for i, g in enumerate(effective_gpus(state)):
        for key in sorted(g):
            val = g[key]
            if key == "nvlink_err":
                lines += [f"gpu.{i}.nvlink_err.{link}={','.join(map(str, c))}" for link, c in sorted(val.items())]
                continue
            if key in ("procs", "graphics_procs"):
                val = ",".join(f"{pid}:{used}" for pid, used in val)
            if "\n" in str(val):
                raise UsageError(f"gpu {i} {key}: value contains a newline")
            lines.append(f"gpu.{i}.{key}={val}")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------ files


def _check_node(node: str) -> str:
    if not isinstance(node, str) or not _NODE_RE.match(node):
        raise UsageError(f"node name {node!r} is not a plain host name")
    return node


def _check_kind(kind: str) -> FaultKind:
    if kind not in FAULT_KINDS:
        raise UsageError(f"unknown GPU fault {kind!r} (known: {', '.join(FAULT_KINDS)})")
    return FAULT_KINDS[kind]


def _check_gpu(state: dict[str, Any], gpu: int) -> int:
    count = len(state["gpus"])
    if isinstance(gpu, bool) or not isinstance(gpu, int) or not 0 <= gpu < count:
        raise UsageError(f"GPU {gpu!r} does not exist on {state['node']} (GPUs 0-{count - 1})")
    return gpu


def _load(d: Path, node: str) -> dict[str, Any]:
    path = d / f"{_check_node(node)}.json"
    try:
        state = json.loads(path.read_text())
    except FileNotFoundError:
        raise UsageError(f"no stand-in GPUs for node {node!r} in {d} (write_healthy has not run for it)") from None
    except (OSError, ValueError) as e:
        raise UsageError(f"{path}: unreadable stand-in GPU state ({e})") from None
    if not isinstance(state, dict) or state.get("format") != STATE_FORMAT:
        raise UsageError(f"{path}: not a stand-in GPU state of format {STATE_FORMAT}")
    return state


def _save(d: Path, node: str, state: dict[str, Any]) -> None:
    text = render(state)  # a fault that cannot apply fails here, before anything is written
    write_atomic(d / f"{node}.json", json.dumps(state, indent=1) + "\n")
    write_atomic(d / f"{node}.state", text)


@contextlib.contextmanager
def _locked(d: Path, node: str) -> Iterator[None]:
    """One writer per node at a time (read-modify-write of the JSON)."""
    _check_node(node)
    if not d.is_dir():
        raise UsageError(f"stand-in GPU state directory {d} does not exist")
    with open(d / f"{node}.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        yield


def set_versions(state_dir: str | os.PathLike[str], node: str, *, driver_version: str, cuda_version: str) -> None:
    """The fake node's driver changed (a rollout, `dev-cluster set-software`): NVML reports it too."""
    cuda = re.fullmatch(r"(\d+)\.(\d+)", cuda_version)
    if not cuda or not re.fullmatch(r"\d+(\.\d+)+", driver_version):
        raise UsageError(f"driver {driver_version!r} / cuda {cuda_version!r}: not versions like 570.133.20 / 12.8")
    d = Path(state_dir)
    with _locked(d, node):
        state = _load(d, node)
        state.update(driver_version=driver_version, nvml_version=f"{cuda.group(1)}.{driver_version}",
                     cuda_driver_version=int(cuda.group(1)) * 1000 + int(cuda.group(2)) * 10)
        _save(d, node, state)
