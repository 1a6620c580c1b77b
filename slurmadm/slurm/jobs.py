"""Jobs and reservations through the Slurm CLI: srun, squeue, sacct, scancel, scontrol.

Only output formats that read the same in 22.05 and 24.11 are used: `squeue -h -o` and
`sacct -n -P -o` with named fields, and `scontrol show reservation -o` (one Key=Value line).

A job is started with `srun` from the calling host (no sbatch): its tasks' stdout and stderr come
back through Slurm's I/O forwarding into files on the caller's side, so no shared filesystem is
needed between the head node and the compute nodes. `srun` blocks while the job waits and runs,
so `SrunJob` runs it in the background; ending the srun process ends its job.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import CommandFailed, UnreachableError
from ..hostlist import compress
from ..proc import run
from .parse import Reservation, parse_reservations


@dataclass(frozen=True)
class JobRequest:
    """One job of `len(nodes)` whole nodes running `argv` in every task."""

    name: str
    nodes: Sequence[str]
    argv: Sequence[str]
    time_limit: str  # SlurmTime
    partition: str | None = None
    qos: str | None = None
    account: str | None = None
    reservation: str | None = None
    tasks_per_node: int = 1
    gpus_per_node: int = 0
    env: Mapping[str, str] = field(default_factory=dict)

    def srun_argv(self) -> list[str]:
        argv = [
            "srun",
            f"--job-name={self.name}",
            f"--nodes={len(self.nodes)}",
            f"--nodelist={compress(self.nodes)}",
            f"--ntasks-per-node={self.tasks_per_node}",
            f"--time={self.time_limit}",
            "--exclusive",  # the whole node: nothing else shares it while it is tested
            "--mem=0",  # all of its memory
            "--kill-on-bad-exit=1",  # one failed task ends the step (a hung peer cannot stall it)
        ]
        if self.gpus_per_node:
            argv.append(f"--gres=gpu:{self.gpus_per_node}")
        for opt, value in (("partition", self.partition), ("qos", self.qos), ("account", self.account),
                           ("reservation", self.reservation)):
            if value:
                argv.append(f"--{opt}={value}")
        return argv + [str(a) for a in self.argv]


class SrunJob:
    """An `srun` running in the background, stdout/stderr in `<log_dir>/<name>.out|.err`."""

    def __init__(self, request: JobRequest, log_dir: Path):
        self.request = request
        log_dir.mkdir(parents=True, exist_ok=True)
        safe = request.name.replace("/", "_")
        self.out_path = log_dir / f"{safe}.out"
        self.err_path = log_dir / f"{safe}.err"
        env = dict(os.environ)
        env.update(request.env)
        argv = request.srun_argv()
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            try:
                self._proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out, stderr=err,
                                              env=env, start_new_session=True, close_fds=True)
            except FileNotFoundError:
                raise UnreachableError("srun: command not found (is Slurm installed and on PATH?)") from None

    @property
    def name(self) -> str:
        return self.request.name

    def poll(self) -> int | None:
        return self._proc.poll()

    def stdout(self) -> str:
        return self.out_path.read_text(errors="replace")

    def stderr(self) -> str:
        return self.err_path.read_text(errors="replace")

    def _signal(self, sig: int) -> None:
        try:
            os.killpg(self._proc.pid, sig)
        except ProcessLookupError:
            pass


def stop_all(jobs: Sequence[SrunJob], *, grace: float = 40.0) -> None:
    """End these jobs: SIGTERM makes each srun cancel its job (pending or running) and wait for
    the step to end (Slurm gives it ~32 s); whatever still runs after `grace` gets SIGKILL."""
    live = [j for j in jobs if j.poll() is None]
    for j in live:
        j._signal(signal.SIGTERM)
    deadline = time.monotonic() + grace
    for j in live:
        try:
            j._proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            j._signal(signal.SIGKILL)
            j._proc.wait(timeout=10)


# ---------------------------------------------------------------------------------- queries


@dataclass(frozen=True)
class QueuedJob:
    job_id: str
    name: str
    state: str
    nodes: str


def queued_jobs(*, user: str | None = None, timeout: float = 20.0) -> list[QueuedJob]:
    argv = ["squeue", "-h", "-o", "%i|%j|%T|%N"]
    if user:
        argv.append(f"--user={user}")
    out = run(argv, timeout=timeout).stdout
    jobs = []
    for line in out.splitlines():
        parts = line.split("|")
        if len(parts) == 4:
            jobs.append(QueuedJob(*[p.strip() for p in parts]))
    return jobs


def cancel(job_ids: Sequence[str], *, timeout: float = 20.0) -> None:
    if job_ids:
        run(["scancel", *job_ids], timeout=timeout, check=False)


@dataclass(frozen=True)
class AccountedJob:
    job_id: str
    state: str  # COMPLETED, FAILED, TIMEOUT, CANCELLED, NODE_FAIL, OUT_OF_MEMORY ... (first word)
    exit_code: str
    elapsed: str


def accounted_jobs(job_ids: Sequence[str], *, timeout: float = 20.0) -> dict[str, AccountedJob]:
    """What slurmdbd recorded for these jobs (allocations only). Unknown ids are absent."""
    if not job_ids:
        return {}
    out = run(["sacct", "-X", "-n", "-P", "-j", ",".join(job_ids), "-o", "JobID,State,ExitCode,Elapsed"],
              timeout=timeout).stdout
    found = {}
    for line in out.splitlines():
        parts = line.split("|")
        if len(parts) == 4:
            job_id, state, code, elapsed = parts
            found[job_id] = AccountedJob(job_id, state.split()[0] if state else "", code, elapsed)
    return found


# ------------------------------------------------------------------------------ reservations


def parse_reservation(text: str, name: str) -> Reservation | None:
    """Reservation `name` from `scontrol show reservation -o` output (one line per reservation)."""
    return next((r for r in parse_reservations(text) if r.name == name), None)


def reservation(name: str, *, timeout: float = 20.0) -> Reservation | None:
    argv = ["scontrol", "show", "reservation", name, "-o"]
    proc = run(argv, timeout=timeout, check=False)
    if proc.returncode != 0:
        text = (proc.stdout or "") + (proc.stderr or "")
        if "not found" in text.lower():
            return None
        raise CommandFailed(argv, proc.returncode, text)
    return parse_reservation(proc.stdout, name)


def create_reservation(name: str, nodes: Sequence[str], *, users: str, flags: Sequence[str],
                       timeout: float = 20.0) -> None:
    """A reservation from now until deleted (no end: a crash leaves the nodes held, not open)."""
    run(["scontrol", "create", "reservation", f"ReservationName={name}", "StartTime=now",
         "Duration=UNLIMITED", f"Nodes={compress(nodes)}", f"Users={users}", f"Flags={','.join(flags)}"],
        timeout=timeout)


def delete_reservation(name: str, *, timeout: float = 20.0) -> None:
    run(["scontrol", "delete", f"ReservationName={name}"], timeout=timeout)
