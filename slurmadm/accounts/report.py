"""Per-project accounting report: quota, GPUs in use, GPU-hours used and left of the budget,
fairshare, members and coordinators. Reads slurmdbd (limits, members), squeue (GPUs held now), sshare (usage that
Slurm counts against the budget, fairshare) and, with --since, sacct (GPU-hours in a window)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ..site import Site
from ..slurm.accounting import AccountingState, ShareRow, gpus_of

COLUMNS = (
    "project", "organization", "gpu_quota", "gpus_in_use", "gpu_hours_budget", "gpu_hours_used",
    "gpu_hours_left", "gpu_hours_since", "level_fs", "effective_usage", "norm_shares", "members",
    "coordinators",
)


@dataclass
class ProjectReport:
    project: str
    organization: str
    gpu_quota: int | None  # GrpTRES gres/gpu as slurmdbd has it (None: no limit)
    gpus_in_use: int  # held by running jobs now
    gpu_hours_budget: float | None  # GrpTRESMins gres/gpu / 60
    gpu_hours_used: float | None  # sshare GrpTRESRaw gres/gpu / 60: what the budget is charged
    gpu_hours_left: float | None
    gpu_hours_since: float | None  # sacct, jobs clipped to [since, now]; None without --since
    level_fs: float | None  # sshare LevelFS: > 1 under-served, < 1 over-served
    effective_usage: float | None
    norm_shares: float | None
    members: list[str] = field(default_factory=list)
    coordinators: list[str] = field(default_factory=list)  # as slurmdbd has them
    in_slurmdbd: bool = True

    def to_json(self) -> dict:
        out = asdict(self)
        if out["level_fs"] is not None and out["level_fs"] == float("inf"):
            out["level_fs"] = "inf"
        return out


def build_report(
    site: Site,
    state: AccountingState,
    running_gpus: dict[tuple[str, str], int],
    shares: list[ShareRow],
    minutes_since: dict[str, float] | None = None,
) -> list[ProjectReport]:
    share_of = {row.account: row for row in shares if not row.user}
    in_use: dict[str, int] = {}
    for (account, _user), n in running_gpus.items():
        in_use[account] = in_use.get(account, 0) + n
    members: dict[str, list[str]] = {}
    for (account, user) in state.assocs:
        if user:
            members.setdefault(account, []).append(user)
    out = []
    for proj in site.projects:
        assoc = state.assocs.get((proj.name, ""))
        share = share_of.get(proj.name)
        quota = gpus_of(assoc.grp_tres) if assoc and "gres/gpu" in assoc.grp_tres else None
        budget = gpus_of(assoc.grp_tres_mins) / 60 if assoc and "gres/gpu" in assoc.grp_tres_mins else None
        used = gpus_of(share.grp_tres_raw) / 60 if share and "gres/gpu" in share.grp_tres_raw else None
        out.append(
            ProjectReport(
                project=proj.name,
                organization=proj.organization,
                gpu_quota=quota,
                gpus_in_use=in_use.get(proj.name, 0),
                gpu_hours_budget=budget,
                gpu_hours_used=used,
                gpu_hours_left=None if budget is None else budget - (used or 0.0),
                gpu_hours_since=None if minutes_since is None else minutes_since.get(proj.name, 0.0) / 60,
                level_fs=share.level_fs if share else None,
                effective_usage=share.effective_usage if share else None,
                norm_shares=share.norm_shares if share else None,
                members=sorted(members.get(proj.name, [])),
                coordinators=sorted(state.accounts[proj.name].coordinators) if proj.name in state.accounts else [],
                in_slurmdbd=assoc is not None,
            )
        )
    return out
