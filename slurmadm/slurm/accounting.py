"""slurmdbd through sacctmgr: read QOS, accounts, associations and default accounts; run batched
changes, `sacctmgr load` files and `sacctmgr dump` backups. Also the few squeue/sshare/sacct reads
that `slurmadm accounts` needs.

Reads use `sacctmgr -n -P show ... format=<named fields>`: the same on every release (captured
from 22.05.8 and 24.11.5, tests/unit/data/accounting/), four at once. Associations are read with
`wopl` (raw values as stored: an inherited QOS reads as empty) and `wopi` (slurmdbd skips its
per-row parent lookup; the tree comes from nested-set bounds or parent ids, see TREE_FIELDS);
default accounts from `show assoc onlydefaults`. For 2,500 associations the slowest read takes
0.35 s. From 23.02 sacctmgr also speaks `--json`; it is used when the text form is ambiguous (a
name with `|` that someone else created) or when SLURMADM_SACCTMGR_FORMAT=json asks for it. Both
shapes parse to the same records.

Facts this module relies on (verified on 22.05.8 and 24.11.5):
- names and descriptions are lowercased by sacctmgr; Fairshare=parent reads as "parent" (JSON:
  shares_raw 2147483647); an unset default account reads as "".
- `sacctmgr -i add` of something that exists exits 1 ("Nothing new added"), as does a modify or
  delete that matches nothing; errors go to stderr, and the exit status is the verdict.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from ..errors import CommandFailed, UnreachableError, UsageError
from ..proc import run
from ..site.accounts import slurm_time_minutes
from .parse import parse_version, unwrap_number

# sacctmgr stores Fairshare=parent as this number (SLURMDB_FS_USE_PARENT).
FS_USE_PARENT = 0x7FFFFFFF

# Every field `sacctmgr show qos` has, Description added: what slurmadm compares, and a complete
# QOS backup from the same read (`sacctmgr dump` leaves QOS out).
QOS_FIELDS = (
    "Name,Description,Priority,GraceTime,Preempt,PreemptExemptTime,PreemptMode,Flags,UsageThres,UsageFactor,"
    "GrpTRES,GrpTRESMins,GrpTRESRunMins,GrpJobs,GrpSubmit,GrpWall,MaxTRES,MaxTRESPerNode,MaxTRESMins,MaxWall,"
    "MaxTRESPU,MaxJobsPU,MaxSubmitPU,MaxTRESPA,MaxJobsPA,MaxSubmitPA,MinTRES"
)
ASSOC_FIELDS = "Account,User,Partition,Share,GrpTRES,GrpTRESMins,QOS,DefaultQOS"
# How an account's parent is read. slurmdbd looks up ParentName per row (0.8 s for 2,500
# associations); with `wopi` it skips that and the tree comes from the nested-set bounds (22.05,
# 23.02) or the parent's id (23.11+: lineage replaced lft/rgt) at 0.35 s.
TREE_FIELDS = {"names": "ParentName", "nested": "LFT,RGT", "ids": "ID,ParentID"}
ACCOUNT_FIELDS = "Account,Descr,Org,Coordinators"  # `show account withcoord`
DEFAULT_FIELDS = "Account,User"  # `show assoc onlydefaults`: each user's default association

# `sacctmgr --json` QOS flag names (24.11.5) -> the names sacctmgr's text output and `Flags=` use.
JSON_QOS_FLAGS = {
    "DENY_LIMIT": "DenyOnLimit",
    "ENFORCE_USAGE_THRESHOLD": "EnforceUsageThreshold",
    "NO_DECAY": "NoDecay",
    "NO_RESERVE": "NoReserve",
    "OVERRIDE_PARTITION_QOS": "OverPartQOS",
    "PARTITION_MAXIMUM_NODE": "PartitionMaxNodes",
    "PARTITION_MINIMUM_NODE": "PartitionMinNodes",
    "PARTITION_TIME_LIMIT": "PartitionTimeLimit",
    "REQUIRED_RESERVATION": "RequiresReservation",
    "USAGE_FACTOR_SAFE": "UsageFactorSafe",
}
# JSON preempt mode -> text ("DISABLED" is what the text form calls "cluster": use slurm.conf's).
JSON_PREEMPT_MODES = {"DISABLED": "cluster", "OFF": "cluster", "CANCEL": "cancel", "REQUEUE": "requeue",
                      "SUSPEND": "suspend", "GANG": "gang"}

Tres = Mapping[str, str]  # {"gres/gpu": "8", "cpu": "64"}


@dataclass(frozen=True)
class QosRecord:
    name: str
    description: str = ""
    priority: int = 0
    preempt: frozenset[str] = frozenset()
    preempt_mode: str = "cluster"
    usage_factor: float = 1.0
    flags: frozenset[str] = frozenset()
    max_tres_per_user: Tres = field(default_factory=dict)
    max_tres_per_job: Tres = field(default_factory=dict)
    grp_tres: Tres = field(default_factory=dict)
    max_wall: int | None = None  # minutes; None: no limit


@dataclass(frozen=True)
class AssocRecord:
    """One association as stored (raw: an inherited QOS reads as empty)."""

    account: str
    user: str = ""  # "" for the account's own association
    parent: str = ""  # parent account, for account associations
    partition: str = ""
    shares: int | str = 1  # a number, or "parent"
    grp_tres: Tres = field(default_factory=dict)
    grp_tres_mins: Tres = field(default_factory=dict)
    qos: frozenset[str] = frozenset()
    default_qos: str = ""

    @property
    def key(self) -> tuple[str, str]:
        return (self.account, self.user)


@dataclass(frozen=True)
class AccountRecord:
    name: str
    description: str = ""
    organization: str = ""
    coordinators: frozenset[str] = frozenset()  # users made coordinators of this account directly


@dataclass
class AccountingState:
    """What slurmdbd holds for one cluster."""

    cluster: str
    qos: dict[str, QosRecord] = field(default_factory=dict)
    assocs: dict[tuple[str, str], AssocRecord] = field(default_factory=dict)
    accounts: dict[str, AccountRecord] = field(default_factory=dict)
    default_account: dict[str, str] = field(default_factory=dict)  # user -> account ("" unset)
    # Partition-specific associations: slurmadm neither plans for them nor deletes them.
    partition_assocs: list[AssocRecord] = field(default_factory=list)
    qos_table: str = ""  # the QOS as read (QOS_FIELDS, `|`-separated): the QOS part of a backup


class AmbiguousOutput(UnreachableError):
    """sacctmgr's parsable text could not be split unambiguously (a value contains '|')."""


