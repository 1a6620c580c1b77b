"""`[repair]` in site.toml: overrides, limits, one error line each at `site validate`."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from slurmadm.cli import cli
from slurmadm.site import load
from tests.unit.siteedit import edited, put

pytestmark = pytest.mark.unit


def validate(tmp_path, *edits):
    f = tmp_path / "site.toml"
    f.write_text(edited(*edits))
    return CliRunner().invoke(cli, ["site", "validate", "--site", str(f)])


def test_defaults_and_an_override(tmp_path):
    f = tmp_path / "site.toml"
    f.write_text(edited(put("repair", {"lemon_incidents": 4, "classes": {"RESET_GPU": {"window_days": 3}}})))
    site = load.load_site(str(f))
    assert site.repair.lemon_incidents == 4 and site.repair.classes["RESET_GPU"].window_days == 3
    assert site.repair.rma.bundle_dir == "/var/lib/slurmadm/rma"
    assert site.repair.reboot_timeout_s == 1800 and site.repair.qualify_stress_seconds is None


def test_the_reboot_timeout_and_the_qualification_stress_are_the_sites(tmp_path, monkeypatch):
    from slurmadm.burnin import sweep
    from slurmadm.repair import qualify
    from slurmadm.repair import run as rr
    from slurmadm.store import Store

    f = tmp_path / "site.toml"
    f.write_text(edited(put("store.path", str(tmp_path / "s.db")),
                        put("repair", {"reboot_timeout_s": 900, "qualify_stress_seconds": 300})))
    site = load.load_site(str(f))
    store = Store(site.store.path)
    assert rr.Executor(site, None, store).reboot_timeout_s == 900
    monkeypatch.setattr(sweep.Sweep, "node_spec", lambda self, node: {"node": node})
    assert qualify.Qualifier(site, None, store).spec(site.node_names[0])["stress_seconds"] == 300
    f.write_text(edited(put("store.path", str(tmp_path / "s.db")), put("burnin.stress_seconds", 600)))
    site = load.load_site(str(f))
    assert qualify.Qualifier(site, None, store).spec(site.node_names[0])["stress_seconds"] == 120


@pytest.mark.parametrize("section, needle", [
    ({"classes": {"RESET_GPUS": {"window_days": 3}}}, "unknown repair class 'RESET_GPUS'"),
    ({"classes": {"RESET_GPU": {"rungs": [["reset", "pray"]]}}}, "repair.classes.RESET_GPU.rungs"),
    ({"breaker_fraction": 1.5}, "repair.breaker_fraction"),
    ({"lemon_incidents": 0}, "repair.lemon_incidents"),
    ({"interval_s": 5}, "repair.interval_s"),
    ({"no_such_key": 1}, "repair.no_such_key"),
    ({"reboot_timeout_s": 5}, "repair.reboot_timeout_s"),
    ({"qualify_stress_seconds": 0}, "repair.qualify_stress_seconds"),
    ({"qualify_stress_seconds": "ten"}, "repair.qualify_stress_seconds"),
])
def test_bad_repair_sections_are_one_line_exit_2(tmp_path, section, needle):
    res = validate(tmp_path, put("repair", section))
    assert res.exit_code == 2, res.output
    lines = [x for x in res.output.splitlines() if x.strip()]
    assert any(needle in x for x in lines), res.output
    assert len([x for x in lines if "repair" in x]) == 1, res.output


def test_example_keys_are_valid_when_uncommented(tmp_path):
    section = {"lemon_incidents": 3, "lemon_window_days": 28, "lemon_failed_qualifications": 2,
               "breaker_fraction": 0.1, "interval_s": 300, "alert_after_h": 72.0,
               "classes": {"RESET_GPU": {"window_days": 7, "rungs": [["reset", "qualify", "resume"], ["rma"]]}},
               "rma": {"bundle_dir": "/var/lib/slurmadm/rma", "bug_report_timeout_s": 300}}
    assert validate(tmp_path, put("repair", section)).exit_code == 0
