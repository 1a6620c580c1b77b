"""One health run, one way: observations (the checks, under time limits) -> verdicts (the site's
policy per result) -> plan (actions.decide) -> act (unless dry-run) -> one record (the run's
`Recorder` collects all along and writes once, after acting: health/record.py). The hooks
(`python -m slurmadm.health prolog`) and the CLI (`slurmadm health run ...`) both call `execute`.

Time budget of a run (site.health.<context>_timeout_s): checks get 75 %, recording and the Slurm
calls the rest; a watchdog ends the process at the full limit whatever is still running.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from dataclasses import field

from ..record import record
from .checks import XID_READ_KEY, Ctx, select
from .config import HealthConfig
from .record import NodeState, Recorder, last_pass, open_store
from .runner import Plan, Result, first_drain, run_checks, stuck_threads

CHECK_SHARE = 0.75


@record
class Report:
    """One health run: its results, the plan and what was applied."""

    node: str
    context: str
    run_id: str
    results: list[Result]
    plan: Plan
    applied: bool
    exit_code: int
    duration_ms: float
    problems: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return {
            "node": self.node, "context": self.context, "run_id": self.run_id,
            "results": [r.to_dict() for r in self.results],
            "plan": {"action": self.plan.action, "reason": self.plan.reason, "blocks_job": self.plan.blocks_job,
                     "check_id": self.plan.check_id},
            "applied": self.applied, "exit_code": self.exit_code, "duration_ms": self.duration_ms,
            "problems": self.problems,
        }


def _exit_code(context: str, results: list[Result], plan: Plan) -> int:
    if context in ("prolog", "epilog"):
        return 1 if plan.blocks_job else 0
    if context == "periodic":
        return 0  # Slurm ignores it; the drain is the signal
    return 1 if any(r.status in ("fail", "error") for r in results) else 0


def start_watchdog(limit_s: float, on_expiry, *, exit_code: int) -> threading.Timer:
    """At the run's hard limit: report and leave with os._exit, whatever is still hanging."""
    def fire() -> None:
        try:
            on_expiry()
        finally:
            os._exit(exit_code)

    timer = threading.Timer(limit_s, fire)
    timer.daemon = True
    timer.start()
    return timer


class Watch:
    """What outlives a run cut at its hard limit: the watchdog (`start_watchdog`'s `on_expiry`)
    calls `salvage(reason)` to write the record the run collected, with the alert, as its one
    record. `journal_fd`: the hook supervisor's pipe, handed the record before the run calls Slurm
    (a run stuck holding the GIL leaves it to the supervisor: hook.py)."""

    def __init__(self, journal_fd: int | None = None):
        self.journal_fd = journal_fd
        self.rec: Recorder | None = None

    def salvage(self, reason: str) -> bool:
        """True when the run's record (with `reason`) was written here; False when there was no
        run yet or it was already writing its own (the caller records the alert alone)."""
        rec = self.rec
        return rec is not None and rec.salvage(reason)


def execute(cfg: HealthConfig, context: str, *, only: list[str] | None = None, act: bool = True,
            backend=None, use_syslog: bool = True, started: float | None = None, watch: Watch | None = None,
            job: tuple[str, list[int]] | None = None) -> Report:
    """One health run: observe (the checks), judge and act (`_act`), record (one commit).
    `job`: the prolog's job and the GPUs it holds (jobmap.held), kept with the record when the
    prolog lets the job start."""
    started = time.monotonic() if started is None else started
    limit = cfg.timeouts[context]
    run_id = os.urandom(6).hex()  # (uuid costs an import a prolog does not need)
    check_deadline = started + limit * CHECK_SHARE
    store, store_problem = open_store(cfg.store_path, cfg.audit_log, timeout_s=min(5.0, limit * 0.1), ship=cfg.ship)
    rec = Recorder(node=cfg.node, context=context, run_id=run_id, results_log=cfg.results_log, store=store,
                   use_syslog=use_syslog, reopen=lambda: open_store(cfg.store_path, cfg.audit_log, timeout_s=1.0),
                   journal_fd=watch.journal_fd if watch is not None else None)
    if watch is not None:
        watch.rec = rec
    if store_problem:
        rec.problems.append(store_problem)
    policies = select(cfg, context, only)
    state, last_nccl = None, None
    if store is not None:
        try:
            state = NodeState(store, cfg.node)
            rec.state = state if act else None  # a dry run writes no state
            if any(p.spec.id == "nccl-allreduce" for p in policies):
                last_nccl = last_pass(store, cfg.node, "nccl-allreduce")
        except Exception as exc:  # noqa: BLE001 - sqlite3.OperationalError (locked too long)
            rec.problems.append(f"store: {exc}")
    ctx = Ctx(cfg=cfg, context=context, now=time.time(), state=state, nccl_last_pass=last_nccl)
    results = run_checks(policies, ctx, deadline=check_deadline)
    rec.results(results)  # the observations (an admin-resume recheck below revises its check's: rec.revise)

    def recheck(check_id: str) -> list[Result]:
        until = min(started + limit * 0.9, time.monotonic() + cfg.check_timeout_s)
        return run_checks([p for p in policies if p.spec.id == check_id], ctx, deadline=until)

    plan, applied = _act(cfg, context, results, rec, state, act=act, backend=backend,
                         deadline=started + limit, recheck=recheck)
    code = _exit_code(context, results, plan)
    if job is not None and act and context == "prolog" and code == 0:
        rec.job_gpus(*job)
    rec.commit()  # the one record: results, events, state; written after acting, never between
    report = Report(cfg.node, context, run_id, results, plan, applied, code,
                    round((time.monotonic() - started) * 1000, 1), rec.problems)
    if store is not None:
        store.close()
    if cfg.ship and act and context == "periodic":
        # the records travel to the central store in the background; no hook waits for the network
        from ..store.ship import spawn

        spawn(cfg.site_path, cfg.node)
    return report


