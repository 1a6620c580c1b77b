"""Site model: QOS, organisations and projects (Slurm accounts), users, and accounting settings.

`slurmadm accounts` reconciles these into slurmdbd (see slurmadm/accounts/). Limits use untyped
`gres/gpu` throughout: a typed limit (`gres/gpu:b200`) is bypassed by untyped requests (Slurm
resource_limits.shtml), and `AccountingStorageTRES=gres/gpu` must be set for any of them to count.

What each key becomes in Slurm:

    organizations[*]          account under `parent` (another organisation) or root
    projects[*]               account under its organisation; jobs run under projects
    .fairshare                Fairshare=N, or Fairshare=parent (compete as the parent account)
    .gpu_quota                GrpTRES=gres/gpu=N: GPUs the account's running jobs may hold at once
    .gpu_hours                GrpTRESMins=gres/gpu=N*60: the GPU-hour budget (see budget_mode)
    projects[*].members       user associations under the project
    .member_fairshare         the members' Fairshare (1, or parent: the project is the unit)
    .user_gpu_cap             each member's GrpTRES=gres/gpu=N in this project
    .member_gpu_caps          per-member overrides of user_gpu_cap
    .qos / .default_qos       QOS= / DefaultQOS= on the project (members inherit them)
    users[*]                  more memberships and a user's default project (DefaultAccount)
    qos[*]                    QOS with Priority, Preempt, PreemptMode, UsageFactor, Flags, limits
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING, Annotated, Literal

from pydantic import Field, PositiveInt

from .profiles import Strict

if TYPE_CHECKING:  # pragma: no cover
    from .model import Site

# Names Slurm keeps as written. sacctmgr lowercases account and QOS names (and user names unless
# slurmdbd has PreserveCaseUser), turns ' into `, and cuts names at 255 bytes; ',' splits lists,
# ':' '=' '#' break its load files and '|' its parsable output. Anything outside these patterns
# would be stored as something else than the site says, and never reconcile.
SlurmName = Annotated[str, Field(pattern=r"^[a-z][a-z0-9_\-]{0,63}$")]
UserName = Annotated[str, Field(pattern=r"^[a-z_][a-z0-9_\-.]{0,31}$")]
# Free text that survives sacctmgr's argv, its load file and its `-P` output (Slurm lowercases it).
Description = Annotated[str, Field(pattern=r"^[^'\"#|:\\\n\r\t]{0,200}$")]
# Slurm time: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS, or UNLIMITED/INFINITE.
SlurmTime = Annotated[
    str,
    Field(pattern=r"^(INFINITE|UNLIMITED|\d+|\d+:\d{2}|\d+:\d{2}:\d{2}|\d+-\d{1,2}(:\d{2}(:\d{2})?)?)$"),
]
# Slurm keeps shares and QOS priorities in uint32 (below NO_VAL) and GrpTRESMins in uint64 minutes.
_UINT32 = 2**32 - 3
Fairshare = Annotated[int, Field(gt=0, le=_UINT32)] | Literal["parent"]
GpuHours = Annotated[int, Field(gt=0, le=(2**63 - 1) // 60)]


def slurm_time_seconds(text: str) -> int | None:
    """Seconds of a SlurmTime (`90`, `30:00`, `02:00:00`, `1-12`, `1-12:30:00`); None for
    INFINITE/UNLIMITED. Plain numbers are minutes and MM:SS is minutes:seconds, as in Slurm."""
    if text in ("INFINITE", "UNLIMITED"):
        return None
    days = 0
    if "-" in text:  # D-HH, D-HH:MM, D-HH:MM:SS
        day_text, text = text.split("-", 1)
        days = int(day_text)
        h, m, s = ([int(x) for x in text.split(":")] + [0, 0])[:3]
    else:
        parts = [int(x) for x in text.split(":")]
        h, m, s = {1: (0, parts[0], 0), 2: (0, *parts), 3: tuple(parts)}[len(parts)]
    return days * 86400 + h * 3600 + m * 60 + s

QosFlag = Literal[
    "DenyOnLimit",
    "EnforceUsageThreshold",
    "NoDecay",
    "NoReserve",
    "OverPartQOS",
    "PartitionMaxNodes",
    "PartitionMinNodes",
    "PartitionTimeLimit",
    "RequiresReservation",
    "UsageFactorSafe",
]


class Qos(Strict):
    name: SlurmName
    description: Description = ""  # empty: Slurm uses the name
    priority: Annotated[int, Field(ge=0, le=_UINT32)] = 0
    # QOS names this QOS may preempt (PreemptType=preempt/qos).
    preempt: list[SlurmName] = []
    # What happens to a job of this QOS when it is preempted ("cluster": slurm.conf PreemptMode).
    preempt_mode: Literal["cluster", "cancel", "requeue", "suspend"] = "cluster"
    # Multiplies the usage charged to fairshare and GPU-hour budgets (0: free, 2: double).
    usage_factor: Annotated[float, Field(ge=0.0)] = 1.0
    flags: list[QosFlag] = []
    max_gpus_per_user: PositiveInt | None = None  # MaxTRESPerUser=gres/gpu=N
    max_gpus_per_job: PositiveInt | None = None  # MaxTRESPerJob=gres/gpu=N
    grp_gpus: PositiveInt | None = None  # GrpTRES=gres/gpu=N (all jobs in the QOS)
    max_wall: SlurmTime | None = None  # MaxWall


class Organization(Strict):
    """A parent account (a department, an institute). Projects hang under it."""

    name: SlurmName
    parent: SlurmName | None = None  # another organisation; none: directly under root
    description: Description = ""
    fairshare: Fairshare = 1
    gpu_quota: PositiveInt | None = None  # GrpTRES=gres/gpu=N for the whole organisation
    gpu_hours: GpuHours | None = None  # GrpTRESMins=gres/gpu=N*60 for the whole organisation
    # Slurm coordinators (sacctmgr add coordinator): may manage users, limits and jobs of this
    # account and every account below it. Users the site declares (members of some project).
    coordinators: list[UserName] = []


class Project(Strict):
    """A Slurm account whose members run jobs. GPU limits are untyped gres/gpu."""

    name: SlurmName
    organization: SlurmName
    description: Description = ""
    fairshare: Fairshare = 1
    gpu_quota: PositiveInt | None = None  # concurrent GPUs: GrpTRES=gres/gpu=N
    gpu_hours: GpuHours | None = None  # budget: GrpTRESMins=gres/gpu=(hours*60)
    user_gpu_cap: PositiveInt | None = None  # per member: user association GrpTRES=gres/gpu=N
    member_gpu_caps: dict[UserName, PositiveInt] = {}  # per-member overrides of user_gpu_cap
    member_fairshare: Fairshare = 1  # the members' Fairshare within the project
    default_qos: SlurmName = "normal"
    qos: list[SlurmName] = ["normal"]
    members: list[UserName] = []
    # Slurm coordinators of the project (the PI): may add and remove its members' associations,
    # change their limits and hold or cancel their jobs. Users the site declares.
    coordinators: list[UserName] = []


class User(Strict):
    """A user's memberships beyond `projects[*].members`, and their default project."""

    name: UserName
    projects: list[SlurmName] = []
    # DefaultAccount; must be one of the user's projects. Unset: keep Slurm's current default
    # while it is one of them, otherwise the first of the user's projects in site order.
    default_project: SlurmName | None = None


