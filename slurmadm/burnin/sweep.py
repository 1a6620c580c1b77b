"""The sweep driver behind `slurmadm burnin run` (see the package docstring for the design)."""

from __future__ import annotations

import datetime as dt
import getpass
import json
import os
import signal
import socket
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..errors import SlurmadmError, UsageError
from ..proc import run as run_command
from ..files import exclusive_lock
from ..health.actions import breaker
from ..hostlist import compress, expand
from ..site import Site, site_path
from ..site.accounts import slurm_time_seconds
from ..slurm import SlurmBackend, get_backend
from ..slurm import jobs as sjobs
from ..slurm.model import NodeInfo
from ..slurm.ownership import format_reason, is_ours, may_drain, may_resume, reason_check_id, reason_detail
from ..store import Store, actor
from . import fleet, history, report
from .model import PairResult, TestResult, is_failure
from .pairs import PairPlan
from .select import DUE_CHECK, STRAGGLER_CHECK, Selection, burnin_partition, named_nodes, select

JOB_PREFIX = "slurmadm-burnin"
OWN_RESERVATION_FLAGS = frozenset({"MAINTENANCE", "RESERVED"})
POLL_S = 0.5
RECOVER_WAIT_S = 120.0
CONTEXT = "burnin"
STRAGGLER_REASON = f"slurmadm: {STRAGGLER_CHECK}:"
SUSPECT_TEST = "suspect"  # `slurmadm: burnin-suspect: ...`: found slow, held for the next sweep's re-test
TREND_SWEEPS = 8  # sweeps per node in the report's trend table
# the ladder counts as running while an acting `repair run` began within this many of its
# timer's intervals (repair.interval_s; at least an hour: a run qualifying nodes takes a while)
LADDER_ALIVE_INTERVALS = 3


class Interrupted(SlurmadmError):
    """SIGTERM/SIGINT during a sweep: jobs cancelled, nodes restored, the sweep recorded."""

    exit_code = 130


@dataclass
class NodeRun:
    node: str
    why: str  # named | requalify | idle
    prior_reason: str = ""  # the slurmadm drain reason before this sweep (requalify)
    job_id: str = ""
    tests: list[TestResult] = field(default_factory=list)
    verdict: str = "skipped"  # pass | fail | skipped
    detail: str = ""  # why it failed or was skipped
    failed_test: str = ""
    action: str = ""
    reason: str = ""  # drain reason set by this sweep
    output: str = ""  # the job's stdout file, relative to the sweep's report directory
    fleet: dict[str, Any] | None = None  # fleet-relative verdict (burnin/fleet.py), passed nodes only
    slow_streak: int = 0  # sweeps in a row, this one included, that found it slow

    def busbw(self) -> float | None:
        return next((t.value for t in self.tests if t.test == "allreduce-node" and t.value is not None), None)

    def to_json(self) -> dict[str, Any]:
        return {
            "node": self.node, "why": self.why, "verdict": self.verdict, "detail": self.detail,
            "failed_test": self.failed_test, "job_id": self.job_id, "busbw_gbps": self.busbw(),
            "action": self.action, "reason": self.reason, "prior_reason": self.prior_reason,
            "output": self.output, "tests": [t.to_json() for t in self.tests],
            "fleet": self.fleet, "slow_streak": self.slow_streak,
        }


@dataclass
class JobOutcome:
    started: bool
    returncode: int | None
    stdout: str
    stderr: str
    job_id: str = ""
    stopped: str = ""  # "" | start-timeout | time-limit (the sweep's)
    output: str = ""  # stdout file relative to the sweep's report directory (jobs/<name>.out)


def new_sweep_id(now: dt.datetime) -> str:
    return now.strftime("%Y%m%d-%H%M%S")


def sweep_lock(site: Site) -> AbstractContextManager[None]:
    """One sweep at a time per store."""
    path = Path(site.store.path).parent / "burnin.lock"
    return exclusive_lock(path, lambda holder: f"another burn-in sweep holds {path} ({holder}); "
                                               "not starting a second one")


@contextmanager
def _signals_raise(armed: Callable[[], bool], fired: list[int]) -> Iterator[None]:
    """SIGTERM (systemd stop, kill) and SIGINT (Ctrl-C) raise Interrupted in the main thread while
    `armed()`; otherwise (during the clean-up, which has its own time limits) they are only noted
    in `fired` so the clean-up completes and the caller raises afterwards."""
    def handler(signum, _frame):
        first = not fired
        fired.append(signum)
        if first and armed():
            raise Interrupted(f"interrupted by {signal.Signals(signum).name}")

    previous = {}
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            previous[sig] = signal.signal(sig, handler)
        except ValueError:  # not the main thread (embedding): no handlers, Ctrl-C still works
            pass
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


