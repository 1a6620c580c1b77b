"""The GPU -> job map: the prolog records which job holds which GPUs, the epilog removes it.

One small JSON file per job in `<job_map_dir>/<node>/<jobid>.json` (the node directory lets one
shared directory serve the dev cluster's fake nodes). Written atomically; a hook never fails a
job because the map could not be written (the caller ignores errors). This module imports only
the standard library (and slurmadm.record): the prolog writes it (health/hook.py), the node
exporter reads it (exporter/node.py); it sits below both.
"""

from __future__ import annotations

import json
import os
import re
import time

from .record import record

_JOBID = re.compile(r"^[0-9]+(_[0-9]+)?$")
_NAME = re.compile(r"^[A-Za-z0-9._-]{1,64}$")


@record(frozen=True)
class JobGpus:
    """Which job holds which GPUs on this node."""

    job_id: str
    user: str
    account: str
    partition: str
    gpus: tuple[int, ...]
    start: float


def parse_gpu_list(text: str) -> tuple[int, ...]:
    """SLURM_JOB_GPUS / CUDA_VISIBLE_DEVICES style: "0,1,2" (ranges "0-3" too); junk -> ()."""
    out: list[int] = []
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        lo, _, hi = part.partition("-")
        if not lo.isdigit() or (hi and not hi.isdigit()):
            return ()
        out.extend(range(int(lo), int(hi or lo) + 1))
    return tuple(sorted(set(out)))


def _clean(value: str, pattern: re.Pattern[str]) -> str:
    return value if pattern.match(value or "") else ""


def record_from_env(env: dict[str, str], node: str, directory: str, context: str) -> str:
    """prolog: write the job's map entry; epilog: remove it. Returns what was done (for logs)."""
    job = env.get("SLURM_JOB_ID", "")
    if not _JOBID.match(job) or not _NAME.match(node):
        return "no job"
    path = os.path.join(directory, node, f"{job}.json")
    os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
    why = _unsafe(directory, os.path.dirname(path))
    if why:  # a job user could have planted a link or a file here: write and remove nothing
        return f"not recorded: {why}"
    if context == "epilog":
        try:
            os.unlink(path)
            return f"removed {path}"
        except FileNotFoundError:
            return "nothing to remove"
    gpus = parse_gpu_list(env.get("SLURM_JOB_GPUS") or env.get("CUDA_VISIBLE_DEVICES") or "")
    entry = {
        "job_id": job,
        "user": _clean(env.get("SLURM_JOB_USER", ""), _NAME),
        "account": _clean(env.get("SLURM_JOB_ACCOUNT", ""), _NAME),
        "partition": _clean(env.get("SLURM_JOB_PARTITION", ""), _NAME),
        "gpus": list(gpus),
        "start": time.time(),
    }
    # a private temporary name (O_EXCL), renamed over the map file; not tempfile: it pulls
    # random, shutil, bz2 and lzma into every prolog
    tmp = os.path.join(os.path.dirname(path), f".job-{os.getpid()}-{time.monotonic_ns()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o644)
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(entry, fh)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    return f"recorded job {job} GPUs {list(gpus)}"


def held(env: dict[str, str]) -> tuple[str, list[int]] | None:
    """The job this prolog runs for and the GPUs it holds (SLURM_JOB_GPUS, else
    CUDA_VISIBLE_DEVICES), validated; None when the environment names no job."""
    job = env.get("SLURM_JOB_ID", "")
    if not _JOBID.match(job):
        return None
    return job, list(parse_gpu_list(env.get("SLURM_JOB_GPUS") or env.get("CUDA_VISIBLE_DEVICES") or ""))


def _unsafe(*dirs: str) -> str:
    """'' when each directory is a real directory (not a link) that only its owner, root or
    this process's user, can write; else why not (the prolog runs as root)."""
    me = os.geteuid()
    for d in dirs:
        try:
            st = os.lstat(d)
        except OSError as exc:
            return f"{d}: {exc.strerror}"
        if not os.path.isdir(d) or os.path.islink(d):
            return f"{d} is not a directory (a link?)"
        if st.st_uid not in (0, me):
            return f"{d} is owned by uid {st.st_uid}"
        if st.st_mode & 0o022:
            return f"{d} is writable by others (mode {st.st_mode & 0o7777:04o})"
    return ""


def read(directory: str, node: str) -> dict[int, JobGpus]:
    """GPU index -> the job holding it, from the node's map files (bad files are skipped, and
    so are files another user than root or this process's owns: a job user's forgeries)."""
    out: dict[int, JobGpus] = {}
    d = os.path.join(directory, node)
    try:
        names = os.listdir(d)
    except OSError:
        return out
    for name in sorted(names):
        if not name.endswith(".json") or name.startswith("."):
            continue
        try:
            fd = os.open(os.path.join(d, name), os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
            if os.fstat(fd).st_uid not in (0, os.geteuid()):
                os.close(fd)
                continue
            with os.fdopen(fd) as fh:
                raw = json.load(fh)
            job = JobGpus(str(raw["job_id"]), str(raw.get("user", "")), str(raw.get("account", "")),
                          str(raw.get("partition", "")), tuple(int(g) for g in raw.get("gpus", [])),
                          float(raw.get("start", 0)))
        except (OSError, ValueError, KeyError, TypeError):
            continue
        if not _JOBID.match(job.job_id):
            continue
        for g in job.gpus:
            out[g] = job
    return out


def record_dcgm(env: dict[str, str], directory: str, context: str) -> str:
    """dcgm-exporter's --hpc-job-mapping-dir format (its transformation/hpc.go): one file per GPU
    index (`<directory>/0` ... `/7`), one job id a line; dcgm-exporter adds `hpc_job="<id>"` to
    that GPU's series, once per id. prolog: add the job to each of its GPUs' files; epilog: take
    it out of every file (a file left empty is removed). One small file per GPU under a lock
    (several jobs may share a GPU), renamed into place: a scrape never reads half a file."""
    import fcntl

    job = env.get("SLURM_JOB_ID", "")
    if not _JOBID.match(job):
        return "no job"
    os.makedirs(directory, mode=0o755, exist_ok=True)
    gpus = parse_gpu_list(env.get("SLURM_JOB_GPUS") or env.get("CUDA_VISIBLE_DEVICES") or "")
    lock = os.open(os.path.join(directory, ".lock"), os.O_WRONLY | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o644)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if context == "epilog":
            names = [n for n in os.listdir(directory) if n.isdigit()]
        else:
            names = [str(g) for g in gpus]
        for name in names:
            path = os.path.join(directory, name)
            try:
                with open(path) as fh:
                    jobs = [ln.strip() for ln in fh if ln.strip()]
            except FileNotFoundError:
                jobs = []
            if context == "epilog":
                if job not in jobs:
                    continue
                jobs = [j for j in jobs if j != job]
            elif job in jobs:
                continue
            else:
                jobs.append(job)
            if not jobs:
                os.unlink(path)
                continue
            tmp = os.path.join(directory, f".gpu-{name}-{os.getpid()}")
            with open(tmp, "w") as fh:
                fh.write("".join(f"{j}\n" for j in jobs))
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
    finally:
        os.close(lock)
    return f"dcgm map: job {job} {'removed' if context == 'epilog' else f'on GPUs {list(gpus)}'}"