BudgetMode = Literal["decay", "reset", "lifetime"]
ResetPeriod = Literal["NONE", "DAILY", "WEEKLY", "MONTHLY", "QUARTERLY", "YEARLY"]


class AccountingSettings(Strict):
    # How GPU-hour budgets (GrpTRESMins) refill. Slurm charges budgets from the same usage that
    # fairshare uses, so this also sets how fairshare forgets (see priority_usage_settings):
    #   decay:    used GPU-minutes decay with slurm.priority.decay_half_life; a budget is a
    #             rolling allowance that refills by itself (half of the use is forgiven after
    #             one half-life). budget_reset_period must be NONE.
    #   reset:    no decay (PriorityDecayHalfLife=0); usage returns to 0 every
    #             budget_reset_period: a hard allowance per period.
    #   lifetime: no decay and no reset: a budget is spent once; raise gpu_hours to top it up.
    # When a budget is spent, Slurm cancels the account's running jobs and holds new ones
    # (AssocGrpGRESMinutes) until usage falls below it again.
    budget_mode: BudgetMode = "decay"
    budget_reset_period: ResetPeriod = "NONE"
    # Never deleted by `accounts apply --prune` (root is Slurm's own account and its admin user;
    # normal is Slurm's default QOS). Protected accounts cannot be declared; a protected user or
    # QOS the site declares is still kept in line with it, and a protected user's default
    # account is left alone.
    protected_accounts: list[SlurmName] = ["root"]
    protected_users: list[UserName] = ["root"]
    protected_qos: list[SlurmName] = ["normal"]
    # `accounts apply` saves `sacctmgr dump` (and the QOS table, which dump leaves out) here
    # before changing anything. Default: accounts-backups/ next to the store file.
    backup_dir: Annotated[str, Field(pattern=r"^/")] | None = None
    backup_keep: Annotated[int, Field(ge=1, le=10000)] = 50  # backups kept in backup_dir (oldest removed)


