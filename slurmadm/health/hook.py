"""The lean entry point Slurm runs on compute nodes: `python -m slurmadm.health prolog|epilog|periodic`.

It imports only what a run needs (no click, no rich, and no site model while the node's cached
settings match the site file), so a healthy 8-GPU node's prolog stays in the tens of
milliseconds. `slurmadm health prolog` (the CLI) runs the same code for people.

Exit codes: prolog/epilog 0 = the node may take the job, 1 = it must not (Slurm requeues the
job; slurmadm has already drained the node with its own reason); 2 = bad usage.
A site file that cannot be read is an admin's error, not the node's: the hook logs it to syslog
and stderr and lets the job run (exit 0) rather than have Slurm drain every node at once.
"""

from __future__ import annotations

import json
import os
import sys
import syslog
import time

CONTEXTS = ("prolog", "epilog", "periodic", "run")


def local_node(explicit: str | None) -> str:
    if explicit:
        # act as that Slurm node, as slurmd would tell us (the dev cluster's stand-in NVML reads it)
        os.environ["SLURMD_NODENAME"] = explicit
        return explicit
    return os.environ.get("SLURMD_NODENAME") or os.uname().nodename.split(".")[0]


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


def main(argv: list[str] | None = None) -> None:
    started = time.monotonic()
    args = _as_slurm_runs_it(sys.argv[1:] if argv is None else argv) or _parse(argv)

    from ..errors import SlurmadmError
    from . import config, engine

    node = local_node(args.node)
    try:
        cfg = config.load(node, args.site)
    except SlurmadmError as exc:
        msg = f"slurmadm health {args.context}: cannot load the site: {exc}"
        syslog.openlog("slurmadm-health", syslog.LOG_PID, syslog.LOG_DAEMON)
        syslog.syslog(syslog.LOG_ALERT, msg)
        print(f"slurmadm: error: {msg}", file=sys.stderr)
        sys.exit(0 if args.context in ("prolog", "epilog", "periodic") else exc.exit_code)

    limit = cfg.timeouts[args.context]
    # at the hard limit, fail-safe for the job unless the site said otherwise
    expiry_code = 1 if cfg.on_error == "fail" and args.context in ("prolog", "epilog") else 0

    def expired() -> None:
        msg = f"slurmadm health {args.context} {node}: gave up at the run's limit of {limit:g} s"
        syslog.openlog("slurmadm-health", syslog.LOG_PID, syslog.LOG_DAEMON)
        syslog.syslog(syslog.LOG_ALERT, msg)
        print(msg, file=sys.stderr, flush=True)

    engine.start_watchdog(limit - (time.monotonic() - started), expired, exit_code=expiry_code)
    try:
        only = [c.strip() for c in args.checks.split(",") if c.strip()] if args.checks else None
        report = engine.execute(cfg, args.context, only=only, act=not args.dry_run, started=started)
    except SlurmadmError as exc:
        print(f"slurmadm: error: {exc}", file=sys.stderr)
        engine.leave(exc.exit_code)
        return
    if args.context == "epilog" or (args.context == "prolog" and report.exit_code == 0):
        _record_job_gpus(cfg, node, args.context)
    if args.json:
        print(json.dumps(report.to_dict(), indent=2, sort_keys=True, default=str))
    print(engine.summary_line(report), file=sys.stderr)
    engine.leave(report.exit_code)


def _record_job_gpus(cfg, node: str, context: str) -> None:
    """The GPU -> job map the node exporter labels GPU metrics with (prolog writes, epilog
    removes). Best effort: a map that cannot be written never fails a job."""
    try:
        from ..exporter.jobmap import record_from_env

        record_from_env(dict(os.environ), node, cfg.job_map_dir, context)
    except Exception as exc:  # noqa: BLE001
        print(f"slurmadm: warning: GPU->job map: {exc}", file=sys.stderr)
