"""Every failed job run attributed: Slurm's accounting joined with what slurmadm saw (issue 36).

A run that ended NODE_FAIL, FAILED, OUT_OF_MEMORY, REQUEUED, BOOT_FAIL or was cancelled by the
system (uid 0 or SlurmUser) is matched with the signals the store holds for its nodes (and, where
the prolog's GPU -> job map was kept, its own GPUs) in Meta's window: a cause detected within the
10 minutes before the run's end or the 5 minutes after it (Kokolis et al., "Revisiting
Reliability in Large-Scale Machine Learning Research Clusters", HPCA 2025, section IV: "we
attribute a job failure to a cause if the cause was detected within the last 10 minutes or 5
minutes after a failing job's lifetime").

Signals: incidents (repair, store v5), drains slurmadm recorded (`node.drain`: health and BMC
health), failed health results (XID lines with their GPU, ECC, NVLink, InfiniBand port faults,
BMC SEL checks), `bmc recover` events, leaf incidents. Application-class XIDs (NVIDIA's catalog
verdict "info": 13, 31, 43, 45, ...) are the job's own and never blame the node.

Verdicts:
- `infrastructure: <node> GPU<i> Xid <n> (incident <id>)`: a node signal in the window;
- `user: exit <n>, no node signal` (or `out of memory`): the store covered the run's nodes and
  saw nothing;
- `unknown`: the store holds no record of a node of the run around its time (no health run, no
  event: never a guess), or a requeue/system cancel without a node signal.
"""

from __future__ import annotations

import bisect
import json
import re
from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from ..hostlist import expand
from ..record import record
from ..slurm.sacct import JobRun

BEFORE_S = 600.0  # Meta: a cause detected within the last 10 minutes of the run's lifetime
AFTER_S = 300.0   # ... or 5 minutes after it
# sacct's Start is whole seconds (Slurm keeps a time_t) and the prolog runs once the run is
# allocated: its findings land at or after Start. A second of slack for the truncation; anything
# earlier was found while the node was not yet running this job (it was resumed since, or the job
# could not have started there) and is not this run's cause.
PROLOG_SLACK_S = 1.0
COVER_BEFORE_S = 3600.0  # a node counts as watched when the store has a record of it this close
HOUR = 3600.0

FAIL_STATES = frozenset({"NODE_FAIL", "FAILED", "OUT_OF_MEMORY", "REQUEUED", "BOOT_FAIL"})
# Checks whose failure is the job's doing, not the node's.
USER_CHECKS = frozenset({"leftover-processes"})
# Audit actions that are node signals (what slurmadm did or saw about a node's hardware).
SIGNAL_ACTIONS = ("node.drain", "bmc.recover.cycle", "bmc.recover.give-up", "bmc.recover.failed",
                  "bmc.recover.alert", "repair.leaf")
_XID = re.compile(r"\bGPU(\d+)\b[^;]*?\bXID (\d+)")
_GPU = re.compile(r"^GPU(\d+)\b")
_HCA = re.compile(r"^(mlx\w+|ib\w*|hca\w*)[:/ ]")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")  # a kernel-log line may carry NULs and escapes


@record
class Signal:
    ts: float
    node: str
    kind: str         # incident | xid | drain | health | bmc | ib | leaf
    text: str         # "GPU3 Xid 79", "ecc-uncorrected: ...", "drained: ..."
    gpu: int | None = None
    incident: str = ""
    cls: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"ts": self.ts, "node": self.node, "kind": self.kind, "text": self.text, "gpu": self.gpu,
                "incident": self.incident, "class": self.cls}


VERDICTS = ("infrastructure", "user", "unknown")  # what a failed run is put down to


@record
class Attributed:
    run: JobRun
    verdict: str      # one of VERDICTS
    why: str          # the verdict line's detail
    signals: list[Signal]
    held_gpus: dict[str, list[int]]

    @property
    def line(self) -> str:
        return f"{self.verdict}: {self.why}" if self.why else self.verdict

    def to_json(self) -> dict[str, Any]:
        return {**self.run.to_json(), "verdict": self.verdict, "why": self.why, "line": self.line,
                "signals": [s.to_json() for s in self.signals],
                "held_gpus": {n: g for n, g in self.held_gpus.items()}}