def priority_usage_settings(site: Site) -> dict[str, str]:
    """slurm.conf PriorityDecayHalfLife and PriorityUsageResetPeriod for the site's budget mode.
    The single source of these two values: the slurm.conf renderer calls this."""
    mode = site.accounting.budget_mode
    if mode == "decay":
        return {"PriorityDecayHalfLife": site.slurm.priority.decay_half_life, "PriorityUsageResetPeriod": "NONE"}
    period = site.accounting.budget_reset_period if mode == "reset" else "NONE"
    return {"PriorityDecayHalfLife": "0", "PriorityUsageResetPeriod": period}


def slurm_time_minutes(text: str) -> int | None:
    """A SlurmTime in whole minutes, seconds rounded up (None: INFINITE/UNLIMITED or empty, as
    sacctmgr prints no limit). Raises ValueError for anything else."""
    if not text.strip():
        return None
    seconds = slurm_time_seconds(text.strip())
    return None if seconds is None else -(-seconds // 60)


def memberships(site: Site) -> dict[str, list[str]]:
    """user -> projects, in site order (projects[*].members first, then users[*].projects)."""
    out: dict[str, list[str]] = {}
    for proj in site.projects:
        for member in proj.members:
            out.setdefault(member, [])
            if proj.name not in out[member]:
                out[member].append(proj.name)
    order = {p.name: i for i, p in enumerate(site.projects)}
    for user in site.users:
        have = out.setdefault(user.name, [])
        for name in user.projects:
            if name not in have:
                have.append(name)
        have.sort(key=lambda n: order.get(n, len(order)))
    return out


def dupes(names: Iterable[str]) -> list[str]:
    """Names that occur more than once, in order of first occurrence."""
    return [n for n, c in Counter(names).items() if c > 1]


def account_problems(site: Site) -> list[str]:
    """Cross-reference checks of [[qos]], [[organizations]], [[projects]], [[users]] and
    [accounting], one line per problem starting with the key path."""
    problems: list[str] = []
    p = problems.append
    total = site.total_gpus
    qos_names = {q.name for q in site.qos}

    def quota(value: int | None, path: str, what: str = "GPUs") -> None:
        if value is not None and value > total:
            p(f"{path}: {value} {what} is above the cluster's {total} GPUs")

    def known_qos(name: str, path: str) -> None:
        if name not in qos_names:
            p(f"{path}: QOS {name!r} is not defined in [[qos]]")

    # ---- QOS ----
    for name in dupes([q.name for q in site.qos]):
        p(f"qos: QOS {name!r} is defined twice")
    for i, q in enumerate(site.qos):
        for j, target in enumerate(q.preempt):
            known_qos(target, f"qos[{i}].preempt[{j}]")
            if target == q.name:
                p(f"qos[{i}].preempt[{j}]: QOS {q.name!r} cannot preempt itself")
        for name in dupes(list(q.flags)):
            p(f"qos[{i}].flags: {name!r} is listed twice")
        quota(q.max_gpus_per_user, f"qos[{i}].max_gpus_per_user")
        quota(q.max_gpus_per_job, f"qos[{i}].max_gpus_per_job")
        quota(q.grp_gpus, f"qos[{i}].grp_gpus")
    by_name = site.qos_by_name()
    for i, q in enumerate(site.qos):
        for j, target in enumerate(q.preempt):
            if q.name in getattr(by_name.get(target), "preempt", []):
                p(f"qos[{i}].preempt[{j}]: {q.name!r} and {target!r} preempt each other")

    # ---- organisations and projects ----
    org_names = [o.name for o in site.organizations]
    proj_names = [x.name for x in site.projects]
    for name in dupes(org_names + proj_names):
        p(f"organizations/projects: account name {name!r} is used twice")
    for what, names in (("organizations", org_names), ("projects", proj_names)):
        for i, name in enumerate(names):
            if name in site.accounting.protected_accounts:
                p(f"{what}[{i}].name: {name!r} is a protected account (Slurm's own root, or "
                  "accounting.protected_accounts) and cannot be declared")
    orgs = {o.name: o for o in site.organizations}
    for i, org in enumerate(site.organizations):
        quota(org.gpu_quota, f"organizations[{i}].gpu_quota")
        if org.parent is None:
            continue
        if org.parent not in orgs:
            p(f"organizations[{i}].parent: {org.parent!r} is not a defined organization")
            continue
        seen = {org.name}
        cur: str | None = org.parent
        while cur is not None and cur in orgs:
            if cur in seen:
                p(f"organizations[{i}].parent: {org.name!r} is its own ancestor (a cycle)")
                break
            seen.add(cur)
            cur = orgs[cur].parent
    for i, proj in enumerate(site.projects):
        path = f"projects[{i}]"
        if proj.organization not in orgs:
            p(f"{path}.organization: {proj.organization!r} is not a defined organization")
        known_qos(proj.default_qos, f"{path}.default_qos")
        for j, name in enumerate(proj.qos):
            known_qos(name, f"{path}.qos[{j}]")
        for name in dupes(list(proj.qos)):
            p(f"{path}.qos: QOS {name!r} is listed twice")
        if proj.default_qos not in proj.qos:
            p(f"{path}.default_qos: {proj.default_qos!r} is not in the project's qos list {proj.qos}")
        quota(proj.gpu_quota, f"{path}.gpu_quota")
        quota(proj.user_gpu_cap, f"{path}.user_gpu_cap")
        if proj.user_gpu_cap and proj.gpu_quota and proj.user_gpu_cap > proj.gpu_quota:
            p(f"{path}.user_gpu_cap: {proj.user_gpu_cap} is above the project's gpu_quota {proj.gpu_quota}")
        for name in dupes(list(proj.members)):
            p(f"{path}.members: user {name!r} is listed twice")
        for user, cap in proj.member_gpu_caps.items():
            if user not in proj.members and not any(
                u.name == user and proj.name in u.projects for u in site.users
            ):
                p(f"{path}.member_gpu_caps.{user}: {user!r} is not a member of {proj.name!r}")
            quota(cap, f"{path}.member_gpu_caps.{user}")
            if proj.gpu_quota and cap > proj.gpu_quota:
                p(f"{path}.member_gpu_caps.{user}: {cap} is above the project's gpu_quota {proj.gpu_quota}")

    # ---- coordinators: Slurm needs them to exist as users ----
    known_users = set(memberships(site)) | set(site.accounting.protected_users)
    for what, items in (("organizations", site.organizations), ("projects", site.projects)):
        for i, item in enumerate(items):
            for name in dupes(list(item.coordinators)):
                p(f"{what}[{i}].coordinators: user {name!r} is listed twice")
            for j, name in enumerate(item.coordinators):
                if name not in known_users:
                    p(f"{what}[{i}].coordinators[{j}]: {name!r} is not a member of any project "
                      "(Slurm only makes existing users coordinators)")
            # a coordinator of an account coordinates everything below it: naming them again
            # below would be a second, indistinguishable record in slurmdbd
            above, seen = (item.organization if what == "projects" else item.parent), set()
            while above is not None and above in orgs and above not in seen:
                seen.add(above)
                for j, name in enumerate(item.coordinators):
                    if name in orgs[above].coordinators:
                        p(f"{what}[{i}].coordinators[{j}]: {name!r} already coordinates it as a "
                          f"coordinator of {above!r}")
                above = orgs[above].parent

    # ---- users ----
    projects = set(proj_names)
    for name in dupes([u.name for u in site.users]):
        p(f"users: user {name!r} is listed twice")
    member_of = memberships(site)
    for i, user in enumerate(site.users):
        for j, name in enumerate(user.projects):
            if name not in projects:
                p(f"users[{i}].projects[{j}]: {name!r} is not a defined project")
        if user.default_project is not None and user.default_project not in member_of.get(user.name, []):
            p(f"users[{i}].default_project: {user.name!r} is not a member of {user.default_project!r}")

    # ---- budgets need time limits ----
    # Slurm starts a job under a GrpTRESMins budget only if its GPUs x time limit fits in what is
    # left; a job without a limit (INFINITE) waits forever with reason AssocGrpGRESMinutes.
    budgeted = [f"projects[{i}]" for i, x in enumerate(site.projects) if x.gpu_hours] + [
        f"organizations[{i}]" for i, x in enumerate(site.organizations) if x.gpu_hours]
    if budgeted:
        for i, part in enumerate(site.partitions):
            if part.default_time is None and slurm_time_minutes(part.max_time) is None:
                p(f"partitions[{i}].default_time: jobs that give no --time never start under a GPU-hour "
                  f"budget ({budgeted[0]}.gpu_hours; they wait with AssocGrpGRESMinutes): set default_time "
                  "or a finite max_time")

    # ---- accounting ----
    acc = site.accounting
    if acc.budget_mode == "decay":
        if acc.budget_reset_period != "NONE":
            p(f"accounting.budget_reset_period: {acc.budget_reset_period!r} needs budget_mode = "
              "\"reset\" (with \"decay\" usage decays instead of being reset)")
        if slurm_time_minutes(site.slurm.priority.decay_half_life) in (0, None):
            p("accounting.budget_mode: \"decay\" needs slurm.priority.decay_half_life above 0")
    elif acc.budget_mode == "reset" and acc.budget_reset_period == "NONE":
        p("accounting.budget_reset_period: budget_mode \"reset\" needs a period (DAILY ... YEARLY)")
    return problems
