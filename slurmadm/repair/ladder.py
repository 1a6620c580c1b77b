"""The ladder: per class, the steps that carry an incident back to service, as data with its
sources (`data/ladder.toml`, overridden by a site's `[repair]`), and the pure decision
`next_step(incident, history, settings, now) -> Step` that `repair run` carries out.

How an incident moves: it starts on the rung its part's earlier incidents of the same class
within the class's window give (`start_rung`: a second RESET_GPU within 7 days starts on the
reboot rung). It takes the rung's steps in order; each step's outcome is recorded by
`incidents.advance` (running, ok, failed). A failed step moves to the next rung's first step (past
the last rung: RMA). A rung's `rma` step holds the node drained as an RMA candidate. A node or GPU
serial with too many incidents in the lemon window, or too many failed qualifications, is a lemon:
held drained, never resumed automatically.
"""

from __future__ import annotations

import tomllib
from functools import cache
from importlib import resources
from typing import Any

from ..record import record
from ..slurm.ownership import format_reason
from . import classes
from .model import STEP_STATE, Incident, Step

DAY = 86400.0
CHECK_ID = "repair"  # the drain reasons repair owns: `slurmadm: repair: <step>: <detail> [repair]`
CONTEXT = "repair"


@record(frozen=True)
class ClassLadder:
    name: str
    window_days: int
    rungs: tuple[tuple[str, ...], ...]
    source: str
    overridden: bool = False


@record(frozen=True)
class Settings:
    ladders: dict[str, ClassLadder]
    lemon_incidents: int = 3
    lemon_window_days: int = 28
    lemon_failed_qualifications: int = 2
    lemon_source: str = ""

    def ladder(self, cls: str) -> ClassLadder:
        if cls in self.ladders:
            return self.ladders[cls]
        return ClassLadder(cls, 28, (("rma",),), "no ladder for this class: held for a person")


@cache
def _data() -> dict[str, Any]:
    with resources.files(__package__).joinpath("data/ladder.toml").open("rb") as fh:
        return tomllib.load(fh)


@cache
def defaults() -> Settings:
    d = _data()
    ladders = {name: ClassLadder(name, int(v["window_days"]), tuple(tuple(r) for r in v["rungs"]), v["source"])
               for name, v in d["class"].items()}
    lemon = d["lemon"]
    return Settings(ladders, int(lemon["incidents"]), int(lemon["window_days"]), int(lemon["failed_qualifications"]),
                    lemon["source"])


def settings(section=None) -> Settings:
    """The defaults with a site's `[repair]` section (site/repair.py RepairSection) over them."""
    base = defaults()
    if section is None:
        return base
    ladders = dict(base.ladders)
    for name, over in section.classes.items():
        old = ladders.get(name) or ClassLadder(name, 28, (("rma",),), "")
        ladders[name] = ClassLadder(name, over.window_days or old.window_days,
                                    tuple(tuple(r) for r in over.rungs) if over.rungs else old.rungs,
                                    "site.toml [repair.classes." + name + "]", True)
    return Settings(ladders, section.lemon_incidents, section.lemon_window_days,
                    section.lemon_failed_qualifications, base.lemon_source)


def rows(s: Settings) -> list[dict[str, Any]]:
    """The ladder as `repair ladder` shows it: one row per incident class."""
    info = classes.classes()
    out = []
    for name in classes.incident_classes():
        lad = s.ladder(name)
        out.append({"class": name, "part": info[name].part, "window_days": lad.window_days,
                    "rungs": [list(r) for r in lad.rungs], "source": lad.source,
                    "class_source": info[name].source, "site": lad.overridden})
    return out


def auto_resume_classes() -> list[str]:
    return [c.name for c in classes.classes().values() if not c.incident]


# ------------------------------------------------------------------------------------ decisions

def start_rung(cls: str, prior: list[Incident], opened_ts: float, s: Settings) -> int:
    """The rung a new incident starts on: how many incidents of the same part and class were
    opened within the class's window before it (capped at the last rung)."""
    lad = s.ladder(cls)
    since = opened_ts - lad.window_days * DAY
    n = sum(1 for i in prior if i.cls == cls and since <= i.opened_ts < opened_ts)
    return min(n, len(lad.rungs) - 1)


def _since_replacement(inc: Incident) -> list[dict]:
    """The incident's evidence after its part was last replaced under an RMA (all of it when it
    was not): what came before was the old part's."""
    cut = max((k for k, e in enumerate(inc.evidence) if e.get("new_part") is not None), default=-1)
    return inc.evidence[cut + 1:]


def cleared_at(node: str, items: list[Incident]) -> float:
    """When an admin last cleared `node` (`repair clear`: its incidents closed at step `clear`),
    0 when never: what failed on the node before it no longer makes it a lemon."""
    return max((float(i.closed_ts) for i in items if i.node == node and i.step == "clear" and i.closed_ts),
               default=0.0)


def last_cleared(node: str, items: list[Incident]) -> set[str]:
    """The classes of the incidents an admin's last `repair clear` of `node` closed (none when
    never cleared): what the part replaced was, for the qualification that follows."""
    when = cleared_at(node, items)
    return {i.cls for i in items if when and i.node == node and i.step == "clear" and i.closed_ts == when}


