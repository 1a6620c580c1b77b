"""Known defects of DCGM per GPU model (burnin/known.py, data/known_tool_issues.toml): the
reference site's B200s never start the `dcgmi diag -r 2` that hangs on them (NVIDIA/DCGM#247), a
DCGM 4.5.0 nvbandwidth failure on H100 only warns (#272). The releases are read from real
`dcgmi` outputs (tests/fixtures/burnin/dcgmi-versions.toml); the `dcgmi` on PATH here is a
stand-in that logs how it was called and prints what each case gives it."""

from __future__ import annotations

import json
import os
import stat
import tomllib
from pathlib import Path

import pytest

from slurmadm.burnin import known
from slurmadm.burnin import node as bnode
from slurmadm.burnin import stress
from slurmadm.burnin.sweep import Sweep

pytestmark = pytest.mark.unit

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "burnin"
SAMPLES = tomllib.loads((FIXTURES / "dcgmi-versions.toml").read_text())["sample"]
DCGM_4_7 = SAMPLES[0]["text"]  # `dcgmi -v` of DCGM 4.7.0, client and host engine

# `dcgmi diag -j` in DCGM 4's shape (tests/unit/burnin/test_node_tests.py reads the same shape)
def diag_json(*results: tuple[str, str, str]) -> str:
    return json.dumps({"DCGM Diagnostic": {"test_categories": [{"category": "Hardware", "tests": [
        {"name": name, "results": [{"entity_id": "0", "status": status,
                                    **({"warnings": [{"warning": why, "error_id": 1}]} if why else {})}]}
        for name, status, why in results]}]}})


@pytest.fixture
def dcgmi(tmp_path, monkeypatch):
    """A `dcgmi` on PATH: `-v` prints the version text given, `diag` the JSON given; every call is
    logged. Returns a setter and the log."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log, version, diag = tmp_path / "calls", tmp_path / "version", tmp_path / "diag"
    script = bin_dir / "dcgmi"
    script.write_text(f"""#!/bin/sh
echo "$*" >> {log}
case "$1" in
  -v) cat {version} ;;
  diag) cat {diag} ;;
