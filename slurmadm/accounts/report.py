"""Per-project (and per-organisation) accounting report: quota, GPUs in use, the GPU-hour budget
and what Slurm charges against it, fairshare, members and coordinators.

Two kinds of GPU-hours, never mixed in one number:

- **charged** (`gpu_hours_charged`): what Slurm counts against GrpTRESMins budgets, from sshare's
  GrpTRESRaw: GPU-minutes x the QOS UsageFactor of each job, decayed with PriorityDecayHalfLife
  (as `accounting.budget_mode` says), kept in whole minutes. The same number `scontrol show
  assoc_mgr` shows in GrpTRESMins=gres/gpu=LIMIT(USED).
- **run** (`gpu_hours_run_since`, with --since): GPU-hours jobs actually ran in the window, from
  sacct (every run of a requeued job, each clipped to the window): no UsageFactor, no decay.
- **lost** (`gpu_hours_lost_infra`, with --since): GPU-hours of the runs that ended in the window
  and failed for the infrastructure (`slurmadm jobs failures`' verdict, whole runs): what a site
  credits back.

`gpu_hours_left` is what Slurm would still let new jobs use: for the project and every
organisation above it that has a budget, budget - charged - what running jobs still hold until
their time limits (sshare TRESRunMins; AccountingStorageEnforce=safe starts a job only if its whole
time limit fits). The tightest of them is the one reported, and `budget_account` names it, so a
project without its own budget shows the budget it inherits.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ..site import Site
from ..slurm.accounting import AccountingState, ShareRow, gpus_of

COLUMNS = (
    "project", "organization", "gpu_quota", "gpus_in_use", "gpu_hours_budget", "budget_account",
    "gpu_hours_charged", "gpu_hours_running", "gpu_hours_left", "gpu_hours_run_since", "gpu_hours_lost_infra",
    "level_fs", "effective_usage", "norm_shares", "members", "coordinators",
)
ORG_COLUMNS = (
    "organization", "parent", "gpu_quota", "gpus_in_use", "gpu_hours_budget", "budget_account",
    "gpu_hours_charged", "gpu_hours_running", "gpu_hours_left", "gpu_hours_run_since", "gpu_hours_lost_infra",
    "level_fs", "effective_usage", "norm_shares", "coordinators",
)


@dataclass
class Usage:
    """One account's own numbers, as Slurm has them."""

    gpu_quota: int | None  # GrpTRES gres/gpu (None: no limit)
    budget: float | None  # GrpTRESMins gres/gpu / 60
    charged: float | None  # sshare GrpTRESRaw gres/gpu / 60 (UsageFactor x, decayed)
    running: float  # sshare TRESRunMins gres/gpu / 60: held by running jobs until their limits


@dataclass
class ProjectReport:
    project: str
    organization: str
    gpu_quota: int | None  # GrpTRES gres/gpu as slurmdbd has it (None: no limit)
    gpus_in_use: int | None  # held by running jobs now (None: Slurm does not track gres/gpu)
    gpu_hours_budget: float | None  # the budget that limits this project (its own or inherited)
    budget_account: str | None  # whose budget that is (None: no budget anywhere above)
    gpu_hours_charged: float | None  # this project's charged GPU-hours (sshare GrpTRESRaw)
    gpu_hours_running: float | None  # GPU-hours its running jobs still hold until their time limits
    gpu_hours_left: float | None  # min over the budgets above: budget - charged - running
    gpu_hours_run_since: float | None  # sacct, every run clipped to [since, now]; None without --since
    level_fs: float | None  # sshare LevelFS: > 1 under-served, < 1 over-served
    effective_usage: float | None
    norm_shares: float | None
    members: list[str] = field(default_factory=list)
    coordinators: list[str] = field(default_factory=list)  # as slurmdbd has them
    in_slurmdbd: bool = True
    gpu_hours_lost_infra: float | None = None  # failed runs with an infrastructure verdict; None without --since

    def to_json(self) -> dict:
        return _json(self)


@dataclass
class OrganizationReport:
    organization: str
    parent: str  # "" under root
    gpu_quota: int | None
    gpus_in_use: int | None  # running jobs of every project below it
    gpu_hours_budget: float | None
    budget_account: str | None
    gpu_hours_charged: float | None  # charged to it: the sum of everything below, as Slurm rolls up
    gpu_hours_running: float | None
    gpu_hours_left: float | None
    gpu_hours_run_since: float | None
    level_fs: float | None
    effective_usage: float | None
    norm_shares: float | None
    coordinators: list[str] = field(default_factory=list)
    in_slurmdbd: bool = True
    gpu_hours_lost_infra: float | None = None

    def to_json(self) -> dict:
        return _json(self)


