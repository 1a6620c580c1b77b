"""Rollout plans, waves, the failure budget and the reboot rule, on plain data."""

from __future__ import annotations

import pytest

from slurmadm.errors import SiteError, UsageError
from slurmadm.fleet.rollout import budget, health_failures, load_plan, reboot_argv, waves
from slurmadm.fleet.ssh import Reply

pytestmark = pytest.mark.unit
NODES = [f"b200-{i:03d}" for i in range(1, 11)]


def test_waves_canary_first_then_fractions():
    assert waves(NODES, 2, 0.25) == [NODES[:2], NODES[2:5], NODES[5:8], NODES[8:]]
    assert waves(NODES[:4], 1, 0.5) == [NODES[:1], NODES[1:3], NODES[3:4]]
    assert waves(NODES[:3], 0, 1.0) == [NODES[:3]]
    assert waves(NODES[:1], 5, 0.25) == [NODES[:1]]


def test_failure_budget():
    assert budget(128, 0.05) == 6  # stops at the 7th failure
    assert budget(4, 0.05) == 0
    assert budget(10, 0.3) == 3


def test_reboot_rule_follows_return_to_service():
    r = "slurmadm: rollout: x [rollout]"
    assert reboot_argv("b200-001", r, 1) == ["scontrol", "reboot", "ASAP", "nextstate=DOWN", f"reason={r}", "b200-001"]
    assert reboot_argv("b200-001", r, 0)[2:4] == ["ASAP", "nextstate=DOWN"]
    # ReturnToService=2 returns a DOWN node at once: the drained node is rebooted plainly
    assert reboot_argv("b200-001", r, 2) == ["scontrol", "reboot", f"reason={r}", "b200-001"]


def write(tmp_path, text):
    p = tmp_path / "plan.toml"
    p.write_text(text)
    return p


def test_plan_loads_and_renders_package_targets(tmp_path):
    plan, sha = load_plan(write(tmp_path, 'name = "drv"\n[[steps]]\npackages = ["nvidia-driver-575=575.51.03-0ubuntu1"]\n'
                                          '[[steps]]\nrun = "systemctl restart nvidia-fabricmanager"\n'
                                          '[expect]\ndriver = "575.51.03"\n'))
    assert len(sha) == 64 and plan.reboot
    assert plan.command(plan.steps[0]) == ("DEBIAN_FRONTEND=noninteractive apt-get install -y --allow-downgrades "
                                           "nvidia-driver-575=575.51.03-0ubuntu1")
    assert plan.command(plan.steps[1]) == "systemctl restart nvidia-fabricmanager"


@pytest.mark.parametrize("text,expected", [
    ('name = "x"\n', "steps: required key is missing"),
    ('name = "x y"\n[[steps]]\nrun = "true"\n', "name:"),
    ('name = "x"\n[[steps]]\nrun = "true"\npackages = ["a"]\n', "steps[0]: give exactly one of run, packages or firmware"),
    ('name = "x"\n[[steps]]\npackages = ["a; reboot"]\n', "steps[0].packages[0]"),
    ('name = "x"\n[[steps]]\nrun = "true"\nrebot = true\n', "unknown key"),
    ('name = "x"\nwave_fraction = 0\n[[steps]]\nrun = "true"\n', "wave_fraction"),
])
def test_bad_plans_name_the_key(tmp_path, text, expected):
    with pytest.raises(SiteError) as err:
        load_plan(write(tmp_path, text))
    assert any(expected in line for line in err.value.lines()), err.value.lines()


def test_unreadable_plan(tmp_path):
    with pytest.raises(UsageError, match="cannot read"):
        load_plan(tmp_path / "missing.toml")
    with pytest.raises(UsageError, match="not TOML"):
        load_plan(write(tmp_path, "name = \n"))


def test_health_failures_names_the_failing_checks():
    out = '{"results": [{"check_id": "xid", "status": "fail", "detail": "GPU2 XID 79"}, ' \
          '{"check_id": "power", "status": "pass", "detail": "ok"}], "exit_code": 1}'
    assert health_failures(Reply("n", 1, out)) == "xid fail: GPU2 XID 79"
    assert health_failures(Reply("n", 2, "usage: boom\n")) == "exit 2: usage: boom"
    assert health_failures(Reply("n", None, "", "timed out", "timeout")) == "timed out"