esac
""")
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")

    def give(version_text: str, diag_text: str = "") -> None:
        version.write_text(version_text)
        diag.write_text(diag_text)

    def calls() -> list[str]:
        return log.read_text().splitlines() if log.exists() else []

    return give, calls


def test_every_entry_names_its_source_and_what_it_does():
    assert {i.id for i in known.issues()} >= {"dcgm-247", "dcgm-272"}
    for i in known.issues():
        assert i.source.startswith("https://") and i.why and i.levels and i.models and i.versions
        assert i.effect in known.EFFECTS and (i.effect != "false-fail" or i.tests)


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: s["source"].split(" (")[0].rsplit("/", 3)[-3])
def test_the_release_is_read_from_real_dcgmi_outputs(sample):
    assert known.dcgmi_version(sample["text"]) == sample["release"]


def test_the_host_engines_release_wins_over_the_clients():
    """The diagnostic runs in the host engine: after an upgrade without a restart, the two differ."""
    text = DCGM_4_7.replace("Version : 4.7.0", "Version : 4.5.1", 1)  # the local (client) section first
    assert known.dcgmi_version(text) == "4.7.0"
    assert known.dcgmi_version("Error: unable to establish a connection to the host engine") is None


@pytest.mark.parametrize("model,version,level,ids", [
    ("b200", "4.7.0", 2, ["dcgm-247"]),        # the reference site: every release so far
    ("NVIDIA B200", None, 3, ["dcgm-247"]),    # a release not read: "*" still matches
    ("gb200", "4.7.0", 2, ["dcgm-247"]),
    ("b200", "4.7.0", 1, []),                  # level 1 runs no PCIe/NVLink test
    ("h100", "4.5.0", 3, ["dcgm-272"]),
    ("h100", "4.5.1", 3, []),                  # the fixed release
    ("h100", "4.5.0", 2, []),                  # the burn test is level 3 and up
    ("h100", None, 3, []),                     # an unknown release is not assumed bad
    ("a100", "4.7.0", 2, []),
])
def test_an_issue_matches_its_models_releases_and_levels(model, version, level, ids):
    assert [i.id for i in known.matching("dcgmi-diag", model, version, level)] == ids


def test_b200_in_gb200_and_b200_do_not_match_each_other_by_substring():
    only_b200 = known.KnownIssue("x", "dcgmi-diag", ("B200",), ("*",), (2,), "hang", (), "w", "https://x")
    assert known._model_matches(only_b200.models, "b200") and not known._model_matches(only_b200.models, "gb200")


def test_on_b200_the_diag_that_hangs_is_never_started(dcgmi):
    give, calls = dcgmi
    give(DCGM_4_7, diag_json(("PCIe", "Pass", "")))
    r = stress.dcgm_diag(2, 900, "b200")
    assert calls() == ["-v"]  # read the release; never `dcgmi diag`
    assert r.status == "skip" and r.test == "dcgm"
    assert r.detail.startswith("dcgmi diag -r 2 not run on b200 (DCGM 4.7.0): known issue dcgm-247")
    assert "https://github.com/NVIDIA/DCGM/issues/247" in r.detail and r.data["known_issue"] == "dcgm-247"


def test_a_site_whose_dcgm_has_the_fix_runs_it(dcgmi):
    give, calls = dcgmi
    give(DCGM_4_7, diag_json(("PCIe", "Fail", "GPU 0 PCIe replay rate too high")))
    r = stress.dcgm_diag(2, 900, "b200", ignore=["dcgm-247"])
    assert calls() == ["-v", "diag -r 2 -j"]
    assert r.status == "fail" and "PCIe GPU0: GPU 0 PCIe replay rate too high" in r.detail


def test_a_known_false_failure_only_warns_and_a_real_one_still_fails(dcgmi):
    give, calls = dcgmi
    v450 = "Version : 4.5.0\nBuild ID : 1\n"
    give(v450, diag_json(("nvbandwidth", "Fail", "MCUTIL > 10%"), ("Memory Bandwidth", "Pass", "")))
    r = stress.dcgm_diag(3, 3600, "h100")
    assert r.status == "warn" and "nvbandwidth GPU0: MCUTIL > 10% (known issue dcgm-272, not the GPU's)" in r.detail
    assert r.data["known_issues"] == ["dcgm-272"]
    give(v450, diag_json(("nvbandwidth", "Fail", "MCUTIL > 10%"), ("Memory Bandwidth", "Fail", "GPU 0 bandwidth low")))
    r = stress.dcgm_diag(3, 3600, "h100")
    assert r.status == "fail" and r.detail == "dcgmi diag -r 3: Memory Bandwidth GPU0: GPU 0 bandwidth low"
    give(v450.replace("4.5.0", "4.5.1"), diag_json(("nvbandwidth", "Fail", "MCUTIL > 10%")))
    r = stress.dcgm_diag(3, 3600, "h100")  # the fixed release: its failure is the GPU's
    assert r.status == "fail" and "known issue" not in r.detail
    assert calls().count("diag -r 3 -j") == 3


def test_the_sweep_tells_the_node_job_its_model_and_the_node_job_passes_it_on(dcgmi, monkeypatch, capsys):
    """The example site (the reference B200 site, dcgm_level 2): the spec carries the model, and
    the node job's dcgm step skips on it rather than hanging for its 15-minute timeout."""
    from slurmadm.burnin.model import TestResult
    from slurmadm.resources import example_site
    from slurmadm.site import load_site

    site = load_site(example_site())
    node = next(iter(site.node_group_of))
    spec = Sweep(site, store=object(), site_file=example_site()).node_spec(node)
    assert (spec["gpu_model"], spec["dcgm_level"], spec["ignore_known_issues"]) == ("b200", 2, [])
    give, calls = dcgmi
    give(DCGM_4_7)
    monkeypatch.setattr(bnode.stress, "stress", lambda *a, **k: TestResult("stress", "pass", "stub"))
    monkeypatch.setattr(bnode, "single_node_allreduce", lambda spec: TestResult("allreduce-node", "pass", "stub"))
    monkeypatch.setattr(bnode, "health_suite", lambda timeout: TestResult("health", "pass", "stub"))
    monkeypatch.setattr(bnode, "local_node", lambda _: node)
    assert bnode.main(["--spec", json.dumps({**spec, "kat": False, "hcas": [], "stress_seconds": 1})]) == 0
    lines = [json.loads(x) for x in capsys.readouterr().out.splitlines()]
    ran = {t["test"]: t for t in lines[-1]["tests"]}
    assert ran["dcgm"]["status"] == "skip" and "dcgm-247" in ran["dcgm"]["detail"] and calls() == ["-v"]


