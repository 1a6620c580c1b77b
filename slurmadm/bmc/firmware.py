"""`slurmadm bmc firmware`: every node's firmware against the site's `[bmc.firmware]` baseline,
and Redfish updates in waves.

Update rules (the fleet rollout rules: `software.canary_nodes` first, then waves of
`software.wave_fraction` of the nodes, stopping when more than `software.max_failed_fraction`
of them failed): only on drained, idle nodes unless --force; a node already at the baseline
version is skipped; each node's update task is followed to the end and the version re-read; one
audit event per node.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import UsageError
from ..slurm.model import NodeInfo
from ..store import Store
from .fanout import Conn, Fleet, Row
from .ops import busy


@dataclass
class Drift:
    node: str
    component: str
    have: str | None
    want: str

    @property
    def ok(self) -> bool:
        return self.have == self.want


def status(fleet: Fleet, nodes: list[str]) -> tuple[list[Row], list[Drift]]:
    baseline = fleet.site.bmc.firmware
    rows = fleet.run(nodes, lambda c: c.redfish.firmware())
    drift = []
    for r in rows:
        if r.ok:
            for comp, want in sorted(baseline.items()):
                drift.append(Drift(r.node, comp, r.value.get(comp), want))
    return rows, drift


def plan_update(nodes: list[str], current: dict[str, Row], states: dict[str, NodeInfo], component: str, *,
                version: str | None, force: bool, drain: bool) -> list[dict]:
    """What `bmc firmware update` does on each node, from its firmware as read (`current`) and
    its Slurm state: update, skip (already at --version), refused (not drained and idle, no
    such component) or unreachable. With --drain a node that may be drained is updated after
    its jobs end ("drain": it must be drained first, "wait": wait for its jobs)."""
    from .ops import safety

    plan = []
    for n in nodes:
        r = current[n]
        if not r.ok:
            plan.append({"node": n, "action": "unreachable", "why": r.error})
        elif component not in r.value:
            plan.append({"node": n, "action": "refused", "why": f"no component {component!r} on this BMC"})
        elif version is not None and r.value[component] == version:
            plan.append({"node": n, "action": "skip", "why": f"already at {version}"})
        elif (why := eligibility(states.get(n), force=force)):
            may, must_drain, how = (safety(n, states[n], disruptive=True, force=False, drain=True)
                                    if drain and n in states else (False, False, why))
            if may:
                plan.append({"node": n, "action": "update", "why": f"{how}; {r.value[component]} -> image",
                             "drain": must_drain, "wait": True})
            else:
                plan.append({"node": n, "action": "refused", "why": how})
        else:
            plan.append({"node": n, "action": "update", "why": f"{r.value[component]} -> image"})
    return plan


def waves(nodes: list[str], canary: int, fraction: float) -> list[list[str]]:
    """Canary first, then waves of ceil(fraction x all) nodes."""
    if not nodes:
        return []
    out = [nodes[:canary]] if canary > 0 else []
    rest = nodes[canary:] if canary > 0 else list(nodes)
    size = max(1, math.ceil(fraction * len(nodes)))
    out += [rest[i:i + size] for i in range(0, len(rest), size)]
    return [w for w in out if w]


def budget(total: int, max_failed_fraction: float) -> int:
    """How many nodes may fail before the rollout stops."""
    return math.floor(max_failed_fraction * total + 1e-9)


def eligibility(info: NodeInfo | None, *, force: bool) -> str:
    """'' when a node may be updated now, else why not."""
    if force:
        return ""
    if info is None:
        return "not known to Slurm"
    if not info.drained and info.state != "DOWN":
        return f"not drained ({info.state_text}): drain it first, or --drain or --force"
    if busy(info):
        return f"still running jobs ({info.state_text})"
    return ""


def update_one(conn: Conn, component: str, image_url: str, image: bytes | None, task_timeout_s: float,
               version: str | None = None, sleep: Callable[[float], None] = time.sleep) -> dict:
    before = conn.redfish.firmware().get(component)
    if before is None:
        raise UsageError(f"{conn.node}: the BMC has no firmware component {component!r}")
    task = conn.redfish.update_firmware(component, image_url, image=image)
    deadline = time.monotonic() + task_timeout_s
    while not task.done and time.monotonic() < deadline:
        sleep(1.0)
        task = conn.redfish.task(task.uri)
    after = conn.redfish.firmware().get(component)
    return {"before": before, "after": after, "task": task.state, "messages": list(task.messages),
            "ok": task.ok and after is not None and (after == version if version else after != before)}


def rollout(fleet: Fleet, nodes: list[str], component: str, image_url: str, image: bytes | None, store: Store,
            reason: str, *, task_timeout_s: float, progress: Callable[[str], None], version: str | None = None) -> dict:
    sw = fleet.site.software
    allowed = budget(len(nodes), sw.max_failed_fraction)
    results: dict[str, dict] = {}
    failed = 0
    stopped = ""
    for i, wave in enumerate(waves(nodes, sw.canary_nodes, sw.wave_fraction)):
        progress(f"wave {i + 1}: {len(wave)} node(s)")
        rows = fleet.run(wave, lambda c: update_one(c, component, image_url, image, task_timeout_s, version),
                         deadline_s=fleet.default_deadline + task_timeout_s + 30)
        events = []
        for r in rows:
            res = r.value if r.ok else {"ok": False, "error": r.error}
            results[r.node] = res
            if not res["ok"]:
                failed += 1
            events.append(("bmc.firmware.update", r.node, reason,
                           {"component": component, "image": image_url, **res}))
        store.audit_many(events)
        if failed > allowed:
            stopped = f"stopped after wave {i + 1}: {failed} failed, budget {allowed}"
            break
    return {"results": results, "failed": failed, "budget": allowed, "stopped": stopped,
            "not_started": [n for n in nodes if n not in results]}


def prepare_update(fleet: Fleet, backend, nodes: list[str], component: str, *, version: str | None, force: bool,
                   drain: bool) -> tuple[list[dict], list[str], list[list[str]]]:
    """`bmc firmware update`'s plan from Slurm's view and each BMC's firmware: (plan, the nodes
    to update, their waves)."""
    from .ops import slurm_view

    states = slurm_view(backend, nodes)
    current = {r.node: r for r in fleet.run(nodes, lambda c: c.redfish.firmware())}
    plan = plan_update(nodes, current, states, component, version=version, force=force, drain=drain)
    todo = [p["node"] for p in plan if p["action"] == "update"]
    sw = fleet.site.software
    return plan, todo, waves(todo, sw.canary_nodes, sw.wave_fraction)


def update(fleet: Fleet, backend, plan: list[dict], todo: list[str], component: str, image_url: str, *,
           push: bool, store: Store, reason: str, task_timeout_s: float, progress: Callable[[str], None],
           version: str | None = None) -> dict:
    """The update itself: nodes that must be drained first (--drain) are drained and waited for
    (bmc.drain_timeout_s; those still busy are refused in `plan`, left drained), then the
    rollout in waves. With `push` the image is read here and pushed to the BMCs."""
    from .ops import Step, drain_and_wait
    from .redfish import _fetch

    image = _fetch(image_url) if push else None
    waiting = [Step(p["node"], "firmware update", True, "" if p["drain"] else "drained; waiting for jobs",
                    drain=p["drain"]) for p in plan if p.get("wait")]
    if waiting:
        stuck = drain_and_wait(backend, waiting, "bmc-firmware-update", reason, fleet.site.bmc.drain_timeout_s,
                               progress)
        store.audit_many([("bmc.drain", s.node, reason, {"for": f"firmware update {component}"})
                          for s in waiting if s.drain])
        for p in plan:
            if p["node"] in stuck:
                p.update(action="refused", why=stuck[p["node"]])
        todo = [n for n in todo if n not in stuck]
    return rollout(fleet, todo, component, image_url, image, store, reason, task_timeout_s=task_timeout_s,
                   progress=progress, version=version)
