"""`slurmadm bmc recover`: bring back nodes whose OS died, through their BMCs.

Which nodes (`select()`, pure): Slurm has had them DOWN (`is_down`: not merely NOT_RESPONDING,
unless in a recovery of ours) for at least `bmc.recover.grace_s` (first seen by slurmadm:
node_state `bmc-down-since`), with Slurm's own reason (Not responding, Kill task failed, ...) or an unfinished recovery of ours; never a node an
admin downed or drained with their own reason, and never one in a state someone else handles
(reboot, power saving, maintenance). A node recovered less than `window_s` ago that is down
again is not cycled: it is drained with the SEL evidence in its reason. Past
`max_cycles_per_hour` power-cycles fleet-wide (counted from the audit trail), or past the health
breaker's cap, the plan is an alert instead.

How (`run()`): read the SEL and power state, drain with `slurmadm: bmc-recover: ...` (so
the node stays out of service when slurmd comes back), power-cycle (or on), wait until slurmd
registers (`boot_timeout_s`), wait for a health run on the node newer than the cycle (slurmd runs
HealthCheckProgram when it starts; the result lands in the store), and resume it when that run
is clean; otherwise leave it drained with the failing check in the reason. Every step is an
audit event (`bmc.recover.*`).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..health.actions import breaker
from ..slurm.model import FOREIGN_FLAGS, NodeInfo, SlurmBackend
from ..slurm.ownership import format_reason, is_ours, reason_check_id
from ..store import Store
from .fanout import Fleet, Progress
from .model import SelEvent

CHECK_ID = "bmc-recover"
DOWN_SINCE = "bmc-down-since"
RECOVERED_AT = "bmc-recovered-at"
# reasons Slurm itself gives a node it lost (slurmctld's own strings)
SLURM_REASONS = ("Not responding", "Kill task failed", "Node unexpectedly rebooted", "Prolog error",
                 "Epilog error", "batch job complete failure", "")


@dataclass
class Candidate:
    node: str
    action: str  # cycle | drain-again | wait | skip | alert
    why: str
    down_for: float | None = None


@dataclass
class Report:
    candidates: list[Candidate]
    recovered: list[str] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"candidates": [c.__dict__ for c in self.candidates], "recovered": self.recovered,
                "failed": self.failed}


def is_down(n: NodeInfo) -> bool:
    """Slurm has declared the node dead (DOWN: no answer for SlurmdTimeout), or it is in a
    recovery of ours and not answering yet. A node merely not responding (`idle*`, `alloc*`) is
    not: Slurm flags a missed ping that way, and a node it has just resumed (after a reboot)
    reads `idle*` until its next ping, which can be longer than a short grace_s away."""
    if n.state == "DOWN":
        return True
    return "NOT_RESPONDING" in n.flags and is_ours(n) and reason_check_id(n.reason) == CHECK_ID


def slurms_own(n: NodeInfo) -> bool:
    """DOWN for a reason Slurm gave (not an admin), or in an unfinished recovery of ours."""
    if is_ours(n):
        return reason_check_id(n.reason) == CHECK_ID
    if n.drained:
        return False  # drained by someone with their own reason
    return any(n.reason.startswith(r) for r in SLURM_REASONS if r) or not n.reason


# What recovery leaves alone: the states someone else handles, except NOT_RESPONDING, the very
# state a dead node is in (health checks leave it alone; recovery exists for it).
RECOVERY_FOREIGN = FOREIGN_FLAGS - {"NOT_RESPONDING"}


def select(nodes: list[NodeInfo], *, now: float, down_since: dict[str, float], recovered_at: dict[str, float],
           grace_s: float, window_s: float, cycles_last_hour: int, max_per_hour: int,
           drain_cap_fraction: float, everyone: list[NodeInfo] | None = None) -> list[Candidate]:
    """`nodes`: the ones to consider; `everyone`: all of Slurm's nodes (the breaker's count)."""
    everyone = nodes if everyone is None else everyone
    out: list[Candidate] = []
    budget = max_per_hour - cycles_last_hour
    for n in nodes:
        if not is_down(n):
            continue
        foreign = n.flags & RECOVERY_FOREIGN
        if foreign:
            out.append(Candidate(n.name, "skip", f"{'+'.join(sorted(foreign))}: left to whoever owns that"))
            continue
        if not slurms_own(n):
            who = n.reason_user or "an admin"
            out.append(Candidate(n.name, "skip", f"downed/drained by {who}: {n.reason!r}"))
            continue
        since = down_since.get(n.name, now)
        down_for = now - since
        if down_for < grace_s:
            out.append(Candidate(n.name, "wait", f"down {down_for:.0f} s of the {grace_s:g} s grace", down_for))
            continue
        last = recovered_at.get(n.name)
        if last is not None and now - last < window_s:
            out.append(Candidate(n.name, "drain-again",
                                 f"down again {now - last:.0f} s after a power-cycle (window {window_s:g} s)", down_for))
            continue
        if budget <= 0:
            out.append(Candidate(n.name, "alert", f"rate limit: {max_per_hour} power-cycles per hour reached",
                                 down_for))
            continue
        if not n.drained:
            why = breaker(n, everyone, drain_cap_fraction)
            if why:
                out.append(Candidate(n.name, "alert", f"breaker: {why}", down_for))
                continue
        budget -= 1
        out.append(Candidate(n.name, "cycle", f"{n.state_text} for {down_for:.0f} s ({n.reason or 'no reason'})",
                             down_for))
    return out


def evidence(events: list[SelEvent], limit: int = 2) -> str:
    """The SEL's most telling recent events, short enough for a drain reason."""
    bad = [e for e in events if e.severity != "info"]
    if not bad:
        return f"no warning/critical events ({len(events)} in the log)"
    return "; ".join(f"{e.sensor}: {e.event}" for e in bad[-limit:])


