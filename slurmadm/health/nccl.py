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
from ..record import record
from .outcome import CannotRun, Ctx, MissingTool, Outcome

NUM = r"[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?"
AVG_RE = re.compile(rf"^\s*#?\s*Avg bus bandwidth\s*:\s*({NUM})", re.M)
OOB_RE = re.compile(r"^\s*#?\s*Out of bounds values\s*:\s*([0-9]+)\s+(OK|FAILED)", re.M)
# What launchers put before each line of a rank's output (tests/fixtures/health/README.md names
# the samples): Open MPI's --tag-output `[1,0]<stdout>:`, its --timestamp-output `ctime()` stamp
# (`Wed Dec  2 05:57:34 2026<stdout>:`, or before the tag when both are given: orte's
# iof_base_output.c), and srun --label's right-aligned task number (` 0: `).
LAUNCHER_PREFIX_RE = re.compile(
    r"^(?:(?:[A-Z][a-z]{2} [A-Z][a-z]{2} [ \d]\d \d{2}:\d{2}:\d{2} \d{4})?(?:\[\d+,\d+\])?"
    r"<(?:stdout|stderr|stddiag)>: ?|[ \t]*\d+: ?)", re.M)


def strip_launcher_prefixes(text: str) -> str:
    """The output as the benchmark printed it, without mpirun's or srun's per-line tags."""
    return LAUNCHER_PREFIX_RE.sub("", text)


@record(frozen=True)
class NcclRun:
    """What one nccl-tests run says. Two different counts of wrong results:
    - `failing_points`: the footer's `Out of bounds values : N FAILED`, which counts test points
      (one per message size and in-place/out-of-place run, per thread) whose check found any
      wrong element (nccl-tests' common.cu: `if (args->reportErrors && *wrongElts) errors[0]++`);
    - `wrong_elements`: the data rows' `#wrong` cells summed: elements, printed with %g so large
      counts are rounded (`1.04858e+06`). 0 when the layout has no such column."""

    busbw: float
    failing_points: int = 0
    wrong_elements: int = 0

    @property
    def wrong(self) -> bool:
        return bool(self.failing_points or self.wrong_elements)

    def describe(self) -> str:
        """`4 failing test points (128 wrong elements)`, each count named for what it counts."""
        pts = f"{self.failing_points} failing test point{'s' if self.failing_points != 1 else ''}"
        els = f"{self.wrong_elements} wrong element{'s' if self.wrong_elements != 1 else ''}"
        if self.failing_points and self.wrong_elements:
            return f"{pts} ({els})"
        return pts if self.failing_points else els


def _count(field: str) -> int:
    """A #wrong cell: an integer, or %g (`1.04858e+06`); N/A and anything else count 0."""
    try:
        return int(float(field))
    except ValueError:
        return 0


def parse_all_reduce_perf(text: str) -> NcclRun:
    """What an all_*_perf run printed, launcher prefixes (mpirun --tag-output / --timestamp-output,
    srun --label) stripped first.

    The footer `Out of bounds values : N FAILED` counts failing test points; the `#wrong` columns
    of nccl-tests 2.x data rows count wrong elements (rounded by %g). Older layouts print a
    max-error column instead of a count: only the footer counts there. A FAILED footer with a
    count of 0 still counts one point."""
    text = strip_launcher_prefixes(text)
    m = AVG_RE.search(text)
    oob = OOB_RE.search(text)
    points = int(oob.group(1)) if oob and oob.group(2) == "FAILED" else 0
    if oob and oob.group(2) == "FAILED" and points == 0:
        points = 1
    elements = 0
    if "#wrong" in text:
        for line in text.splitlines():
            fields = line.split()
            # data rows: size count type redop root time algbw busbw #wrong time algbw busbw #wrong
            if len(fields) >= 13 and fields[0].isdigit():
                elements += _count(fields[8]) + _count(fields[12])
    if not m:
        if points or elements:
            return NcclRun(0.0, points, elements)
        tail = text.strip().splitlines()[-1:] or ["no output"]
        raise CannotRun(f"all_reduce_perf printed no 'Avg bus bandwidth' line ({tail[0][:120]})")
    return NcclRun(float(m.group(1)), points, elements)


def measure(gpus: int, size_mib: int, iters: int, timeout_s: float) -> tuple[NcclRun, str]:
    """(what the run says, how it was measured) on this node's GPUs."""
    nbytes = size_mib << 20
    exe = shutil.which("all_reduce_perf")
    try:
        if exe:
            # nccl-tests exits non-zero when any result was wrong: that is a verdict, not "cannot run"
            proc = run([exe, "-b", str(nbytes), "-e", str(nbytes), "-f", "2", "-g", str(gpus),
                        "-n", str(iters), "-w", "5", "-c", "1"], timeout=timeout_s, check=False)
            try:
                got = parse_all_reduce_perf(proc.stdout)
            except CannotRun:
                if proc.returncode != 0:
                    tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or ["no output"]
                    raise CannotRun(f"all_reduce_perf exited {proc.returncode}: {tail[0][:160]}") from None
                raise
            return got, "all_reduce_perf"
        if not _torch_cuda():
            raise MissingTool("no all_reduce_perf on PATH and no torch with CUDA (pip install 'slurmadm[burnin]')")
        from .allreduce import run_local

        data = run_local("nccl", gpus, mib=size_mib, iters=iters, timeout=timeout_s)
        if "error" in data:
            raise CannotRun(f"all-reduce failed: {data['error']}")
        return NcclRun(data["busbw_gbps"], 0, int(data["wrong_elements"])), "torch.distributed/nccl"
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
    got, how = measure(cfg.gpu.count, cfg.nccl_size_mib, cfg.nccl_iters, cfg.nccl_timeout_s)
    bw = got.busbw
    floor = cfg.thresholds.nccl_busbw_floor_gbps
    out.value = bw
    out.note = f"busbw {bw:.1f} GB/s >= floor {floor:g} ({how}, {cfg.nccl_size_mib} MiB x {cfg.gpu.count} GPUs)"
    if got.wrong:
        out.fail(f"{got.describe()} in the all-reduce: data corruption ({how})")
    if bw < floor:
        out.fail(f"busbw {bw:.1f} GB/s < floor {floor:g} GB/s ({how})")
    return out
