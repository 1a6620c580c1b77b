"""What a replay measured, per policy, from what it observed: pure arithmetic, no cluster.

A policy's run is observed as the faults it injected (when, where, what class, whether a node-level
signal exists), the drains and returns Slurm and slurmadm recorded, and every job run as sacct
saw it. From those, `measure()` gives the report's figures; `compare()` puts the policies side by
side with the issue's targets. All times here are replay seconds; `compression` turns them into
site time (hours) for the figures a site reads.

Assumptions, stated in the report too:
- a failed run's whole time is lost (no checkpoint data), as Kokolis et al. (HPCA'25) assume
  for ETTR without checkpoints;
- a failed run is killed by a fault when a fault on one of its nodes was in its part at some
  time from 10 minutes (site time) before the run started to the run's end (Meta's attribution
  window, the part before the failure: nothing injected after the run's end can kill it); a
  fault's part is mended at the times below (a repair, the ladder's return), as for job harm;
- a drain is false when its node had no injected fault active and none injected in the 10 site
  minutes before it, unless it is the repair of an earlier fault on the node: the repair ladder's
  own drain (`slurmadm: repair: ...`) or a reboot's passing state (no reason), counted apart
  (`repair_after_fault`);
- a GPU fault the ladder's reset or reboot clears on the stand-in (`LADDER_MENDS`) ends at the
  node's first return by the ladder after it, if that comes before its repair time;
- a fault with no repair time (duration 0: "until the ladder acts") is in its part until the
  node's first return to service after it (a reset or a reboot has repaired it, or a qualification
  passed) or, when the node never returns, to the end;
- job harm counts runs started on a node after a fault's injection while it was in its part
  (`started_on_faulty_node`: a BMC fault has no prolog check, so a job may start there before the
  next BMC sweep); the target counts those started after a drain had followed the fault
  (`started_on_known_faulty_node`: the node returned to service too soon, or never left it);
- a fault's time is when its injection took effect (the injector returned), not when the schedule
  asked for it: on a loaded machine a prolog may run in between and rightly find nothing; and it
  ends when its repair took effect (fleet_replay.as_observed); but a drain after its injection
  began (`asked_s`: the injector writes the fault before it returns) has it as its cause and is
  its detection (time to drain 0), and the node was not already out for it;
- a burn-in sweep's stretch in its reservation is maintenance: no drain (never false), no
  repair when it ends, its node-hours counted apart (`node_hours_maintenance`); a drain during it
  (the sweep's verdict) is a drain;
- a fault with no node-level signal is detected only by the active test that can see it (silent
  data corruption: the burn-in's known-answer test, `burnin-kat`; a straggler: the burn-in's
  fleet-relative verdict, `burnin-straggler`; a user's bug: none), and with no repair time it
  stays in its part until the node returns after that drain (a return from another part's drain
  does not mend it);
- a straggler (PCT percent slower) wastes PCT percent of the time of every run on its node while
  it lasts (synchronous training waits for its slowest rank): `gpu_hours_slowed`, apart from the
  GPU-hours lost in failed runs.
"""

from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field

from .schedule import Fault

GPUS_PER_NODE = 8
# sacct gives a run's start to the whole second (a run's start_s is its second's beginning): a
# fault must still be in its part at the end of that second for the run to have started on it
# (the CI run's ci-009 started in the second the ladder resumed its node)
START_SLACK_S = 0.999
WINDOW_SITE_S = 600          # Meta's "within the last 10 minutes"
KILLED_STATES = ("FAILED", "NODE_FAIL", "OUT_OF_MEMORY")


@dataclass(frozen=True)
class Drain:
    t_s: float
    node: str
    reason: str             # Slurm's reason; slurmadm's start "slurmadm: <check-id>: "


@dataclass(frozen=True)
class Return:
    t_s: float
    node: str
    by: str                 # ladder | clean-runs | admin | recover