class Recovery:
    def __init__(self, site, fleet: Fleet, backend: SlurmBackend, store: Store,
                 progress: Callable[[str], None] = lambda m: None, sleep: Callable[[float], None] = time.sleep,
                 bar: Progress | None = None, results_factory=None):
        self.site = site
        # where the first health run is read (store/read.trusted: the central store by origin
        # when the site has one); default: `store`
        self.results_factory = results_factory
        self.cfg = site.bmc.recover
        self._health_cfg: dict = {}  # node -> its HealthConfig (the site's policy per check)
        self.fleet = fleet
        self.backend = backend
        self.store = store
        self.progress = progress
        self.sleep = sleep
        self.bar = bar  # advanced once per node acted on, when it is recovered or given up on

    def _done(self, report: Report, node: str, why: str | None = None) -> None:
        if why is None:
            report.recovered.append(node)
        else:
            report.failed[node] = why
        if self.bar is not None:
            self.bar.advance()

    # ------------------------------------------------------------------ planning
    def plan(self, nodes: list[str] | None = None, *, now: float | None = None, record: bool = True) -> list[Candidate]:
        now = time.time() if now is None else now
        everyone = self.backend.nodes()
        down_since, recovered_at = {}, {}
        for n in everyone:
            raw = self.store.get_node_state(n.name, DOWN_SINCE)
            if is_down(n):
                if raw is None:
                    # first seen down: since Slurm set its reason ("Not responding"), when Slurm
                    # says (a first `recover` after the fact otherwise read "down 0 s")
                    since = n.reason_time if 0 < n.reason_time <= now else now
                    if record:
                        self.store.set_node_state(n.name, DOWN_SINCE, repr(since))
                    down_since[n.name] = since
                else:
                    down_since[n.name] = float(raw)
            elif raw is not None and record and not (is_ours(n) and reason_check_id(n.reason) == CHECK_ID):
                self.store.delete_node_state(n.name, DOWN_SINCE)  # back up on its own
            rec = self.store.get_node_state(n.name, RECOVERED_AT)
            if rec is not None:
                recovered_at[n.name] = float(rec)
        cycles = len(self.store.events(since=now - 3600, action="bmc.recover.cycle", limit=100000))
        wanted = set(nodes) if nodes else None
        pool = [n for n in everyone if wanted is None or n.name in wanted]
        return select(pool, now=now, down_since=down_since, recovered_at=recovered_at, grace_s=self.cfg.grace_s,
                      window_s=self.cfg.window_s, cycles_last_hour=cycles, max_per_hour=self.cfg.max_cycles_per_hour,
                      drain_cap_fraction=self.site.health.drain_cap_fraction, everyone=everyone)

    # ------------------------------------------------------------------ acting
    def run(self, candidates: list[Candidate], reason: str) -> Report:
        report = Report(candidates)
        act = [c for c in candidates if c.action in ("cycle", "drain-again")]
        if not act:
            for c in candidates:
                if c.action == "alert":
                    self.store.audit("bmc.recover.alert", c.node, c.why)
            return report
        if self.bar is not None:
            self.bar.begin(len(act))
        reads = {r.node: r for r in self.fleet.run([c.node for c in act],
                                                   lambda conn: (conn.bmc.sel(), conn.bmc.power_state()))}
        cycled: dict[str, float] = {}
        for c in act:
            r = reads[c.node]
            sel_text = evidence(r.value[0]) if r.ok else f"BMC unreachable: {r.error}"
            if c.action == "drain-again":
                why = f"failed again within {self.cfg.window_s:g} s of a power-cycle; SEL: {sel_text}"
                self.backend.drain([c.node], format_reason(CHECK_ID, why, "bmc"))
                self.store.audit("bmc.recover.give-up", c.node, why, sel=sel_text)
                self._done(report, c.node, why)
                continue
            if not r.ok:
                self._done(report, c.node, r.error)
                self.store.audit("bmc.recover.unreachable", c.node, r.error)
                continue
            power = r.value[1]
            self.backend.drain([c.node], format_reason(
                CHECK_ID, f"power-cycling through the BMC ({c.why}); SEL: {sel_text}", "bmc"))
            rows = self.fleet.run([c.node], lambda conn: conn.bmc.power("cycle"))
            if not rows[0].ok:
                self._done(report, c.node, rows[0].error)
                self.store.audit("bmc.recover.unreachable", c.node, rows[0].error)
                continue
            cycled[c.node] = time.time()
            self.store.audit("bmc.recover.cycle", c.node, reason, was=power, down_for=c.down_for, sel=sel_text)
            self.progress(f"{c.node}: power-cycled (was {power}); waiting for slurmd")
        self._follow(cycled, report)
        return report

    def _follow(self, cycled: dict[str, float], report: Report) -> None:
        deadline = time.monotonic() + self.cfg.boot_timeout_s
        waiting = dict(cycled)
        registered: dict[str, float] = {}
        while waiting and time.monotonic() < deadline:
            states = {n.name: n for n in self.backend.nodes(list(waiting))}
            for node in list(waiting):
                n = states.get(node)
                if node not in registered and n is not None and not is_down(n):
                    registered[node] = time.time()
                    self.progress(f"{node}: slurmd registered; waiting for a health run")
                if node in registered:
                    verdict = self._health(node, waiting[node])
                    if verdict is None:
                        continue
                    ok, detail = verdict
                    del waiting[node]
                    self._finish(node, ok, detail, report)
            if waiting:
                self.sleep(1.0)
        for node in waiting:
            why = ("slurmd did not register" if node not in registered else "no health run") + \
                  f" within {self.cfg.boot_timeout_s:g} s of the power-cycle"
            self.backend.drain([node], format_reason(CHECK_ID, why, "bmc"))
            self.store.audit("bmc.recover.failed", node, why)
            self._done(report, node, why)

    def _drains(self, node: str, check_id: str, status: str) -> bool:
        """Would this result drain the node under the site's health policy? (A warning-class
        check, e.g. software-drift with on_fail = "warn", does not make a recovery fail.)"""
        from ..health import checks as hc
        from ..health.config import from_site
        from ..health.runner import verdict

        spec = hc.BY_ID.get(check_id)
        if spec is None:
            return status in ("fail", "error")  # a check this slurmadm does not know: be strict
        if node not in self._health_cfg:
            try:
                self._health_cfg[node] = from_site(self.site, node, site_path="", site_sha256="")
            except Exception:  # noqa: BLE001 - a node the site's health settings do not resolve: be strict
                self._health_cfg[node] = None
        cfg = self._health_cfg[node]
        if cfg is None:
            return status in ("fail", "error")
        return verdict(hc.policy(spec, cfg), status) == "drain"

    def _health(self, node: str, since: float) -> tuple[bool, str] | None:
        """The first health run on `node` after `since` (None while there is none): clean when
        no check of the configured set (default: all) failed or errored in a way that, under the
        site's health policy, drains the node."""
        sql = ("SELECT run_id, check_id, status, detail FROM check_results WHERE node=? AND ts>=? AND context != 'bmc' "
               "AND {trusted} ORDER BY {order}")
        if self.results_factory is None:
            rows = self.store.query(sql.format(trusted="1=1", order="id"), (node, since))
        else:
            with self.results_factory() as r:  # only the node's own runs (issue 24)
                rows = r.query(sql.format(trusted="origin = node" if r.central else "1=1",
                                          order="ts, seq" if r.central else "id"), (node, since))
        if not rows:
            return None
        first = rows[0]["run_id"]
        run = [r for r in rows if r["run_id"] == first]
        wanted = set(self.cfg.health_checks)
        bad = [r for r in run if r["status"] in ("fail", "error") and (not wanted or r["check_id"] in wanted)
               and self._drains(node, r["check_id"], r["status"])]
        if bad:
            return False, f"{bad[0]['check_id']}: {bad[0]['detail']}"
        return True, f"{len(run)} checks clean"

    def _finish(self, node: str, ok: bool, detail: str, report: Report) -> None:
        if ok:
            n = self.backend.nodes([node])[0]
            if is_ours(n) and reason_check_id(n.reason) == CHECK_ID:
                self.backend.resume([node])
            self.store.set_node_states(node, {RECOVERED_AT: repr(time.time())})
            self.store.delete_node_state(node, DOWN_SINCE)
            self.store.audit("bmc.recover.resume", node, f"recovered by power-cycle; health: {detail}")
            self._done(report, node)
            self.progress(f"{node}: healthy, resumed")
        else:
            why = f"health failed after power-cycle: {detail}"
            self.backend.set_reason([node], format_reason(CHECK_ID, why, "bmc"))
            self.store.audit("bmc.recover.failed", node, why)
            self._done(report, node, why)