def add_lost(site: Site, projects: list[ProjectReport], orgs: list[OrganizationReport],
             lost_by_account: dict[str, float]) -> None:
    """GPU-hours lost to infrastructure per project, rolled up to its organisations."""
    total: dict[str, float] = {}
    for account, hours in lost_by_account.items():
        for up in _chain(site, account):
            total[up] = total.get(up, 0.0) + hours
    for p in projects:
        p.gpu_hours_lost_infra = round(total.get(p.project, 0.0), 4)
    for o in orgs:
        o.gpu_hours_lost_infra = round(total.get(o.organization, 0.0), 4)


def _json(row) -> dict:
    out = asdict(row)
    if out["level_fs"] is not None and out["level_fs"] == float("inf"):
        out["level_fs"] = "inf"
    return out


def _hours(tres) -> float | None:
    return gpus_of(tres) / 60 if "gres/gpu" in tres else None


def _chain(site: Site, account: str) -> list[str]:
    """The account, then its organisations up to the top (site order of parents)."""
    parent_of = {o.name: o.parent or "" for o in site.organizations}
    parent_of.update({p.name: p.organization for p in site.projects})
    out, seen = [], set()
    while account and account not in seen:
        out.append(account)
        seen.add(account)
        account = parent_of.get(account, "")
    return out


def build_report(
    site: Site,
    state: AccountingState,
    running_gpus: dict[tuple[str, str], int],
    shares: list[ShareRow],
    minutes_since: dict[str, float] | None = None,
    gpu_tracked: bool | None = True,
) -> list[ProjectReport]:
    return build_full_report(site, state, running_gpus, shares, minutes_since, gpu_tracked)[0]


GPU_NOT_TRACKED = ("Slurm does not track gres/gpu (AccountingStorageTRES lacks it): jobs' GPUs, GPU-hours "
                   "and GPU limits are unknown to Slurm, not zero; add gres/gpu to AccountingStorageTRES")


def build_full_report(
    site: Site,
    state: AccountingState,
    running_gpus: dict[tuple[str, str], int],
    shares: list[ShareRow],
    minutes_since: dict[str, float] | None = None,
    gpu_tracked: bool | None = True,
) -> tuple[list[ProjectReport], list[OrganizationReport]]:
    """`gpu_tracked` False (AccountingStorageTRES without gres/gpu): every job reads as 0 GPUs,
    so the GPU numbers Slurm would give are unknown (None), never reported as zero."""
    projects, orgs = _build(site, state, running_gpus, shares, minutes_since)
    if gpu_tracked is False:
        for row in [*projects, *orgs]:
            row.gpus_in_use = None
            row.gpu_hours_charged = row.gpu_hours_running = row.gpu_hours_left = None
            row.gpu_hours_run_since = None
    return projects, orgs


