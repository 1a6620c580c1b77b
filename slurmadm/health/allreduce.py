"""slurmadm's own all-reduce benchmark (torch.distributed), used when nccl-tests is not installed.

    python -m slurmadm.health.allreduce --backend nccl --world 8 --size-mib 4096 --iters 20

One process per rank on this node. Rank 0 prints one JSON line: busbw/algbw in GB/s (same
formula as nccl-tests: busbw = algbw x 2(n-1)/n), the mean time per all-reduce and the number
of wrong elements of a correctness all-reduce. `--backend gloo` runs the same code on CPU
tensors: it exists to test this program on machines without GPUs; its numbers say nothing
about NVLink.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import time


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _rank(rank: int, world: int, backend: str, port: int, nbytes: int, iters: int, warmup: int, queue) -> None:
    import torch
    import torch.distributed as dist

    from .nccl import busbw

    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    if backend == "nccl":
        torch.cuda.set_device(rank)
        device = torch.device("cuda", rank)
        sync = torch.cuda.synchronize
    else:
        device = torch.device("cpu")
        sync = lambda: None  # noqa: E731 - gloo calls are synchronous
    n = nbytes // 4
    check = torch.ones(n, dtype=torch.float32, device=device)
    dist.all_reduce(check)
    sync()
    wrong = int((check != world).sum().item())
    data = torch.empty(n, dtype=torch.float32, device=device).fill_(1.0 / world)
    for _ in range(warmup):
        dist.all_reduce(data)
    sync()
    dist.barrier()
    start = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(data)
    sync()
    seconds = (time.perf_counter() - start) / iters
    if rank == 0:
        queue.put({"backend": backend, "world": world, "bytes": n * 4, "iters": iters,
                   "time_us": round(seconds * 1e6, 1), "algbw_gbps": round(n * 4 / seconds / 1e9, 3),
                   "busbw_gbps": round(busbw(n * 4, seconds, world), 3), "wrong": wrong})
    dist.destroy_process_group()


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(prog="python -m slurmadm.health.allreduce", description=__doc__.splitlines()[0])
    ap.add_argument("--backend", choices=["nccl", "gloo"], default="nccl")
    ap.add_argument("--world", type=int, default=8)
    ap.add_argument("--size-mib", type=int, default=4096)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=5)
    args = ap.parse_args(argv)
    if args.world < 2:
        ap.error("--world must be at least 2")
    import torch.multiprocessing as mp

    os.environ.setdefault("NCCL_DEBUG", "WARN")
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    mp.start_processes(_rank, args=(args.world, args.backend, _free_port(), args.size_mib << 20, args.iters,
                                    args.warmup, queue), nprocs=args.world, join=True, start_method="spawn")
    print(json.dumps(queue.get()))


if __name__ == "__main__":
    main()
