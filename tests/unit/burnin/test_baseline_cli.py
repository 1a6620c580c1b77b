"""`burnin history NODE` and `burnin baseline show|set|reset` on a store filled by real sweep
logic (fake Slurm): JSON out, --dry-run changes nothing, changes audited, bad files refused in
one line with exit 2."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from slurmadm.burnin import history
from slurmadm.cli import cli
from slurmadm.site import parse_site
from slurmadm.store import Store

from tests.unit.burnin.test_cli import site_copy
from tests.unit.burnin.test_straggler_sweep import one_sweep
from tests.unit.burnin.test_sweep_logic import FakeSlurm, fleet

pytestmark = pytest.mark.unit


def invoke(*args):
    return CliRunner().invoke(cli, list(args))


@pytest.fixture()
def swept(tmp_path):
    """Three sweeps: b200-008 slow (held for a re-test), slow (drained), then clean (resumed;
    seeds the baseline)."""
    path = site_copy(tmp_path)
    site = parse_site(path.read_text())
    slurm = FakeSlurm(fleet(40))
    sw1, _ = one_sweep(site, tmp_path, slurm, 1, {"b200-008": 800.0})
    slurm.resume(["b200-008"])
    sw2, _ = one_sweep(site, tmp_path, slurm, 2, {"b200-008": 800.0}, prior={"b200-008": sw1.runs["b200-008"].reason})
    slurm.resume(["b200-008"])
    sw3, _ = one_sweep(site, tmp_path, slurm, 3, {}, prior={"b200-008": sw2.runs["b200-008"].reason})
    return path, site, sw3.id


def test_history_of_a_node_as_share_of_the_fleet_median(swept):
    path, _, _ = swept
    res = invoke("burnin", "history", "b200-008", "--site", str(path), "--json")
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert [h["fleet"]["level"] for h in data["sweeps"]] == ["ok", "slow", "slow"]
    assert [h["action"] for h in data["sweeps"]] == ["resumed", "drained", "held for a re-test"]
    assert data["sweeps"][1]["shares"]["stress-tflops"] == pytest.approx(800 / 1002.5, abs=1e-3)
    text = invoke("burnin", "history", "b200-008", "--site", str(path))
    assert text.exit_code == 0 and "80%" in text.output and "stress-tflops" in text.output
    bad = invoke("burnin", "history", "nosuch-001", "--site", str(path))
    assert bad.exit_code == 2 and "nosuch-001: not a node of the site" in bad.output
    assert "Traceback" not in bad.output


def test_baseline_show_set_reset_and_a_file_round_trip(swept, tmp_path):
    path, site, seeded_by = swept
    shown = json.loads(invoke("burnin", "baseline", "show", "--site", str(path), "--json").output)
    assert shown["baselines"]["hgx-b200"]["stress-tflops"]["source"] == f"sweep {seeded_by}"
    f = tmp_path / "baseline.json"
    f.write_text(json.dumps(shown))

    plan = invoke("burnin", "baseline", "reset", "--site", str(path), "--dry-run", "--json")
    assert plan.exit_code == 0 and json.loads(plan.output)["removed"] == 0
    assert history.baselines(Store(site.store.path))  # dry run: still there
    res = invoke("burnin", "baseline", "reset", "--site", str(path), "--reason", "new GPUs")
    assert res.exit_code == 0 and history.baselines(Store(site.store.path)) == {}
    events = Store(site.store.path).events(action="burnin.baseline.reset")
    assert [(e.target, e.reason) for e in events] == [("hgx-b200", "new GPUs")]

    res = invoke("burnin", "baseline", "set", "--site", str(path), "--from", str(f), "--json")
    assert res.exit_code == 0, res.output
    got = history.baselines(Store(site.store.path))["hgx-b200"]["stress-tflops"]
    assert got["median"] == shown["baselines"]["hgx-b200"]["stress-tflops"]["median"]
    assert got["source"] == f"file {f}"
    # from the newest passed sweep (the one that seeded it); a sweep with a straggler cannot be one
    res = invoke("burnin", "baseline", "set", "--site", str(path), "--dry-run")
    assert res.exit_code == 0 and f"sweep {seeded_by}" in res.output and "nothing changed" in res.output
    first = min(r["id"] for r in history.sweeps(Store(site.store.path), limit=3))
    res = invoke("burnin", "baseline", "set", "--site", str(path), "--sweep", first)
    assert res.exit_code == 2 and f"--sweep {first}: cannot be a baseline: it did not pass" in res.output
    assert len(Store(site.store.path).events(action="burnin.baseline.set")) > 0


@pytest.mark.parametrize("content,expected", [
    ("not json", "not JSON"),
    ('{"x": 1}', 'expected {"baselines"'),
    ('{"baselines": {"h100": {"stress-tflops": {"median": 1}}}}', "baselines.h100: no node of the site has this profile"),
    ('{"baselines": {"hgx-b200": {"ib-rate": {"median": 1}}}}', "baselines.hgx-b200.ib-rate: unknown metric"),
    ('{"baselines": {"hgx-b200": {"stress-tflops": {"median": -3}}}}', "stress-tflops.median: -3 is not a positive"),
    ('{"baselines": {"hgx-b200": {"stress-tflops": {"median": 3, "mad": "x"}}}}', "stress-tflops.mad: 'x'"),
    ('{"baselines": {"hgx-b200": {"hca-link-downed": {"median": -1}}}}', "hca-link-downed.median: -1 is not a number >= 0"),
    ('{"baselines": {"hgx-b200": {"stress-tflops": {"median": 0}}}}', "stress-tflops.median: 0 is not a positive"),
])
def test_a_bad_baseline_file_is_one_line_and_changes_nothing(tmp_path, content, expected):
    path = site_copy(tmp_path)
    f = tmp_path / "b.json"
    f.write_text(content)
    res = invoke("burnin", "baseline", "set", "--site", str(path), "--from", str(f))
    assert res.exit_code == 2, res.output
    assert expected in res.output and f"{f}:" in res.output and "Traceback" not in res.output
    assert len(res.output.strip().splitlines()) == 1
    assert history.baselines(Store(parse_site(path.read_text()).store.path)) == {}


def test_status_json_carries_the_fleet_relative_shares(swept):
    path, _, _ = swept
    res = invoke("burnin", "status", "--site", str(path), "--json")
    assert res.exit_code == 0, res.output
    rows = sorted(json.loads(res.output), key=lambda r: r["id"])
    assert [r["stragglers"] for r in rows] == [["b200-008"], ["b200-008"], []]
    second = rows[1]["fleet"]["b200-008"]
    assert second["level"] == "slow" and second["slow_streak"] == 2
    assert second["shares"]["stress-tflops"] == pytest.approx(800 / 1002.5, abs=1e-3)
    assert second["worst"] == "stress-tflops 800 = 80% of fleet median 1002"
    assert rows[2]["fleet"]["b200-001"]["shares"]["allreduce-node"] == 1.0
    text = invoke("burnin", "status", "--site", str(path))
    assert text.exit_code == 0 and "straggler" in text.output


def test_a_baseline_file_may_give_an_error_count_a_median_of_zero(tmp_path):
    """What `baseline show --json` prints for a fleet whose HCA counters did not rise sets again."""
    path = site_copy(tmp_path)
    f = tmp_path / "b.json"
    f.write_text('{"baselines": {"hgx-b200": {"hca-symbol-errors": {"median": 0, "mad": 0, "nodes": 8}}}}')
    res = invoke("burnin", "baseline", "set", "--site", str(path), "--from", str(f))
    assert res.exit_code == 0, res.output
    got = history.baselines(Store(parse_site(path.read_text()).store.path))["hgx-b200"]["hca-symbol-errors"]
    assert (got["median"], got["nodes"]) == (0.0, 8)
