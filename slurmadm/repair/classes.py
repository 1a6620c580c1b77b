"""The class of a verdict, and the part it is about: data with sources (`data/classes.toml`).

A verdict is what a source recorded when it drained a node: a check id and its detail text
(health's `xid` check: "GPU2 XID 79 ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS (RESTART_BM)").
`classify()` turns one into `Fault`s, one per part it names: health's detail joins the findings
of one check with "; ", and an XID finding names NVIDIA's immediate action in parentheses, so the
class follows the catalog (application-class XIDs never open an incident).

Imports only the standard library and the record helper (the repair package's low floor).
"""

from __future__ import annotations

import fnmatch
import re
from dataclasses import replace
import tomllib
from functools import cache
from importlib import resources

from ..record import record

PART_KINDS = ("gpu", "hca", "board", "psu", "fan", "node", "leaf")

# "GPU2 XID 79 NAME (ACTION)" / "PCI 0000:1b:00.0 XID 45 ..." as health's xid check writes them
XID_RE = re.compile(r"(?:GPU(?P<gpu>\d+)|PCI (?P<pci>[0-9A-Fa-f:.]+))(?: \(MIG [^)]*\))? XID (?P<xid>\d+)"
                    r"(?: x\d+)? (?P<name>.*?) \((?P<action>[A-Z0-9_/]+)\)")
# a bare "XID 79" anywhere (an alert's summary)
BARE_XID_RE = re.compile(r"\b[Xx][Ii][Dd][ =]?(\d{1,3})\b")
# health's xid check naming NVML's own recovery verdict: "GPU3 NVML recovery action: Reset"
NVML_RECOVERY_RE = re.compile(r"\bNVML recovery action\b")
GPU_RE = re.compile(r"\bGPU ?(\d+)\b")
HCA_RE = re.compile(r"\b(mlx\d_\d+|hfi\d_\d+|ib[a-z]*\d+)(?:(?::|/| port )(\d+))?")
SENSOR_RE = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9 _./#-]*?)(?::|(?i: is | reads | status| failed| critical))")


@record(frozen=True)
class ClassInfo:
    name: str
    part: str
    incident: bool
    source: str
    burnin_closes: bool = False  # a later burn-in pass closes an incident the ladder has not acted on


@record(frozen=True)
class CheckRule:
    id: str  # glob on the check id
    cls: str
    match: str
    source: str


@record(frozen=True)
class Fault:
    """One part a verdict blames, with its class and the evidence line."""

    cls: str
    part_kind: str
    slot: str  # GPU index, HCA "mlx5_0/1", PSU/fan sensor, "" for the node
    pci: str
    xid: int | None
    line: str  # the finding's text (evidence)
    check_id: str

    @property
    def opens_incident(self) -> bool:
        return classes()[self.cls].incident


@cache
def _data() -> dict:
    with resources.files(__package__).joinpath("data/classes.toml").open("rb") as fh:
        return tomllib.load(fh)


@cache
def classes() -> dict[str, ClassInfo]:
    return {name: ClassInfo(name, v["part"], bool(v["incident"]), v["source"], bool(v.get("burnin_closes", False)))
            for name, v in _data()["class"].items()}


@cache
def action_classes() -> dict[str, str]:
    return dict(_data()["actions"])


@cache
def xid_classes() -> dict[int, str]:
    return {int(k): v["class"] for k, v in _data()["xids"].items()}


@cache
def check_rules() -> list[CheckRule]:
    return [CheckRule(r["id"], r["class"], r.get("match", ""), r["source"]) for r in _data()["checks"]]


def incident_classes() -> list[str]:
    """Classes that open incidents (and so have a ladder)."""
    return [c.name for c in classes().values() if c.incident]


def xid_class(xid: int, action: str, text: str = "") -> str:
    """An XID's class: the per-XID override, else NVIDIA's immediate action's class. Xid 154
    (NVML's recovery action in the text) is Reboot -> RESTART_BM, else RESET_GPU."""
    if xid == 154:
        return "RESTART_BM" if re.search(r"(?i)reboot", text) else "RESET_GPU"
    by_action = action_classes().get(action, "APPLICATION")
    if by_action == "APPLICATION":
        return by_action
    return xid_classes().get(xid, by_action)


def check_class(check_id: str, detail: str) -> str | None:
    for rule in check_rules():
        if fnmatch.fnmatchcase(check_id, rule.id) and (not rule.match or re.search(rule.match, detail)):
            return rule.cls
    return None


def _slot(kind: str, text: str) -> str:
    if kind == "gpu":
        m = GPU_RE.search(text)
        return m.group(1) if m else ""
    if kind == "hca":
        m = HCA_RE.search(text)
        return (m.group(1) + (f"/{m.group(2)}" if m.group(2) else "")) if m else ""
    if kind in ("psu", "fan"):
        m = SENSOR_RE.match(text)
        return m.group(1).strip() if m else text.strip()[:40]
    return ""


