"""What a health run does about its results: drain, resume, alert, or nothing.

`decide()` is pure (results + what Slurm says about the nodes -> a Plan) so every rule is tested
on plain data; engine.py carries a plan out through the Slurm adapter (under `drain_lock`).

Rules:
- Drain only through slurmadm's own reason (`slurmadm: <check-id>: <detail> [<context>]`) and
  only a node `may_drain` allows: a node drained for another reason, or in a state someone else
  handles (reboot, power, maintenance, reservation), is never touched.
- The breaker: automatic drains may not take out more than floor(drain_cap_fraction x nodes) of
  any partition the node is in; past that the plan is an alert instead of a drain.
- Resume only in periodic runs, only slurmadm's own drains set by a health check (not e.g. a
  burn-in drain, which only a passing burn-in lifts), after `resume_after_clean_runs`
  consecutive clean periodic runs (the count lives in the store's node_state).
- A prolog/epilog blocks the job (non-zero exit) when the node is drained now (by us or already
  by someone), and when a state someone else handles holds the drain back (a pending reboot, DOWN,
  power): the fault is real and the job must not run on it. Two exceptions let the job run with an
  alert: the breaker (a non-zero exit would make Slurm drain the node behind it) and a maintenance
  reservation (its jobs are the admin's, or burn-in's, which test the node themselves).
- A drain whose reason no longer reads exactly as slurmadm set it (`our_reason`, remembered in
  the store) was taken over by an admin: never resumed.
"""

from __future__ import annotations

import fcntl
import math
import os
import time
from contextlib import contextmanager
from ..slurm.model import NodeInfo
from ..slurm.ownership import format_reason, is_ours, may_drain, may_resume, reason_check_id
from .checks import BY_ID
from .runner import Plan, Result, first_drain

CLEAN_RUNS_KEY = "clean-runs"
DRAIN_REASON_KEY = "drain-reason"  # the exact reason this node's last health drain set


def drain_reason(results: list[Result], context: str) -> tuple[str, str] | None:
    worst = first_drain(results)
    if worst is None:
        return None
    others = sum(1 for r in results if r.action == "drain") - 1
    detail = worst.detail + (f" (+{others} more)" if others > 0 else "")
    return worst.check_id, format_reason(worst.check_id, detail, context)


def breaker(node: NodeInfo, everyone: list[NodeInfo], fraction: float) -> str:
    """'' when draining `node` keeps every partition of it within the cap, else why not."""
    for part in node.partitions:
        members = [n for n in everyone if part in n.partitions]
        ours = [n.name for n in members if is_ours(n) and n.name != node.name]
        cap = math.floor(fraction * len(members) + 1e-9)
        if len(ours) + 1 > cap:
            return (f"partition {part}: {len(ours)} of {len(members)} nodes already drained by slurmadm, "
                    f"cap is {cap} (drain_cap_fraction {fraction:g})")
    return ""


def over_cap(node: NodeInfo, everyone: list[NodeInfo], fraction: float) -> str:
    """After our drain: '' unless `node`'s drain is one too many in some partition of it.

    Racing runs (nodes with separate stores share no lock) each recount Slurm's state, so the
    answer must be the same from every node: the drains Slurm recorded first (reason time, then
    node name) fill the cap, and only those after it undo: the cap holds and none of it is lost."""
    for part in node.partitions:
        members = [n for n in everyone if part in n.partitions]
        ours = sorted((n for n in members if is_ours(n)), key=lambda n: (n.reason_time, n.name))
        cap = math.floor(fraction * len(members) + 1e-9)
        rank = next((i for i, n in enumerate(ours) if n.name == node.name), 0)
        if len(ours) > cap and rank >= cap:
            return (f"partition {part}: {len(ours)} slurmadm drains > cap {cap} and this one came after "
                    f"{', '.join(n.name for n in ours[:cap]) or 'none'} (a concurrent drain raced it)")
    return ""


def decide(*, context: str, results: list[Result], node: NodeInfo | None, everyone: list[NodeInfo],
           fraction: float, resume_after: int, prev_clean: int, our_reason: str | None = None) -> Plan:
    found = drain_reason(results, context)
    periodic = context == "periodic"
    if found is not None:
        check_id, reason = found
        reset = 0 if periodic else None
        if node is None:
            return Plan("alert", f"would drain ({reason}) but Slurm's view of the node is unknown",
                        blocks_job=True, clean_runs=reset, check_id=check_id)
        verdict = may_drain(node)
        if not verdict.act:
            if node.drained:  # ours already, or someone else's: the node takes no new work anyway
                return Plan("none", verdict.why, blocks_job=True, clean_runs=reset, check_id=check_id)
            refuse = "MAINTENANCE" not in node.flags
            return Plan("alert", f"not draining ({reason}): {verdict.why}", blocks_job=refuse, clean_runs=reset,
                        check_id=check_id)
        why = breaker(node, everyone, fraction)
        if why:
            return Plan("alert", f"breaker: not draining ({reason}): {why}", clean_runs=reset, check_id=check_id)
        return Plan("drain", reason, blocks_job=True, clean_runs=reset, check_id=check_id)
    if not periodic:
        return Plan("none", "clean")
    if node is None or not is_ours(node):
        return Plan("none", "clean", clean_runs=0 if prev_clean else None)
    owner = reason_check_id(node.reason)
    if owner not in BY_ID:  # e.g. a burn-in drain: only a passing burn-in may lift it
        return Plan("none", f"clean; drained by slurmadm for {owner!r}, which is not a health check: "
                    "left to its owner", clean_runs=0 if prev_clean else None)
    if our_reason and node.reason != our_reason:
        return Plan("none", f"clean; the drain reason was changed since slurmadm set {our_reason!r}: "
                    "the drain is the admin's now", clean_runs=0 if prev_clean else None)
    count = prev_clean + 1
    if count < resume_after:
        return Plan("none", f"clean run {count} of {resume_after} before resuming", clean_runs=count)
    verdict = may_resume(node)
    if not verdict.act:
        return Plan("none", f"clean, but not resuming: {verdict.why}", clean_runs=count)
    return Plan("resume", f"{count} consecutive clean periodic runs (was: {node.reason})", clean_runs=0)


@contextmanager
def drain_lock(store_path: str, timeout_s: float):
    """Serialise breaker decisions of runs that share a store directory (e.g. the dev cluster's
    nodes, or a site whose store is node-local: then it only orders runs on one node, and the
    post-drain recount catches races between nodes). Waits at most `timeout_s`, then goes on
    without the lock rather than hang a prolog behind a stuck run."""
    path = f"{store_path}.drain.lock"
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    except OSError:
        yield
        return
    deadline = time.monotonic() + timeout_s
    try:
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    break
                time.sleep(0.05)
        yield
    finally:
        os.close(fd)