# Checks whose faults live in a log window (an XID waiting for its reset, InfiniBand link flaps):
# check id -> (node_state key "slurmadm drained for it", key "an admin acknowledged up to then").
HELD = {"xid": ("xid-held", "xid-ack"), "infiniband": ("ib-held", "ib-ack")}
XID_HELD_KEY = HELD["xid"][0]
HELD_SEEN_KEY = "held-seen"  # when a run last saw the node drained by slurmadm for one of HELD


def _sighting(state: NodeState) -> str:
    """`HELD_SEEN_KEY`'s value for a run that sees the node drained for a held fault: now, or the
    latest time a kernel-log line it has read can have been logged, if later. Every line read
    before the sighting was logged before the admin's resume; a whole-second stamp of this very
    second (xid.latest: up to a second on) must not outlive the resume (the drain in the same
    second as its XID line was never acknowledged, and the node went back to drained)."""
    try:
        read = float(state.get(XID_READ_KEY) or 0)
    except ValueError:
        read = 0.0
    return f"{max(time.time(), read):.3f}"


def _admin_resumed(results: list[Result], node, state: NodeState | None, rec: Recorder, recheck, act: bool) -> None:
    """A node slurmadm drained for a logged fault (a reset-class XID, link flaps) that is no
    longer drained was resumed by an admin: record that as the acknowledgement of what the log
    holds so far, and judge that check again (else the old lines would drain it right back)."""
    if state is None or node is None or not act:
        return
    if node.drained:
        if any(state.get(held) == "1" for held, _ack in HELD.values()):
            state.set(HELD_SEEN_KEY, _sighting(state))
        return
    # acknowledged: what was logged up to the last time the node was seen still drained (a fault
    # logged after the admin's resume is new, and counts)
    try:
        seen = float(state.get(HELD_SEEN_KEY) or 0) or time.time()
    except ValueError:
        seen = time.time()
    for check_id, (held_key, ack_key) in HELD.items():
        if state.get(held_key) != "1":
            continue
        idx = next((i for i, r in enumerate(results) if r.check_id == check_id), None)
        if idx is None:
            continue
        try:
            before = float(state.get(ack_key) or 0)
        except ValueError:
            before = 0.0
        # acknowledged also when this run finds it clean: an XID cleared by NVML's recovery action
        # reading "none" comes back on a run that cannot read that field (NVML slow or broken),
        # and the lines the admin resumed the node over must not drain it then
        state.set(ack_key, f"{max(seen, before):.3f}")  # an acknowledgement never moves back
        state.set(held_key, "0")
        if results[idx].status != "fail":  # resumed and clean: nothing to tell
            continue
        rec.event("alert", f"an admin resumed {node.name}: {check_id} faults logged so far are acknowledged "
                  f"(was: {results[idx].detail})", check_id=check_id)
        if recheck is not None:
            again = recheck(check_id)
            if again:
                results[idx] = again[0]
                rec.revise(again[0])


