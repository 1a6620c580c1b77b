"""The lean entry point Slurm runs on compute nodes: `python -m slurmadm.health prolog|epilog|periodic`.

It imports only what a run needs (no click, no rich, and no site model while the node's cached
settings match the site file), so a healthy 8-GPU node's prolog stays in the tens of
milliseconds. `slurmadm health prolog` (the CLI) runs the same code for people.

The rule: **the hook never fails a job for the admin's mistake or a broken install, only for a
node fault.** So:
- exit 0: the node may take the job; also whenever the site file cannot be read, is unsafe
  (writable by others while we run as root) or anything unexpected happens while loading it:
  that is logged loudly (syslog LOG_ALERT and stderr), recorded where admins look (results log,
  the node's store, the exporter's `slurmadm_hook_errors_total`: health/hookerror.py) and the
  job runs, rather than have Slurm drain every node at once;
- exit `$SLURMADM_REFUSE_EXIT` (default 1; the wrappers in prolog_epilog/ set their own code and
  turn it into 1 for Slurm): the node must not take the job (slurmadm has drained it, or a
  state someone else handles holds the drain back);
- exit 2: bad usage.
The wrappers treat every other exit (a traceback's 1, a missing interpreter's 127, a signal) as a
broken install: alert, and let the job run.

The run's time limit (`health.<context>_timeout_s`) is held from outside the Python process that
runs the checks: the hook forks, the child runs the checks and the Slurm calls, and the parent,
which runs no Python code but a wait, kills the child at the limit. So a library that keeps the
GIL while it hangs (pyslurm while libslurm retries an unreachable controller) cannot stretch it.
"""

from __future__ import annotations

import json
import os
import sys
import syslog
import time

CONTEXTS = ("prolog", "epilog", "periodic", "run")
ENV_REFUSE_EXIT = "SLURMADM_REFUSE_EXIT"
HOOK_CONTEXTS = ("prolog", "epilog", "periodic")
# the parent's limit is this much after the child's own watchdog, so the child reports first
# whenever its Python still runs
SUPERVISOR_GRACE_S = 1.0


def local_node(explicit: str | None) -> str:
    if explicit:
        # act as that Slurm node, as slurmd would tell us (the dev cluster's stand-in NVML reads it)
        os.environ["SLURMD_NODENAME"] = explicit
        return explicit
    return os.environ.get("SLURMD_NODENAME") or os.uname().nodename.split(".")[0]


def refuse_exit() -> int:
    try:
        code = int(os.environ.get(ENV_REFUSE_EXIT) or 1)
    except ValueError:
        return 1
    return code if 1 <= code <= 125 else 1


def _alert(msg: str) -> None:
    syslog.openlog("slurmadm-health", syslog.LOG_PID, syslog.LOG_DAEMON)
    syslog.syslog(syslog.LOG_ALERT, msg)
    print(f"slurmadm: error: {msg}", file=sys.stderr, flush=True)


def _as_slurm_runs_it(argv: list[str]):
    """`prolog` alone, as the hook scripts run it: no argparse import (a few ms of every prolog)."""
    if len(argv) == 1 and argv[0] in CONTEXTS:
        from types import SimpleNamespace

        return SimpleNamespace(context=argv[0], node=None, site=None, checks=None, dry_run=False, json=False)
    return None


