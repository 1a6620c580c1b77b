"""What the `slurmadm bmc` commands show: their --json shapes, their table rows and their exit
codes, built from what ops/firmware/recover/health return. The CLI (slurmadm/cli/bmc.py) only
parses arguments and prints these.

A table cell is literal text (`str`, never markup), `(text, style)` for colour, or a list of
such parts (one cell in several styles); None is an empty cell.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from ..errors import EXIT_PROBLEMS, EXIT_UNREACHABLE
from ..hostlist import compress, fold, neutral
from .fanout import Row
from .ops import Step

RED, YELLOW, GREEN = "red", "yellow", "green"
UNREACHABLE = ("unreachable", RED)

Table = tuple  # (title, columns, rows) or (title, columns, rows, columns that wrap)


def code(rows: Iterable[Row], problems: bool = False) -> int:
    """3 when a BMC did not answer, else 1 when `problems`, else 0."""
    return EXIT_UNREACHABLE if any(not r.ok for r in rows) else EXIT_PROBLEMS if problems else 0


def unreachable(rows: Iterable[Row]) -> list[tuple[str, str]]:
    return [(r.node, r.error) for r in rows if not r.ok]


def errors_table(errors: list[tuple[str, str]]) -> Table | None:
    return ("unreachable", ["node", "error"], list(errors)) if errors else None


# ---------------------------------------------------------------------- power
def power_status_json(rows: list[Row]) -> list[dict]:
    return [{"node": r.node, "power": r.value if r.ok else None, "error": r.error or None, "seconds": r.seconds}
            for r in rows]


def power_status_table(rows: list[Row]) -> Table:
    """Nodes that agree as one row (fold.fold_rows); the nodes and power columns wrap."""
    from .fold import fold_rows

    return (None, ["nodes", "n", "power"],
            [(g.hostlist, str(g.count), g.key[1] if g.key[0] else [UNREACHABLE, f": {g.named(g.key[1])}"])
             for g in fold_rows(rows)], ["nodes", "power"])


def plan_code(steps: list[Step], failed: dict[str, str]) -> int:
    if failed or any(s.error for s in steps):
        return EXIT_UNREACHABLE
    if any(s.action == "refused" for s in steps):
        return EXIT_PROBLEMS
    return 0


def plan_json(steps: list[Step], *, dry_run: bool) -> dict:
    return {"dry_run": dry_run, "steps": [s.to_json() for s in steps]}


def plan_table(steps: list[Step], *, dry_run: bool) -> Table:
    rows = []
    for s in steps:
        what: Any = s.action if not s.error else UNREACHABLE
        if s.do and not dry_run and not s.error:
            what = (s.action, GREEN)
        elif s.action == "refused":
            what = ("refused", YELLOW)
        rows.append((s.node, s.power or "?", s.slurm, what, s.error or s.why))
    return ("plan (dry run)" if dry_run else None, ["node", "power", "slurm", "action", "why"], rows)


# ---------------------------------------------------------------------- sensors
def sensors_code(rows: list[Row]) -> int:
    return code(rows, any(s.alarm for r in rows if r.ok for s in r.value))


def sensors_json(rows: list[Row]) -> list[dict]:
    return [{"node": r.node, "sensors": [s.to_json() for s in r.value] if r.ok else None, "error": r.error or None}
            for r in rows]


def sensors_table(rows: list[Row]) -> Table:
    """One row per sensor and status that nodes share, in the order the first node lists its
    sensors: the nodes whose sensor is ok fold into one row that gives the range of their readings
    (`38-44 C`), an alarm keeps its exact reading (nodes fold only on the same one), so 128 nodes of
    one model are one row per sensor plus a row per alarm."""
    groups: dict[tuple, tuple[list[str], list[float]]] = {}  # key -> (nodes, readings to range)
    for r in rows:
        for s in (r.value if r.ok else []):
            th = " ".join(f"{k}={v:g}" for k, v in s.thresholds.items())
            ranged = s.status == "ok" and s.value is not None
            exact = "" if ranged else ", ".join(s.states) if s.value is None else f"{s.value:g} {s.unit}".strip()
            nodes, values = groups.setdefault((s.name, s.type, s.unit, exact, s.status, th), ([], []))
            nodes.append(r.node)
            if ranged:
                values.append(s.value)
    order = {name: i for i, name in enumerate(dict.fromkeys(k[0] for k in groups))}
    out = []
    for (name, type_, unit, exact, status, th), (nodes, values) in sorted(
            groups.items(), key=lambda kv: (order[kv[0][0]], kv[0][4] == "ok", -len(kv[1][0]), kv[1][0])):
        reading = exact
        if values:
            lo, hi = min(values), max(values)
            reading = (f"{lo:g}" if lo == hi else f"{lo:g}-{hi:g}") + (f" {unit}" if unit else "")
        cell = {"ok": "ok", "warning": ("warning", YELLOW)}.get(status, ("CRITICAL", RED))
        out.append((compress(nodes), str(len(nodes)), name, type_, reading, cell, th))
    return (None, ["nodes", "n", "sensor", "type", "reading", "status", "thresholds"], out, ["nodes"])


# ---------------------------------------------------------------------- SEL
def sel_clear_plan(rows: list[Row]) -> list[dict]:
    """`bmc sel --clear --dry-run`: how many events each BMC's clear would remove."""
    return [{"node": r.node, "would_clear": len(r.value) if r.ok else None, "error": r.error or None} for r in rows]