class Sweep:
    def __init__(self, site: Site, *, backend: SlurmBackend | None = None, store: Store | None = None,
                 site_file: str | None = None, report_dir: str | None = None,
                 progress: Callable[[str], None] = lambda m: None, now: dt.datetime | None = None):
        self.site = site
        self.b = site.burnin
        self._backend = backend
        self.store = store or Store.for_site(site)
        self.site_file = str(site_path(site_file).resolve())
        self.report_root = Path(report_dir or self.b.report_dir)
        self.progress = progress
        self.now = now or dt.datetime.now()
        self.user = getpass.getuser()
        self.python = self.b.python or sys.executable
        self.reservation = self.b.reservation or None
        self.on_error = site.health.on_error
        self.id = new_sweep_id(self.now)
        self.runs: dict[str, NodeRun] = {}
        self.plan: PairPlan | None = None
        self.selection = Selection()
        self.links: list = []
        self.pair_note = ""
        self.status = "running"
        self.reserved = False
        self.timings: dict[str, float] = {}  # seconds per phase
        self.fleet: dict[str, Any] | None = None  # fleet.evaluate() of this sweep (None: off)
        self.held: dict[str, dict[str, str]] = {}  # busy node due for burn-in -> why, what was done (_hold_due)
        self.secs = {k: slurm_time_seconds(getattr(self.b, k)) or 0
                     for k in ("job_time_limit", "start_timeout", "sweep_time_limit")}

    @property
    def backend(self) -> SlurmBackend:
        """Chosen on first use (asking Slurm), so bad arguments are refused before that."""
        if self._backend is None:
            self._backend = get_backend()
        return self._backend

    # ------------------------------------------------------------------ entry points
    def select(self, named: str | None) -> Selection:
        if named:
            named_nodes(self.site, named)  # bad --nodes: refused before Slurm is asked
        nodes = self.backend.nodes()
        return select(self.site, nodes, now=self.now, named=named, last_tested=history.last_tested(self.store),
                      reservation_enabled=self.reservation is not None, repairing=self.repairing(),
                      suspects=history.suspects(self.store), since=history.first_sweep(self.store))

    def repairing(self) -> dict[str, str]:
        """Node -> its open repair incidents, while the ladder runs (an acting `repair run` began
        within LADDER_ALIVE_INTERVALS of repair.interval_s, at least an hour): those drained
        nodes are the ladder's to mend and qualify. A site that does not run the ladder keeps
        burn-in's re-qualification."""
        from ..repair import incidents

        within = max(LADDER_ALIVE_INTERVALS * self.site.repair.interval_s, 3600.0)
        if not incidents.ladder_running(self.store, within):
            return {}
        return incidents.open_by_node(self.store)

    def dry_run(self, named: str | None) -> dict[str, Any]:
        sel = self.select(named)
        leftovers = self._leftovers()
        return {
            "would_recover": leftovers,
            "selection": {"chosen": sel.chosen, "skipped": sel.skipped, "in_window": sel.in_window},
            "would_hold": sel.due,
            "reservation": self.reservation if sel.chosen else None,
            "node_job": self._node_request(next(iter(sel.chosen))).srun_argv() if sel.chosen else None,
            "prerequisites": self.prerequisites(),
            "changes": "none (dry run)",
        }

    def prerequisites(self) -> list[str]:
        """What the sweep's jobs need and Slurm lacks (read from sacctmgr and sinfo), one line each."""
        env = None
        accts = run_command(["sacctmgr", "-n", "-P", "show", "assoc", "where", f"user={self.user}",
                             f"cluster={self.site.cluster.name}", "format=account,partition,qos"], env=env).stdout
        assocs: dict[tuple[str, str], set[str]] = {}
        for line in accts.splitlines():
            parts = line.split("|")
            if len(parts) >= 3 and parts[0]:
                assocs[(parts[0], parts[1])] = {q for q in parts[2].split(",") if q}
        qos_names = set(run_command(["sacctmgr", "-n", "-P", "show", "qos", "format=name"], env=env).stdout.split())
        partitions = {p.rstrip("*") for p in run_command(["sinfo", "-h", "-o", "%P"], env=env).stdout.split()}
        python_ok = "" if os.access(self.python, os.X_OK) else f"{self.python}: not an executable file"
        return missing_prerequisites(self.site, user=self.user, partitions=partitions, assocs=assocs,
                                     qos_names=qos_names, python_ok=python_ok)

    def run(self, named: str | None) -> dict[str, Any]:
        """The whole sweep under the lock. Returns the JSON summary (its `exit_code` says 0/1).
        Whatever happens after the sweep is recorded (interrupt, Slurm error), its jobs are
        cancelled, its nodes restored, the reservation deleted, and the sweep recorded."""
        if named:
            named_nodes(self.site, named)  # bad --nodes: refused before anything else happens
        problems = self.prerequisites()  # before anything is reserved: a sweep that cannot test fails now
        if problems:
            raise UsageError("burn-in cannot run: " + problems[0]
                             + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""))
        cleaning = False
        fired: list[int] = []
        with sweep_lock(self.site), _signals_raise(lambda: not cleaning, fired):
            self._recover()
            self.selection = sel = self.select(named)
            self.id = history.unique_sweep_id(self.store, self.id)
            history.start_sweep(self.store, self.id, pid=os.getpid(), host=socket.gethostname(), actor=actor(),
                                nodes=compress(sel.chosen))
            self._hold_due(sel)
            deadline = time.monotonic() + self.secs["sweep_time_limit"]
            error: BaseException | None = None
            try:
                if sel.chosen:
                    for phase, fn in (("prepare", lambda: self._prepare(sel)),
                                      ("nodes", lambda: self._node_phase(deadline)),
                                      ("pairs", lambda: self._pair_phase(deadline))):
                        t0 = time.monotonic()
                        fn()
                        self.timings[phase] = round(time.monotonic() - t0, 2)
                self.status = "timed-out" if time.monotonic() >= deadline else "done"
            except Interrupted as exc:
                self.status, error = "interrupted", exc
            except BaseException as exc:  # recorded, then raised again
                self.status, error = "failed", exc
            cleaning = True  # from here on a signal waits for the clean-up to finish
            self._cancel_leftover_jobs()
            try:
                self._conclude()
            except SlurmadmError as exc:
                self.status, error = "failed", error or exc
            if fired and error is None:
                self.status = "interrupted"
                error = Interrupted(f"interrupted by {signal.Signals(fired[0]).name} (after the sweep's work)")
            summary = self._finish()
        if error is not None:
            raise error
        return summary

    # ------------------------------------------------------------------ recovery
    def _leftovers(self) -> dict[str, Any]:
        res = sjobs.reservation(self.reservation) if self.reservation else None
        held = {n: self.store.get_node_state(n, history.REQUALIFY_KEY) for n in self.site.node_names}
        return {
            "reservation": res.nodes if res else None,
            "quarantined": {n: r for n, r in held.items() if r},
            "jobs": self._queued(JOB_PREFIX + "."),
        }

    def _queued(self, prefix: str) -> list[str]:
        """Ids of the sweep user's queued jobs whose name starts with `prefix`."""
        return [j.job_id for j in sjobs.queued_jobs(user=self.user) if j.name.startswith(prefix)]

    def _recover(self) -> None:
        """Undo what an earlier sweep that died (SIGKILL, power loss) left behind: its jobs, its
        reservation, and nodes it had resumed for re-qualification (drained again, as they were)."""
        for row in history.running_sweeps(self.store):
            history.mark_abandoned(self.store, row["id"])
            self.store.audit("burnin.recover", row["id"], "sweep died without finishing; marked interrupted")
        left = self._leftovers()
        if left["jobs"]:
            sjobs.cancel(left["jobs"])
            self.store.audit("burnin.recover", ",".join(left["jobs"]), "cancelled jobs of a dead sweep")
            # their nodes count as busy until the jobs have completed: wait (bounded) for that
            deadline = time.monotonic() + RECOVER_WAIT_S
            while self._queued(JOB_PREFIX + ".") and time.monotonic() < deadline:
                time.sleep(POLL_S)
        if left["quarantined"]:
            nodes = {n.name: n for n in self.backend.nodes(list(left["quarantined"]))}
            for name, reason in left["quarantined"].items():
                node = nodes[name]
                if not node.drained:
                    self.backend.drain([name], reason)
                    self.store.audit("node.drain", name, reason, by="burnin.recover")
                self.store.delete_node_state(name, history.REQUALIFY_KEY)
        if left["reservation"] is not None:
            sjobs.delete_reservation(self.reservation)
            self.store.audit("burnin.reservation.delete", self.reservation, "left by a dead sweep")
        if any(left.values()):
            self.progress(f"recovered from an earlier sweep: {left}")

    # ------------------------------------------------------------------ preparation
    def _prepare(self, sel: Selection) -> None:
        nodes = list(sel.chosen)
        info = {n.name: n for n in self.backend.nodes(nodes)}
        for name, why in sel.chosen.items():
            self.runs[name] = NodeRun(name, why)
        if self.reservation:
            sjobs.create_reservation(self.reservation, nodes, users=self.user, flags=["MAINT", "IGNORE_JOBS"])
            self.reserved = True
            self.store.audit("burnin.reservation.create", self.reservation, f"burn-in sweep {self.id}",
                             nodes=compress(nodes))
        for name, run in self.runs.items():
            node = self._ours_stripped(info[name])
            if run.why != "requalify":
                continue
            verdict = may_resume(node)
            if not verdict.act:  # changed since selection: leave it alone
                run.detail = f"not re-qualified: {verdict.why}"
                continue
            run.prior_reason = node.reason
            # remember the drain first: a crash from here on re-drains the node (see _recover)
            self.store.set_node_state(name, history.REQUALIFY_KEY, node.reason)
            self.backend.resume([name])
            self.store.audit("burnin.requalify", name, f"resumed inside reservation {self.reservation} for "
                             f"burn-in sweep {self.id}", was=node.reason)
        self.progress(f"sweep {self.id}: {len(nodes)} node(s) {compress(nodes)}"
                      + (f" in reservation {self.reservation}" if self.reservation else ""))

    def _hold_due(self, sel: Selection) -> None:
        """Drain the busy nodes due for burn-in (burnin.due_days, select.py): their jobs finish,
        and the next sweep takes them first (a node slurmadm drained, at any hour) and resumes
        them on a pass. Under the breaker; a node that changed since the selection is left."""
        if not sel.due:
            return
        every = {n.name: n for n in self.backend.nodes()}
        for name, why in sel.due.items():
            reason = format_reason(DUE_CHECK, why, CONTEXT)
            refused = self._refused(every[name], every, reason) if name in every else ": not reported"
            if refused:
                self.held[name] = {"why": why, "action": "not held" + refused}
                continue
            self._drain(name, reason, every)
            self.held[name] = {"why": why, "action": "held for the next sweep", "reason": reason}
            self.progress(f"{name}: {why}")

    def _ours_stripped(self, node: NodeInfo) -> NodeInfo:
        """Inside our own reservation, its MAINT/RESERVED flags are ours, not someone else's."""
        if self.reserved and node.name in self.runs:
            return replace(node, flags=node.flags - OWN_RESERVATION_FLAGS)
        return node

    # ------------------------------------------------------------------ jobs
    def _request(self, name: str, nodes: list[str], argv: list[str], tasks_per_node: int) -> sjobs.JobRequest:
        gpus = min(self.site.node_profile(n).gpus.count for n in nodes)
        return sjobs.JobRequest(
            name=name, nodes=nodes, argv=argv, time_limit=self.b.job_time_limit,
            partition=burnin_partition(self.site), qos=self.b.qos, account=self.b.account,
            reservation=self.reservation, tasks_per_node=tasks_per_node, gpus_per_node=gpus,
            env={"SLURMADM_SITE": self.site_file},
        )

    def _step_timeout(self) -> float:
        return max(60.0, min(900.0, self.secs["job_time_limit"] / 2))

    def node_spec(self, node: str) -> dict[str, Any]:
        model = self.site.node_profile(node).gpus.model
        floor = self.b.node_busbw_floor_gbps or self.site.thresholds(model).nccl_busbw_floor_gbps
        return {
            "stress_seconds": self.b.stress_seconds, "dcgm_level": self.b.dcgm_level, "kat": self.b.known_answer,
            "dcgm_timeout": {2: 900, 3: 3600}.get(self.b.dcgm_level, 900),
            "gpu_model": model, "ignore_known_issues": list(self.b.ignore_known_issues),
            "collective": self.b.collective, "allreduce_mib": self.b.allreduce_mib,
            "allreduce_iters": self.b.allreduce_iters, "rendezvous_port": self.b.rendezvous_port,
            "rendezvous_ports": self.b.rendezvous_ports, "node_floor_gbps": floor, "step_timeout": self._step_timeout(),
            **self._fabric_spec(node),
        }

    def _fabric_spec(self, node: str) -> dict[str, Any]:
        """Where the node job reads its HCA ports' rates and counters and their "Link down" lines
        (as the health suite's infiniband check)."""
        nics = self.site.node_profile(node).nics
        hcas = expand(nics.hcas, what="nics.hcas") if nics.hcas and nics.count else []
        return {"hcas": hcas, "hca_port": nics.port,
                "sysfs_root": self.site.health.sysfs_root.replace("{node}", node),
                "xid_source": self.site.health.xid_source.replace("{node}", node)}

    def _node_request(self, node: str) -> sjobs.JobRequest:
        argv = [self.python, "-m", "slurmadm.burnin.node", "--spec", json.dumps(self.node_spec(node), sort_keys=True)]
        return self._request(f"{JOB_PREFIX}.{self.id}.{node}", [node], argv, 1)

    def _pair_request(self, a: str, b: str, rnd: int) -> sjobs.JobRequest:
        ranks = min(self.site.node_profile(n).gpus.count for n in (a, b)) if self.b.collective == "nccl" else 1
        argv = [self.python, "-m", "slurmadm.health.allreduce", "--backend", self.b.collective,
                "--mib", str(self.b.allreduce_mib), "--iters", str(self.b.allreduce_iters),
                "--timeout", str(self._step_timeout()), "--port-base", str(self.b.rendezvous_port),
                "--port-range", str(self.b.rendezvous_ports)]
        for n in (a, b):
            argv += ["--addr", f"{n}={self.site.node_group_of[n].addr or n}"]
        return self._request(f"{JOB_PREFIX}.{self.id}.r{rnd}.{a}+{b}", [a, b], argv, ranks)

    def _run_jobs(self, requests: dict[str, sjobs.JobRequest], deadline: float) -> dict[str, JobOutcome]:
        """Run these jobs at once; wait for all, cancelling any that do not start within
        burnin.start_timeout or are still running at the sweep's deadline."""
        log_dir = self.report_root / self.id / "jobs"
        running = {key: sjobs.SrunJob(req, log_dir) for key, req in requests.items()}
        launched = time.monotonic()
        stopped: dict[str, str] = {}
        try:
            while True:
                live = [k for k, j in running.items() if j.poll() is None and k not in stopped]
                if not live:
                    break
                now = time.monotonic()
                late = []
                for k in live:
                    if now >= deadline:
                        stopped[k] = "time-limit"
                    elif now - launched > self.secs["start_timeout"] and not _started(running[k].stdout()):
                        stopped[k] = "start-timeout"
                    else:
                        continue
                    late.append(running[k])
                if late:
                    sjobs.stop_all(late)
                time.sleep(POLL_S)
        except BaseException:
            sjobs.stop_all(list(running.values()))
            raise
        out = {}
        for key, job in running.items():
            stdout = job.stdout()
            first = _first_event(stdout, "started") or {}
            out[key] = JobOutcome(started=bool(first), returncode=job.poll(), stdout=stdout, stderr=job.stderr(),
                                  job_id=str(first.get("job_id", "")), stopped=stopped.get(key, ""),
                                  output=job.out_path.relative_to(log_dir.parent).as_posix())
        return out

    def _cancel_leftover_jobs(self) -> None:
        try:
            sjobs.cancel(self._queued(f"{JOB_PREFIX}.{self.id}."))
        except SlurmadmError as exc:
            self.progress(f"could not check for leftover jobs: {exc}")

    # ------------------------------------------------------------------ phase 1: per node
    def _node_phase(self, deadline: float) -> None:
        todo = {n: self._node_request(n) for n, r in self.runs.items() if not r.detail}
        self.progress(f"phase 1: {len(todo)} node job(s) in parallel (stress, single-node all-reduce, health)")
        outcomes = self._run_jobs(todo, deadline)
        for node, res in outcomes.items():
            self._judge_node(self.runs[node], res)

    def _judge_node(self, run: NodeRun, res: JobOutcome) -> None:
        run.job_id, run.output = res.job_id, res.output
        final = _last_event(res.stdout, "result")
        run.tests = [TestResult.from_json(t) for t in (final or {}).get("tests", [])] if final else \
            [TestResult.from_json(e) for e in job_events(res.stdout, "test")]
        if not res.started:
            run.verdict, run.detail = "skipped", {
                "start-timeout": f"job did not start within burnin.start_timeout {self.b.start_timeout}",
                "time-limit": "sweep time limit reached before the job started",
            }.get(res.stopped, f"job did not start: {_tail(res.stderr)}")
            return
        if final is None and res.stopped != "time-limit":  # the sweep's limit is not the node's fault
            run.tests.append(TestResult("job", "error", self._job_failure(res)))
        bad = [t for t in run.tests if is_failure(t.status, self.on_error)]
        if bad:
            run.verdict, run.failed_test, run.detail = "fail", bad[0].test, bad[0].detail
        elif final is None:
            run.verdict = "skipped"
            run.detail = run.tests[-1].detail if res.stopped != "time-limit" else "cut short by the sweep time limit"
        else:
            run.verdict = "pass"

    def _job_failure(self, res: JobOutcome) -> str:
        acct = {}
        if res.job_id:
            try:
                acct = sjobs.accounted_jobs([res.job_id])
            except SlurmadmError:
                pass
        state = acct.get(res.job_id)
        if state and state.state == "TIMEOUT":
            return f"job {res.job_id} hit its time limit {self.b.job_time_limit} (hung GPU or step?)"
        what = f"job {res.job_id} " + (f"ended {state.state} exit {state.exit_code}" if state else
                                        f"exited {res.returncode}")
        return f"{what} without a result: {_tail(res.stderr)}"

    # ------------------------------------------------------------------ phase 2: pairs
    def _pair_phase(self, deadline: float) -> None:
        ready = [n for n, r in self.runs.items() if r.verdict == "pass"]
        no_torch = [n for n in ready
                    if any(t.test == "allreduce-node" and t.status == "skip" for t in self.runs[n].tests)]
        if no_torch:
            self.pair_note = f"multi-node all-reduce skipped: no torch on {compress(no_torch)}"
            ready = [n for n in ready if n not in no_torch]
        if len(ready) < 2:
            self.pair_note = self.pair_note or "multi-node all-reduce needs two nodes that passed phase 1"
            return
        units = [(name, [n for n in members if n in ready]) for name, members in self.site.scalable_units]
        self.plan = PairPlan(units, self.b.pair_busbw_floor_gbps)
        while time.monotonic() < deadline:
            pairs = self.plan.next_round()
            if not pairs:
                break
            rnd = pairs[0].round
            self.progress(f"phase 2 round {rnd}: {len(pairs)} pair(s) ({pairs[0].kind}): "
                          + ", ".join(f"{p.a}+{p.b}" for p in pairs))
            outcomes = self._run_jobs({f"{p.a}+{p.b}": self._pair_request(p.a, p.b, rnd) for p in pairs}, deadline)
            for p in pairs:
                self.plan.record(self._judge_pair(p.a, p.b, p.kind, rnd, outcomes[f"{p.a}+{p.b}"]))

    def _judge_pair(self, a: str, b: str, kind: str, rnd: int, res: JobOutcome) -> PairResult:
        pr = PairResult(a, b, kind, rnd, "skip", job_id=res.job_id, output=res.output)
        if not res.started:
            pr.detail = "did not start" + (f" ({res.stopped})" if res.stopped else f": {_tail(res.stderr)}")
            return pr
        lines = job_events(res.stdout, "result")
        result = lines[-1] if lines else None
        errors = [e["error"] for e in lines if "error" in e]
        if res.stopped == "time-limit":
            pr.detail = "cut short by the sweep time limit"
        elif errors or result is None:
            pr.status = "error"
            pr.detail = errors[0] if errors else self._job_failure(res)
        elif result.get("wrong_elements"):
            pr.status, pr.busbw_gbps = "fail", result["busbw_gbps"]
            pr.detail = f"{result['wrong_elements']} wrong elements after all-reduce"
        else:
            bw = result["busbw_gbps"]
            floor = self.b.pair_busbw_floor_gbps
            pr.busbw_gbps, pr.algbw_gbps = bw, result["algbw_gbps"]
            pr.status = "pass" if bw >= floor else "fail"
            pr.detail = (f"{result['backend']} {result['ranks']} ranks on {result['device']}: busbw {bw:.3g} GB/s "
                         f"({'>=' if pr.status == 'pass' else '<'} floor {floor:g})")
        return pr

    # ------------------------------------------------------------------ verdicts and actions
    def _conclude(self) -> None:
        """Node verdicts from the pair tests, then drains, resumes and restores, then the
        reservation goes (drains first: a failed node never becomes available to users)."""
        if self.plan is not None:
            bad, self.links, _ = self.plan.conclusions()
            for finding in bad:
                run = self.runs[finding.node]
                run.tests.append(TestResult("allreduce-pair", "fail", finding.detail))
                if run.verdict != "fail":
                    run.verdict, run.failed_test, run.detail = "fail", "allreduce-pair", finding.detail
        if self.status == "interrupted":
            for run in self.runs.values():  # half-tested nodes prove nothing either way
                if run.verdict == "pass":
                    run.verdict, run.detail = "skipped", "sweep interrupted before the pair tests finished"
        try:
            self._fleet_verdicts()
        except SlurmadmError as exc:  # the store unreadable: no fleet verdicts, the sweep still acts
            self.progress(f"no fleet-relative verdicts: {exc}")
        try:
            self._act()
        finally:
            if self.reserved:
                sjobs.delete_reservation(self.reservation)
                self.store.audit("burnin.reservation.delete", self.reservation, f"burn-in sweep {self.id} ended")
                self.reserved = False

    def _fleet_verdicts(self) -> None:
        """Each passed node against the fleet of this sweep (same profile, same scalable unit)
        and the profile's baseline (burnin/fleet.py); how many sweeps in a row found it slow."""
        cfg = self.b.straggler
        if not cfg.enabled or not self.runs:
            return
        profile_of = {n: self.site.node_group_of[n].profile for n in self.runs}
        unit_of = {n: unit for unit, members in self.site.scalable_units for n in members if n in self.runs}
        summary = {"nodes": [r.to_json() for r in self.runs.values()],
                   "pairs": [p.to_json() for p in (self.plan.results if self.plan else [])]}
        self.fleet = fleet.evaluate(summary, profile_of=profile_of, unit_of=unit_of,
                                    settings=fleet.Settings.from_site(cfg), baselines=history.baselines(self.store))
        for name, entry in self.fleet["nodes"].items():
            run = self.runs[name]
            run.fleet = entry
            if entry["level"] == "slow":
                run.slow_streak = 1 + history.slow_streak(self.store, name, before=self.id, limit=cfg.drain_after)

    @staticmethod
    def _slow(run: NodeRun) -> bool:
        """Passed every test, slow against its fleet or baseline (a worst metric to name)."""
        return (run.verdict == "pass" and bool(run.fleet) and run.fleet["level"] == "slow"
                and run.fleet.get("worst") is not None)

    def _straggler_due(self, run: NodeRun) -> bool:
        return self._slow(run) and run.slow_streak >= self.b.straggler.drain_after

    def _suspect_held(self, run: NodeRun) -> bool:
        """Found slow, not yet in drain_after sweeps in a row: held out of service for the next
        sweep's re-test (burnin.straggler.hold_suspects). Not without a reservation: no sweep
        could re-qualify a drained node, so the hold would be for good."""
        return (self.b.straggler.hold_suspects and self.reservation is not None and self._slow(run)
                and run.slow_streak < self.b.straggler.drain_after)

    def _act(self) -> None:
        if not self.runs:
            return
        actual = {n.name: n for n in self.backend.nodes()}
        # For the drain cap, nodes under re-qualification still count as slurmadm's drains.
        view = dict(actual)
        for r in self.runs.values():
            if r.prior_reason and not actual[r.node].drained:
                view[r.node] = replace(actual[r.node], flags=actual[r.node].flags | {"DRAIN"}, reason=r.prior_reason)
        # re-qualification outcomes first: what they free or hold is known before new drains
        for name, run in sorted(self.runs.items(), key=lambda item: not item[1].prior_reason):
            node = self._ours_stripped(actual[name])
            if node.drained:  # drained during the sweep (a prolog found a fault, an admin): keep it
                if is_ours(node) and node.reason != run.prior_reason and run.verdict != "fail":
                    run.verdict, run.detail = "fail", reason_detail(node.reason)
                    run.failed_test = reason_check_id(node.reason) or "job"
                run.action, run.reason = "already drained", node.reason
            elif run.verdict == "fail":
                self._drain_failed(run, node, view)
            elif self._straggler_due(run):
                self._drain_failed(run, node, view, test="straggler", detail=fleet.describe(run.fleet["worst"]))
            elif self._suspect_held(run):
                n, of = run.slow_streak, self.b.straggler.drain_after
                self._drain_failed(run, node, view, test=SUSPECT_TEST, held=True,
                                   detail=f"{fleet.describe(run.fleet['worst'])} (slow in {n} sweep{'s' * (n > 1)} "
                                          f"of {of}; held for the next sweep's re-test)")
            elif run.prior_reason and run.verdict == "pass":
                run.action = "resumed"
                view[name] = actual[name]
                self.store.audit("node.resume", name, f"passed burn-in sweep {self.id}", was=run.prior_reason)
            elif run.prior_reason:  # not tested to the end: drained again, as it was
                self.backend.drain([name], run.prior_reason)
                run.action, run.reason = "kept drained", run.prior_reason
                self.store.audit("burnin.restore-drain", name, run.prior_reason, sweep=self.id)
            if run.prior_reason:
                self.store.delete_node_state(name, history.REQUALIFY_KEY)

    def _drain_failed(self, run: NodeRun, node: NodeInfo, view: dict[str, NodeInfo], *, test: str = "",
                      detail: str = "", held: bool = False) -> None:
        reason = format_reason(f"burnin-{test or run.failed_test}", detail or run.detail, CONTEXT)
        if not run.prior_reason:  # a node in service: ownership rules and the breaker apply
            refused = self._refused(node, view, reason)
            if refused:
                run.action = "not drained" + refused
                return
        self._drain(node.name, reason, view)
        run.action, run.reason = ("held for a re-test" if held else "drained"), reason

    def _refused(self, node: NodeInfo, view: dict[str, NodeInfo], reason: str) -> str:
        """Why a node in service may not be drained now (`: <ownership>`, ` (breaker): <cap>`,
        audited), else ''. `view`: every node as this sweep's drains leave them."""
        verdict = may_drain(node)
        if not verdict.act:
            return f": {verdict.why}"
        why = breaker(view.get(node.name, node), list(view.values()), self.site.health.drain_cap_fraction)
        if why:
            self.store.audit("burnin.drain-capped", node.name, reason, sweep=self.id, why=why)
            return f" (breaker): {why}"
        return ""

    def _drain(self, name: str, reason: str, view: dict[str, NodeInfo]) -> None:
        self.backend.drain([name], reason)
        view[name] = replace(view[name], flags=view[name].flags | {"DRAIN"}, reason=reason)
        self.store.audit("node.drain", name, reason, by="burnin", sweep=self.id)

    # ------------------------------------------------------------------ record and report
    def _finish(self) -> dict[str, Any]:
        failed = any(r.verdict == "fail" for r in self.runs.values()) or bool(self.links) \
            or any(r.reason.startswith(STRAGGLER_REASON) for r in self.runs.values() if r.action == "drained")
        problem = ""
        if self.runs and not any(r.verdict in ("pass", "fail") for r in self.runs.values()):
            # nodes were selected and none was tested (jobs refused, never started): not a success
            first = next((r.detail for r in self.runs.values() if r.detail), "")
            problem = f"none of the {len(self.runs)} selected node(s) was tested" + (f": {first}" if first else "")
            failed = True
        finished = dt.datetime.now()
        sel = self.selection
        summary = {
            "sweep_id": self.id, "status": self.status, "cluster": self.site.cluster.name,
            # with their time zone (a naive now is local time)
            "site": self.site_file, "started": self.now.astimezone().isoformat(timespec="seconds"),
            "finished": finished.astimezone().isoformat(timespec="seconds"),
            "duration_s": round((finished - self.now).total_seconds(), 1),
            "phase_s": self.timings,
            "collective": self.b.collective,
            "floors": {"pair_busbw_gbps": self.b.pair_busbw_floor_gbps,
                       "node_busbw_gbps": {n: self.node_spec(n)["node_floor_gbps"] for n in self.runs}},
            "reservation": self.reservation, "qos": self.b.qos, "account": self.b.account,
            "selection": {"chosen": sel.chosen, "skipped": sel.skipped, "in_window": sel.in_window},
            "held_for_next": self.held,
            "nodes": [r.to_json() for r in self.runs.values()],
            "pairs": [p.to_json() for p in (self.plan.results if self.plan else [])],
            "links": [vars(link) for link in self.links],
            "pair_note": self.pair_note,
            "problem": problem,
            "slowdown_warn_percent": self.b.slowdown_warn_percent,
            "fleet": {k: v for k, v in self.fleet.items() if k != "nodes"} if self.fleet else None,
            "exit_code": 1 if failed else 0,
        }
        summary["trend"] = self._trend() if self.fleet else {}
        previous = history.previous_summary(self.store, self.id)
        summary["previous"] = report.compare(summary, previous)
        paths = report.write(summary, self.report_root)
        summary["report"] = str(paths["html"])
        history.finish_sweep(self.store, self.id, status=self.status, summary=summary, report=str(paths["html"]))
        self._seed_baselines(summary)
        verdicts = [r.verdict for r in self.runs.values()]
        self.store.audit("burnin.sweep", self.id, f"burn-in sweep {self.status}", nodes=compress(self.runs),
                         passed=verdicts.count("pass"), failed=verdicts.count("fail"),
                         skipped=verdicts.count("skipped"), report=str(paths["html"]))
        return summary


    def _trend(self) -> dict[str, list[dict[str, Any]]]:
        """node -> its last TREND_SWEEPS sweeps (this one last): shares of the fleet median and
        levels per metric, for the report's trend table."""
        out = {}
        for name, run in self.runs.items():
            past = [h for h in history.node_history(self.store, name, limit=TREND_SWEEPS - 1) if h["sweep_id"] != self.id]
            rows = [{"sweep_id": h["sweep_id"], "shares": fleet.shares(h["fleet"]),
                     "levels": {m: r["level"] for m, r in ((h["fleet"] or {}).get("metrics") or {}).items()}}
                    for h in reversed(past)]
            rows.append({"sweep_id": self.id, "shares": fleet.shares(run.fleet),
                         "levels": {m: r["level"] for m, r in ((run.fleet or {}).get("metrics") or {}).items()}})
            if any(r["shares"] for r in rows):
                out[name] = rows
        return out

    def _seed_baselines(self, summary: dict[str, Any]) -> None:
        """A profile with no baseline yet gets this sweep's medians, when the sweep passed
        (nothing failed, no straggler): later sweeps are then also judged against it, so a fleet
        that degrades together is caught. Changed after that only with `burnin baseline`."""
        if not self.fleet or summary["exit_code"] or self.status != "done":
            return
        if any(e["level"] == "slow" for e in self.fleet["nodes"].values()):
            return
        have = history.baselines(self.store)
        new = {p: {m: b for m, b in metrics.items() if m not in have.get(p, {})}
               for p, metrics in fleet.baseline_from(self.fleet).items()}
        new = {p: m for p, m in new.items() if m}
        if new:
            history.set_baselines(self.store, new, source=f"sweep {self.id}")
            for p, metrics in new.items():
                self.store.audit("burnin.baseline.seed", p, f"first passed sweep {self.id} with fleet verdicts",
                                 metrics=sorted(metrics))