# ------------------------------------------------------------------------------- value parsing


# TRES counted in megabytes (slurmdb TRES of type mem/vmem/fs/disk; gres/gpumem in MB). JSON
# gives them as a plain number of MB; sacctmgr text converts them to a unit (`mem=64G`,
# `mem=512M`, `mem=1.50T`: TRES_STR_CONVERT_UNITS). One unit, MB, for both.
MB_TRES = frozenset({"mem", "vmem", "fs/disk", "gres/gpumem"})
_UNIT = re.compile(r"^(\d+(?:\.\d+)?)([KMGTPE])$", re.IGNORECASE)
_MB_PER = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024**2, "P": 1024**3, "E": 1024**4}


def tres_value(key: str, value: str) -> str:
    """A TRES value in the unit JSON uses: megabytes for MB_TRES (`64G` -> `65536`), else as is."""
    if key not in MB_TRES:
        return value
    m = _UNIT.match(value.strip())
    if not m:
        return value.strip()
    mb = float(m.group(1)) * _MB_PER[m.group(2).upper()]
    return str(int(round(mb)))


def parse_tres(text: str) -> dict[str, str]:
    """`cpu=64,gres/gpu=12,mem=64G` -> {"cpu": "64", "gres/gpu": "12", "mem": "65536"} (memory
    TRES in MB, as JSON has them)."""
    out: dict[str, str] = {}
    for part in (text or "").split(","):
        part = part.strip()
        if not part:
            continue
        key, sep, value = part.partition("=")
        if not sep:
            raise UnreachableError(f"cannot read TRES {text!r}")
        out[key] = tres_value(key, value)
    return out


def format_tres(tres: Mapping[str, str | int]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(tres.items()))


def tres_from_json(items: Any) -> dict[str, str]:
    """24.11 JSON TRES lists: [{"type": "gres", "name": "gpu", "count": 8}] -> {"gres/gpu": "8"}."""
    out: dict[str, str] = {}
    for item in items or []:
        if not isinstance(item, dict):
            continue
        kind, name = item.get("type") or "", item.get("name") or ""
        count = unwrap_number(item.get("count"))
        if count is None or not kind:
            continue
        key = f"{kind}/{name}" if name else kind
        out[key] = tres_value(key, str(count))
    return out


def parse_shares(text: str | int | None) -> int | str:
    if text in (None, ""):
        return 1
    if isinstance(text, str) and text.strip().lower() == "parent":
        return "parent"
    value = int(text)
    return "parent" if value == FS_USE_PARENT else value


def parse_wall(text: str) -> int | None:
    try:
        return slurm_time_minutes(text or "")
    except ValueError:
        raise UnreachableError(f"cannot read a Slurm time from {text!r}") from None


def _names(text: str) -> frozenset[str]:
    return frozenset(x for x in (text or "").split(",") if x)