def _act(cfg: HealthConfig, context: str, results: list[Result], rec: Recorder, state: NodeState | None, *,
         act: bool, backend, deadline: float, recheck=None) -> tuple[Plan, bool]:
    if context != "periodic" and first_drain(results) is None:
        return Plan("none", "clean"), False  # a healthy node's prolog never calls Slurm
    from . import actions

    prev = int(state.get(actions.CLEAN_RUNS_KEY) or 0) if state is not None else 0
    rec.journal()  # a Slurm call may hang holding the GIL: the supervisor holds the record meanwhile
    try:
        backend = backend or _backend(deadline)
        with actions.drain_lock(cfg.store_path, timeout_s=max(0.5, (deadline - time.monotonic()) / 4)):
            everyone = backend.nodes()
            node = next((n for n in everyone if n.name == cfg.node), None)
            _admin_resumed(results, node, state, rec, recheck, act)
            if context != "periodic" and first_drain(results) is None:
                return Plan("none", "clean"), False
            our_reason = (state.get(actions.DRAIN_REASON_KEY) or None) if state is not None else None
            if our_reason and node is not None and not node.drained and act:
                state.set(actions.DRAIN_REASON_KEY, "")  # resumed since (by anyone): forget it
                our_reason = None
            plan = actions.decide(context=context, results=results, node=node, everyone=everyone,
                                  fraction=cfg.drain_cap_fraction, resume_after=cfg.resume_after_clean_runs,
                                  prev_clean=prev, our_reason=our_reason)
            if not act:
                return plan, False
            if plan.action == "drain":
                backend.drain([cfg.node], plan.reason)
                for r in results:
                    if state is not None and r.check_id in HELD and r.action == "drain":
                        state.set(HELD[r.check_id][0], "1")
                        state.set(HELD_SEEN_KEY, _sighting(state))
                if state is not None:
                    state.set(actions.DRAIN_REASON_KEY, plan.reason)
                rec.event("drain", plan.reason, check_id=plan.check_id)
                after = backend.nodes()
                me = next((n for n in after if n.name == cfg.node), None)
                why = actions.over_cap(me, after, cfg.drain_cap_fraction) if me is not None else ""
                if why and me is not None and actions.is_ours(me):
                    backend.resume([cfg.node])
                    if state is not None:
                        state.set(actions.DRAIN_REASON_KEY, "")
                    rec.event("resume", f"undo drain: {why}", check_id=plan.check_id)
                    plan = Plan("alert", f"breaker: drain undone ({plan.reason}): {why}",
                                        clean_runs=plan.clean_runs, check_id=plan.check_id)
            elif plan.action == "resume":
                backend.resume([cfg.node])
                for held_key, _ack in HELD.values():
                    if state is not None and state.get(held_key) == "1":
                        state.set(held_key, "0")
                if state is not None:
                    state.set(actions.DRAIN_REASON_KEY, "")
                rec.event("resume", plan.reason)
            if plan.action == "alert":
                _alert(cfg, rec, state, plan.reason, check_id=plan.check_id)
    except Exception as exc:  # noqa: BLE001 - UnreachableError/CommandFailed from Slurm, all alike here
        rec.problems.append(f"slurm: {exc}")
        # Fail-safe: a fault we could not act on still keeps the job off this node.
        plan = Plan("alert", f"could not reach Slurm to act ({exc})",
                            blocks_job=first_drain(results) is not None)
        if act:
            _alert(cfg, rec, state, plan.reason)
        return plan, False
    if state is not None and plan.clean_runs is not None:
        state.set(actions.CLEAN_RUNS_KEY, str(plan.clean_runs))
    return plan, True


LAST_ALERT_KEY = "last_alert"  # node_state (health. prefix): "<unix time> <reason>"


def _alert(cfg: HealthConfig, rec: Recorder, state: NodeState | None, reason: str, **detail) -> None:
    """Record an alert, unless this node recorded the same one less than alert_repeat_minutes ago:
    a fault on a node in maintenance, or one the breaker holds back, is seen by every periodic run
    (every HealthCheckInterval) and would otherwise fill the audit trail and syslog. The drain
    reason inside an alert ends in its run's context (`[prolog]`): the same fault seen by a
    prolog and then an epilog is one alert."""
    now = time.time()
    if state is not None and cfg.alert_repeat_minutes > 0:
        key = reason.replace(f" [{rec.context}]", "")
        stamp, _, last = (state.get(LAST_ALERT_KEY) or "").partition(" ")
        try:
            recent = now - float(stamp) < cfg.alert_repeat_minutes * 60
        except ValueError:
            recent = False
        if recent and last == key:
            return
        state.set(LAST_ALERT_KEY, f"{now:.3f} {key}")
    rec.event("alert", reason, **detail)


def _backend(deadline: float):
    """Every scontrol/sinfo call (and the pyslurm probe) within a third of what is left; a pyslurm
    call that hangs holding the GIL is cut by the hook's supervisor process at the run's limit."""
    from ..slurm import get_backend

    return get_backend(timeout=max(1.0, min(20.0, (deadline - time.monotonic()) / 3)))


def summary_line(report: Report) -> str:
    bad = [r for r in report.results if r.status not in ("pass", "skip")]
    parts = [f"slurmadm health {report.context} {report.node}: {len(report.results)} checks"]
    parts.append("; ".join(f"{r.check_id} {r.status}: {r.detail}" for r in bad) if bad else "all clean")
    if report.plan.action != "none":
        parts.append(f"{report.plan.action}: {report.plan.reason}")
    parts += [f"problem: {p}" for p in report.problems]
    return " | ".join(parts)


def leave(code: int, *, now: bool = False) -> None:
    """Exit; with os._exit when a worker thread is stuck in a hung call (so nothing waits) or
    when `now` (the hook's own process: everything is written and closed, and the interpreter's
    teardown of every module would only add to the job's wait)."""
    sys.stdout.flush()
    sys.stderr.flush()
    if now or any(t.is_alive() for t in stuck_threads):
        os._exit(code)
    sys.exit(code)