@dataclass(frozen=True)
class Run:
    name: str
    nodes: tuple[str, ...]
    start_s: float
    end_s: float
    state: str              # sacct's State word (COMPLETED, FAILED, NODE_FAIL, ...)


@dataclass
class Observed:
    policy: str
    compression: float
    horizon_s: float
    faults: list[tuple[Fault, bool]]          # (fault, has a node-level signal)
    drains: list[Drain] = field(default_factory=list)
    returns: list[Return] = field(default_factory=list)
    runs: list[Run] = field(default_factory=list)
    lemons: list[str] = field(default_factory=list)


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    if len(values) == 1:
        return values[0]
    return statistics.quantiles(sorted(values), n=100, method="inclusive")[round(q * 100) - 1]


def mechanism(reason: str) -> str:
    """The check id of a slurmadm reason (`slurmadm: gpu-xid: ...` -> gpu-xid), else `other`."""
    if reason.startswith("slurmadm: "):
        rest = reason[len("slurmadm: "):]
        return rest.split(":", 1)[0].strip() or "other"
    return "other"


# Stand-in GPU fault kinds the repair ladder's steps clear (slurmadm/devcluster/gpus.py: a GPU
# reset clears a pending row remap, a hung GPU and the reset-class XIDs; a reboot every XID and a
# GPU off the bus), as the replay's jobs see them (bench/replay/job.py reads the stand-in): once
# the ladder has returned the node (a reset or a reboot, then a passed qualification) such a part
# is mended, whatever repair time the schedule drew for its class (the hour-long run's Xid 48s:
# reset, qualified, resumed, and the next job counted as started on a faulty node).
LADDER_MENDS = ("xid", "row-remap-pending", "hang", "missing-gpu")


def fault_end(fault: Fault, returns: list[Return] | None = None, after: float | None = None) -> float:
    """When the fault left its part (inf: not in the run): its repair time, or with none
    (duration 0) the node's first return after it (after `after`, when given: a fault without a
    node-level signal is not repaired by the node's return from another part's drain, only from
    its own detection's); a kind the ladder mends (LADDER_MENDS) ends at the ladder's return if
    that comes first. A maintenance stretch's end (a burn-in sweep of the node) repairs nothing."""
    if fault.duration_s:
        end = fault.t_s + fault.duration_s
        if fault.injector == "gpu" and fault.kind in LADDER_MENDS:
            end = min([end] + [r.t_s for r in returns or [] if r.node == fault.node and r.t_s > fault.t_s
                               and r.by == "ladder"])
        return end
    since = fault.t_s if after is None else after
    return min((r.t_s for r in returns or [] if r.node == fault.node and r.t_s > since
                and r.by != "maintenance"), default=float("inf"))


def _active(fault: Fault, t: float, returns: list[Return] | None = None, after: float | None = None) -> bool:
    """Whether the fault is still in its part at time t (injected, not yet repaired: fault_end)."""
    return fault.t_s <= t < fault_end(fault, returns, after)


def maintenance(reason: str) -> bool:
    """A stretch out of service that is no drain: a node taken, with no reason, into a reservation
    (a burn-in sweep of idle nodes; fleet_replay.Run.poll labels it)."""
    return reason.startswith("maintenance (")


