"""Pair planning and bisection: the bad node (or link) is named, never just the pair."""

from __future__ import annotations

import pytest

from slurmadm.burnin.model import PairResult
from slurmadm.burnin.pairs import BISECT, CROSS, INTRA, PARTNER, PairPlan

pytestmark = pytest.mark.unit

FLOOR = 40.0


def drive(plan: PairPlan, bandwidth) -> list[list[tuple[str, str, str]]]:
    """Run the plan to the end with `bandwidth(a, b) -> GB/s`; returns the rounds as planned."""
    rounds = []
    while pairs := plan.next_round():
        assert len({n for p in pairs for n in (p.a, p.b)}) == 2 * len(pairs), "a node twice in one round"
        rounds.append([(p.a, p.b, p.kind) for p in pairs])
        for p in pairs:
            bw = bandwidth(p.a, p.b)
            plan.record(PairResult(p.a, p.b, p.kind, p.round, "pass" if bw >= FLOOR else "fail", busbw_gbps=bw))
    return rounds


def healthy(a, b):
    return 100.0


def slow_node(bad):
    return lambda a, b: 10.0 if bad in (a, b) else 100.0


def test_one_unit_pairs_neighbours_once_and_stops_when_all_pass():
    plan = PairPlan([("su1", ["n1", "n2", "n3", "n4"])], FLOOR)
    rounds = drive(plan, healthy)
    assert rounds == [[("n1", "n2", INTRA), ("n3", "n4", INTRA)]]
    assert plan.conclusions() == ([], [], [])


def test_inside_units_first_then_across_units_interleaved():
    plan = PairPlan([("su1", ["a1", "a2"]), ("su2", ["b1", "b2"])], FLOOR)
    rounds = drive(plan, healthy)
    assert rounds[0] == [("a1", "a2", INTRA), ("b1", "b2", INTRA)]
    assert rounds[1] == [("a1", "b1", CROSS), ("a2", "b2", CROSS)]
    assert len(rounds) == 2


def test_bad_node_is_named_by_bisection_against_a_good_node_of_its_unit():
    plan = PairPlan([("su1", ["n1", "n2", "n3", "n4"])], FLOOR)
    rounds = drive(plan, slow_node("n3"))
    # n3+n4 failed; each member is paired with a known-good node (n1, n2) in one round
    assert rounds[1] == [("n3", "n1", BISECT), ("n4", "n2", BISECT)]
    bad, links, untested = plan.conclusions()
    assert [b.node for b in bad] == ["n3"]
    assert "known-good n1" in bad[0].detail and "10 GB/s" in bad[0].detail
    assert links == [] and untested == []


def test_both_members_bad():
    plan = PairPlan([("su1", ["n1", "n2", "n3", "n4"])], FLOOR)
    drive(plan, lambda a, b: 10.0 if {"n3", "n4"} & {a, b} else 100.0)
    assert sorted(b.node for b in plan.conclusions()[0]) == ["n3", "n4"]


def test_bad_link_when_both_members_pass_with_good_partners():
    units = [("su1", ["a1", "a2"]), ("su2", ["b1", "b2"])]
    plan = PairPlan(units, FLOOR)
    drive(plan, lambda a, b: 5.0 if {a, b} == {"a2", "b2"} else 100.0)
    bad, links, _ = plan.conclusions()
    assert bad == []
    assert [(link.a, link.b) for link in links] == [("a2", "b2")]
    assert "both pass with known-good partners" in links[0].detail


def test_cross_unit_failure_prefers_partners_from_the_suspects_own_unit():
    units = [("su1", ["a1", "a2"]), ("su2", ["b1", "b2"])]
    plan = PairPlan(units, FLOOR)
    rounds = drive(plan, lambda a, b: 5.0 if {a, b} == {"a2", "b2"} else 100.0)
    bisect = rounds[2]
    assert ("a2", "a1", BISECT) in bisect and ("b2", "b1", BISECT) in bisect


def test_odd_node_gets_a_known_good_partner():
    plan = PairPlan([("su1", ["n1", "n2", "n3"])], FLOOR)
    rounds = drive(plan, slow_node("n3"))
    assert rounds == [[("n1", "n2", INTRA)], [("n3", "n1", PARTNER)]]
    assert [b.node for b in plan.conclusions()[0]] == ["n3"]


def test_unresolved_pair_fails_both_members():
    plan = PairPlan([("su1", ["n1", "n2"])], FLOOR)
    rounds = drive(plan, lambda a, b: 1.0)
    assert len(rounds) == 1  # nobody to bisect against
    bad, links, _ = plan.conclusions()
    assert sorted(b.node for b in bad) == ["n1", "n2"]
    assert all("no known-good node" in b.detail for b in bad)


def test_errors_count_as_failures_and_skips_as_no_evidence():
    plan = PairPlan([("su1", ["n1", "n2", "n3", "n4"])], FLOOR)
    first = plan.next_round()
    plan.record(PairResult("n1", "n2", INTRA, first[0].round, "pass", busbw_gbps=100.0))
    plan.record(PairResult("n3", "n4", INTRA, first[1].round, "error", detail="rank 1: NCCL timeout"))
    second = plan.next_round()
    assert {(p.a, p.kind) for p in second} == {("n3", BISECT), ("n4", BISECT)}
    for p in second:  # nothing ran (e.g. the nodes were busy): try the other good partners
        plan.record(PairResult(p.a, p.b, p.kind, p.round, "skip", detail="did not start"))
    third = plan.next_round()
    assert {(p.a, p.b) for p in third} == {("n3", "n2"), ("n4", "n1")}
    for p in third:
        plan.record(PairResult(p.a, p.b, p.kind, p.round, "skip", detail="did not start"))
    assert plan.next_round() == []  # each (suspect, partner) is tried once: the loop ends
    bad, _, _ = plan.conclusions()
    # no evidence against either member beyond the pair itself: both fail, named as unresolved
    assert sorted(b.node for b in bad) == ["n3", "n4"]
    assert "rank 1: NCCL timeout" in bad[0].detail


def test_single_node_has_no_pairs():
    plan = PairPlan([("su1", ["n1"])], FLOOR)
    assert plan.next_round() == []
    assert plan.conclusions() == ([], [], ["n1"])
