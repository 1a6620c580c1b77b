"""The `nccl-allreduce` check: single-node all-reduce bus bandwidth against the model's floor.

Two ways to measure, the same formula (nccl-tests' PERFORMANCE.md):
  algbw = bytes / time,  busbw = algbw x 2(n-1)/n  for n ranks.
- nccl-tests' `all_reduce_perf` when it is on PATH (one process driving every GPU, `-g N`);
- else slurmadm's own torch.distributed run (`python -m slurmadm.health.allreduce`, NCCL
  backend, one process per GPU), when torch with CUDA is installed (the `burnin` extra).
With neither, the check cannot run and says so (status "error", the site's on_error policy).

In prolog and epilog it runs only when the node has no passing result fresher than
`nccl_fresh_hours`, and never while a process holds a GPU (other jobs on a shared node).
"""

from __future__ import annotations

import re
import shutil
import sys

from ..errors import SlurmadmError
from ..proc import run
from .checks import CannotRun, Ctx, MissingTool, Outcome

NUM = r"[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?"
AVG_RE = re.compile(rf"^\s*#?\s*Avg bus bandwidth\s*:\s*({NUM})", re.M)
OOB_RE = re.compile(r"^\s*#?\s*Out of bounds values\s*:\s*([0-9]+)\s+(OK|FAILED)", re.M)


def _count(field: str) -> int:
    """A #wrong cell: an integer, or %g (`1.04858e+06`); N/A and anything else count 0."""
    try:
        return int(float(field))
    except ValueError:
        return 0


def parse_all_reduce_perf(text: str) -> tuple[float, int]:
    """(average bus bandwidth GB/s, number of wrong results) from all_reduce_perf's output.

    Wrong results: the `#wrong` columns of nccl-tests 2.x data rows (printed with %g, so large
    counts read `1.04858e+06`, rounded) and the `Out of bounds values : N FAILED` footer, which is
    exact and wins when present (older layouts print a max-error column instead of a count)."""
    m = AVG_RE.search(text)
    oob = OOB_RE.search(text)
    wrong = int(oob.group(1)) if oob and oob.group(2) == "FAILED" else 0
    if oob and oob.group(2) == "FAILED" and wrong == 0:
        wrong = 1
    if not wrong and "#wrong" in text:
        rows = 0
        for line in text.splitlines():
            fields = line.split()
            # data rows: size count type redop root time algbw busbw #wrong time algbw busbw #wrong
            if len(fields) >= 13 and fields[0].isdigit():
                rows += _count(fields[8]) + _count(fields[12])
        wrong = rows
    if not m:
        if wrong:
            return 0.0, wrong
        tail = text.strip().splitlines()[-1:] or ["no output"]
        raise CannotRun(f"all_reduce_perf printed no 'Avg bus bandwidth' line ({tail[0][:120]})")
    return float(m.group(1)), wrong


def measure(gpus: int, size_mib: int, iters: int, timeout_s: float) -> tuple[float, int, str]:
    """(busbw GB/s, wrong results, how) on this node's GPUs."""
    nbytes = size_mib << 20
    exe = shutil.which("all_reduce_perf")
    try:
        if exe:
            # nccl-tests exits non-zero when any result was wrong: that is a verdict, not "cannot run"
            proc = run([exe, "-b", str(nbytes), "-e", str(nbytes), "-f", "2", "-g", str(gpus),
                        "-n", str(iters), "-w", "5", "-c", "1"], timeout=timeout_s, check=False)
            try:
                bw, wrong = parse_all_reduce_perf(proc.stdout)
            except CannotRun:
                if proc.returncode != 0:
                    tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
                    raise CannotRun(f"all_reduce_perf exited {proc.returncode}: {tail[0][:160]}") from None
                raise
            return bw, wrong, "all_reduce_perf"
        if not _torch_cuda():
            raise MissingTool("no all_reduce_perf on PATH and no torch with CUDA (pip install 'slurmadm[burnin]')")
        from .allreduce import run_local

        data = run_local("nccl", gpus, mib=size_mib, iters=iters, timeout=timeout_s)
        if "error" in data:
            raise CannotRun(f"all-reduce failed: {data['error']}")
        return data["busbw_gbps"], data["wrong_elements"], "torch.distributed/nccl"
    except SlurmadmError as exc:  # timed out, or the benchmark itself failed
        raise CannotRun(str(exc)) from None


def _torch_cuda() -> bool:
    proc = run([sys.executable, "-c", "import torch, torch.distributed as d; "
                "print(torch.cuda.is_available() and d.is_nccl_available())"], timeout=60, check=False)
    return proc.returncode == 0 and proc.stdout.strip().endswith("True")


def check(ctx: Ctx) -> Outcome:
    cfg = ctx.cfg
    out = Outcome()
    last = ctx.nccl_last_pass
    if ctx.context in ("prolog", "epilog") and last is not None:
        if ctx.now - last < cfg.nccl_fresh_hours * 3600:
            out.skip = f"passed {(ctx.now - last) / 3600:.1f} h ago (fresh for {cfg.nccl_fresh_hours:g} h)"
            return out
    if ctx.nvml is not None:
        for g in ctx.nvml.usable:
            if ctx.nvml.get("nvmlDeviceGetComputeRunningProcesses", g.handle):
                out.skip = f"GPU{g.index} is in use; all-reduce needs every GPU idle"
                return out
    bw, wrong, how = measure(cfg.gpu.count, cfg.nccl_size_mib, cfg.nccl_iters, cfg.nccl_timeout_s)
    floor = cfg.thresholds.nccl_busbw_floor_gbps
    out.value = bw
    out.note = f"busbw {bw:.1f} GB/s >= floor {floor:g} ({how}, {cfg.nccl_size_mib} MiB x {cfg.gpu.count} GPUs)"
    if wrong:
        out.fail(f"{wrong} wrong all-reduce results: data corruption ({how})")
    if bw < floor:
        out.fail(f"busbw {bw:.1f} GB/s < floor {floor:g} GB/s ({how})")
    return out