def _rows(text: str, fields: str, command: str) -> list[list[str]]:
    want = fields.count(",") + 1
    rows = []
    for line in text.splitlines():
        if not line.strip():
            continue
        cols = line.split("|")  # -P / --parsable2: no trailing separator
        if len(cols) != want:
            raise AmbiguousOutput(
                f"{command}: a line has {len(cols)} fields instead of {want} (a name with '|'?): {line[:80]!r}"
            )
        rows.append(cols)
    return rows


# Column names as sacctmgr's and sshare's headers print them -> the format= name they stand for
# (both are case-insensitive; headers abbreviate a few).
_HEADER_ALIASES = {"descr": "description", "org": "organization", "par name": "parentname",
                   "def qos": "defaultqos", "def acct": "defaultaccount", "coord accounts": "coordinators",
                   "coordinator": "coordinators"}
# Every column a header line of the reads below may hold (format= names, lower-cased): a first
# line made only of these is a header, not data.
_KNOWN_COLUMNS = frozenset(
    "cluster account user partition parentname parentid id lft rgt share priority graceTime preempt "
    "preemptexempttime preemptmode flags usagethres usagefactor grpjobs grpjobsaccrue grpsubmit grptres "
    "grptresmins grptresrunmins grpwall maxjobs maxjobsaccrue maxsubmit maxtres maxtrespernode maxtresmins "
    "maxtresrunmins maxwall maxtrespu maxjobspu maxsubmitpu maxtrespa maxjobspa maxsubmitpa mintres qos "
    "defaultqos defaultaccount name description organization coordinators rawshares normshares rawusage "
    "normusage effectvusage fairshare levelfs grptresraw tresrunmins jobid jobname state exitcode submit "
    "start end elapsed nodelist alloctres reqtres reason jobidraw derivedexitcode elapsedraw sluid "
    # more of sacct's --format names (sacct --helpformat), as people print them beside those above
    "alloccpus allocnodes ncpus nnodes ntasks reqcpus reqmem reqnodes maxrss averss maxvmsize cputime "
    "cputimeraw totalcpu usercpu systemcpu timelimit timelimitraw eligible comment workdir cluster "
    "nodelist group uid gid priority".lower().split())


def _column(name: str) -> str:
    key = " ".join(name.split()).lower()
    return _HEADER_ALIASES.get(key, key)


def _table(text: str, fields: str, command: str, *, need: tuple[str, ...] = ()) -> list[dict[str, str]]:
    """`-P` rows as {column: value}, columns by name (lower-cased format= names): from the
    output's own header line when it has one (sshare, sacctmgr without -n), else from `fields`,
    the format= list the command was given. Values are stripped (sshare indents accounts); a
    column the output lacks reads as "". `need`: columns without which the rows mean nothing."""
    lines = [line for line in text.splitlines() if line.strip()]
    names = [_column(f) for f in fields.split(",")]
    if lines:
        first = [_column(c) for c in lines[0].split("|")]
        if len(first) > 1 and all(c in _KNOWN_COLUMNS for c in first):
            names, lines = first, lines[1:]
    missing = [c for c in need if c not in names]
    if missing:
        raise UnreachableError(f"{command}: no {missing[0]!r} column in the output (columns: {','.join(names)})")
    out = []
    for line in lines:
        cols = line.split("|")
        if len(cols) != len(names):
            raise AmbiguousOutput(
                f"{command}: a line has {len(cols)} fields instead of {len(names)} (a name with '|'?): {line[:80]!r}"
            )
        out.append({n: c.strip() for n, c in zip(names, cols)})
    return out


def _get(row: Mapping[str, str], name: str) -> str:
    return row.get(name, "")


# --------------------------------------------------------------------------- text (every release)


def qos_from_text(text: str, fields: str = QOS_FIELDS) -> dict[str, QosRecord]:
    """`sacctmgr -P show qos format=<fields>` (with or without its header line); columns by name."""
    out = {}
    for q in _table(text, fields, "sacctmgr show qos", need=("name",)):
        g = q.get
        out[q["name"]] = QosRecord(
            name=q["name"],
            description=g("description", ""),
            priority=int(g("priority") or 0),
            preempt=_names(g("preempt", "")),
            preempt_mode=g("preemptmode") or "cluster",
            usage_factor=float(g("usagefactor") or 1.0),
            flags=_names(g("flags", "")),
            max_tres_per_user=parse_tres(g("maxtrespu", "")),
            max_tres_per_job=parse_tres(g("maxtres", "")),
            grp_tres=parse_tres(g("grptres", "")),
            max_wall=parse_wall(g("maxwall", "")),
        )
    return out


class TreeUnknown(UnreachableError):
    """The parents could not be worked out from ids or nested-set bounds; ask for ParentName."""


