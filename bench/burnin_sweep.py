#!/usr/bin/env python3
"""Burn-in sweep wall time: 4 nodes at once against 1 node, and against the same 4 nodes swept
one at a time (the serial peer), all in one run on a fresh dev cluster (issue 6).

What is timed is `slurmadm burnin run` end to end (lock, reservation, the per-node jobs through
srun, the pair all-reduces, drains/report/store), as cron would run it. The dev site's phases:
the CPU stand-in stress (burnin.stress_seconds, time-bound), a 2-rank gloo all-reduce of
16 MiB, the health suite against the stand-in GPUs. A 1-node sweep has no pair phase; the
per-phase split is printed too. Each --stress-seconds value is one configuration: 3 is the dev
site's; a longer one is closer to a real sweep, where the time-bound stress dominates.

Usage (root, torch installed: scripts/install-torch-cpu.sh .venv/bin/python):
    .venv/bin/python bench/burnin_sweep.py [--port-base 21200] [--repeat 1] [--stress-seconds 3,30]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

import tomli_w

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # tests.integration.helpers

from slurmadm.devcluster.cluster import DevCluster  # noqa: E402
from tests.integration.helpers import ensure_burnin_accounting  # noqa: E402

NODES = ["b200-001", "b200-002", "b200-003", "b200-004"]


def sweep(env: dict[str, str], nodes: list[str] | None) -> dict:
    argv = [sys.executable, "-m", "slurmadm", "burnin", "run", "--json"]
    if nodes:
        argv += ["--nodes", ",".join(nodes)]
    t0 = time.perf_counter()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=900)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"sweep of {nodes or 'all'} failed ({proc.returncode}): {proc.stderr[-500:]}")
    s = json.loads(proc.stdout)
    if len(s["nodes"]) != (len(nodes) if nodes else 4) or any(n["verdict"] != "pass" for n in s["nodes"]):
        raise SystemExit(f"unexpected sweep result: {[(n['node'], n['verdict']) for n in s['nodes']]}")
    cpu = job_cpu_seconds(env, [n["job_id"] for n in s["nodes"]])
    return {"wall": wall, "cpu": cpu, **{k: s["phase_s"].get(k, 0.0) for k in ("prepare", "nodes", "pairs")}}


def _seconds(text: str) -> float:
    """sacct TotalCPU: [D-][HH:]MM:SS[.mmm]"""
    days, _, clock = text.rpartition("-")
    parts = [float(p) for p in clock.split(":")]
    while len(parts) < 3:
        parts.insert(0, 0.0)
    return (int(days) if days else 0) * 86400 + parts[0] * 3600 + parts[1] * 60 + parts[2]


def job_cpu_seconds(env: dict[str, str], job_ids: list[str]) -> float:
    """CPU time (user + system) the node jobs' steps used, as Slurm accounted it."""
    out = subprocess.run(["sacct", "-n", "-P", "-j", ",".join(job_ids), "-o", "JobID,TotalCPU"], env=env,
                         capture_output=True, text=True, timeout=60, check=True).stdout
    return sum(_seconds(cpu) for job, cpu in (ln.split("|") for ln in out.splitlines())
               if "." in job and cpu)


def bench_config(env: dict[str, str], dev_site: Path, stress: int, repeat: int) -> dict[str, list[dict]]:
    data = tomllib.loads(dev_site.read_text())
    data["burnin"]["stress_seconds"] = stress
    site = dev_site.with_name(f"site-stress{stress}.toml")
    site.write_text(tomli_w.dumps(data))
    env = {**env, "SLURMADM_SITE": str(site)}
    sweep(env, ["b200-001"])  # warm-up: page cache for torch, first sacct/squeue
    rows: dict[str, list[dict]] = {"1 node": [], "4 nodes": [], "4 x 1 node (serial peer)": []}
    for _ in range(repeat):
        rows["1 node"].append(sweep(env, ["b200-001"]))
        rows["4 nodes"].append(sweep(env, None))
        serial = [sweep(env, [n]) for n in NODES]
        rows["4 x 1 node (serial peer)"].append(
            {k: sum(r[k] for r in serial) for k in ("wall", "cpu", "prepare", "nodes", "pairs")})
    return rows


def show(stress: int, rows: dict[str, list[dict]]) -> None:
    cores = os.cpu_count() or 1
    print(f"\nstress_seconds = {stress}")
    print(f"{'sweep':<26}{'wall':>9}{'node jobs':>11}{'pairs':>8}{'node-job CPU':>14}")
    med = {name: {k: statistics.median(r[k] for r in runs) for k in ("wall", "nodes", "pairs", "cpu")}
           for name, runs in rows.items()}
    for name, m in med.items():
        print(f"{name:<26}{m['wall']:>8.1f}s{m['nodes']:>10.1f}s{m['pairs']:>7.1f}s{m['cpu']:>13.1f}s")
    one, four, serial = (med[k] for k in rows)
    print(f"4-node sweep / 1-node sweep: {four['wall'] / one['wall']:.2f}x wall, node jobs "
          f"{four['nodes'] / one['nodes']:.2f}x; serial peer / 4-node sweep: {serial['wall'] / four['wall']:.2f}x")
    print(f"the 4 fake nodes share this host's {cores} cores: their node jobs need {four['cpu']:.1f} CPU-s, "
          f"so they cannot take less than {four['cpu'] / cores:.1f} s here (one node's job: {one['nodes']:.1f} s)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--port-base", type=int, default=21200)
    ap.add_argument("--repeat", type=int, default=1)
    ap.add_argument("--stress-seconds", default="3,30", help="comma-separated stress durations to run")
    args = ap.parse_args()
    results = {}
    with tempfile.TemporaryDirectory(prefix="bench-burnin-") as tmp:
        dc = DevCluster(Path(tmp))
        try:
            dc.up(nodes=4, port_base=args.port_base, timeout=300)
            env = dict(os.environ)
            env.update(dc.env())
            ensure_burnin_accounting(env, dc.site())
            for stress in (int(x) for x in args.stress_seconds.split(",")):
                results[stress] = bench_config(env, dc.site_path, stress, args.repeat)
        finally:
            dc.down(purge=True)
    for stress, rows in results.items():
        show(stress, rows)
    print(f"\nload average at the end (other work on this host skews every number): "
          f"{' '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