def _parse(argv: list[str] | None):
    import argparse

    ap = argparse.ArgumentParser(prog="python -m slurmadm.health", description=__doc__.splitlines()[0])
    ap.add_argument("context", choices=CONTEXTS)
    ap.add_argument("--node", help="act as this Slurm node (default: $SLURMD_NODENAME, then the host name)")
    ap.add_argument("--site", help="site file (default: $SLURMADM_SITE, then /etc/slurmadm/site.toml)")
    ap.add_argument("--checks", help="comma-separated check ids (default: the context's checks)")
    ap.add_argument("--dry-run", action="store_true", help="report what would be drained/resumed; change nothing")
    ap.add_argument("--json", action="store_true", help="the full report as JSON on stdout")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None, *, exit_now: bool = False) -> None:
    """`exit_now`: leave with os._exit once the run is recorded (`python -m slurmadm.health`)."""
    started = time.monotonic()
    args = _as_slurm_runs_it(sys.argv[1:] if argv is None else argv) or _parse(argv)
    hook = args.context in HOOK_CONTEXTS
    refuse = refuse_exit()

    from ..errors import SlurmadmError
    from . import config, engine

    node = local_node(args.node)
    try:
        cfg = config.load(node, args.site, site_checks=_site_checks)
    except SlurmadmError as exc:
        _cannot_load(args.context, node, exc, str(exc))
        sys.exit(0 if hook else exc.exit_code)
    except Exception as exc:  # noqa: BLE001 - anything at all: never fail every job for it
        _cannot_load(args.context, node, exc, f"unexpected {type(exc).__name__}: {exc}")
        sys.exit(0 if hook else 2)

    limit = cfg.timeouts[args.context]
    # at the hard limit, fail-safe for the job unless the site said otherwise
    expiry_code = refuse if cfg.on_error == "fail" and args.context in ("prolog", "epilog") else 0
    gave_up = f"slurmadm health {args.context} {node}: gave up at the run's limit of {limit:g} s"

    journal = None
    if hook:
        journal = _supervise(cfg, args.context, limit - (time.monotonic() - started) + SUPERVISOR_GRACE_S, gave_up,
                             expiry_code)  # returns only in the child
    watch = engine.Watch(journal)

    def expired() -> None:
        _alert(gave_up)
        if not watch.salvage(gave_up):  # the run's record with the alert, else the alert alone
            _record_alert(cfg, args.context, gave_up)

    engine.start_watchdog(limit - (time.monotonic() - started), expired, exit_code=expiry_code)
    try:
        only = [c.strip() for c in args.checks.split(",") if c.strip()] if args.checks else None
        job = None
        if args.context == "prolog":
            from ..jobmap import held

            job = held(dict(os.environ))
        report = engine.execute(cfg, args.context, only=only, act=not args.dry_run, started=started, watch=watch,
                                job=job)
    except SlurmadmError as exc:
        print(f"slurmadm: error: {exc}", file=sys.stderr)
        engine.leave(exc.exit_code if not hook else 0, now=exit_now)
        return
    if args.context == "epilog" or (args.context == "prolog" and report.exit_code == 0):
        _record_job_gpus(cfg, node, args.context)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2, sort_keys=True, default=str))
    print(engine.summary_line(report), file=sys.stderr)
    code = report.exit_code
    engine.leave(refuse if code == 1 and args.context in ("prolog", "epilog") else code, now=exit_now)


def _site_checks() -> None:
    """The health package's site checks (unknown check ids, models), for a site parsed on a
    settings-cache miss: sitecheck imports the site model's validation, which a cached run never
    needs."""
    from . import sitecheck  # noqa: F401  (registers them)


def _cannot_load(context: str, node: str, exc: BaseException, error: str) -> None:
    """The site cannot be loaded: say so loudly, and in a hook (which lets the job run, so health
    enforcement is off here) also leave the trace admins look at (health/hookerror.py)."""
    if context not in HOOK_CONTEXTS:
        _alert(f"slurmadm health {context}: cannot load the site: {error}")
        return
    consequence = ("the job runs (an admin's error, not the node's)" if context in ("prolog", "epilog")
                   else "health enforcement is off on this node until it loads")
    _alert(f"slurmadm health {context}: cannot load the site: {error}; {consequence}")
    try:
        from . import hookerror

        for problem in hookerror.record(node, context, hookerror.reason_of(exc), f"cannot load the site: {error}"):
            print(f"slurmadm: warning: hook error not recorded: {problem}", file=sys.stderr, flush=True)
    except Exception as rec_exc:  # noqa: BLE001 - the alert above stands; never fail the job for this
        print(f"slurmadm: warning: hook error not recorded: {rec_exc}", file=sys.stderr, flush=True)