def sel_clear_plan_table(plan: list[dict]) -> Table:
    """Nodes whose clear would remove the same number of events as one row."""
    groups = fold((p["node"], f"clear {p['would_clear']} event(s)" if p["error"] is None
                      else f"unreachable: {neutral(p['error'], p['node'])}") for p in plan)
    return ("plan (dry run)", ["nodes", "n", "action"],
            [(g.hostlist, str(g.count), g.named(g.key)) for g in groups], ["nodes", "action"])


def sel_json(rows: list[Row], *, cleared: bool) -> list[dict]:
    return [{"node": r.node, "events": [e.to_json() for e in r.value] if r.ok else None,
             "cleared": cleared and r.ok, "error": r.error or None} for r in rows]


def sel_table(rows: list[Row], when: Callable[[float], str]) -> Table:
    out = []
    for r in rows:
        for e in (r.value if r.ok else []):
            sev = {"critical": ("critical", RED), "warning": ("warning", YELLOW)}.get(e.severity, "info")
            out.append((r.node, e.log, e.record_id, when(e.timestamp) if e.timestamp else "?", e.sensor, e.event,
                        sev))
    return (None, ["node", "log", "id", "when", "sensor", "event", "severity"], out)


# ---------------------------------------------------------------------- inventory
def inventory_json(rows: list[Row]) -> list[dict]:
    return [{"node": r.node, "inventory": r.value if r.ok else None,
             "error": r.error or "; ".join(r.value.get("errors", [])) or None} for r in rows]


def inventory_table(rows: list[Row]) -> Table:
    out = []
    for r in rows:
        if not r.ok:
            continue
        v = r.value
        fw = v.get("firmware", {})
        out.append((r.node, v.get("model", ""), v.get("serial", ""), v.get("bmc_firmware", ""),
                    v.get("bios_firmware", fw.get("BIOS", "")), len(fw)))
    return (None, ["node", "model", "serial", "BMC", "BIOS", "firmware items"], out)


# ---------------------------------------------------------------------- boot device
def _device(device: str, persist: bool) -> str:
    return f"{device}{' (persistent)' if persist else ''}"


def bootdev_status_json(data: list[dict], device: str, *, dry_run: bool) -> Any:
    return {"dry_run": True, "plan": data} if dry_run and device != "status" else data


def bootdev_status_table(data: list[dict], device: str, persist: bool) -> Table:
    """Nodes with the same boot device (and the same planned action) as one row."""
    status = device == "status"
    cols = ["nodes", "n", "bootdev", "persistent"] + ([] if status else ["action"])
    groups = fold((d["node"], (d["bootdev"] or "", str(d["persistent"]),
                                  *([] if status else [f"set {_device(device, persist)}" if d.get("would_change")
                                                       else "nothing"]))) for d in data)
    out = [(g.hostlist, str(g.count), g.key[0] or UNREACHABLE, *g.key[1:]) for g in groups]
    return (None if status else "plan (dry run)", cols, out, ["nodes"])


def bootdev_set_json(rows: list[Row], changed: list[str]) -> list[dict]:
    return [{"node": r.node, "changed": r.node in changed, "was": r.value["was"] if r.ok else None,
             "error": r.error or None} for r in rows]


