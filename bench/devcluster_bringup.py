#!/usr/bin/env python3
"""Dev-cluster bring-up time for 4 and 16 nodes (issue 2), against a peer in the same run.

Measured per size N:
  cold      `up` from an empty state directory (MariaDB init, munge key, every daemon, all idle)
  warm      `up` again on the running cluster (the idempotent no-op)
  slurmd    restart of the N slurmd as `up` does it (all started, one wait for all idle)
  peer      the hand-written way: start one slurmd, wait until that node is idle, then the next

Usage (root): .venv/bin/python bench/devcluster_bringup.py [--sizes 4,16] [--port-base 23000]
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from slurmadm.devcluster.cluster import DevCluster
from slurmadm.devcluster.daemons import wait_for
from slurmadm.proc import run


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def serial_slurmds(dc: DevCluster) -> None:
    for node in dc.nodes():
        dc.daemon(f"slurmd-{node}").start(["slurmd", "-D", "-N", node], env={"SLURM_CONF": str(dc.slurm_conf)})
        if not wait_for(lambda node=node: dc.node_states().get(node, "").startswith("idle"), 120, interval=0.25):
            raise SystemExit(f"{node} did not become idle")


def stop_slurmds(dc: DevCluster) -> None:
    """Stop every slurmd and mark the nodes DOWN, so idle again means "registered again"
    (ReturnToService=2 returns a DOWN node when its slurmd registers)."""
    for node in dc.nodes():
        dc.daemon(f"slurmd-{node}").stop()
    run(["scontrol", "update", f"NodeName={','.join(dc.nodes())}", "State=DOWN", "Reason=bench restart"],
        env={"SLURM_CONF": str(dc.slurm_conf)})
    if not wait_for(lambda: all(s.startswith("down") for s in dc.node_states().values()), 30):
        raise SystemExit("nodes did not go down")


def bench(size: int, port_base: int) -> dict:
    with tempfile.TemporaryDirectory(prefix=f"bench-dc{size}-") as tmp:
        dc = DevCluster(Path(tmp))
        try:
            cold = timed(lambda: dc.up(nodes=size, port_base=port_base, timeout=300))
            warm = timed(lambda: dc.up(nodes=size, port_base=port_base, timeout=300))
            stop_slurmds(dc)
            parallel = timed(lambda: dc.up(nodes=size, port_base=port_base, timeout=300))
            stop_slurmds(dc)
            peer = timed(lambda: serial_slurmds(dc))
        finally:
            dc.down()
    return {"nodes": size, "cold_s": round(cold, 2), "warm_s": round(warm, 2),
            "slurmd_parallel_s": round(parallel, 2), "slurmd_serial_peer_s": round(peer, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sizes", default="4,16")
    ap.add_argument("--port-base", type=int, default=23000)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    rows = [bench(int(s), args.port_base) for s in args.sizes.split(",")]
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    print(f"{'nodes':>5} {'cold up':>9} {'warm up':>9} {'slurmd (up)':>12} {'slurmd serial peer':>19}")
    for r in rows:
        print(f"{r['nodes']:>5} {r['cold_s']:>8.2f}s {r['warm_s']:>8.2f}s {r['slurmd_parallel_s']:>11.2f}s "
              f"{r['slurmd_serial_peer_s']:>18.2f}s")


if __name__ == "__main__":
    main()