# ------------------------------------------------------------------------------ output parsing


def job_events(stdout: str, kind: str) -> list[dict[str, Any]]:
    """The JSON event lines of `kind` a node job printed (other lines skipped)."""
    out = []
    for line in stdout.splitlines():
        line = line.strip()
        if not line.startswith("{"):
            continue
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict) and obj.get("event") == kind:
            out.append(obj)
    return out


def _first_event(stdout: str, kind: str) -> dict[str, Any] | None:
    found = job_events(stdout, kind)
    return found[0] if found else None


def _last_event(stdout: str, kind: str) -> dict[str, Any] | None:
    found = job_events(stdout, kind)
    return found[-1] if found else None


def _started(stdout: str) -> bool:
    return '"event": "started"' in stdout


def _tail(text: str) -> str:
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1][:300] if lines else "no output"


def missing_prerequisites(site: Site, *, user: str, partitions: set[str], assocs: dict[tuple[str, str], set[str]],
                          qos_names: set[str], python_ok: str) -> list[str]:
    """What a sweep by `user` needs from Slurm and does not have; each line names the fix.
    `assocs`: (account, partition) -> QOS of the user's associations; `python_ok`: '' or why not."""
    b = site.burnin
    part = burnin_partition(site)
    fix = "(create it with `slurmadm accounts apply`)"
    out = []
    if part not in partitions:
        out.append(f"partition {part!r} (burnin.partition) is not in Slurm (apply the site's slurm.conf: "
                   "`slurmadm config apply`)")
    if b.qos not in qos_names:
        out.append(f"QOS {b.qos!r} (burnin.qos) does not exist in slurmdbd {fix}")
    mine = {a: q for (a, p), q in assocs.items() if a == b.account and p in ("", part)}
    if not mine:
        out.append(f"user {user} has no association with account {b.account!r} (burnin.account) {fix}")
    elif b.qos in qos_names and not any(not q or b.qos in q for q in mine.values()):
        out.append(f"user {user} in account {b.account!r} may not use QOS {b.qos!r} {fix}")
    if python_ok:
        out.append(f"the all-reduce program cannot run: {python_ok} (burnin.python)")
    return out
