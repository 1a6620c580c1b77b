"""The accounts part of the site model: bad input is refused before anything talks to slurmdbd,
with one line naming the key path; budget modes map to slurm.conf values."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from slurmadm.cli import cli
from slurmadm.errors import SiteError
from slurmadm.site import load_site, parse_site
from slurmadm.site.accounts import (
    memberships,
    priority_usage_settings,
    slurm_time_minutes,
)
from tests.unit.siteedit import EXAMPLE, edited, put

pytestmark = pytest.mark.unit



def append(section: str, entry: dict):
    return lambda data: data.setdefault(section, []).append(entry)


BAD = [
    # names Slurm would store differently (lowercased, ' -> `), or that break its syntax
    ("uppercase-project", put("projects.1.name", "Phys-Lattice"), "projects[1].name: 'Phys-Lattice' is not allowed"),
    ("comma-in-qos-name", put("qos.2.name", "low,cheap"), "qos[2].name: 'low,cheap' is not allowed"),
    ("quote-in-user", put("projects.1.members", ["o'brien"]), "projects[1].members[0]: \"o'brien\" is not allowed"),
    ("pipe-in-description", put("projects.1.description", "a|b"), "projects[1].description: 'a|b' is not allowed"),
    ("colon-in-description", put("organizations.1.description", "Physics: theory"),
     "organizations[1].description: 'Physics: theory' is not allowed"),
    ("overlong-account", put("projects.1.name", "p" * 65), "projects[1].name:"),
    ("root-declared", put("organizations.0.name", "root"), "organizations[0].name: 'root' is a protected account"),
    # undefined references
    ("undefined-qos-in-list", put("projects.2.qos", ["normal", "urgent"]), "projects[2].qos[1]: QOS 'urgent' is not defined"),
    ("default-qos-not-in-list", put("projects.2.default_qos", "high"),
     "projects[2].default_qos: 'high' is not in the project's qos list"),
    ("undefined-parent-org", put("organizations.4.parent", "engineering"),
     "organizations[4].parent: 'engineering' is not a defined organization"),
    ("org-cycle", lambda d: (d["organizations"][3].__setitem__("parent", "ml-students")),
     "organizations[3].parent: 'ml' is its own ancestor"),
    ("user-in-undefined-project", append("users", {"name": "zoe", "projects": ["chemistry"]}),
     "users[2].projects[0]: 'chemistry' is not a defined project"),
    ("default-project-not-member", put("users.0.default_project", "bio-fold"),
     "users[0].default_project: 'alice' is not a member of 'bio-fold'"),
    ("cap-for-non-member", put("projects.1.member_gpu_caps", {"zoe": 8}),
     "projects[1].member_gpu_caps.zoe: 'zoe' is not a member of 'phys-lattice'"),
    ("coordinator-not-a-user", put("projects.1.coordinators", ["zoe"]),
     "projects[1].coordinators[0]: 'zoe' is not a member of any project"),
    ("duplicate-coordinator", put("organizations.3.coordinators", ["frank", "frank"]),
     "organizations[3].coordinators: user 'frank' is listed twice"),
    ("coordinator-of-parent-too", put("projects.4.coordinators", ["frank"]),
     "projects[4].coordinators[0]: 'frank' already coordinates it as a coordinator of 'ml'"),
    # duplicates
    ("duplicate-qos", put("qos.3.name", "low"), "qos: QOS 'low' is defined twice"),
    ("org-and-project-same-name", put("projects.0.name", "ops"), "account name 'ops' is used twice"),
    ("duplicate-user-entry", append("users", {"name": "alice"}), "users: user 'alice' is listed twice"),
    ("duplicate-flag", put("qos.0.flags", ["DenyOnLimit", "DenyOnLimit"]), "qos[0].flags: 'DenyOnLimit' is listed twice"),
    # quotas
    ("org-quota-above-cluster", put("organizations.1.gpu_quota", 4096),
     "organizations[1].gpu_quota: 4096 GPUs is above the cluster's 1024 GPUs"),
    ("member-cap-above-quota", put("projects.1.member_gpu_caps", {"bob": 300}),
     "projects[1].member_gpu_caps.bob: 300 is above the project's gpu_quota 256"),
    ("user-cap-above-quota", put("projects.5.user_gpu_cap", 100), "projects[5].user_gpu_cap: 100 is above the project's gpu_quota 64"),
    ("mutual-preemption", put("qos.2.preempt", ["high"]), "qos[2].preempt[0]: 'low' and 'high' preempt each other"),
    # budgets
    ("decay-with-reset-period", put("accounting.budget_reset_period", "MONTHLY"),
     "accounting.budget_reset_period: 'MONTHLY' needs budget_mode = \"reset\""),
    ("reset-without-period", put("accounting.budget_mode", "reset"), "accounting.budget_reset_period: budget_mode \"reset\" needs a period"),
    ("unknown-budget-mode", put("accounting.budget_mode", "monthly"), "accounting.budget_mode: got 'monthly'"),
    ("negative-hours", put("projects.1.gpu_hours", -5), "projects[1].gpu_hours: must be > 0, got -5"),
    ("budget-without-time-limit", lambda d: d["partitions"][0].pop("default_time") and d["partitions"][0].update(max_time="INFINITE"),
     "partitions[0].default_time: jobs that give no --time never start under a GPU-hour budget"),
]


@pytest.mark.parametrize("case", BAD, ids=[c[0] for c in BAD])
def test_bad_accounts_input_is_refused_with_key_path(case, tmp_path):
    _, change, expected = case
    path = tmp_path / "site.toml"
    path.write_text(edited(change))
    with pytest.raises(SiteError) as err:
        load_site(path)
    assert any(expected in line for line in err.value.lines()), err.value.lines()
    # the accounts commands refuse it the same way, before touching slurmdbd
    result = CliRunner().invoke(cli, ["accounts", "plan", "--site", str(path)])
    assert result.exit_code == 2
    assert expected in result.output and "Traceback" not in result.output


def test_example_accounts():
    site = load_site(EXAMPLE)
    assert site.memberships["alice"] == ["phys-lattice", "ml-llm"]
    assert site.memberships["grace"] == ["ml-llm", "ml-vision"]  # project members, then [[users]]
    assert {u for u, _ in site.memberships.items()} >= {"root", "bob", "carol", "ivan"}
    orgs = {o.name: o for o in site.organizations}
    assert orgs["ml-students"].parent == "ml" and orgs["ml-students"].gpu_hours == 20000


def test_memberships_order_follows_the_site():
    site = parse_site(edited(
        append("users", {"name": "zoe", "projects": ["ml-llm", "ops-burnin"], "default_project": "ml-llm"})
    ))
    assert memberships(site)["zoe"] == ["ops-burnin", "ml-llm"]  # site order, not the user's list


@pytest.mark.parametrize("mode,period,expected", [
    ("decay", "NONE", {"PriorityDecayHalfLife": "14-0", "PriorityUsageResetPeriod": "NONE"}),
    ("reset", "MONTHLY", {"PriorityDecayHalfLife": "0", "PriorityUsageResetPeriod": "MONTHLY"}),
    ("reset", "QUARTERLY", {"PriorityDecayHalfLife": "0", "PriorityUsageResetPeriod": "QUARTERLY"}),
    ("lifetime", "NONE", {"PriorityDecayHalfLife": "0", "PriorityUsageResetPeriod": "NONE"}),
])
def test_budget_mode_gives_the_slurm_conf_priority_values(mode, period, expected):
    site = parse_site(edited(put("accounting.budget_mode", mode), put("accounting.budget_reset_period", period)))
    assert priority_usage_settings(site) == expected


def test_decay_needs_a_half_life():
    with pytest.raises(SiteError, match="needs slurm.priority.decay_half_life above 0"):
        parse_site(edited(put("slurm.priority.decay_half_life", "0")))


@pytest.mark.parametrize("text,minutes", [
    ("90", 90), ("05:30", 6), ("01:00:00", 60), ("2-00:00:00", 2880), ("1-12", 2160), ("14-0", 20160),
    ("1-02:03", 1563), ("INFINITE", None), ("UNLIMITED", None),
])
def test_slurm_time_minutes(text, minutes):
    assert slurm_time_minutes(text) == minutes


def test_slurm_time_minutes_refuses_garbage():
    with pytest.raises(ValueError):
        slurm_time_minutes("two days")