def failed(run: JobRun, system_uids: Iterable[str] = ("0",)) -> bool:
    """Whether a run ended in a way issue 36 attributes."""
    if run.state in FAIL_STATES:
        return True
    return run.state == "CANCELLED" and run.cancelled_by in set(system_uids)


# ------------------------------------------------------------------------------- signals


def _try(r, sql: str, args=()) -> list[dict[str, Any]]:
    """A read of a table an older store may lack (incidents: v5, job_gpus: v7): [] then."""
    try:
        return r.query(sql, args)
    except Exception:  # noqa: BLE001 - sqlite3.OperationalError / pymysql ProgrammingError: no such table
        return []


def _app_class(xid: int) -> bool:
    from ..health import xid as xidmod

    try:
        return xidmod.classify_event(xid, "").verdict in ("info", "ignore")
    except Exception:  # noqa: BLE001 - an XID the catalog cannot read: treat as a node fault
        return False


class Signals:
    """Every node signal in [lo, hi], indexed by node and time, plus which nodes the store
    watched when (hour buckets with any health result or event)."""

    def __init__(self, store, lo: float, hi: float, leaves: dict[str, list[str]] | None = None):
        self.by_node: dict[str, list[Signal]] = defaultdict(list)
        self.times: dict[str, list[float]] = {}
        self.watched: dict[str, set[int]] = defaultdict(set)
        self.held: dict[tuple[str, str], list[int]] = {}
        self.leaves = leaves or {}
        self._app: dict[int, bool] = {}
        self._read(store, lo, hi)
        for node, sigs in self.by_node.items():
            sigs.sort(key=lambda s: s.ts)
            self.times[node] = [s.ts for s in sigs]

    def app_class(self, xid: int) -> bool:
        if xid not in self._app:
            self._app[xid] = _app_class(xid)
        return self._app[xid]

    def add(self, s: Signal) -> None:
        if s.node in self.leaves:  # a leaf incident: a signal on every node under the leaf
            for n in self.leaves[s.node]:
                self.by_node[n].append(Signal(s.ts, n, s.kind, s.text, None, s.incident, s.cls))
        else:
            self.by_node[s.node].append(s)

    def _read(self, store, lo: float, hi: float) -> None:
        """`store`: a local Store or a store.read.Reader (anything with `.query`; `.central`
        picks the SQL dialect of the hour bucket)."""
        hour = "FLOOR(ts / 3600)" if getattr(store, "central", False) else "CAST(ts / 3600 AS INTEGER)"
        # centrally, only what a node says of itself (or the head of any node): store/read.py trusted()
        own = store.trusted() if hasattr(store, "trusted") else "1=1"
        for r in store.query(f"SELECT node, {hour} AS h FROM check_results WHERE ts BETWEEN ? AND ? AND {own} "
                             "GROUP BY node, h", (lo - COVER_BEFORE_S, hi)):
            self.watched[r["node"]].add(int(r["h"]))
        for r in store.query(f"SELECT ts, node, check_id, status, detail FROM check_results "
                             f"WHERE ts BETWEEN ? AND ? AND status IN ('fail', 'warn') AND {own} ORDER BY ts",
                             (lo, hi)):
            self._result(r)
        marks = ",".join("?" * len(SIGNAL_ACTIONS))
        for r in store.query(f"SELECT ts, action, target, reason, detail FROM events WHERE ts BETWEEN ? AND ? "
                             f"AND action IN ({marks}) ORDER BY ts", (lo, hi, *SIGNAL_ACTIONS)):
            self._event(r)
        self._incidents(store, lo, hi)

    def read_held(self, store, job_ids: list[str], hi: float) -> None:
        """Which GPUs each job held per node (the prolog's record, store v7), newest record at or
        before `hi` (job ids come round again)."""
        ids = sorted(set(job_ids))
        for i in range(0, len(ids), 500):
            chunk = ids[i:i + 500]
            rows = _try(store, f"SELECT node, job_id, gpus, ts FROM job_gpus WHERE job_id IN "
                               f"({','.join('?' * len(chunk))}) AND ts <= ? ORDER BY ts", (*chunk, hi))
            for r in rows:
                try:
                    self.held[(r["node"], str(r["job_id"]))] = [int(g) for g in json.loads(r["gpus"])]
                except (ValueError, TypeError):
                    continue

    def _result(self, r) -> None:
        node, check, ts = r["node"], r["check_id"], float(r["ts"])
        detail = _CONTROL.sub("?", r["detail"] or "")
        self.watched[node].add(int(ts // HOUR))
        if check in USER_CHECKS:
            return
        if r["status"] == "warn" and check != "xid":
            return
        for item in (x.strip() for x in detail.split(";")):
            if not item:
                continue
            if check == "xid":
                m = _XID.search(item)
                if m is None:
                    continue
                gpu, xid = int(m.group(1)), int(m.group(2))
                if self.app_class(xid):
                    continue
                self.add(Signal(ts, node, "xid", f"GPU{gpu} Xid {xid}", gpu))
                continue
            if r["status"] != "fail":
                continue
            g = _GPU.match(item)
            kind = "ib" if check == "infiniband" or _HCA.match(item) else "health"
            self.add(Signal(ts, node, kind, f"{check}: {item}"[:160], int(g.group(1)) if g else None))

    def _event(self, r) -> None:
        ts, action, node = float(r["ts"]), r["action"], r["target"]
        reason = _CONTROL.sub("?", r["reason"] or "")
        self.watched[node].add(int(ts // HOUR))
        if action == "node.drain":
            self.add(Signal(ts, node, "drain", f"drained: {reason}"[:160]))
        elif action == "repair.leaf":
            try:
                detail = json.loads(r["detail"] or "{}")
            except ValueError:
                detail = {}
            for n in detail.get("nodes", []):
                self.add(Signal(ts, n, "leaf", reason[:160], None, str(detail.get("incident", "")), "LEAF"))
        else:
            self.add(Signal(ts, node, "bmc", f"{action.removeprefix('bmc.')}: {reason}"[:160]))

    def _incidents(self, store, lo: float, hi: float) -> None:
        rows = _try(store, "SELECT id, node, part_kind, part_key, slot, class, opened_ts, updated_ts, evidence "
                           "FROM incidents WHERE opened_ts <= ? AND updated_ts >= ?", (hi, lo))
        times: dict[str, list[float]] = defaultdict(list)
        for e in _try(store, "SELECT incident_id, ts FROM incident_events WHERE ts BETWEEN ? AND ? "
                             "AND kind IN ('opened', 'extended')", (lo, hi)) if rows else []:
            times[str(e["incident_id"])].append(float(e["ts"]))
        for r in rows:
            iid, cls, kind = str(r["id"]), str(r["class"]), str(r["part_kind"])
            gpu = int(r["slot"]) if kind == "gpu" and str(r["slot"] or "").isdigit() else None
            what = f"GPU{gpu} {cls}" if gpu is not None else (f"{kind} {r['part_key']} {cls}" if kind != "node" else cls)
            xid = _incident_xid(r["evidence"])
            if xid is not None and gpu is not None:
                if self.app_class(xid):
                    continue
                what = f"GPU{gpu} Xid {xid}"
            nodes = [r["node"]]
            if kind == "leaf":
                nodes = _leaf_nodes(r["evidence"]) or self.leaves.get(r["node"], [])
                what = f"suspect leaf {r['part_key'] or r['node']}"
            for ts in sorted({float(r["opened_ts"]), *times.get(iid, [])}):
                for n in nodes:
                    self.by_node[n].append(Signal(ts, n, "incident", what, gpu, iid, cls))

    def near(self, node: str, lo: float, hi: float) -> list[Signal]:
        times = self.times.get(node)
        if not times:
            return []
        sigs = self.by_node[node]
        return sigs[bisect.bisect_left(times, lo):bisect.bisect_right(times, hi)]

    def covered(self, node: str, lo: float, hi: float) -> bool:
        hours = self.watched.get(node)
        if not hours:
            return False
        return any(h in hours for h in range(int(lo // HOUR), int(hi // HOUR) + 1))


def _incident_xid(evidence: str | None) -> int | None:
    try:
        items = json.loads(evidence or "[]")
    except ValueError:
        return None
    for e in items if isinstance(items, list) else []:
        if isinstance(e, dict):
            x = e.get("xid")
            if isinstance(x, int) or (isinstance(x, str) and x.isdigit()):
                return int(x)
            m = _XID.search(str(e.get("text", "") or e.get("line", "")))
            if m:
                return int(m.group(2))
    return None


def _leaf_nodes(evidence: str | None) -> list[str]:
    try:
        items = json.loads(evidence or "[]")
    except ValueError:
        return []
    out: list[str] = []
    for e in items if isinstance(items, list) else []:
        if isinstance(e, dict) and isinstance(e.get("nodes"), list):
            out += [str(n) for n in e["nodes"]]
    return out


# ------------------------------------------------------------------------------- verdicts

_EXPANDED: dict[str, list[str]] = {}


def _nodes(hostlist: str) -> list[str]:
    """A run's node list, expanded once per distinct hostlist (ClusterShell costs ~0.4 ms a call)."""
    if not hostlist:
        return []
    if "[" not in hostlist and "," not in hostlist:
        return [hostlist]
    got = _EXPANDED.get(hostlist)
    if got is None:
        if len(_EXPANDED) > 100_000:
            _EXPANDED.clear()
        got = _EXPANDED[hostlist] = expand(hostlist)
    return got


_RANK = {"xid": 0, "incident": 1, "leaf": 2, "ib": 3, "health": 4, "drain": 5, "bmc": 6}


def attribute(run: JobRun, signals: Signals, *, before_s: float = BEFORE_S, after_s: float = AFTER_S) -> Attributed:
    """The verdict of one failed run."""
    nodes = _nodes(run.nodes)
    end = run.end if run.end is not None else (run.start or 0.0) + run.elapsed_s
    lo, hi = end - before_s, end + after_s
    if run.start:
        # Meta's window is the last 10 minutes *of the run's lifetime*: a signal from before the run
        # began (a fault found, cleared and the node resumed before this run) did not kill it. A
        # second of slack keeps the prolog's own findings, which land as the run starts.
        lo = max(lo, run.start - PROLOG_SLACK_S)
    held = {n: signals.held[(n, run.job_id)] for n in nodes if (n, run.job_id) in signals.held}
    seen: list[Signal] = []
    for n in nodes:
        for s in signals.near(n, lo, hi):
            if s.gpu is not None and n in held and s.gpu not in held[n]:
                continue  # another job's GPU on a shared node
            seen.append(s)
    if seen:
        best = min(seen, key=lambda s: (_RANK.get(s.kind, 9), s.ts))
        text = f"{best.node} {best.text}"
        incident = best.incident or next((s.incident for s in seen if s.incident and s.node == best.node
                                          and (best.gpu is None or s.gpu in (None, best.gpu))), "")
        if incident:
            text += f" (incident {incident})"
        same = {(best.node, best.gpu), (best.node, None)}
        others = len({(s.node, s.gpu) for s in seen} - same)
        if others > 0:
            text += f" (+{others} more)"
        return Attributed(run, "infrastructure", text, seen, held)
    covered = [n for n in nodes if signals.covered(n, (run.start or end) - COVER_BEFORE_S, hi)]
    if not nodes or len(covered) < len(nodes):
        missing = [n for n in nodes if n not in covered]
        from ..hostlist import compress

        why = f"the store has no record of {compress(missing)} around the run" if missing else "no nodes in sacct"
        return Attributed(run, "unknown", why, [], held)
    if run.state == "NODE_FAIL":
        return Attributed(run, "infrastructure", f"{run.nodes} NODE_FAIL (Slurm), no slurmadm signal", [], held)
    if run.state == "BOOT_FAIL":
        return Attributed(run, "infrastructure", f"{run.nodes} BOOT_FAIL (Slurm), no slurmadm signal", [], held)
    if run.state in ("REQUEUED", "CANCELLED"):
        what = "requeued" if run.state == "REQUEUED" else f"cancelled by uid {run.cancelled_by}"
        return Attributed(run, "unknown", f"{what}, no node signal", [], held)
    oom = run.state == "OUT_OF_MEMORY" or any(s.state == "OUT_OF_MEMORY" for s in run.steps)
    if oom:
        step = next((s.step_id for s in run.steps if s.state == "OUT_OF_MEMORY"), "")
        return Attributed(run, "user", f"out of memory{f' (step {step})' if step else ''}, no node signal", [], held)
    code = run.exit_code or run.derived_exit or next((s.exit_code for s in run.steps if s.exit_code), 0)
    sig = run.signal or next((s.signal for s in run.steps if s.signal), 0)
    what = f"exit {code}" if code or not sig else f"signal {sig}"
    return Attributed(run, "user", f"{what}, no node signal", [], held)


def attribute_all(store, runs: list[JobRun], *, system_uids: Iterable[str] = ("0",),
                  leaves: dict[str, list[str]] | None = None) -> list[Attributed]:
    """Verdicts of the failed runs among `runs` (one store read for all)."""
    uids = tuple(system_uids)
    bad = [r for r in runs if failed(r, uids) and r.end is not None]
    if not bad:
        return []
    lo = min(r.end for r in bad) - BEFORE_S
    lo = min(lo, min((r.start or r.end) for r in bad) - COVER_BEFORE_S)
    hi = max(r.end for r in bad) + AFTER_S
    signals = Signals(store, lo, hi, leaves)
    signals.read_held(store, [r.job_id for r in bad], hi)
    return [attribute(r, signals) for r in bad]


def select(attributed: list[Attributed], *, project: str | None = None, user: str | None = None) -> list[Attributed]:
    return [a for a in attributed if (project is None or a.run.account == project)
            and (user is None or a.run.user == user)]


def summary(attributed: list[Attributed]) -> dict[str, Any]:
    by: dict[str, dict[str, float]] = defaultdict(lambda: {"runs": 0, "gpu_hours": 0.0})
    for a in attributed:
        by[a.verdict]["runs"] += 1
        by[a.verdict]["gpu_hours"] += a.run.gpu_hours
    return {v: {"runs": int(x["runs"]), "gpu_hours": round(x["gpu_hours"], 3)} for v, x in sorted(by.items())}


def lost_by_account(attributed: list[Attributed]) -> dict[str, float]:
    """GPU-hours lost to infrastructure per account (project)."""
    out: dict[str, float] = defaultdict(float)
    for a in attributed:
        if a.verdict == "infrastructure":
            out[a.run.account] += a.run.gpu_hours
    return dict(out)


def system_uids(site) -> tuple[str, ...]:
    """uid 0 and SlurmUser's uid: a run "CANCELLED by" one of them was cancelled by the system."""
    import pwd

    out = ["0"]
    try:
        out.append(str(pwd.getpwnam(site.slurm_user).pw_uid))
    except (KeyError, AttributeError):
        pass
    return tuple(dict.fromkeys(out))


def leaves_of(site) -> dict[str, list[str]]:
    """Leaf switch -> its nodes: the site's scalable units, as topology.conf has them."""
    return {name: list(nodes) for name, nodes in site.scalable_units}


def collect(site, since: float, until: float | None = None, *, sacct=None) -> tuple[list[JobRun], list[Attributed]]:
    """Every run Slurm's accounting has in [since, until] and the verdicts of the failed ones."""
    from ..slurm.sacct import SacctReader
    from ..store import read

    runs = (sacct or SacctReader()).runs(since, until)
    with read.trusted(site) as r:
        attributed = attribute_all(r, runs, system_uids=system_uids(site), leaves=leaves_of(site))
    return runs, attributed
