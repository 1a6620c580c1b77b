"""Builders for the accounts unit tests: sites derived from the example, and slurmdbd states built
the way slurmdbd stores them (import: from tests.unit.accounts.states import ...)."""

from __future__ import annotations

import dataclasses

from slurmadm.accounts import desired_state
from slurmadm.site import Site, parse_site
from slurmadm.slurm.accounting import (
    AccountingState,
    AccountRecord,
    AssocRecord,
    QosRecord,
)
from tests.unit.siteedit import edited


def site_with(*edits) -> Site:
    """The example site after each edit(data) on its TOML data."""
    return parse_site(edited(*edits))


def empty_slurmdbd(cluster: str = "b200") -> AccountingState:
    """A fresh cluster: root account and user, Slurm's normal QOS."""
    return AccountingState(
        cluster=cluster,
        qos={"normal": QosRecord("normal", description="Normal QOS default")},
        assocs={("root", ""): AssocRecord("root", qos=frozenset({"normal"})),
                ("root", "root"): AssocRecord("root", "root")},
        accounts={"root": AccountRecord("root", "default root account", "root")},
        default_account={"root": "root"},
    )


def as_stored(site: Site) -> AccountingState:
    """What slurmdbd holds after a perfect apply of `site` (text lowercased as sacctmgr does)."""
    want = desired_state(site)
    state = empty_slurmdbd(want.cluster)
    for name, q in want.qos.items():
        state.qos[name] = dataclasses.replace(q, description=q.description.lower())
    for name, a in want.accounts.items():
        state.accounts[name] = AccountRecord(name, a.description.lower(), a.organization.lower(), a.coordinators)
    state.assocs.update(want.assocs)
    for user, projects in site.memberships.items():
        if user != "root":
            state.default_account[user] = want.default_project.get(user, projects[0])
    return state
