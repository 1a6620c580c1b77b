#!/usr/bin/env python3
"""Prolog wall time on a healthy 8-GPU stand-in node: slurmadm vs Meta GCM, in the same run.

    .venv/bin/python bench/prolog_vs_gcm.py [--runs 20]

- slurmadm: `prolog_epilog/prolog.sh` exactly as slurmd runs it (no PATH; SLURMD_NODENAME;
  slurmadm.env next to the script), i.e. the full fast suite of the prolog: gpu-count,
  ecc-uncorrected, row-remap, xid, nvlink (18 links x 8 GPUs), pcie-link, thermal, clock-events,
  fabric (8 GPUs), ecc-corrected, retired-pages, power, driver-version, infiniband (8 HCAs from a
  stand-in sysfs tree, with the kernel-log flap scan), host-memory, mounts (/); results to JSON
  lines, syslog and the SQLite store. NCCL is not part of it (it is not a fast check: the prolog runs it only when
  no pass is fresher than health.nccl_fresh_hours).
- GCM: `health_checks check-nvidia-smi ... -c gpu_num -c ecc_uncorrected_volatile_total` from
  PyPI gpucm, in its own venv (scripts/setup-gcm.sh), against the same stand-in node.

Both read the same stand-in libnvidia-ml.so.1 (compiled from C) through their own pynvml.
Measured: wall time from process start to exit, CPU time (user + system of the child: what a
machine shared with other work inflates least), and peak RSS (ru_maxrss of the child), runs
interleaved so machine noise hits both alike. The first slurmadm run after a site change parses
site.toml (cache miss) and is reported apart ("cold").
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

import tomli_w

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from slurmadm.devcluster import gpus, ibsysfs  # noqa: E402
from slurmadm.site import BUILTIN_PROFILES  # noqa: E402

NODE = "b200-001"
DRIVER = "570.133.20"


CPU: list[float] = []  # CPU seconds (user + system) of each timed child, in order


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, float, int, str]:
    """(wall seconds, peak RSS MiB, exit code, output) of one process, start to exit. Its CPU
    time (user + system: what a loaded machine inflates least) is appended to CPU."""
    t0 = time.perf_counter()
    p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd="/")
    out = p.stdout.read()
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    CPU.append(usage.ru_utime + usage.ru_stime)
    p.returncode = os.waitstatus_to_exitcode(status)
    return wall, usage.ru_maxrss / 1024, p.returncode, out.decode(errors="replace")


def setup(tmp: Path) -> tuple[dict[str, str], Path]:
    lib = gpus.build_library(tmp / "lib").parent
    gdir = tmp / "gpus"
    gpus.write_healthy(gdir, NODE, BUILTIN_PROFILES["hgx-b200"], driver_version=DRIVER)
    ibsysfs.write_healthy(gdir, NODE, BUILTIN_PROFILES["hgx-b200"])  # 8 stand-in HCAs, ACTIVE at 400 Gb/s
    data = tomllib.loads((REPO / "site.example.toml").read_text())
    data["store"] = {"path": str(tmp / "slurmadm.db")}
    data["health"].update(results_log=str(tmp / "health.jsonl"), xid_source=str(gdir / "{node}.kmsg"),
                          sysfs_root=str(gdir / "{node}.sysfs"), fabric_manager_process="",
                          mounts=[{"path": "/", "min_free_gib": 0.1}])
    # host-memory reads this machine's /proc/meminfo: its memory stands in for the node's 2 TB
    data["profiles"]["hgx-b200"]["memory_gib"] = max(1, os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") >> 30)
    # the fast suite only: no GPUs here to all-reduce on (see the module docstring)
    data["health"]["checks"]["nccl-allreduce"] = {"contexts": ["epilog", "run"]}
    site = tmp / "site.toml"
    site.write_text(tomli_w.dumps(data))
    hooks = tmp / "prolog_epilog"
    hooks.mkdir()
    for script in (REPO / "prolog_epilog").glob("*.sh"):
        (hooks / script.name).symlink_to(script)
    env = {"SLURMADM_SITE": str(site), "SLURMADM_PYTHON": sys.executable, "SLURMADM_CACHE_DIR": str(tmp / "cache"),
           **gpus.env_for(gdir, lib)}
    (hooks / "slurmadm.env").write_text("".join(f"{k}='{v}'\n" for k, v in env.items()))
    return gpus.env_for(gdir, lib, NODE), hooks


def gcm_command() -> str:
    r = subprocess.run([str(REPO / "scripts" / "setup-gcm.sh")], capture_output=True, text=True, timeout=900)
    if r.returncode != 0:
        sys.exit(f"setup-gcm.sh failed: {r.stderr.strip()[-300:]}")
    return r.stdout.strip()


def summary(samples: list[tuple[float, float, float]]) -> dict[str, float]:
    walls = sorted(s[0] * 1000 for s in samples)
    return {"median_ms": round(statistics.median(walls), 1), "min_ms": round(walls[0], 1),
            "p90_ms": round(walls[int(0.9 * (len(walls) - 1))], 1),
            "peak_rss_mib": round(max(s[1] for s in samples), 1),
            "cpu_median_ms": round(statistics.median(s[2] * 1000 for s in samples), 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=20)
    args = ap.parse_args()
    gcm = gcm_command()
    with tempfile.TemporaryDirectory(prefix="slurmadm-bench-") as tmp_name:
        tmp = Path(tmp_name)
        nvml_env, hooks = setup(tmp)
        ours_env = {"SLURMD_NODENAME": NODE, "SLURM_JOB_ID": "1"}  # what slurmd gives a prolog
        ours_argv = [str(hooks / "prolog.sh")]
        gcm_env = {"PATH": "/usr/bin:/bin", **nvml_env}
        gcm_argv = [gcm, "check-nvidia-smi", "bench", "nagios", "-c", "gpu_num", "--gpu_num", "8",
                    "-c", "ecc_uncorrected_volatile_total", "--log-folder", str(tmp / "gcm-logs")]

        # The peer must really check: a fault it cannot see would make it fast for nothing.
        gpus.inject(tmp / "gpus", NODE, 5, "ecc-uncorrected")
        wall, rss, rc, out = timed([*gcm_argv, "--verbose-out"], gcm_env)
        assert rc == 2 and "GPU 5 has ECC uncorrected: 1 above the threshold of 0" in out, out
        wall, rss, rc, out = timed(ours_argv, ours_env)
        assert rc != 0 and "ecc-uncorrected" in out, out
        gpus.clear(tmp / "gpus", NODE)
        shutil.rmtree(tmp / "cache", ignore_errors=True)  # cold: the site parsed again, the cache rewritten
        cold = timed(ours_argv, ours_env)
        assert cold[2] == 0, cold[3]
        ours, theirs, bare = [], [], []
        for _ in range(args.runs):
            wall, rss, rc, out = timed(ours_argv, ours_env)
            assert rc == 0, out
            ours.append((wall, rss, CPU[-1]))
            wall, rss, rc, out = timed(gcm_argv, gcm_env)
            assert rc == 0 and out.startswith("OK"), out
            theirs.append((wall, rss, CPU[-1]))
            # the machine's speed in this run: a bare interpreter start (`python -I -c pass`)
            wall, rss, rc, out = timed([sys.executable, "-I", "-c", "pass"], {})
            bare.append((wall, rss, CPU[-1]))
        rows = [json.loads(line) for line in open(tmp / "health.jsonl")]
        checks = sum(1 for r in rows if r.get("run_id") == rows[-1].get("run_id"))  # the last run's

    result = {
        "runs": args.runs,
        "slurmadm_prolog": {**summary(ours), "checks": checks, "cold_ms": round(cold[0] * 1000, 1)},
        "gcm_check_nvidia_smi": {**summary(theirs), "checks": 2},
        "python_start": summary(bare),
    }
    result["speedup_median"] = round(result["gcm_check_nvidia_smi"]["median_ms"]
                                     / result["slurmadm_prolog"]["median_ms"], 2)
    print(f"{'':28} {'median ms':>10} {'min ms':>8} {'p90 ms':>8} {'CPU ms':>8} {'peak RSS MiB':>13} {'checks':>7}")
    for name, key in (("slurmadm prolog.sh", "slurmadm_prolog"), ("GCM check-nvidia-smi", "gcm_check_nvidia_smi")):
        r = result[key]
        print(f"{name:28} {r['median_ms']:>10} {r['min_ms']:>8} {r['p90_ms']:>8} {r['cpu_median_ms']:>8} "
              f"{r['peak_rss_mib']:>13} {r['checks']:>7}")
    print(f"slurmadm cold run (site parsed, cache written): {result['slurmadm_prolog']['cold_ms']} ms")
    print(f"machine speed in this run: `python -I -c pass` median {result['python_start']['median_ms']} ms")
    print(f"speed-up (median): {result['speedup_median']}x")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