def _tree_of(columns: Iterable[str]) -> str | None:
    have = set(columns)
    for tree, cols in TREE_FIELDS.items():
        if {_column(c) for c in cols.split(",")} <= have:
            return tree
    return None


def assocs_from_text(text: str, tree: str | None = None, fields: str | None = None) -> list[AssocRecord]:
    """`show assoc ... format=<fields>` (default ASSOC_FIELDS,TREE_FIELDS[tree]) -> records with
    their parent, columns by name; the tree from whichever columns name it (ParentName, ID and
    ParentID, or LFT and RGT; `tree` picks when several do)."""
    fields = fields or f"{ASSOC_FIELDS},{TREE_FIELDS[tree or 'names']}"
    rows = _table(text, fields, "sacctmgr show assoc", need=("account", "user"))
    columns = rows[0].keys() if rows else [_column(f) for f in fields.split(",")]
    if tree is None or not {_column(c) for c in TREE_FIELDS[tree].split(",")} <= set(columns):
        tree = _tree_of(columns)
    parents = _parents(rows, tree)
    return [
        AssocRecord(
            account=r["account"],
            user=r["user"],
            parent="" if r["user"] else parents.get(r["account"], ""),
            partition=_get(r, "partition"),
            shares=parse_shares(_get(r, "share")),
            grp_tres=parse_tres(_get(r, "grptres")),
            grp_tres_mins=parse_tres(_get(r, "grptresmins")),
            qos=_names(_get(r, "qos")),
            default_qos=_get(r, "defaultqos"),
        )
        for r in rows
    ]


def _parents(rows: list[dict[str, str]], tree: str | None) -> dict[str, str]:
    """account -> parent account, from the tree columns of the account rows (user empty)."""
    accounts = [r for r in rows if not r["user"] and not _get(r, "partition")]
    if tree is None:
        if accounts:
            raise TreeUnknown("sacctmgr show assoc: no column names the parents (ParentName, ID/ParentID, LFT/RGT)")
        return {}
    if tree == "names":
        return {r["account"]: r["parentname"] for r in accounts}
    try:
        if tree == "ids":
            name_of = {r["id"]: r["account"] for r in accounts}
            out = {r["account"]: name_of.get(r["parentid"], "") for r in accounts}
        else:  # nested sets: the parent is the nearest enclosing interval
            out, stack = {}, []
            for name, lft, rgt in sorted(((r["account"], int(r["lft"]), int(r["rgt"])) for r in accounts),
                                         key=lambda x: x[1]):
                while stack and stack[-1][2] < lft:
                    stack.pop()
                out[name] = stack[-1][0] if stack else ""
                stack.append((name, lft, rgt))
    except (ValueError, KeyError):
        raise TreeUnknown("sacctmgr show assoc: unreadable tree columns") from None
    orphans = [a for a, parent in out.items() if not parent and a != "root"]
    if orphans:
        raise TreeUnknown(f"sacctmgr show assoc: no parent found for {orphans[0]!r}")
    return out


def accounts_from_text(text: str, fields: str = ACCOUNT_FIELDS) -> dict[str, AccountRecord]:
    """`show account [withcoord] format=<fields>`; columns by name (Coordinators optional)."""
    return {
        r["account"]: AccountRecord(r["account"], _get(r, "description"), _get(r, "organization"),
                                    _names(_get(r, "coordinators")))
        for r in _table(text, fields, "sacctmgr show account", need=("account",))
    }


def default_accounts_from_text(text: str, fields: str = DEFAULT_FIELDS) -> dict[str, str]:
    """`show assoc onlydefaults ... format=Account,User` -> user: default account."""
    return {r["user"]: r["account"]
            for r in _table(text, fields, "sacctmgr show assoc onlydefaults", need=("account", "user")) if r["user"]}


# ------------------------------------------------------------------------- JSON (23.02 and newer)


def _json(text: str, key: str, command: str) -> list[dict]:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise UnreachableError(f"{command}: output is not JSON ({exc.msg} at line {exc.lineno})") from None
    items = data.get(key) if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise UnreachableError(f"{command}: unexpected JSON (no {key!r} list)")
    return [x for x in items if isinstance(x, dict)]


def _dig(obj: Any, *path: str) -> Any:
    for part in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(part)
    return obj