# Active tests: what can see a fault that has no node-level signal, per class: the burn-in's
# known-answer test finds silent data corruption (`slurmadm: burnin-kat: ...`). Any other drain of
# such a node (a burn-in pair test failing on a loaded machine) detects nothing; a user's own bug
# (`software`) is found by no test.
# A straggler (`slow`: the node is slower, no check fails) is seen only by the burn-in's
# fleet-relative verdict: held `slurmadm: burnin-suspect: ...` for a re-test after one slow sweep
# (burnin.straggler.hold_suspects), drained `slurmadm: burnin-straggler: ...` after two.
ACTIVE_MECHANISMS = {"sdc": ("burnin-kat",), "straggler": ("burnin-suspect", "burnin-straggler")}
# A detection that orders no repair: a suspect held for the next sweep's re-test opens no
# incident (repair/data/classes.toml SUSPECT, incident = false); nobody replaces a part on it, so
# the fault's repair time counts from its confirmation (fleet_replay.found_at(confirmed=True)).
SUSPICION_ONLY = ("burnin-suspect",)
# The incident class the ladder opens for that drain (slurmadm/repair/data/classes.toml): the
# ladder may take the node over (`slurmadm: repair: reboot: node BURNIN ...`) within a second of
# the sweep's end, before a poll has seen the burn-in's own reason; on the faulty node, its
# ladder step for that class is the same detection, seen one step later.
ACTIVE_CLASSES = {"sdc": ("SDC",), "straggler": ("BURNIN",)}
_LADDER_CLASS = re.compile(r"^slurmadm: repair: [\w-]+: [^(]*?\b([A-Z][A-Z_]{2,})\b")


def ladder_class(reason: str) -> str:
    """The incident class a repair ladder's drain reason names (`slurmadm: repair: reboot: node
    BURNIN (rung 1 of 2 ...)` -> BURNIN), else ""."""
    m = _LADDER_CLASS.match(reason)
    return m.group(1) if m else ""


def active_detection(cls: str, reason: str) -> str:
    """The mechanism by which a drain with `reason` detects a fault of class `cls` that has no
    node-level signal (its active test's check id, or `repair-CLASS` for the ladder's step on
    it), else ""."""
    m = mechanism(reason)
    if m in ACTIVE_MECHANISMS.get(cls, ()):
        return m
    c = ladder_class(reason)
    return f"repair-{c}" if c and c in ACTIVE_CLASSES.get(cls, ()) else ""
SLOW_KINDS = ("slow",)  # the stand-in's straggler: its value is percent slower


def repair_reason(reason: str) -> bool:
    """A drain the repair of a fault makes: the ladder's own, or a node passing through a reboot
    (Slurm shows no reason)."""
    return reason.startswith("slurmadm: repair:") or reason.strip() in ("", "none") or reason.startswith("none (")


def _out_intervals(obs: Observed, *, maintenance_too: bool = False) -> dict[str, list[tuple[float, float]]]:
    """node -> its stretches out of service: from a drain to the next return (maintenance_too:
    from a maintenance stretch's start as well)."""
    events = sorted([(d.t_s, d.node, "drain") for d in obs.drains if maintenance_too or not maintenance(d.reason)]
                    + [(r.t_s, r.node, "return") for r in obs.returns])
    since: dict[str, float] = {}
    out: dict[str, list[tuple[float, float]]] = {}
    for t, node, what in events:
        if what == "drain":
            since.setdefault(node, t)
        elif node in since:
            out.setdefault(node, []).append((since.pop(node), t))
    for node, t in since.items():
        out.setdefault(node, []).append((t, obs.horizon_s))
    return out


def slowed_gpu_hours(obs: Observed, active) -> dict[str, float]:
    """Run name -> the GPU-hours a straggler among its nodes wasted: synchronous training waits
    for its slowest rank (bench/replay/job.py), so while a node of the run is PCT percent slower
    the whole run does PCT percent of that time's work for nothing. `active(f, t)`: whether the
    fault is in its part at t; its stretch is sampled on a grid of the run's time (the overlap of
    two stragglers in one run counts the slower)."""
    stragglers = [f for f, _ in obs.faults if f.kind in SLOW_KINDS]
    out: dict[str, float] = {}
    for r in obs.runs:
        mine = [f for f in stragglers if f.node in r.nodes and f.t_s < r.end_s]
        if not mine or r.end_s <= r.start_s:
            continue
        steps = 200
        dt = (r.end_s - r.start_s) / steps
        wasted = 0.0
        for i in range(steps):
            t = r.start_s + (i + 0.5) * dt
            pct = max((_percent(f.value) for f in mine if active(f, t)), default=0.0)
            wasted += dt * pct / 100
        if wasted > 0:
            out[r.name] = out.get(r.name, 0.0) + wasted * len(r.nodes) * GPUS_PER_NODE * obs.compression / 3600
    return out


