"""slurmadm's all-reduce bandwidth test (used when nccl-tests' all_reduce_perf is not installed):
one process per rank, torch.distributed with NCCL on GPUs or gloo on the CPU. Prints JSON lines;
rank 0 prints the result. The health check `nccl-allreduce` (one node, one rank per GPU) and the
burn-in's per-node and pair tests all run this one program.

    # across nodes, one task per GPU (or one per node with gloo), launched by srun:
    srun -N2 --ntasks-per-node=8 python -m slurmadm.health.allreduce --backend nccl \
        --port-base 29500 --addr b200-001=10.0.0.1 --addr b200-002=10.0.0.2
    # on one node: `run_local()`

Rank, world size and local rank come from --rank/--world/--local-rank or from srun's
SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID. Rank 0 runs on the first node of SLURM_STEP_NODELIST
and listens on --port, or on --port-base + (SLURM_JOB_ID % --port-range, 100) so that concurrent jobs whose
nodes share an address (the dev cluster) never collide.

Bus bandwidth follows nccl-tests (doc/PERFORMANCE.md): algbw = bytes / time and, for
all-reduce, busbw = algbw * 2(n-1)/n, comparable across rank counts and to the hardware's peak.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import socket
import subprocess
import sys
import time
import warnings
from collections.abc import Sequence
from typing import Any

from ..hostlist import expand

WARMUP = 5


def import_torch() -> Any:
    """torch (the optional `burnin` extra), or None when it is not installed. The CPU wheel's
    "Failed to initialize NumPy" warning is silenced: nothing here needs numpy."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Failed to initialize NumPy")
        try:
            import torch
        except ImportError:
            return None
    return torch


def busbw(algbw: float, ranks: int) -> float:
    return algbw * 2 * (ranks - 1) / ranks


def _emit(obj: dict) -> None:
    print(json.dumps(obj, sort_keys=True), flush=True)


def _env_int(name: str, default: int | None = None) -> int | None:
    value = os.environ.get(name)
    return int(value) if value not in (None, "") else default


def rendezvous_port(port: int | None, port_base: int | None, port_range: int = 100) -> int:
    if port:
        return port
    job = _env_int("SLURM_JOB_ID")
    if port_base is None or job is None:
        raise SystemExit("collective: need --port, or --port-base inside a Slurm job")
    return port_base + job % port_range


def master_address(addr: str | None, addr_map: dict[str, str]) -> str:
    if addr:
        return addr
    nodelist = os.environ.get("SLURM_STEP_NODELIST") or os.environ.get("SLURM_JOB_NODELIST")
    if not nodelist:
        raise SystemExit("collective: need --master-addr outside a Slurm step")
    first = expand(nodelist)[0]
    return addr_map.get(first, first)