def qos_from_json(text: str) -> dict[str, QosRecord]:
    out = {}
    for q in _json(text, "qos", "sacctmgr --json show qos"):
        modes = _dig(q, "preempt", "mode") or ["DISABLED"]
        mode = modes[0] if isinstance(modes, list) else modes
        factor = unwrap_number(q.get("usage_factor"))
        limits = q.get("limits") or {}
        out[q["name"]] = QosRecord(
            name=q["name"],
            description=q.get("description") or "",
            priority=int(unwrap_number(q.get("priority")) or 0),
            preempt=frozenset(_dig(q, "preempt", "list") or []),
            preempt_mode=JSON_PREEMPT_MODES.get(str(mode).upper(), str(mode).lower()),
            usage_factor=float(1.0 if factor is None else factor),
            flags=frozenset(JSON_QOS_FLAGS.get(f, f) for f in q.get("flags") or [] if f not in ("NONE",)),
            max_tres_per_user=tres_from_json(_dig(limits, "max", "tres", "per", "user")),
            max_tres_per_job=tres_from_json(_dig(limits, "max", "tres", "per", "job")),
            grp_tres=tres_from_json(_dig(limits, "max", "tres", "total")),
            max_wall=unwrap_number(_dig(limits, "max", "wall_clock", "per", "job")),
        )
    return out


def assocs_from_json(text: str) -> tuple[list[AssocRecord], dict[str, str]]:
    """Associations, and the default account of each user (JSON marks the default one)."""
    out, defaults = [], {}
    for a in _json(text, "associations", "sacctmgr --json show assoc"):
        user = a.get("user") or ""
        rec = AssocRecord(
            account=a.get("account") or "",
            user=user,
            parent=a.get("parent_account") or "",
            partition=a.get("partition") or "",
            shares=parse_shares(unwrap_number(a.get("shares_raw"))),
            grp_tres=tres_from_json(_dig(a, "max", "tres", "total")),
            grp_tres_mins=tres_from_json(_dig(a, "max", "tres", "group", "minutes")),
            qos=frozenset(a.get("qos") or []),
            default_qos=_dig(a, "default", "qos") or "",
        )
        out.append(rec)
        if user:
            defaults.setdefault(user, "")
            if a.get("is_default") and not rec.partition:
                defaults[user] = rec.account
    return out, defaults


def accounts_from_json(text: str) -> dict[str, AccountRecord]:
    return {
        a["name"]: AccountRecord(a["name"], a.get("description") or "", a.get("organization") or "",
                                 frozenset(c["name"] for c in a.get("coordinators") or ()
                                           if isinstance(c, dict) and c.get("name") and c.get("direct", True)))
        for a in _json(text, "accounts", "sacctmgr --json show account withcoord")
    }


def default_accounts_from_json(text: str) -> dict[str, str]:
    return {
        u["name"]: _dig(u, "default", "account") or ""
        for u in _json(text, "users", "sacctmgr --json show user")
    }


def direct_coordinators(accounts: dict[str, AccountRecord], parent: Mapping[str, str]) -> dict[str, AccountRecord]:
    """The text form lists a coordinator on the account they were added to *and* on every
    account below it (slurmdbd adds those rows itself, and removes them with the direct one).
    Direct ones are those the parent account does not list. (JSON says `direct` outright.)"""
    out = {}
    for name, rec in accounts.items():
        above = accounts.get(parent.get(name, ""))
        inherited = above.coordinators if above is not None and name != "root" else frozenset()
        out[name] = rec if not (rec.coordinators & inherited) else AccountRecord(
            rec.name, rec.description, rec.organization, rec.coordinators - inherited)
    return out


def build_state(cluster: str, qos: dict[str, QosRecord], assocs: Iterable[AssocRecord],
                accounts: dict[str, AccountRecord], defaults: dict[str, str]) -> AccountingState:
    state = AccountingState(cluster=cluster, qos=qos, accounts=accounts)
    users = set()
    for rec in assocs:
        if rec.partition:
            state.partition_assocs.append(rec)
            continue
        state.assocs[rec.key] = rec
        if rec.user:
            users.add(rec.user)
    state.default_account = {u: defaults.get(u, "") for u in sorted(users)}
    return state


# ------------------------------------------------------------------------------------ sacctmgr


def _failure(argv: list[str], proc) -> CommandFailed:
    """sacctmgr prints its reason on stderr, or on stdout after a header; keep the telling line."""
    lines = [ln.strip() for ln in (proc.stderr or "").splitlines() + (proc.stdout or "").splitlines()]
    lines = [ln for ln in lines if ln]
    telling = [ln for ln in lines if re.search(r"error|problem|unknown|invalid|can ?not|nothing|you need", ln, re.IGNORECASE)]
    text = "\n".join(telling or lines[-3:] or ["no output"])
    return CommandFailed(argv[:3] + (["..."] if len(argv) > 3 else []), proc.returncode, text)


def _qos_with_text(text: str) -> tuple[dict[str, QosRecord], str]:
    return qos_from_text(text), QOS_FIELDS.replace(",", "|") + "\n" + text


def _qos_with_json(text: str) -> tuple[dict[str, QosRecord], str]:
    return qos_from_json(text), text


