"""What slurmdbd should hold, derived from the site: the same record types the sacctmgr adapter
reads (slurmadm.slurm.accounting), so the plan compares like with like."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..site import Site
from ..site.accounts import slurm_time_minutes
from ..slurm.accounting import AccountRecord, AssocRecord, QosRecord

GPU = "gres/gpu"


def _gpus(n: int | None) -> dict[str, str]:
    return {} if n is None else {GPU: str(n)}


def _gpu_minutes(hours: int | None) -> dict[str, str]:
    return {} if hours is None else {GPU: str(hours * 60)}


@dataclass
class Desired:
    cluster: str
    qos: dict[str, QosRecord] = field(default_factory=dict)
    accounts: dict[str, AccountRecord] = field(default_factory=dict)
    assocs: dict[tuple[str, str], AssocRecord] = field(default_factory=dict)
    depth: dict[str, int] = field(default_factory=dict)  # account -> depth below root (1 = top)
    organizations: set[str] = field(default_factory=set)
    memberships: dict[str, list[str]] = field(default_factory=dict)  # user -> projects, site order
    default_project: dict[str, str] = field(default_factory=dict)  # user -> explicit default
    protected_accounts: frozenset[str] = frozenset()
    protected_users: frozenset[str] = frozenset()
    protected_qos: frozenset[str] = frozenset()


def desired_state(site: Site) -> Desired:
    acc = site.accounting
    want = Desired(
        cluster=site.cluster.name,
        protected_accounts=frozenset(acc.protected_accounts) | {"root"},
        protected_users=frozenset(acc.protected_users),
        protected_qos=frozenset(acc.protected_qos),
        memberships=site.memberships,
        default_project={u.name: u.default_project for u in site.users if u.default_project},
    )
    for q in site.qos:
        want.qos[q.name] = QosRecord(
            name=q.name,
            description=q.description or q.name,  # Slurm's own default description is the name
            priority=q.priority,
            preempt=frozenset(q.preempt),
            preempt_mode=q.preempt_mode,
            usage_factor=q.usage_factor,
            flags=frozenset(q.flags),
            max_tres_per_user=_gpus(q.max_gpus_per_user),
            max_tres_per_job=_gpus(q.max_gpus_per_job),
            grp_tres=_gpus(q.grp_gpus),
            max_wall=None if q.max_wall is None else slurm_time_minutes(q.max_wall),
        )

    orgs = {o.name: o for o in site.organizations}

    def depth(name: str) -> int:
        parent = orgs[name].parent
        return 1 if parent is None else depth(parent) + 1

    def top(name: str) -> str:
        parent = orgs[name].parent
        return name if parent is None else top(parent)

    for org in site.organizations:
        want.organizations.add(org.name)
        want.depth[org.name] = depth(org.name)
        want.accounts[org.name] = AccountRecord(org.name, org.description or org.name, top(org.name),
                                                frozenset(org.coordinators))
        want.assocs[(org.name, "")] = AssocRecord(
            account=org.name,
            parent=org.parent or "root",
            shares=org.fairshare,
            grp_tres=_gpus(org.gpu_quota),
            grp_tres_mins=_gpu_minutes(org.gpu_hours),
        )
    members: dict[str, list[str]] = {}
    for user, projects in site.memberships.items():
        for proj in projects:
            members.setdefault(proj, []).append(user)
    for proj in site.projects:
        want.depth[proj.name] = depth(proj.organization) + 1
        want.accounts[proj.name] = AccountRecord(proj.name, proj.description or proj.name, top(proj.organization),
                                                 frozenset(proj.coordinators))
        want.assocs[(proj.name, "")] = AssocRecord(
            account=proj.name,
            parent=proj.organization,
            shares=proj.fairshare,
            grp_tres=_gpus(proj.gpu_quota),
            grp_tres_mins=_gpu_minutes(proj.gpu_hours),
            qos=frozenset(proj.qos),
            default_qos=proj.default_qos,
        )
        for user in members.get(proj.name, []):
            cap = proj.member_gpu_caps.get(user, proj.user_gpu_cap)
            # Members inherit the project's QOS and default QOS: empty here, as stored.
            want.assocs[(proj.name, user)] = AssocRecord(
                account=proj.name, user=user, shares=proj.member_fairshare, grp_tres=_gpus(cap)
            )
    return want
