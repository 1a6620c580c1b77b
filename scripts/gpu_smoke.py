"""Helper of scripts/gpu-smoke.sh: GPU facts from NVML, a one-node site for this machine, and the
pass/fail table. Runs in the smoke virtualenv (slurmadm + nvidia-ml-py installed).

  gpu_smoke.py facts [--stand-in]         JSON facts of this machine's GPUs (NVML)
  gpu_smoke.py site FACTS OUT STATE       write a site for node `smoke-001` from site.example.toml
  gpu_smoke.py table REPORT [REPORT...]   print the table; exit 1 if any check failed
"""

from __future__ import annotations

import json
import sys
import tomllib
from pathlib import Path

import tomli_w

REPO = Path(__file__).resolve().parents[1]
NODE = "smoke-001"


def facts() -> dict:
    import pynvml

    pynvml.nvmlInit()
    try:
        n = pynvml.nvmlDeviceGetCount()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)

        def get(fn, *args, default=None):
            try:
                return getattr(pynvml, fn)(*args)
            except (pynvml.NVMLError, AttributeError):
                return default

        name = get("nvmlDeviceGetName", h, default="unknown")
        name = name.decode() if isinstance(name, bytes) else name
        links = 0
        for link in range(18):
            if get("nvmlDeviceGetNvLinkState", h, link) is None:
                break
            links += 1
        mem = get("nvmlDeviceGetMemoryInfo", h)
        limit = get("nvmlDeviceGetEnforcedPowerLimit", h, default=700_000)
        driver = pynvml.nvmlSystemGetDriverVersion()
        return {
            "count": n, "nvml_name": name, "nvlinks": links,
            "pcie_gen": get("nvmlDeviceGetMaxPcieLinkGeneration", h, default=4),
            "pcie_width": get("nvmlDeviceGetMaxPcieLinkWidth", h, default=16),
            "power_limit_w": round(limit / 1000),
            "memory_gib": max(1, (mem.total >> 30) if mem else 80),
            "driver": driver.decode() if isinstance(driver, bytes) else driver,
            # NVSwitch fabric: only where NVML reports a fabric state for the GPU
            "nvswitches": 4 if links and _fabric_supported(pynvml, h) else 0,
        }
    finally:
        pynvml.nvmlShutdown()


def _fabric_supported(pynvml, h) -> bool:
    from ctypes import byref

    try:
        info = pynvml.c_nvmlGpuFabricInfoV_t()
        pynvml.nvmlDeviceGetGpuFabricInfoV(h, byref(info))
        return int(info.state) != 0
    except Exception:  # noqa: BLE001 - any NVML error or an old pynvml: no fabric
        return False


def site(facts_file: str, out: str, state: str) -> None:
    f = json.loads(Path(facts_file).read_text())
    data = tomllib.loads((REPO / "site.example.toml").read_text())
    import os

    mem_gib = max(1, os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") >> 30)
    cpus = os.cpu_count() or 1
    data["profiles"] = {"smoke": {
        "description": "this machine (scripts/gpu-smoke.sh)", "sockets": 1, "cores_per_socket": cpus,
        "threads_per_core": 1, "memory_gib": mem_gib,
        "gpus": {"count": f["count"], "model": "smoke", "nvml_name": f["nvml_name"], "memory_gib": f["memory_gib"],
                 "sockets": [0] * f["count"], "device_files": f"/dev/nvidia[0-{f['count'] - 1}]"
                 if f["count"] > 1 else "/dev/nvidia0",
                 "nvlinks": f["nvlinks"], "nvswitches": f["nvswitches"], "pcie_gen": f["pcie_gen"],
                 "pcie_width": f["pcie_width"], "power_limit_w": f["power_limit_w"]},
        "nics": {"count": 0},
    }}
    data["nodes"] = [{"names": NODE, "profile": "smoke"}]
    data["topology"] = {"plugin": "none"}
    data["partitions"] = [p for p in data["partitions"] if p["nodes"] == "ALL"]
    data["software"]["driver_version"] = f["driver"]
    # GPU limits and quotas above one machine's GPUs are rejected: drop them (nothing is scheduled)
    for section in ("qos", "organizations", "projects"):
        for item in data.get(section, []):
            for key in [k for k in item if "gpu" in k and k != "gpus"]:
                del item[key]
    data["store"] = {"path": f"{state}/slurmadm.db"}
    h = data["health"]
    xid_source = os.environ.get("GPU_SMOKE_XID_SOURCE") or ("kmsg" if os.access("/dev/kmsg", os.R_OK) else "journal")
    h.update(results_log=f"{state}/health.jsonl", xid_source=xid_source,
             nccl_size_mib=256, nccl_iters=10, nccl_timeout_s=300.0, check_timeout_s=10.0, run_timeout_s=600.0)
    h["models"] = {"smoke": {"nccl_busbw_floor_gbps": 1.0}}  # one GPU: there is no bus; the run must complete
    h["checks"] = {"nccl-allreduce": {"contexts": ["run"]}}
    Path(out).write_text(tomli_w.dumps(data))


def table(reports: list[str]) -> int:
    rows, bad = [], 0
    for path in reports:
        rep = json.loads(Path(path).read_text())
        for r in rep["results"]:
            rows.append((r["check_id"], r["status"], r["detail"]))
            bad += r["status"] in ("fail", "error")
    width = max(len(r[0]) for r in rows) if rows else 5
    print(f"{'check':<{width}}  {'status':<6}  detail")
    for cid, status, detail in rows:
        print(f"{cid:<{width}}  {status:<6}  {detail[:110]}")
    print(f"\n{len(rows)} checks, {bad} failed or could not run: {'FAIL' if bad else 'PASS'}")
    return 1 if bad else 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["facts"]:
        print(json.dumps(facts()))
        return 0
    if argv[:1] == ["site"] and len(argv) == 4:
        site(*argv[1:])
        return 0
    if argv[:1] == ["table"] and len(argv) > 1:
        return table(argv[1:])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