class Sacctmgr:
    """sacctmgr for one cluster. Every call has a time limit; changes use `-i` (commit at once)."""

    def __init__(self, cluster: str, *, env: Mapping[str, str] | None = None, timeout: float = 120.0,
                 fmt: str | None = None):
        self.cluster = cluster
        self.env = dict(env) if env is not None else None
        self.timeout = timeout
        self.fmt = (fmt or os.environ.get("SLURMADM_SACCTMGR_FORMAT") or "auto").lower()
        if self.fmt not in ("auto", "text", "json"):
            raise UsageError(f"SLURMADM_SACCTMGR_FORMAT: {self.fmt!r} is not one of auto, text, json")
        self._version: tuple[int, int, int] | None = None

    # ---- plumbing ----

    def _run(self, argv: list[str], *, timeout: float | None = None, check: bool = True):
        proc = run(argv, timeout=timeout or self.timeout, env=self.env, check=False)
        if check and proc.returncode != 0:
            raise _failure(argv, proc)
        return proc

    def version(self) -> tuple[int, int, int]:
        if self._version is None:
            self._version = parse_version(self._run(["sacctmgr", "--version"], timeout=20).stdout)
        return self._version

    @property
    def has_json(self) -> bool:
        return self.version() >= (23, 2, 0)

    def _show(self, *args: str) -> str:
        return self._run(["sacctmgr", "-n", "-P", "show", *args]).stdout

    def _show_json(self, *args: str) -> str:
        return self._run(["sacctmgr", "--json", "show", *args]).stdout

    # ---- reads ----

    def read_state(self) -> AccountingState:
        """QOS, associations, accounts and default accounts: four reads at once."""
        where = f"cluster={self.cluster}"
        use_json = self.fmt == "json"
        if use_json and not self.has_json:
            raise UsageError(f"SLURMADM_SACCTMGR_FORMAT=json needs Slurm 23.02 or newer (have "
                             f"{'.'.join(map(str, self.version()))})")

        def text_or_json(text_args: tuple[str, ...], json_args: tuple[str, ...], from_text, from_json):
            if not use_json:
                try:
                    return from_text(self._show(*text_args))
                except AmbiguousOutput:
                    if self.fmt == "text" or not self.has_json:
                        raise
            return from_json(self._show_json(*json_args))

        def assocs():
            if use_json:
                return assocs_from_json(self._show_json("assoc", "wopl", "where", where))
            json_args = ("assoc", "wopl", "where", where)
            tree = "ids" if self.version() >= (23, 11, 0) else "nested"
            fields = f"format={ASSOC_FIELDS},{TREE_FIELDS[tree]}"
            try:
                recs = text_or_json(("assoc", "wopl", "wopi", "where", where, fields), json_args,
                                    lambda t: assocs_from_text(t, tree), lambda t: assocs_from_json(t)[0])
            except TreeUnknown:  # a release whose tree columns differ: let slurmdbd name the parents
                recs = text_or_json(("assoc", "wopl", "where", where, f"format={ASSOC_FIELDS},ParentName"),
                                    json_args, assocs_from_text, lambda t: assocs_from_json(t)[0])
            return recs, None

        jobs = {
            "qos": lambda: text_or_json(("qos", f"format={QOS_FIELDS}"), ("qos",), _qos_with_text, _qos_with_json),
            "assocs": assocs,
            "accounts": lambda: text_or_json(
                ("account", "withcoord", f"format={ACCOUNT_FIELDS}"), ("account", "withcoord"),
                lambda t: (accounts_from_text(t), True), lambda t: (accounts_from_json(t), False)
            ),
        }
        if not use_json:  # `show user` would name them too, but takes 0.9 s for 2,000 users
            self.version()  # once, before the threads need it
            jobs["defaults"] = lambda: text_or_json(
                ("assoc", "onlydefaults", "wopl", "wopi", "where", where, f"format={DEFAULT_FIELDS}"),
                ("user", "where", where),
                default_accounts_from_text,
                default_accounts_from_json,
            )
        with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
            futures = {k: pool.submit(fn) for k, fn in jobs.items()}
            results = {k: f.result() for k, f in futures.items()}
        assoc_list, json_defaults = results["assocs"]
        defaults = json_defaults if json_defaults is not None else results["defaults"]
        qos, qos_table = results["qos"]
        accounts, listed_with_inherited = results["accounts"]
        if listed_with_inherited:
            accounts = direct_coordinators(accounts, {r.account: r.parent for r in assoc_list if not r.user})
        state = build_state(self.cluster, qos, assoc_list, accounts, defaults)
        state.qos_table = qos_table
        return state

    # ---- changes ----

    def execute(self, args: list[str], *, timeout: float | None = None) -> str:
        """`sacctmgr -i <args>`; raises CommandFailed with sacctmgr's own reason."""
        return self._run(["sacctmgr", "-i", *args], timeout=timeout).stdout

    def load(self, path: str, *, timeout: float | None = None) -> str:
        """`sacctmgr -i load file=PATH`: adds what the file has and slurmdbd lacks, in one commit.
        Never `load clean` (it removes the whole cluster first)."""
        return self.execute(["load", f"file={path}"], timeout=timeout or max(self.timeout, 600))

    def dump(self, path: str) -> None:
        """`sacctmgr dump CLUSTER file=PATH` (accounts, users, limits; not QOS)."""
        self._run(["sacctmgr", "-i", "dump", self.cluster, f"file={path}"], timeout=max(self.timeout, 300))



