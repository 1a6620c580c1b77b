"""`slurmadm burnin held`: which nodes burn-in holds out of service now, read from Slurm's drain
reasons (burnin/held.py), folded for people, one row per node in --json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import slurmadm.slurm as slurm_pkg
from slurmadm.burnin import held as bheld
from slurmadm.cli import cli
from slurmadm.errors import UnreachableError
from slurmadm.site import load_site
from slurmadm.slurm import NodeInfo
from slurmadm.slurm.ownership import format_reason

pytestmark = pytest.mark.unit

EXAMPLE = Path(__file__).resolve().parents[3] / "site.example.toml"
NOW = 1_800_000_000.0
SLOW = "stress-tflops 300 = 30% of the fleet median 1000 (slow in 1 sweep of 2; held for the next sweep's re-test)"


def node(name, state="IDLE", flags=(), reason="", user="slurm", since=0.0):
    return NodeInfo(name=name, state=state, flags=frozenset(flags), reason=reason, reason_user=user,
                    partitions=("gpu",), reason_time=since)


def drained(name, check, detail, state="IDLE", since=NOW - 3600):
    return node(name, state, {"DRAIN"}, format_reason(check, detail, "burnin"), since=since)


def fleet():
    return [
        node("b200-001"),
        drained("b200-002", "burnin-suspect", SLOW, since=NOW - 600),
        drained("b200-003", "burnin-suspect", SLOW, since=NOW - 1200),
        drained("b200-004", "burnin-due", "last burned in 45 days ago (burnin.due_days 30); held for the next sweep",
                state="MIXED", since=NOW - 7200),
        drained("b200-005", "burnin-straggler", "stress-tflops 300 = 30% of the fleet median 1000 (2 sweeps)",
                since=NOW - 86400 * 3),
        drained("b200-006", "burnin-gpu-burn", "GPU3: 12 errors in 60 s"),
        drained("b200-007", "xid", "GPU2 XID 79"),  # health's drain: not burn-in's
        drained("b200-008", "repair", "GPU2 held for an RMA"),  # the ladder's
        node("b200-009", flags={"DRAIN"}, reason="burnin-due: mine now", user="alice"),  # a person's words
        drained("login1", "burnin-due", "not a node of the site"),
    ]


@pytest.fixture(scope="module")
def site():
    return load_site(EXAMPLE)


def test_held_reads_burnins_own_drains_only_each_with_its_kind_and_what_releases_it(site):
    items = bheld.held(site, fleet())
    assert [(h.node, h.kind, h.check_id) for h in items] == [
        ("b200-006", "failed", "burnin-gpu-burn"), ("b200-005", "straggler", "burnin-straggler"),
        ("b200-002", "suspect", "burnin-suspect"), ("b200-003", "suspect", "burnin-suspect"),
        ("b200-004", "due", "burnin-due")]
    by = {h.node: h for h in items}
    assert by["b200-004"].state == "MIXED+DRAIN"  # its jobs still run
    assert by["b200-002"].detail == SLOW and by["b200-002"].since == NOW - 600
    assert by["b200-006"].next == by["b200-005"].next == "its repair incident (`slurmadm repair status`)"
    assert by["b200-002"].next.startswith("the next sweep's re-test")
    assert by["b200-004"].next == "the next sweep's test (resumed on a pass)"
    assert bheld.summary(items) == ("5 held: 1 failed (b200-006), 1 straggler (b200-005), "
                                    "2 suspect (b200-[002-003]), 1 due (b200-004)")
    assert bheld.summary([]) == "none held"


def test_rows_fold_agreeing_nodes_and_show_the_longest_hold(site):
    rows = bheld.rows(bheld.held(site, fleet()), NOW)
    assert [r[:4] for r in rows] == [
        ("b200-006", "failed: gpu-burn", "IDLE+DRAIN", "60 min"),
        ("b200-005", "straggler", "IDLE+DRAIN", "3 days"),
        ("b200-[002-003]", "suspect", "IDLE+DRAIN", "20 min"),  # b200-003's, the older
        ("b200-004", "due", "MIXED+DRAIN", "2 h"),
    ]
    assert rows[2][4] == SLOW
    assert bheld.releases(bheld.held(site, fleet()))[0] == ("failed, straggler",
                                                            "its repair incident (`slurmadm repair status`)")


def test_without_a_reservation_nothing_re_tests_a_held_node(site):
    no_res = site.model_copy(update={"burnin": site.burnin.model_copy(update={"reservation": ""})})
    by = {h.node: h for h in bheld.held(no_res, fleet())}
    assert by["b200-002"].next == by["b200-004"].next == bheld.NO_SWEEP
    assert by["b200-006"].next.startswith("its repair incident")


class FakeSlurm:
    def __init__(self, nodes, down=False):
        self.list, self.down = nodes, down

    def nodes(self, names=None):
        if self.down:
            raise UnreachableError("slurmctld: connection refused")
        return self.list


def _invoke(monkeypatch, nodes, *args, down=False):
    monkeypatch.setattr(slurm_pkg, "get_backend", lambda *a, **k: FakeSlurm(nodes, down))
    return CliRunner().invoke(cli, ["burnin", "held", "--site", str(EXAMPLE), *args])


def test_cli_json_is_one_row_per_node_and_people_get_folded_rows(monkeypatch):
    res = _invoke(monkeypatch, fleet(), "--json")
    assert res.exit_code == 0, res.output
    rows = json.loads(res.output)
    assert [r["node"] for r in rows] == ["b200-006", "b200-005", "b200-002", "b200-003", "b200-004"]
    assert set(rows[0]) == {"node", "kind", "check_id", "state", "detail", "since", "next"}
    res = _invoke(monkeypatch, fleet())
    assert res.exit_code == 0, res.output
    assert "b200-[002-003]" in res.output and "b200-007" not in res.output and "login1" not in res.output
    assert "suspect: released by the next sweep's re-test" in res.output
    assert "in the window 01:00-05:00" in res.output


def test_cli_says_when_nothing_is_held_and_fails_in_one_line_without_slurm(monkeypatch):
    res = _invoke(monkeypatch, [node("b200-001")])
    assert res.exit_code == 0 and res.output.strip() == "burn-in holds no node"
    res = _invoke(monkeypatch, [], down=True)
    assert res.exit_code == 3 and "slurmctld: connection refused" in res.output
    assert "Traceback" not in res.output