def recovery(site, fleet: Fleet, backend: SlurmBackend, store: Store, *, progress: Callable[[str], None],
             bar: Progress | None = None) -> Recovery:
    """The Recovery `bmc recover` runs: first health runs read through store/read.trusted when
    the site has a central store, else from `store`."""
    from ..store import read

    return Recovery(site, fleet, backend, store, progress=progress, bar=bar,
                    results_factory=(lambda: read.trusted(site)) if site.store.url else None)


def run_locked(rec: Recovery, nodes: list[str] | None, reason: str, *, trigger: bool, sweep: bool,
               progress: Callable[[str], None], sleep: Callable[[float], None] = time.sleep
               ) -> tuple[list[Candidate], Report] | None:
    """Plan and recover under the site's recovery lock (one recovery at a time). For Slurm's
    strigger (`trigger`): wait out the grace period of the nodes still in it, and wait for a
    recovery that holds the lock, up to grace_s + 10 minutes. From the sweep: when another
    recovery holds the lock, leave the nodes to it (None). Otherwise a held lock is LockBusy."""
    from pathlib import Path

    from ..errors import LockBusy
    from ..files import exclusive_lock

    grace_s = rec.site.bmc.recover.grace_s
    lock = Path(f"{rec.site.store.path}.bmc-recover.lock")
    deadline = time.monotonic() + (grace_s + 600 if trigger else 0)
    while True:
        try:
            with exclusive_lock(lock, lambda holder: f"another recovery runs ({holder})"):
                cands = rec.plan(nodes)
                if trigger and any(c.action == "wait" for c in cands) and time.monotonic() < deadline:
                    progress(f"waiting: {min(c.why for c in cands if c.action == 'wait')}")
                    sleep(min(5.0, max(0.5, grace_s / 10)))
                    continue
                return cands, rec.run(cands, reason)
        except LockBusy as exc:
            if sweep:
                progress(f"{exc}: this sweep leaves the nodes to it")
                return None
            if not trigger or time.monotonic() >= deadline:
                raise
            sleep(2.0)