# ------------------------------------------------------------------------ jobs, fairshare, usage


@dataclass(frozen=True)
class ShareRow:
    account: str
    user: str
    raw_shares: str
    norm_shares: float | None
    raw_usage: int
    effective_usage: float | None
    fairshare: float | None
    level_fs: float | None  # inf for an unused account
    grp_tres_mins: Tres
    grp_tres_raw: Tres  # usage counted against GrpTRESMins (decayed like fairshare)
    # TRES-minutes that running jobs still hold until their time limits (GrpTRESRunMins usage):
    # what AccountingStorageEnforce=safe counts against a budget before it starts a job.
    tres_run_mins: Tres = field(default_factory=dict)


SSHARE_FIELDS = ("Account,User,RawShares,NormShares,RawUsage,EffectvUsage,FairShare,LevelFS,GrpTRESMins,"
                 "GrpTRESRaw,TRESRunMins")


def _float(text: str) -> float | None:
    text = (text or "").strip()
    if not text:
        return None
    try:
        return float(text)
    except ValueError:
        return None


def shares_from_text(text: str, fields: str = SSHARE_FIELDS) -> list[ShareRow]:
    """`sshare -a -P [-l | -o <fields>]`: columns by the header line sshare prints (the default
    and `-l` columns, or `-o`'s, in any order); a column it lacks reads as empty. Account names
    are indented."""
    rows = []
    for r in _table(text, fields, "sshare", need=("account", "user")):
        g = r.get
        rows.append(
            ShareRow(r["account"], r["user"], g("rawshares", ""), _float(g("normshares", "")),
                     int(float(g("rawusage") or 0)), _float(g("effectvusage", "")), _float(g("fairshare", "")),
                     _float(g("levelfs", "")), parse_tres(g("grptresmins", "")), parse_tres(g("grptresraw", "")),
                     parse_tres(g("tresrunmins", "")))
        )
    return rows


def gpus_of(tres: Mapping[str, str]) -> int:
    """GPUs in a TRES map: untyped gres/gpu (typed entries like gres/gpu:b200 are a subset)."""
    value = tres.get("gres/gpu")
    if value is None:
        return 0
    m = re.match(r"\d+", value)
    return int(m.group(0)) if m else 0


_ID_SUFFIX = re.compile(r"\(\d+\)$")


def parse_assoc_mgr(text: str, cluster: str) -> tuple[set[tuple[str, str]], set[str]]:
    """`scontrol show assoc_mgr` (every release: "Association Records" then one
    `ClusterName=c Account=a UserName=u(uid) Partition= ...` line per association with indented
    detail lines; "QOS Records" then `QOS=name(id)` lines) -> ({(account, user)}, {qos}) of what
    slurmctld holds now, for `cluster`. A user association's name drops its `(uid)`."""
    assocs: set[tuple[str, str]] = set()
    qos: set[str] = set()
    section = ""
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.endswith(" Records") and "=" not in stripped:
            section = stripped
        elif section == "Association Records" and line.startswith("ClusterName="):
            kv = dict(re.findall(r"(\w+)=(\S*)", stripped))
            if kv.get("ClusterName") == cluster:
                assocs.add((kv.get("Account", ""), _ID_SUFFIX.sub("", kv.get("UserName", ""))))
        elif section == "QOS Records" and line.startswith("QOS="):
            qos.add(_ID_SUFFIX.sub("", stripped[4:].split()[0]))
    return assocs, qos


def read_assoc_mgr(*, env: Mapping[str, str] | None = None, timeout: float = 30.0) -> str:
    """slurmctld's association manager as it enforces it now (not slurmdbd's tables)."""
    argv = ["scontrol", "show", "assoc_mgr"]
    proc = run(argv, timeout=timeout, env=dict(env) if env is not None else None, check=False)
    if proc.returncode != 0:
        raise _failure(argv, proc)
    return proc.stdout