def test_a_site_naming_an_unknown_issue_is_refused_in_one_line():
    from slurmadm.site.burnin import BurninSection

    with pytest.raises(ValueError, match=r"ignore_known_issues: dcgm-999 is no known issue \(known: dcgm-247, "):
        BurninSection(ignore_known_issues=["dcgm-999"])
    assert BurninSection(ignore_known_issues=["dcgm-247"]).ignore_known_issues == ["dcgm-247"]


def test_known_issues_says_what_each_does_on_this_site():
    """`slurmadm burnin known-issues`: on the reference site (B200, dcgm_level 2) dcgm-247 is what
    stops the diag; the H100 entry does nothing here; a site ignoring dcgm-247 says so; in a
    terminal of 80 columns it stays inside, the ids whole."""
    from click.testing import CliRunner

    from slurmadm.cli import cli
    from slurmadm.resources import example_site
    from tests.unit.cli.test_output import in_terminal

    r = CliRunner().invoke(cli, ["burnin", "known-issues", "--site", str(example_site()), "--json"])
    assert r.exit_code == 0, r.output
    got = {i["id"]: i for i in json.loads(r.stdout)}
    assert got["dcgm-247"]["acts_here"] and got["dcgm-247"]["profiles"] == ["hgx-b200"]
    assert not got["dcgm-272"]["acts_here"] and got["dcgm-272"]["profiles"] == []
    assert all(i["source"].startswith("https://") for i in got.values())
    out = in_terminal(["burnin", "known-issues"], 80, {"SLURMADM_SITE": str(example_site())})
    lines = [ln for ln in out.splitlines() if ln.strip()]
    assert max(len(ln) for ln in lines) <= 80, out
    assert any("dcgm-247" in ln and "not run on" in ln for ln in lines) and any("dcgm-272" in ln for ln in lines), out


def test_a_site_that_ignores_an_issue_is_told_so(tmp_path):
    from click.testing import CliRunner

    from slurmadm.cli import cli
    from slurmadm.resources import example_site

    site = tmp_path / "site.toml"
    text = Path(example_site()).read_text()
    assert "\nignore_known_issues = []\n" in text
    site.write_text(text.replace("\nignore_known_issues = []\n", '\nignore_known_issues = ["dcgm-247"]\n'))
    r = CliRunner().invoke(cli, ["burnin", "known-issues", "--site", str(site)])
    assert r.exit_code == 0 and "ignored (site)" in r.output, r.output
    off = tmp_path / "off.toml"
    assert "\ndcgm_level = 2 " in text
    off.write_text(text.replace("\ndcgm_level = 2 ", "\ndcgm_level = 0 "))
    r = CliRunner().invoke(cli, ["burnin", "known-issues", "--site", str(off), "--json"])
    assert {i["id"]: (i["acts_here"], i["here"]) for i in json.loads(r.stdout)}["dcgm-247"] == \
        (False, "diag off (dcgm_level 0)")
    bad = tmp_path / "bad.toml"
    bad.write_text(text.replace("\nignore_known_issues = []\n", '\nignore_known_issues = ["dcgm-999"]\n'))
    r = CliRunner().invoke(cli, ["burnin", "known-issues", "--site", str(bad)])
    assert r.exit_code == 2 and "ignore_known_issues: dcgm-999 is no known issue" in r.output
    assert "Traceback" not in r.output