def bootdev_set_table(rows: list[Row], changed: list[str], device: str, persist: bool) -> Table:
    return (None, ["node", "was", "now"],
            [(r.node, r.value["was"], _device(device, persist) if r.node in changed else "unchanged")
             for r in rows if r.ok])


# ---------------------------------------------------------------------- recover
def recover_json(cands, report, *, dry_run: bool) -> dict:
    return {"dry_run": dry_run, **(report.to_json() if report else {"candidates": [c.__dict__ for c in cands]})}


def recover_table(cands, report, *, dry_run: bool) -> Table:
    rows = []
    for c in cands:
        result: Any = ""
        if report is not None:
            result = (("recovered", GREEN) if c.node in report.recovered else
                      (report.failed[c.node], RED) if c.node in report.failed else "")
        rows.append((c.node, c.action, c.why, result))
    return ("plan (dry run)" if dry_run else None, ["node", "action", "why", "result"], rows)


def recover_code(report) -> int:
    unreachable_ = any("unreachable" in why or "did not answer" in why for why in report.failed.values())
    return EXIT_UNREACHABLE if unreachable_ else EXIT_PROBLEMS if report.failed else 0


# ---------------------------------------------------------------------- firmware
def firmware_status_json(baseline: dict, rows: list[Row], drift) -> dict:
    return {"baseline": baseline,
            "nodes": [{"node": r.node, "firmware": r.value if r.ok else None, "error": r.error or None} for r in rows],
            "drift": [{"node": d.node, "component": d.component, "have": d.have, "want": d.want}
                      for d in drift if not d.ok]}


FIRMWARE_STATUS = {"ok": "ok", "missing": ("missing", RED), "drift": ("drift", YELLOW)}


def firmware_status_table(drift) -> Table:
    """One row per component and version that nodes share: 128 nodes on the baseline are one row
    per component; the components in baseline order, within one the drifting nodes first."""
    order = {c: i for i, c in enumerate(dict.fromkeys(d.component for d in drift))}
    groups = sorted(fold((d.node, (d.component, d.have or "-", d.want,
                                   "ok" if d.ok else "missing" if d.have is None else "drift")) for d in drift),
                    key=lambda g: (order[g.key[0]], g.key[3] == "ok", -g.count, g.hostlist))
    return (None, ["nodes", "n", "component", "have", "baseline", "status"],
            [(g.hostlist, str(g.count), *g.key[:3], FIRMWARE_STATUS[g.key[3]]) for g in groups], ["nodes"])


def firmware_status_code(rows: list[Row], drift) -> int:
    return code(rows, any(not d.ok for d in drift))


def firmware_plan_table(plan: list[dict], *, dry_run: bool) -> Table:
    return ("plan (dry run)" if dry_run else "nothing to update", ["node", "action", "why"],
            [(p["node"], p["action"], p["why"]) for p in plan])


def firmware_plan_code(plan: list[dict], out: dict | None = None) -> int:
    if any(p["action"] == "unreachable" for p in plan):
        return EXIT_UNREACHABLE
    failed = out is not None and bool(out["failed"] or out["stopped"])
    return EXIT_PROBLEMS if failed or any(p["action"] == "refused" for p in plan) else 0


def firmware_update_table(plan: list[dict], out: dict) -> Table:
    rows = [(n, r.get("before", ""), r.get("after", ""), r.get("task", ""),
             ("ok", GREEN) if r["ok"] else [("failed", RED), f" {r.get('error') or '; '.join(r.get('messages', []))}"])
            for n, r in out["results"].items()]
    rows += [(p["node"], "", "", "", [(p["action"], YELLOW), f" {p['why']}"])
             for p in plan if p["action"] in ("refused", "unreachable")]
    return (None, ["node", "before", "after", "task", "result"], rows)


# ---------------------------------------------------------------------- BMC health
HEALTH_STYLE = {"pass": GREEN, "fail": RED, "error": "magenta"}


def health_table(out: dict) -> Table:
    return (None, ["node", "check", "status", "detail"],
            [(v["node"], v["check_id"], (v["status"], HEALTH_STYLE[v["status"]]), v["detail"])
             for v in out["verdicts"]])


def health_code(out: dict) -> int:
    failed = any(v["status"] == "fail" for v in out["verdicts"])
    return EXIT_UNREACHABLE if out["unreachable"] else EXIT_PROBLEMS if failed else 0