def _build(
    site: Site,
    state: AccountingState,
    running_gpus: dict[tuple[str, str], int],
    shares: list[ShareRow],
    minutes_since: dict[str, float] | None,
) -> tuple[list[ProjectReport], list[OrganizationReport]]:
    share_of = {row.account: row for row in shares if not row.user}
    in_use: dict[str, int] = {}
    for (account, _user), n in running_gpus.items():
        for up in _chain(site, account):
            in_use[up] = in_use.get(up, 0) + n
    members: dict[str, list[str]] = {}
    for (account, user) in state.assocs:
        if user:
            members.setdefault(account, []).append(user)
    since: dict[str, float] = {}
    if minutes_since is not None:
        for account, minutes in minutes_since.items():
            for up in _chain(site, account):
                since[up] = since.get(up, 0.0) + minutes / 60

    def usage(account: str) -> Usage:
        assoc = state.assocs.get((account, ""))
        share = share_of.get(account)
        return Usage(
            gpu_quota=gpus_of(assoc.grp_tres) if assoc and "gres/gpu" in assoc.grp_tres else None,
            budget=_hours(assoc.grp_tres_mins) if assoc else None,
            charged=_hours(share.grp_tres_raw) if share else None,
            running=(_hours(share.tres_run_mins) or 0.0) if share else 0.0,
        )

    def limiting(account: str) -> tuple[float | None, str | None, float | None]:
        """(budget, whose, left) of the tightest budget at or above the account."""
        best: tuple[float | None, str | None, float | None] = (None, None, None)
        for up in _chain(site, account):
            u = usage(up)
            if u.budget is None:
                continue
            left = u.budget - (u.charged or 0.0) - u.running
            if best[2] is None or left < best[2]:
                best = (u.budget, up, left)
        return best

    def coordinators(name: str) -> list[str]:
        return sorted(state.accounts[name].coordinators) if name in state.accounts else []

    def common(name: str) -> dict:
        """The fields a project's and an organization's rows share."""
        u = usage(name)
        budget, whose, left = limiting(name)
        share = share_of.get(name)
        return dict(
            gpu_quota=u.gpu_quota,
            gpus_in_use=in_use.get(name, 0),
            gpu_hours_budget=budget,
            budget_account=whose,
            gpu_hours_charged=u.charged,
            gpu_hours_running=u.running,
            gpu_hours_left=left,
            gpu_hours_run_since=None if minutes_since is None else since.get(name, 0.0),
            level_fs=share.level_fs if share else None,
            effective_usage=share.effective_usage if share else None,
            norm_shares=share.norm_shares if share else None,
            coordinators=coordinators(name),
            in_slurmdbd=(name, "") in state.assocs,
        )

    projects = [
        ProjectReport(project=proj.name, organization=proj.organization,
                      members=sorted(members.get(proj.name, [])), **common(proj.name))
        for proj in site.projects
    ]
    orgs = [
        OrganizationReport(organization=org.name, parent=org.parent or "", **common(org.name))
        for org in site.organizations
    ]
    return projects, orgs


def _num(v, fmt="{:,.1f}") -> str:
    return "-" if v is None else fmt.format(v)


def _usage_cells(r, own: str, since: str | None) -> list[str]:
    """GPU quota .. left (and ran since) of a row, as people read them; a budget inherited from
    above names its account."""
    budget = "-"
    if r.gpu_hours_budget is not None:
        budget = _num(r.gpu_hours_budget) + ("" if r.budget_account == own else f" ({r.budget_account})")
    cells = [_num(r.gpu_quota, "{}"), _num(r.gpus_in_use, "{}"), budget, _num(r.gpu_hours_charged),
             _num(r.gpu_hours_running), _num(r.gpu_hours_left)]
    if since:
        cells.append(_num(r.gpu_hours_run_since))
        if r.gpu_hours_lost_infra is not None:
            cells.append(_num(r.gpu_hours_lost_infra, "{:,.2f}"))
    return cells + [_num(r.level_fs, "{:.3g}")]


def _usage_columns(since: str | None, lost: bool = False) -> list[str]:
    cols = ["GPU quota", "in use", "budget GPU-h", "charged GPU-h", "running GPU-h", "left GPU-h"]
    ran = [f"ran GPU-h since {since}"] + (["lost to infra GPU-h"] if lost else []) if since else []
    return cols + ran + ["LevelFS"]


def _named(name: str, in_slurmdbd: bool) -> str:
    return name + ("" if in_slurmdbd else " (not in slurmdbd)")


def project_table(rows: list[ProjectReport], since: str | None) -> tuple[list[str], list[list[str]]]:
    """Columns and rows of the projects' table of `accounts report` (members, * for coordinators)."""
    out = []
    for r in rows:
        people = ([m + ("*" if m in r.coordinators else "") for m in r.members]
                  + [f"{c}* (not a member)" for c in r.coordinators if c not in r.members])
        out.append([_named(r.project, r.in_slurmdbd), r.organization, *_usage_cells(r, r.project, since),
                    ", ".join(people)])
    lost = any(r.gpu_hours_lost_infra is not None for r in rows)
    return ["project", "org", *_usage_columns(since, lost), "members (* coordinator)"], out


def organization_table(orgs: list[OrganizationReport], since: str | None) -> tuple[list[str], list[list[str]]]:
    """Columns and rows of the organisations' table of `accounts report`."""
    out = [[_named(o.organization, o.in_slurmdbd), o.parent or "root", *_usage_cells(o, o.organization, since),
            ", ".join(o.coordinators)] for o in orgs]
    lost = any(o.gpu_hours_lost_infra is not None for o in orgs)
    return ["organisation", "parent", *_usage_columns(since, lost), "coordinators"], out
