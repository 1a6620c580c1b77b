"""The incident model (issue 34): what the store's `incidents` rows are, as records.

Other capabilities (repair run, parts/RMA, the reliability report) code against these. Imports
only the record helper: the repair package's low floor sits below health, bmc and burnin.
"""

from __future__ import annotations

import json
from dataclasses import field
from typing import Any

from ..record import record

STATES = ("open", "resetting", "rebooting", "qualifying", "rma", "lemon", "closed")
ACTIVE = ("open", "resetting", "rebooting", "qualifying")  # the ladder still moves these
HELD = ("rma", "lemon")  # stay drained until a person acts (`repair clear`, the RMA case)
STEPS = ("reset", "reboot", "qualify", "resume", "rma", "lemon", "wait", "none")
LADDER_STEPS = ("reset", "reboot", "qualify", "resume", "rma")  # what a site's ladder may name
OUTCOMES = ("", "running", "ok", "failed")
# the state an incident enters when a step is taken
STEP_STATE = {"reset": "resetting", "reboot": "rebooting", "qualify": "qualifying", "resume": "closed",
              "rma": "rma", "lemon": "lemon"}


@record
class Incident:
    """One fault of one part on one node, from its first signal to its end.

    `part_key`: GPU serial, else its UUID, else "slot:<index>"; HCA "<device>/<port>" (its GUID
    when the node recorded one: "guid:port"); board: the BMC FRU serial, else the node; PSU/fan:
    the SEL sensor name; leaf: the switch name. `rung`: the ladder row this incident is on (0:
    the first); `step`/`outcome`: the last step taken and how it went ('' = none yet, running,
    ok, failed). `evidence`: a list of dicts (XID lines, counters, SEL entries, check details,
    qualification results), oldest first."""

    id: str
    node: str
    part_kind: str
    part_key: str
    slot: str
    cls: str
    state: str = "open"
    step: str = ""
    outcome: str = ""
    rung: int = 0
    opened_ts: float = 0.0
    updated_ts: float = 0.0
    closed_ts: float | None = None
    count: int = 1
    evidence: list[dict[str, Any]] = field(default_factory=list)
    source: str = ""
    serial: str = ""
    uuid: str = ""
    why: str = ""  # the last decision's reason

    @property
    def active(self) -> bool:
        return self.state in ACTIVE

    @property
    def is_open(self) -> bool:
        return self.state != "closed"

    def to_json(self) -> dict[str, Any]:
        return {"id": self.id, "node": self.node, "part_kind": self.part_kind, "part_key": self.part_key,
                "slot": self.slot, "class": self.cls, "state": self.state, "step": self.step,
                "outcome": self.outcome, "rung": self.rung, "opened_ts": self.opened_ts,
                "updated_ts": self.updated_ts, "closed_ts": self.closed_ts, "count": self.count,
                "serial": self.serial, "uuid": self.uuid, "source": self.source, "why": self.why,
                "evidence": self.evidence}

    @classmethod
    def from_row(cls, row: dict[str, Any]) -> Incident:
        try:
            evidence = json.loads(row.get("evidence") or "[]")
        except ValueError:
            evidence = []
        return cls(id=str(row["id"]), node=str(row["node"]), part_kind=str(row["part_kind"]),
                   part_key=str(row["part_key"]), slot=str(row["slot"] or ""), cls=str(row["class"]),
                   state=str(row["state"]), step=str(row["step"] or ""), outcome=str(row["outcome"] or ""),
                   rung=int(row["rung"] or 0), opened_ts=float(row["opened_ts"]), updated_ts=float(row["updated_ts"]),
                   closed_ts=None if row.get("closed_ts") is None else float(row["closed_ts"]),
                   count=int(row["count"] or 1), evidence=evidence if isinstance(evidence, list) else [],
                   source=str(row["source"] or ""), serial=str(row.get("serial") or ""),
                   uuid=str(row.get("uuid") or ""), why=str(row.get("why") or ""))


@record(frozen=True)
class Step:
    """What the ladder says to do next with one incident (`ladder.next_step`).

    action: reset | reboot | qualify | resume | rma | lemon | wait | none. `state`: the state
    the incident enters when the executor takes it (`incidents.advance`). `reason`: the drain
    reason to set (`slurmadm: repair: <step>: <detail>`), '' when the drain stays as it is.
    `why`: the decision in words."""

    action: str
    state: str
    why: str
    reason: str = ""
    rung: int = 0

    @property
    def acts(self) -> bool:
        return self.action not in ("wait", "none")


@record(frozen=True)
class Qualification:
    """One qualification run of an incident's node (written by `repair run`)."""

    id: int
    incident_id: str
    node: str
    job_id: str
    started: float
    finished: float | None
    status: str  # running | passed | failed
    evidence: list[dict[str, Any]] = field(default_factory=list)
