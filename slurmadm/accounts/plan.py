"""The plan: what must change in slurmdbd to match the site, as an ordered list of typed operations.

Order (cheeto's, `ucdavis/cheeto` slurm.py, with moves and defaults added): QOS first (adds, then
changes), then accounts parents before children (adds, moves, changes), then users (adds,
changes, default accounts), then coordinators (they must exist as users), then deletions
bottom-up (users, accounts deepest first, QOS last). Coordinators are a declared property of an
account: ones the site does not name are removed without --prune, like any other setting.
Deletions run only with --prune, never for an association with pending or running jobs, never
for protected accounts, users or QOS.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ..slurm.accounting import (
    AccountingState,
    AccountRecord,
    AssocRecord,
    QosRecord,
    format_tres,
)
from .desired import Desired

KINDS = (
    "add-qos",
    "modify-qos",
    "add-account",
    "move-account",
    "modify-account",
    "add-user",
    "modify-user",
    "default-account",
    "remove-coordinators",
    "add-coordinators",
    "delete-user",
    "delete-account",
    "delete-qos",
)
PHASE = {k: i for i, k in enumerate(KINDS)}


@dataclass(frozen=True)
class Change:
    field: str  # Slurm's name for it (GrpTRES, Fairshare, QOS, ...)
    old: str
    new: str
    arg: str  # what sacctmgr is given: `GrpTRES=gres/gpu=8`, `QOS=` (inherit), ...


@dataclass(frozen=True)
class Op:
    kind: str
    name: str  # QOS, account or user name
    account: str = ""  # user ops: the project; account ops: the parent
    changes: tuple[Change, ...] = ()
    depth: int = 0
    new_user: bool = False  # add-user of a user slurmdbd does not know yet
    blocked: str = ""  # why a deletion must not run (jobs, ...)

    @property
    def target(self) -> str:
        if self.kind.endswith("-qos"):
            return f"qos:{self.name}"
        if (self.kind.endswith("-account") and self.kind != "default-account") or self.kind.endswith("-coordinators"):
            return f"account:{self.name}"
        if self.kind == "default-account":
            return f"user:{self.name}"
        return f"user:{self.name}@{self.account}"

    @property
    def is_delete(self) -> bool:
        return self.kind.startswith("delete-")

    def describe(self, sep: str = "; ") -> str:
        return sep.join(f"{c.field}: {c.old or '-'} -> {c.new or '-'}" for c in self.changes)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": self.kind,
            "target": self.target,
            "name": self.name,
            "changes": [{"field": c.field, "old": c.old, "new": c.new} for c in self.changes],
        }
        if self.account:
            out["account" if self.kind.endswith("-user") else "parent"] = self.account
        if self.is_delete:
            out["needs_prune"] = True
        if self.blocked:
            out["blocked"] = self.blocked
        return out


@dataclass
class Plan:
    cluster: str
    ops: list[Op] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.ops)

    def __len__(self) -> int:
        return len(self.ops)

    def runnable(self, prune: bool) -> list[Op]:
        return [op for op in self.ops if not op.blocked and (prune or not op.is_delete)]

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for op in self.ops:
            out[op.kind] = out.get(op.kind, 0) + 1
        return out

    def to_json(self) -> dict[str, Any]:
        return {"cluster": self.cluster, "changes": len(self.ops), "counts": self.counts(),
                "ops": [op.to_json() for op in self.ops]}


# --------------------------------------------------------------------------------- field diffs


def _same_text(a: str, b: str) -> bool:
    return a.strip().casefold() == b.strip().casefold()  # sacctmgr lowercases free text


def _tres_change(name: str, have: Mapping[str, str], want: Mapping[str, str]) -> Change | None:
    """Set exactly `want`: TRES slurmadm does not declare are cleared with -1."""
    if dict(have) == dict(want):
        return None
    parts = {k: "-1" for k in have if k not in want}
    parts.update({k: v for k, v in want.items() if have.get(k) != v})
    return Change(name, format_tres(have), format_tres(want), f"{name}={format_tres(parts)}")


def _list(values: Iterable[str]) -> str:
    return ",".join(sorted(values))


def _shares(value: int | str) -> str:
    return str(value)


def qos_changes(have: QosRecord | None, want: QosRecord) -> list[Change]:
    """Changes that turn `have` (None: a fresh QOS with Slurm's defaults) into `want`."""
    base = have or QosRecord(name=want.name, description=want.name)
    out: list[Change] = []

    def add(fld: str, old: str, new: str, arg: str) -> None:
        out.append(Change(fld, old, new, arg))

    if not _same_text(base.description, want.description):
        add("Description", base.description, want.description, f"Description={want.description}")
    if base.priority != want.priority:
        add("Priority", str(base.priority), str(want.priority), f"Priority={want.priority}")
    if abs(base.usage_factor - want.usage_factor) > 5e-7:
        add("UsageFactor", f"{base.usage_factor:g}", f"{want.usage_factor:g}", f"UsageFactor={want.usage_factor:g}")
    if base.preempt_mode != want.preempt_mode:
        add("PreemptMode", base.preempt_mode, want.preempt_mode, f"PreemptMode={want.preempt_mode}")
    if base.flags != want.flags:
        add("Flags", _list(base.flags), _list(want.flags), f"Flags={_list(want.flags) or '-1'}")
    for fld, attr in (("MaxTRESPerUser", "max_tres_per_user"), ("MaxTRESPerJob", "max_tres_per_job"),
                      ("GrpTRES", "grp_tres")):
        change = _tres_change(fld, getattr(base, attr), getattr(want, attr))
        if change:
            out.append(change)
    if base.max_wall != want.max_wall:
        show = lambda m: "" if m is None else f"{m // 1440}-{m % 1440 // 60:02d}:{m % 60:02d}:00"
        add("MaxWall", show(base.max_wall), show(want.max_wall),
            f"MaxWall={-1 if want.max_wall is None else want.max_wall}")
    if base.preempt != want.preempt:  # last: the executor runs it after every QOS exists
        add("Preempt", _list(base.preempt), _list(want.preempt), f"Preempt={_list(want.preempt)}")
    return out


def assoc_changes(have: AssocRecord | None, want: AssocRecord, *, manage_qos: bool) -> list[Change]:
    """Changes to an association's limits and QOS (None: a new association, Slurm's defaults)."""
    base = have or AssocRecord(account=want.account, user=want.user)
    out: list[Change] = []
    if base.shares != want.shares:
        out.append(Change("Fairshare", _shares(base.shares), _shares(want.shares), f"Fairshare={want.shares}"))
    for fld, attr in (("GrpTRES", "grp_tres"), ("GrpTRESMins", "grp_tres_mins")):
        change = _tres_change(fld, getattr(base, attr), getattr(want, attr))
        if change:
            out.append(change)
    if manage_qos:
        if base.qos != want.qos:
            out.append(Change("QOS", _list(base.qos), _list(want.qos) or "(inherit)", f"QOS={_list(want.qos)}"))
        if base.default_qos != want.default_qos:
            out.append(Change("DefaultQOS", base.default_qos, want.default_qos or "(inherit)",
                              f"DefaultQOS={want.default_qos or '-1'}"))
    return out


def account_info_changes(have: AccountRecord | None, want: AccountRecord) -> list[Change]:
    out = []
    if have is None or not _same_text(have.description, want.description):
        out.append(Change("Description", have.description if have else "", want.description,
                          f"Description={want.description}"))
    if have is None or not _same_text(have.organization, want.organization):
        out.append(Change("Organization", have.organization if have else "", want.organization,
                          f"Organization={want.organization}"))
    return out


# ------------------------------------------------------------------------------------ the plan


def make_plan(want: Desired, have: AccountingState) -> Plan:
    ops: list[Op] = []

    # ---- QOS ----
    for name, q in want.qos.items():
        current = have.qos.get(name)
        changes = qos_changes(current, q)
        if current is None:
            ops.append(Op("add-qos", name, changes=tuple(changes)))
        elif changes:
            ops.append(Op("modify-qos", name, changes=tuple(changes)))
    for name in have.qos:
        if name not in want.qos and name not in want.protected_qos:
            ops.append(Op("delete-qos", name))

    # ---- accounts, parents before children ----
    live_depth = _depths(have)
    for name in sorted(want.depth, key=lambda n: (want.depth[n], n)):
        target = want.assocs[(name, "")]
        current = have.assocs.get((name, ""))
        manage_qos = name not in want.organizations
        info = account_info_changes(have.accounts.get(name), want.accounts[name])
        if current is None:
            # An account record another cluster already created keeps its description unless
            # changed separately (a load must not modify: see apply.py).
            changes = assoc_changes(None, target, manage_qos=manage_qos)
            if name not in have.accounts:
                changes = info + changes
                info = []
            ops.append(Op("add-account", name, account=target.parent, depth=want.depth[name],
                          changes=(Change("Parent", "", target.parent, f"Parent={target.parent}"), *changes)))
            if info:
                ops.append(Op("modify-account", name, account=target.parent, depth=want.depth[name],
                              changes=tuple(info)))
            continue
        if current.parent != target.parent:
            ops.append(Op("move-account", name, account=target.parent, depth=want.depth[name],
                          changes=(Change("Parent", current.parent, target.parent, f"Parent={target.parent}"),)))
        changes = info + assoc_changes(current, target, manage_qos=manage_qos)
        if changes:
            ops.append(Op("modify-account", name, account=target.parent, depth=want.depth[name],
                          changes=tuple(changes)))

    # ---- users ----
    known_users = set(have.default_account)
    for (account, user), target in want.assocs.items():
        if not user:
            continue
        current = have.assocs.get((account, user))
        changes = assoc_changes(current, target, manage_qos=True)
        if current is None:
            new_user = user not in known_users
            if new_user and _default_for(want, user, "") == account:
                # set by the load that adds the user (DefaultAccount on the user's lines)
                changes.append(Change("DefaultAccount", "", account, f"DefaultAccount={account}"))
            ops.append(Op("add-user", user, account=account, depth=want.depth.get(account, 0) + 1,
                          changes=tuple(changes), new_user=new_user))
        elif changes:
            ops.append(Op("modify-user", user, account=account, depth=want.depth.get(account, 0) + 1,
                          changes=tuple(changes)))
    for user in sorted(want.memberships):
        if user in want.protected_users or user not in known_users:
            continue  # new users get their default account with their first association
        current = have.default_account.get(user, "")
        target = _default_for(want, user, current)
        if target != current:
            ops.append(Op("default-account", user, account=target,
                          changes=(Change("DefaultAccount", current, target, f"DefaultAccount={target}"),)))

    # ---- coordinators of the accounts the site declares ----
    for name in sorted(want.depth, key=lambda n: (want.depth[n], n)):
        old = have.accounts[name].coordinators if name in have.accounts else frozenset()
        new = want.accounts[name].coordinators
        for kind, users in (("remove-coordinators", old - new), ("add-coordinators", new - old)):
            if users:
                ops.append(Op(kind, name, depth=want.depth[name],
                              changes=(Change("Coordinators", _list(old), _list(new), _list(users)),)))

    # ---- deletions, bottom-up ----
    for account, user in have.assocs:
        if not user or (account, user) in want.assocs:
            continue
        if account in want.protected_accounts or user in want.protected_users:
            continue
        ops.append(Op("delete-user", user, account=account, depth=live_depth.get(account, 0) + 1))
    for (account, user), current in have.assocs.items():
        if user or account in want.depth or account in want.protected_accounts:
            continue
        ops.append(Op("delete-account", account, account=current.parent, depth=live_depth.get(account, 0)))

    ops.sort(key=_order)
    return Plan(cluster=want.cluster, ops=ops)


def _default_for(want: Desired, user: str, current: str) -> str:
    """The default account a user should have: the explicit one, else the current one while it is
    one of the user's projects, else their first project."""
    projects = want.memberships.get(user, [])
    if user in want.default_project:
        return want.default_project[user]
    if current in projects:
        return current
    return projects[0] if projects else current


def _order(op: Op) -> tuple:
    depth = -op.depth if op.is_delete else op.depth
    return (PHASE[op.kind], depth, op.account if op.kind.endswith("-user") else "", op.name)


def _depths(have: AccountingState) -> dict[str, int]:
    parent = {a: rec.parent for (a, u), rec in have.assocs.items() if not u}
    out: dict[str, int] = {}

    def depth(name: str, seen: frozenset[str] = frozenset()) -> int:
        if name in out:
            return out[name]
        p = parent.get(name, "")
        d = 0 if not p or name == "root" or p in seen else depth(p, seen | {name}) + 1
        out[name] = d
        return d

    for name in parent:
        depth(name)
    return out


# ------------------------------------------------------------------------------- job safety


def mark_blocked(plan: Plan, have: AccountingState, active: Iterable[tuple[str, str, str]]) -> Plan:
    """Block deletions that would touch pending or running jobs: a user association with jobs, an
    account with jobs in it or below it, a QOS jobs use, and any account above a blocked one."""
    active = list(active)
    parent = {a: rec.parent for (a, u), rec in have.assocs.items() if not u}
    busy_assocs = {(a, u) for a, u, _q in active}
    busy_qos = {q for _a, _u, q in active}
    busy_accounts: set[str] = set()
    for account, _user, _qos in active:
        cur, seen = account, set()
        while cur and cur not in seen:  # the job's account and everything above it
            busy_accounts.add(cur)
            seen.add(cur)
            cur = parent.get(cur, "")
    out = []
    for op in plan.ops:
        reason = ""
        if op.kind == "delete-user" and (op.account, op.name) in busy_assocs:
            reason = "has pending or running jobs"
        elif op.kind == "delete-account" and op.name in busy_accounts:
            reason = "has pending or running jobs in it or below it"
        elif op.kind == "delete-qos" and op.name in busy_qos:
            reason = "pending or running jobs use it"
        out.append(replace(op, blocked=reason) if reason else op)
    return Plan(plan.cluster, out)