def failed_qualifications(inc: Incident, history: list[Incident]) -> int:
    """Failed qualification steps recorded in the evidence of this incident and its history (any
    window, `[lemon] failed_qualifications`), since each one's part was replaced (if it was) and
    since the node was last cleared by an admin."""
    cut = cleared_at(inc.node, [inc, *history])
    return sum(1 for i in [inc, *history] for e in _since_replacement(i)
               if e.get("kind") == "step" and e.get("step") == "qualify" and e.get("outcome") == "failed"
               and float(e.get("ts") or 0) >= cut)


def faults(items, *, keep: str = "", node_rule: bool = False) -> int:
    """What the lemon rule counts: faults, not incidents. One signal opens an incident per class it
    shows (a hung GPU fails a dozen checks at once: GPU_LOST, ECC, NVLINK, ...), all at that
    signal's time; counted one by one, a single hung GPU made its node a lemon (found by the fleet
    replay, issue 37). For a node (`node_rule`), an incident whose part went back to the vendor and
    was replaced was that part's, not the node's (`keep`: an incident id counted regardless)."""
    return len({i.opened_ts for i in items
                if not node_rule or i.id == keep or len(_since_replacement(i)) == len(i.evidence)})


def lemon_why(inc: Incident, history: list[Incident], s: Settings, now: float) -> str:
    """'' unless the incident's node or GPU serial is a lemon; else why."""
    since = now - s.lemon_window_days * DAY
    everyone = [i for i in {i.id: i for i in [*history, inc]}.values() if i.opened_ts >= since]
    cut = cleared_at(inc.node, [*history, inc])  # an admin's clear starts the node's count again
    on_node = faults([i for i in everyone if i.node == inc.node and (i.id == inc.id or i.opened_ts >= cut)],
                     keep=inc.id, node_rule=True)
    if on_node >= s.lemon_incidents:
        return f"{on_node} incidents on {inc.node} in {s.lemon_window_days} days"
    if inc.part_kind == "gpu" and inc.serial:
        on_part = faults([i for i in everyone if i.serial == inc.serial or i.part_key == inc.part_key])
        if on_part >= s.lemon_incidents:
            return f"{on_part} incidents on GPU serial {inc.serial} in {s.lemon_window_days} days"
    failed = failed_qualifications(inc, [i for i in history if i.node == inc.node])
    if failed >= s.lemon_failed_qualifications:
        return f"{failed} failed qualifications on {inc.node}"
    return ""


def describe(inc: Incident) -> str:
    """The part and class in a few words, for reasons: `GPU2 (serial 1655...) RESET_GPU`."""
    if inc.part_kind == "gpu":
        who = f"GPU{inc.slot}" if inc.slot else "GPU"
        if inc.serial:
            who += f" serial {inc.serial}"
    elif inc.part_kind == "node":
        who = "node"
    else:
        who = f"{inc.part_kind} {inc.slot or inc.part_key}"
    return f"{who} {inc.cls}"


def reason(step: str, detail: str) -> str:
    return format_reason(CHECK_ID, f"{step}: {detail}", CONTEXT)


def _step(action: str, inc: Incident, why: str, rung: int) -> Step:
    detail = f"{describe(inc)} ({why})"
    return Step(action, STEP_STATE.get(action, inc.state), why,
                reason(action, detail) if action in ("reset", "reboot", "qualify", "rma", "lemon") else "", rung)


def next_step(inc: Incident, history: list[Incident], s: Settings, now: float) -> Step:
    """What to do next with `inc`, given the other incidents of its node and part (`history`)."""
    if inc.state == "closed":
        return Step("none", "closed", "closed", rung=inc.rung)
    if inc.state == "lemon":
        return Step("none", "lemon", "a lemon: held drained until `repair clear`", rung=inc.rung)
    if inc.state == "rma":
        return Step("none", "rma", "an RMA candidate: held drained until the part is replaced or `repair clear`",
                    rung=inc.rung)
    lad = s.ladder(inc.cls)
    rung = min(max(inc.rung, 0), len(lad.rungs) - 1)
    plan = lad.rungs[rung]
    if inc.outcome == "running":
        return Step("wait", inc.state, f"{inc.step} still running", rung=rung)
    if not inc.step:
        nxt, why = plan[0], f"rung {rung + 1} of {len(lad.rungs)}: {' -> '.join(plan)}"
    elif inc.outcome == "failed":
        if rung + 1 < len(lad.rungs):
            rung += 1
            nxt, why = lad.rungs[rung][0], f"{inc.step} failed: rung {rung + 1} of {len(lad.rungs)}"
        else:
            nxt, why = "rma", f"{inc.step} failed on the last rung"
    elif inc.step in plan:
        i = plan.index(inc.step)
        if i + 1 >= len(plan):
            return Step("none", inc.state, f"{inc.step} done: the rung is finished", rung=rung)
        nxt, why = plan[i + 1], f"{inc.step} done"
    else:  # a step the ladder no longer has (the site changed it): start the rung over
        nxt, why = plan[0], f"rung {rung + 1} restarted ({inc.step} is not on it)"
    if nxt == "rma":
        if rung > 0 and lad.rungs[rung] == ("rma",):
            why = f"{why}; {rung + 1} {inc.cls} incidents within {lad.window_days} days" if inc.step == "" else why
        return _step("rma", inc, why, rung)
    lemon = lemon_why(inc, history, s, now)
    if lemon:
        return _step("lemon", inc, lemon, rung)
    return _step(nxt, inc, why, rung)