def _percent(value: str) -> float:
    try:
        return min(max(float(value), 0.0), 95.0)
    except ValueError:
        return 0.0


def since(f: Fault) -> float:
    """When a fault may first be seen: its injection's start (`asked_s`: the injector writes it
    before it returns), else its time."""
    return f.t_s if f.asked_s is None else min(f.asked_s, f.t_s)


def measure(obs: Observed) -> dict:
    c = obs.compression
    window = WINDOW_SITE_S / c
    out = _out_intervals(obs)
    drains = [d for d in obs.drains if not maintenance(d.reason)]

    def out_at(node: str, t: float) -> bool:
        return any(a <= t < b for a, b in out.get(node, []))

    # ---- detection per class
    classes: dict[str, dict] = {}
    for fault, signal in obs.faults:
        row = classes.setdefault(fault.cls, {"injected": 0, "detected": 0, "signal": signal,
                                             "mechanisms": {}, "latency_s": [], "already_out": 0})
        row["injected"] += 1
        if out_at(fault.node, since(fault)):
            row["already_out"] += 1
            continue
        # no node-level signal: not a detection target (the job harm counts it), but an active
        # test (the burn-in's known-answer test) may find it: only such a drain is its detection
        first = next((d for d in sorted(drains, key=lambda d: d.t_s)
                      if d.node == fault.node and d.t_s >= since(fault)
                      and (signal or active_detection(fault.cls, d.reason))
                      and (fault.duration_s == 0 or d.t_s <= fault.t_s + fault.duration_s + window)), None)
        if first is not None:
            row["detected"] += 1
            m = mechanism(first.reason) if signal else active_detection(fault.cls, first.reason)
            row["mechanisms"][m] = row["mechanisms"].get(m, 0) + 1
            row["latency_s"].append(max(first.t_s - fault.t_s, 0.0) * c)
    per_class = {}
    for cls, row in sorted(classes.items()):
        lat = row.pop("latency_s")
        per_class[cls] = {**row, "p50_s": _pct(lat, 0.5), "p95_s": _pct(lat, 0.95)}
    undetected = sorted(cls for cls, r in per_class.items()
                        if r["signal"] and r["injected"] > r["already_out"] and r["detected"] == 0)

    # a fault without a node-level signal stays in its part until its own detection's drain is
    # followed by a return (an active test's drain; never detected: to the end)
    found: dict[int, float] = {}
    for f, signal in obs.faults:
        if not signal:
            d = next((d.t_s for d in sorted(drains, key=lambda d: d.t_s) if d.node == f.node and d.t_s >= f.t_s
                      and active_detection(f.cls, d.reason)), None)
            found[id(f)] = obs.horizon_s + 1 if d is None else d

    def active(f: Fault, t: float) -> bool:
        return _active(f, t, obs.returns, found.get(id(f)))

    # ---- job harm
    signalled = [f for f, s in obs.faults if s]
    started_on_faulty = [r.name for r in obs.runs
                         if any(f.node in r.nodes and f.t_s < r.start_s and active(f, r.start_s + START_SLACK_S)
                                for f in signalled)]
    # known: a drain of the node has followed the fault (the fleet has seen it); a run that still
    # starts there while the fault is in its part (the node returned too soon, a drain refused by
    # the breaker came later) is the "job started on a known-faulty node"
    drains_by_time = sorted(drains, key=lambda d: d.t_s)
    known_at = {id(f): next((d.t_s for d in drains_by_time if d.node == f.node and d.t_s >= since(f)), None)
                for f in signalled}
    started_on_known = [r.name for r in obs.runs
                        if any(f.node in r.nodes and known_at[id(f)] is not None and known_at[id(f)] < r.start_s
                               and active(f, r.start_s + START_SLACK_S) for f in signalled)]
    killed = [r for r in obs.runs if r.state in KILLED_STATES
              and any(f.node in r.nodes and f.t_s <= r.end_s
                      and fault_end(f, obs.returns, found.get(id(f))) >= r.start_s - window
                      for f, _ in obs.faults)]

    # ---- false drains
    uncaused = [d for d in drains
                if not any(f.node == d.node and (active(f, d.t_s) or since(f) <= d.t_s <= f.t_s + window)
                           for f, _ in obs.faults)]
    repairs = [d for d in uncaused if repair_reason(d.reason)
               and any(f.node == d.node and f.t_s < d.t_s for f, _ in obs.faults)]
    false_drains = [d for d in uncaused if d not in repairs]

    # ---- repair and cost
    node_hours_out = sum(min(b, obs.horizon_s) - a for iv in out.values() for a, b in iv) * c / 3600
    node_hours_all = sum(min(b, obs.horizon_s) - a for iv in _out_intervals(obs, maintenance_too=True).values()
                         for a, b in iv) * c / 3600
    gpu_h = lambda r: (r.end_s - r.start_s) * len(r.nodes) * GPUS_PER_NODE * c / 3600
    slowed = slowed_gpu_hours(obs, active)
    lost = sum(gpu_h(r) for r in killed)
    completed = sum(gpu_h(r) for r in obs.runs if r.state == "COMPLETED")
    return {
        "policy": obs.policy,
        "per_class": per_class,
        "undetected_classes": undetected,
        "jobs": {"runs": len(obs.runs), "started_on_faulty_node": len(started_on_faulty),
                 "started_on_faulty_names": started_on_faulty[:20],
                 "started_on_known_faulty_node": len(started_on_known),
                 "started_on_known_faulty_names": started_on_known[:20], "killed_by_faults": len(killed)},
        "drains": {"total": len(drains), "maintenance": len(obs.drains) - len(drains), "false": len(false_drains), "repair_after_fault": len(repairs),
                   "false_nodes": sorted({d.node for d in false_drains}),
                   "false_reasons": sorted({d.reason for d in false_drains})[:20]},
        "repair": {"returned_by_ladder": sum(r.by == "ladder" for r in obs.returns),
                   "returned_otherwise": sum(r.by != "ladder" for r in obs.returns),
                   "lemons": sorted(obs.lemons), "node_hours_out": round(node_hours_out, 2),
                   # a burn-in sweep's own nodes (maintenance), on top of node_hours_out
                   "node_hours_maintenance": round(node_hours_all - node_hours_out, 2)},
        "cost": {"gpu_hours_completed": round(completed, 2), "gpu_hours_lost": round(lost, 2),
                 "ettr": round(completed / (completed + lost), 4) if completed + lost else None,
                 # a straggler's toll on the runs that shared it (apart from the figures above)
                 "runs_slowed": len(slowed), "gpu_hours_slowed": round(sum(slowed.values()), 2)},
    }


def compare(results: dict[str, dict]) -> dict:
    """The policies side by side, and the issue's targets for slurmadm's policy (a)."""
    lost = {p: r["cost"]["gpu_hours_lost"] for p, r in results.items()}
    ratios = {f"{p}/{q}": (round(lost[p] / lost[q], 3) if lost[q] else None)
              for p in lost for q in lost if p != q}
    targets = {}
    a = results.get("a")
    if a is not None:
        targets = {
            "every signalled class detected": not a["undetected_classes"],
            "no job started on a known-faulty node": a["jobs"]["started_on_known_faulty_node"] == 0,
            "no false drain": a["drains"]["false"] == 0,
        }
        if "c" in lost:
            targets["loses at most half of the NHC-like policy's GPU-hours"] = (
                lost["a"] <= 0.5 * lost["c"] if lost["c"] else lost["a"] == 0)
    return {"gpu_hours_lost": lost, "ratios": ratios, "targets": targets}