# burn-in's health test names each failed check of the suite it ran: "<check id>: <detail>",
# joined with "; " (burnin/node.py parse_health)
BURNIN_HEALTH = "burnin-health"
CHECK_HEAD_RE = re.compile(r"(?P<id>[a-z][a-z0-9-]*): (?P<rest>.+)", re.S)


def health_checks_in(detail: str) -> list[tuple[str, str]]:
    """(check id, detail) of each health check a burn-in health failure names. A finding that does
    not start with a check id this module knows continues the check before it (a check's own
    findings are joined with "; " too)."""
    groups: list[tuple[str, list[str]]] = []
    for piece in findings(detail):
        m = CHECK_HEAD_RE.fullmatch(piece)
        if m and (m.group("id") == "xid" or check_class(m.group("id"), m.group("rest")) is not None):
            groups.append((m.group("id"), [m.group("rest")]))
        elif groups:
            groups[-1][1].append(piece)
    return [(cid, "; ".join(parts)) for cid, parts in groups]


def classify(check_id: str, detail: str) -> list[Fault]:
    """The faults in one verdict (check id + detail), one per part and class. Application-class
    and auto-resume classes are included (their `opens_incident` is False): the caller drops
    them. An unknown check id gives no fault. A burn-in health failure is classed by the checks
    it names (an ECC error found under burn-in load is that GPU's ECC incident), and is a
    node-wide burn-in fault only where none of them is known."""
    if check_id == BURNIN_HEALTH:
        inner = [replace(f, check_id=check_id) for cid, text in health_checks_in(detail) for f in classify(cid, text)]
        if inner:
            return _unique(inner)
    out: list[Fault] = []
    pieces = findings(detail)
    if check_id == "xid" or check_id.startswith("alert-GpuXid"):
        for piece in pieces:
            m = XID_RE.search(piece)
            if m:
                xid = int(m.group("xid"))
                cls = xid_class(xid, m.group("action"), piece)
                out.append(Fault(cls, classes()[cls].part, m.group("gpu") or "", m.group("pci") or "", xid,
                                 piece, check_id))
                continue
            bare = BARE_XID_RE.search(piece)
            if bare:
                from_catalog = _catalog_action(int(bare.group(1)))
                cls = xid_class(int(bare.group(1)), from_catalog, piece)
                out.append(Fault(cls, classes()[cls].part, _slot("gpu", piece), "", int(bare.group(1)), piece,
                                 check_id))
            elif check_id == "xid" and NVML_RECOVERY_RE.search(piece):
                # "GPU3 NVML recovery action: Reset" and the like: NVML's own verdict [nvml]
                cls = "RESTART_BM" if re.search(r"(?i)reboot", piece) else "RESET_GPU"
                out.append(Fault(cls, "gpu", _slot("gpu", piece), "", None, piece, check_id))
        if out or check_id == "xid":
            return _unique(out)
    cls = check_class(check_id, detail)
    if cls is None:
        return []
    info = classes()[cls]
    if info.part == "gpu":
        slots = {s for s in (_slot("gpu", p) for p in pieces)}
        if len(pieces) > 1 and len(slots) > 1:
            for piece in pieces:
                c = check_class(check_id, piece) or cls
                out.append(Fault(c, classes()[c].part, _slot("gpu", piece), "", None, piece, check_id))
            return _unique(out)
    return [Fault(cls, info.part, _slot(info.part, detail), "", None, detail, check_id)]


def findings(detail: str) -> list[str]:
    """A check's detail cut into its findings at `; ` outside brackets: health joins findings
    with `; `, and a finding's own note may hold one (`[logged at an unknown time: ... (not this
    boot); treated as recent]`, tests/fixtures/health/xid-raw-dmesg.log)."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(detail):
        if ch in "[(":
            depth += 1
        elif ch in ")]":
            depth = max(0, depth - 1)
        elif ch == ";" and depth == 0 and detail.startswith("; ", i):
            out.append(detail[start:i])
            start = i + 2
    out.append(detail[start:])
    return [p.strip() for p in out if p.strip()] or [detail]


def _unique(faults: list[Fault]) -> list[Fault]:
    seen: dict[tuple[str, str, str], Fault] = {}
    for f in faults:
        seen.setdefault((f.cls, f.slot, f.pci), f)
    return list(seen.values())


@cache
def _catalog() -> dict[int, str]:
    """xid -> immediate action from health's copy of NVIDIA's catalog (read as a data file:
    the repair package does not import health)."""
    import csv
    import io
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "health" / "data" / "xid_catalog.csv").read_text()
    rows = csv.DictReader(io.StringIO("\n".join(line for line in text.splitlines() if not line.startswith("#"))))
    return {int(r["xid"]): r["immediate"] for r in rows}


def _catalog_action(xid: int) -> str:
    return _catalog().get(xid, "UNKNOWN") or "SEE_CATALOG"