def gpu_tres_tracked(accounting_storage_tres: str) -> bool:
    """Does slurmctld track GPUs as a TRES? Only what AccountingStorageTRES names is (slurm.conf.5:
    the default is cpu,mem,energy,node,billing,fs/disk,vmem,pages; a typed `gres/gpu:b200` tracks
    `gres/gpu` too). Without it a job's TRES (squeue tres-alloc, sacct AllocTRES, sshare) carry no
    gres/gpu: every GPU job reads as 0 GPUs and GPU limits are not enforced."""
    names = [t.strip().lower() for t in accounting_storage_tres.split(",")]
    return any(n == "gres/gpu" or n.startswith("gres/gpu:") for n in names)


def config_value(text: str, key: str) -> str | None:
    """One value of `scontrol show config` (`AccountingStorageTRES = cpu,mem,...`)."""
    for line in text.splitlines():
        name, sep, value = line.partition("=")
        if sep and name.strip().removesuffix("[0]") == key:
            return value.strip()
    return None


class JobReader:
    """squeue/sshare/sacct reads for `accounts apply --prune` and `accounts report`."""

    def __init__(self, *, env: Mapping[str, str] | None = None, timeout: float = 60.0):
        self.env = dict(env) if env is not None else None
        self.timeout = timeout

    def _out(self, argv: list[str]) -> str:
        proc = run(argv, timeout=self.timeout, env=self.env, check=False)
        if proc.returncode != 0:
            raise _failure(argv, proc)
        return proc.stdout

    def active_jobs(self) -> set[tuple[str, str, str]]:
        """(account, user, qos) of every job squeue still lists (pending, running, suspended,
        completing)."""
        out = self._out(["squeue", "-h", "-a", "-o", "%a|%u|%q"])
        return {(a, u, q) for a, u, q in _rows(out, "a,u,q", "squeue")}

    def running_gpus(self) -> dict[tuple[str, str], int]:
        """GPUs held now by running jobs, per (account, user)."""
        out = self._out(["squeue", "-h", "-a", "-t", "RUNNING", "-O", "Account:|,UserName:|,tres-alloc:"])
        used: dict[tuple[str, str], int] = {}
        for account, user, tres in _rows(out, "a,u,t", "squeue"):
            key = (account.strip(), user.strip())
            used[key] = used.get(key, 0) + gpus_of(parse_tres(tres.strip()))
        return used

    def shares(self) -> list[ShareRow]:
        return shares_from_text(self._out(["sshare", "-a", "-P", "-o", SSHARE_FIELDS]))

    def gpu_tracked(self) -> bool | None:
        """Whether slurmctld tracks gres/gpu (AccountingStorageTRES); None when it cannot be read."""
        try:
            value = config_value(self._out(["scontrol", "show", "config"]), "AccountingStorageTRES")
        except UnreachableError:
            return None
        return None if value is None else gpu_tres_tracked(value)

    def gpu_minutes_since(self, start: str, end: str = "now") -> dict[str, float]:
        """GPU-minutes per account of jobs that ran between start and end (sacct), each job's time
        clipped to the window. start/end in sacct's format (2026-11-01T00:00:00). Every run of a
        requeued job counts (--duplicates: without it sacct shows only a job's last run, and the
        low QOS is preempted by requeue)."""
        out = self._out(["sacct", "-a", "-X", "--duplicates", "-n", "-P", "-S", start, "-E", end,
                         "-o", SACCT_FIELDS])
        return gpu_minutes_from_sacct(out, start, end)


SACCT_FIELDS = "Account,User,AllocTRES,Start,End,State"


def gpu_minutes_from_sacct(text: str, start: str, end: str = "now", fields: str = SACCT_FIELDS) -> dict[str, float]:
    """GPU-minutes per account from `sacct -n -P -o <fields>` rows, columns by name. Job steps
    (JobID `3.batch`, when a JobID column is there) are left out: their TRES are the job's own."""
    import datetime as dt

    def when(value: str, default: dt.datetime) -> dt.datetime:
        value = value.strip()
        if value in ("", "Unknown", "None", "now"):
            return default
        return dt.datetime.fromisoformat(value)

    now = dt.datetime.now().replace(microsecond=0)
    lo = when(start, now)
    hi = when(end, now)
    out: dict[str, float] = {}
    for r in _table(text, fields, "sacct", need=("account", "alloctres", "start", "end")):
        if "." in _get(r, "jobid"):
            continue
        account, tres, s, e = r["account"], r["alloctres"], r["start"], r["end"]
        gpus = gpus_of(parse_tres(tres))
        if not gpus or s in ("", "Unknown", "None"):
            continue
        begin = max(when(s, now), lo)
        finish = min(when(e, now), hi)
        if finish > begin:
            out[account] = out.get(account, 0.0) + gpus * (finish - begin).total_seconds() / 60.0
    return out