def measure(backend: str, rank: int, world: int, local_rank: int, master: str, port: int,
            mib: int, iters: int, timeout_s: float) -> dict:
    torch = import_torch()
    if torch is None:
        raise ImportError("torch")
    import torch.distributed as dist

    if backend == "nccl":
        if not torch.cuda.is_available():
            raise RuntimeError("backend nccl but torch sees no CUDA device")
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
    else:
        device = torch.device("cpu")
    timeout = dt.timedelta(seconds=timeout_s)
    store = dist.TCPStore(master, port, world, is_master=(rank == 0), timeout=timeout)
    dist.init_process_group(backend, store=store, rank=rank, world_size=world, timeout=timeout)
    try:
        numel = mib * (1 << 20) // 4
        buf = torch.ones(numel, dtype=torch.float32, device=device)

        def sync() -> None:
            if device.type == "cuda":
                torch.cuda.synchronize(device)

        for _ in range(WARMUP):
            dist.all_reduce(buf)
        sync()
        dist.barrier()
        start = time.perf_counter()
        for _ in range(iters):
            dist.all_reduce(buf)
        sync()
        elapsed = torch.tensor([time.perf_counter() - start], dtype=torch.float64, device=device)
        dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)  # the slowest rank sets the pace
        # correctness: every rank contributes rank+1, so every element must be n(n+1)/2
        buf.fill_(rank + 1)
        dist.all_reduce(buf)
        expected = world * (world + 1) / 2
        wrong = int((buf != expected).sum().item())
        per_op = float(elapsed.item()) / iters
        alg = numel * 4 / per_op / 1e9
        return {
            "backend": backend, "device": device.type, "ranks": world, "bytes": numel * 4, "iters": iters,
            "time_per_op_s": per_op, "algbw_gbps": alg, "busbw_gbps": busbw(alg, world),
            "wrong_elements": wrong,
        }
    finally:
        dist.destroy_process_group()


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m slurmadm.health.allreduce")
    ap.add_argument("--backend", choices=["nccl", "gloo"], required=True)
    ap.add_argument("--mib", type=int, default=1024)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--rank", type=int)
    ap.add_argument("--world", type=int)
    ap.add_argument("--local-rank", type=int)
    ap.add_argument("--master-addr")
    ap.add_argument("--port", type=int)
    ap.add_argument("--port-base", type=int)
    ap.add_argument("--port-range", type=int, default=100, help="listen on --port-base + job id %% this")
    ap.add_argument("--addr", action="append", default=[], metavar="NODE=ADDR",
                    help="address of a node (rank 0's node is looked up here)")
    args = ap.parse_args(argv)
    rank = args.rank if args.rank is not None else _env_int("SLURM_PROCID", 0)
    world = args.world if args.world is not None else _env_int("SLURM_NTASKS", 1)
    local = args.local_rank if args.local_rank is not None else _env_int("SLURM_LOCALID", 0)
    addr_map = dict(item.split("=", 1) for item in args.addr)
    master = master_address(args.master_addr, addr_map)
    port = rendezvous_port(args.port, args.port_base, args.port_range)
    if rank == 0:
        _emit({"event": "started", "job_id": os.environ.get("SLURM_JOB_ID", ""), "master": f"{master}:{port}",
               "ranks": world})
    try:
        result = measure(args.backend, rank, world, local, master, port, args.mib, args.iters, args.timeout)
    except ImportError:
        if rank == 0:
            _emit({"event": "result", "error": "torch is not installed (pip install 'slurmadm[burnin]')",
                   "missing": "torch"})
        return 3
    except Exception as exc:  # a failed rendezvous, a NCCL/gloo error: reported, not a traceback
        _emit({"event": "result", "error": f"rank {rank}: {type(exc).__name__}: {' '.join(str(exc).split())}"[:500]})
        return 1
    if rank == 0:
        _emit({"event": "result", **result})
    return 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_local(backend: str, ranks: int, *, mib: int, iters: int, timeout: float, port: int | None = None) -> dict:
    """All-reduce among `ranks` processes on this node (the single-node test). Returns rank 0's
    result line (with `error` when it failed)."""
    port = port or free_port()
    base = [sys.executable, "-m", "slurmadm.health.allreduce", "--backend", backend, "--mib", str(mib),
            "--iters", str(iters), "--timeout", str(timeout), "--world", str(ranks),
            "--master-addr", "127.0.0.1", "--port", str(port)]
    procs = [subprocess.Popen([*base, "--rank", str(r), "--local-rank", str(r)], stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for r in range(ranks)]
    outputs = []
    deadline = time.monotonic() + timeout + 30
    for p in procs:
        try:
            outputs.append(p.communicate(timeout=max(1.0, deadline - time.monotonic())))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            return {"error": f"no result within {timeout + 30:g} s"}
    result = last_result(outputs[0][0])
    if result is None:
        errors = [last_result(out) for out, _ in outputs]
        detail = next((e["error"] for e in errors if e and "error" in e), None)
        tail = (outputs[0][1].strip().splitlines() or ["no output"])[-1]
        return {"error": detail or f"rank 0 exited {procs[0].returncode}: {tail}"}
    return result


def last_result(stdout: str) -> dict | None:
    """The last `{"event": "result", ...}` line of a collective's output."""
    for line in reversed(stdout.splitlines()):
        line = line.strip()
        if line.startswith("{"):
            try:
                obj = json.loads(line)
            except json.JSONDecodeError:
                continue
            if obj.get("event") == "result":
                return obj
    return None


if __name__ == "__main__":
    sys.exit(main())
