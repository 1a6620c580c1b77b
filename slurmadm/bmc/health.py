"""BMC readings as node health, run periodically on the head node (`slurmadm bmc health`, cron).

Checks (ids appear in drain reasons as `slurmadm: bmc-<check>: ...`):
- bmc-temperature: a sensor of `bmc.health.temperature_sensors` (inlet, GPU baseboard, GPUs)
  over its critical threshold (the BMC's own);
- bmc-psu: a power supply reports a failure (or AC lost);
- bmc-fan: a fan under its critical threshold while the host is powered on (fans stop with the
  host: a powered-off node's fans at 0 RPM are no fault, and were drained as one);
- bmc-sel: SEL events at least `bmc.health.sel_severity` logged since the last run.
A failure drains the node through the same rules as the GPU checks (never someone else's drain,
never a foreign state, the drain breaker `health.drain_cap_fraction`); a node drained by one of
these checks is resumed after `health.resume_after_clean_runs` clean runs. Results go to the
store's check_results (context "bmc") like any health run; an unreachable BMC is an `error`
result, never a drain.
"""

from __future__ import annotations

import fnmatch
import json
import time
import uuid
from dataclasses import dataclass

from ..errors import SlurmadmError
from ..health.actions import breaker
from ..slurm.model import NodeInfo, SlurmBackend
from ..slurm.ownership import format_reason, is_ours, may_drain, may_resume, reason_check_id
from ..store import Store
from .fanout import Fleet
from .model import Sensor, SelEvent

CHECKS = ("bmc-temperature", "bmc-psu", "bmc-fan", "bmc-sel")
CONTEXT = "bmc"
SEL_SEEN = "bmc-sel-seen"  # node_state: the SEL events already judged (JSON list of event_key)
CLEAN = "bmc-clean-runs"


@dataclass
class Verdict:
    node: str
    check_id: str
    status: str  # pass | fail | error
    detail: str


def event_key(e: SelEvent) -> str:
    """Identity of a SEL event across runs (timestamps converted from the BMC clock jitter by a
    second between reads, so they cannot say what is new)."""
    return f"{e.record_id}:{e.sensor}:{e.event}"


def judge(node: str, sensors: list[Sensor], events: list[SelEvent], *, temp_globs: list[str],
          sel_severity: str, seen: set[str], power: str = "on") -> list[Verdict]:
    """The node's verdicts from its BMC's sensors and SEL. `power`: the chassis power state
    ("on", "off", or "unknown" when the BMC did not say: judged as on)."""
    hot = [s for s in sensors if s.type == "temperature" and any(fnmatch.fnmatch(s.name, g) for g in temp_globs)
           and s.status == "critical"]
    psu = [s for s in sensors if s.type == "psu" and s.status != "ok"]
    fans = [s for s in sensors if s.type == "fan" and s.status == "critical"]
    rank = {"info": 0, "warning": 1, "critical": 2}
    new = [e for e in events if event_key(e) not in seen and rank[e.severity] >= rank[sel_severity]]

    def v(check: str, bad: list, text) -> Verdict:
        return Verdict(node, check, "fail" if bad else "pass", text(bad) if bad else "ok")

    return [
        v("bmc-temperature", hot, lambda b: "; ".join(
            f"{s.name} {s.value:g}{s.unit} over critical {s.thresholds.get('uc', '?')}" for s in b)),
        v("bmc-psu", psu, lambda b: "; ".join(f"{s.name}: {', '.join(s.states) or s.status}" for s in b)),
        v("bmc-fan", fans, lambda b: "; ".join(f"{s.name} {s.value:g} {s.unit} under critical "
                                               f"{s.thresholds.get('lc', '?')}" for s in b))
        if power != "off" else Verdict(node, "bmc-fan", "pass", "host powered off: its fans stop with it"),
        v("bmc-sel", new, lambda b: f"{len(b)} new {sel_severity}+ event(s): "
                                    + "; ".join(f"{e.sensor}: {e.event}" for e in b[-2:])),
    ]