def _supervise(cfg, context: str, limit_s: float, gave_up: str, expiry_code: int) -> int | None:
    """Fork: the child returns (the write end of the journal pipe: what the run hands over before
    it calls Slurm, health/record.py) and runs the health run; the parent waits for it at most
    `limit_s`, then kills it, records what the run handed over with the alert and leaves with
    `expiry_code`. The parent leaves with the child's exit code otherwise (0 when the child died
    of a signal: a crash is not a node fault)."""
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        rfd, wfd = os.pipe()
    except OSError:
        rfd = wfd = None
    try:
        pid = os.fork()
    except OSError as exc:  # no fork (out of processes): run in this process, with the thread watchdog
        print(f"slurmadm: warning: cannot fork a supervisor ({exc.strerror}); running unsupervised",
              file=sys.stderr)
        for fd in (rfd, wfd):
            if fd is not None:
                os.close(fd)
        return None
    if pid == 0:
        if rfd is not None:
            os.close(rfd)
        return wfd
    if wfd is not None:
        os.close(wfd)
    import signal  # the parent's alone, imported while the child runs (off the prolog's path)

    signal.signal(signal.SIGTERM, lambda *_: (_kill(pid), os._exit(0)))
    status, journal = _wait(pid, max(limit_s, 0.1), rfd)
    if status is None:
        _kill(pid)
        _alert(gave_up)
        _record_alert(cfg, context, gave_up, journal)
        os._exit(expiry_code)
    if os.WIFEXITED(status):
        os._exit(os.WEXITSTATUS(status))
    sig = os.WTERMSIG(status) if os.WIFSIGNALED(status) else 0
    _alert(f"slurmadm health {context} {cfg.node}: the run died of signal {sig}; the job runs")
    _record_alert(cfg, context, f"the health run died of signal {sig}", journal)
    os._exit(0)


def _wait(pid: int, timeout_s: float, journal_fd: int | None = None) -> tuple[int | None, bytes]:
    """(the child's wait status, or None if it is still running after `timeout_s`; what it wrote
    on `journal_fd` meanwhile)."""
    import select

    deadline = time.monotonic() + timeout_s
    journal = bytearray()
    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        fd = None
    try:
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return status, bytes(journal)
            left = deadline - time.monotonic()
            if left <= 0:
                return None, bytes(journal)
            fds = [f for f in (fd, journal_fd) if f is not None]
            if fd is None:
                left = min(left, 0.02)
            ready = select.select(fds, [], [], left)[0] if fds else time.sleep(left) or []
            if journal_fd is not None and journal_fd in ready:
                chunk = os.read(journal_fd, 65536)
                if chunk:
                    journal += chunk
                else:  # the child closed it (exec, exit): nothing more will come
                    os.close(journal_fd)
                    journal_fd = None
    except ChildProcessError:
        return 0, bytes(journal)
    finally:
        for f in (fd, journal_fd):
            if f is not None:
                os.close(f)


def _kill(pid: int) -> None:
    import signal

    try:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass


def _record_alert(cfg, context: str, reason: str, journal: bytes = b"") -> None:
    """The alert where a run's own alerts go (JSON lines, the store's audit trail), best effort
    and briefly: this runs after the limit. With what a killed run handed over (`journal`), that
    record and the alert are written as the run's one record."""
    try:
        from .record import Recorder, open_store, replay_journal

        handed = replay_journal(journal) if journal else None
        store, _ = open_store(cfg.store_path, cfg.audit_log, timeout_s=1.0)
        rec = Recorder(node=cfg.node, context=context, run_id=handed[0] if handed else "supervisor",
                       results_log=cfg.results_log, store=store, use_syslog=bool(handed))
        if handed:
            rec.items = handed[1]  # its syslog lines too: the run never got to send them
        rec.event("alert", reason)
        rec.commit()
        if store is not None:
            store.close()
    except Exception:  # noqa: BLE001 - syslog and stderr already have it
        pass


def _record_job_gpus(cfg, node: str, context: str) -> None:
    """The GPU -> job map the node exporter labels GPU metrics with (prolog writes, epilog
    removes). Best effort: a map that cannot be written never fails a job."""
    try:
        from ..jobmap import record_from_env

        record_from_env(dict(os.environ), node, cfg.job_map_dir, context)
        if getattr(cfg, "dcgm_job_map_dir", ""):
            from ..jobmap import record_dcgm

            record_dcgm(dict(os.environ), cfg.dcgm_job_map_dir, context)
    except Exception as exc:  # noqa: BLE001
        print(f"slurmadm: warning: GPU->job map: {exc}", file=sys.stderr)