def _power(bmc) -> str:
    """The chassis power state, or "unknown" when the BMC does not answer that one question (its
    sensors and SEL were read: the node is still judged, as powered on)."""
    try:
        state = bmc.power_state()
    except SlurmadmError:
        return "unknown"
    return state if state in ("on", "off") else "unknown"


def run(site, fleet: Fleet, backend: SlurmBackend, store: Store, nodes: list[str], *, act: bool) -> dict:
    h = site.bmc.health
    rows = fleet.run(nodes, lambda c: (c.bmc.sensors(), c.bmc.sel(), _power(c.bmc)))
    run_id = uuid.uuid4().hex[:12]
    now = time.time()
    verdicts: list[Verdict] = []
    newest: dict[str, list[str]] = {}
    for r in rows:
        if not r.ok:
            verdicts.append(Verdict(r.node, "bmc-sel", "error", r.error))
            continue
        sensors, events, power = r.value
        raw = store.get_node_state(r.node, SEL_SEEN)
        seen = set(json.loads(raw)) if raw else None
        if seen is None:  # first run on this node: what is in the SEL already is history, not news
            seen = {event_key(e) for e in events}
        verdicts += judge(r.node, sensors, events, temp_globs=h.temperature_sensors, sel_severity=h.sel_severity,
                          seen=seen, power=power)
        newest[r.node] = [event_key(e) for e in events][-512:]
    with store.transaction() as db:
        db.executemany("INSERT INTO check_results (ts, run_id, node, context, check_id, status, severity, detail,"
                       " value, duration_ms) VALUES (?,?,?,?,?,?,?,?,?,?)",
                       [(now, run_id, v.node, CONTEXT, v.check_id, v.status, "critical", v.detail, None, 0.0)
                        for v in verdicts])
    actions = []
    everyone = backend.nodes() if act else []
    infos = {n.name: n for n in everyone}
    for node in nodes:
        mine = [v for v in verdicts if v.node == node]
        failed = [v for v in mine if v.status == "fail"]
        info = infos.get(node)
        if any(v.status == "error" for v in mine):
            continue
        if failed:
            if act:
                store.set_node_state(node, CLEAN, "0")
            actions.append(_drain(node, failed, info, everyone, site, backend, store, act))
        elif info is not None and is_ours(info) and reason_check_id(info.reason) in CHECKS:
            count = int(store.get_node_state(node, CLEAN) or 0) + 1
            store.set_node_state(node, CLEAN, str(count))
            if count >= site.health.resume_after_clean_runs and may_resume(info).act:
                backend.resume([node])
                store.audit("node.resume", node, f"{count} clean BMC health runs (was: {info.reason})")
                store.set_node_state(node, CLEAN, "0")
                actions.append({"node": node, "action": "resume", "why": info.reason})
        if act and node in newest:
            store.set_node_state(node, SEL_SEEN, json.dumps(newest[node]))
    return {"run_id": run_id, "verdicts": [v.__dict__ for v in verdicts], "actions": actions,
            "unreachable": [r.node for r in rows if not r.ok]}


def _drain(node: str, failed: list[Verdict], info: NodeInfo | None, everyone: list[NodeInfo], site, backend,
           store: Store, act: bool) -> dict:
    first = failed[0]
    more = f" (+{len(failed) - 1} more)" if len(failed) > 1 else ""
    reason = format_reason(first.check_id, first.detail + more, CONTEXT)
    if not act:
        return {"node": node, "action": "would drain", "why": reason}
    if info is None:
        return {"node": node, "action": "alert", "why": f"not known to Slurm: {reason}"}
    verdict = may_drain(info)
    if not verdict.act:
        return {"node": node, "action": "none", "why": verdict.why}
    why = breaker(info, everyone, site.health.drain_cap_fraction)
    if why:
        store.audit("health.alert", node, f"breaker: not draining ({reason}): {why}")
        return {"node": node, "action": "alert", "why": why}
    backend.drain([node], reason)
    store.audit("node.drain", node, reason, checks=[v.check_id for v in failed])
    return {"node": node, "action": "drain", "why": reason}
