"""Slurm output of every supported release parses to the same NodeInfo.

The samples are real output captured from Slurm 22.05 (Debian 12) and 24.11 (Debian 13) by
tests/fixtures/slurm/capture.sh; see tests/fixtures/slurm/README.md for the picture they show.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from slurmadm.errors import UnreachableError
from slurmadm.slurm.model import NodeInfo
from slurmadm.slurm.ownership import reason_check_id
from slurmadm.slurm.parse import (
    NODE_TEXT_TAIL,
    nodes_from_json,
    nodes_from_scontrol_text,
    parse_kv_line,
    parse_version,
    split_state,
    unwrap_number,
)

pytestmark = pytest.mark.unit

FIXTURES = Path(__file__).resolve().parents[2] / "fixtures" / "slurm"
OURS = "slurmadm: ecc-uncorrected: GPU5 volatile DBE=2 [prolog]"


def _node(name: str, state: str, flags=(), reason: str = "", by: str = "", partitions=("gpu", "debug")) -> NodeInfo:
    return NodeInfo(name=name, state=state, flags=frozenset(flags), reason=reason, reason_user=by,
                    gres="gpu:b200:8", partitions=partitions, features=("b200", "ib400"), cpus=2,
                    real_memory=22374)


# What capture.sh set up, the same on both releases.
EXPECTED = {
    n.name: n
    for n in [
        _node("b200-001", "MIXED"),  # a 4-GPU job
        _node("b200-002", "MIXED"),  # an 8-GPU job
        _node("b200-003", "IDLE", {"DRAIN"}, OURS, "root"),  # drained by slurmadm
        _node("b200-004", "MIXED", {"DRAIN"}, "admin: replace PSU 2, ticket 4711", "root"),  # draining
        _node("b200-005", "DOWN", (), "IB port 3 flapping", "root", partitions=("gpu",)),
    ]
}

SOURCES = [
    ("22.05", "sinfo.json"),  # what CliBackend reads on 22.05
    ("22.05", "sinfo-N.json"),
    ("22.05", "scontrol-show-node.txt"),  # the fallback on every release
    ("24.11", "scontrol-show-node.json"),  # what CliBackend reads on 23.11+
    ("24.11", "sinfo.json"),  # grouped rows
    ("24.11", "sinfo-N.json"),
    ("24.11", "scontrol-show-node.txt"),
    ("26.05", "scontrol-show-node.json"),  # Debian forky, Slurm 26.05.5 (data_parser v0.0.45)
    ("26.05", "sinfo.json"),
    ("26.05", "sinfo-N.json"),
    ("26.05", "scontrol-show-node.txt"),
]


def fixture(release: str, name: str) -> str:
    return (FIXTURES / release / name).read_text()


def parse(release: str, name: str) -> dict[str, NodeInfo]:
    text = fixture(release, name)
    nodes = nodes_from_scontrol_text(text) if name.endswith(".txt") else nodes_from_json(text, name)
    return {n.name: n for n in nodes}


def expected(release: str) -> dict[str, NodeInfo]:
    """The picture as captured on `release`. The 26.05 capture was made later, by a dev cluster that
    gives its nodes their scalable-unit feature (`su1`) and whose slurmd (26.05) prints the GPUs'
    socket (`gpu:b200:8(S:0)`); everything else is the same."""
    if release < "26":
        return EXPECTED
    return {k: replace(n, gres="gpu:b200:8(S:0)", features=(*n.features, "su1")) for k, n in EXPECTED.items()}


def _any_partition_order(nodes: dict[str, NodeInfo]) -> dict[str, NodeInfo]:
    return {k: replace(n, partitions=tuple(sorted(n.partitions))) for k, n in nodes.items()}


@pytest.mark.parametrize("release,name", SOURCES)
def test_every_release_and_shape_gives_the_same_nodes(release, name):
    got, want = parse(release, name), expected(release)
    if release >= "26" and name == "sinfo-N.json":  # 26.05's `sinfo -N` rows come partition by name
        got, want = _any_partition_order(got), _any_partition_order(want)
    assert got == want


def test_drain_states_and_ownership_read_right():
    nodes = parse("24.11", "scontrol-show-node.json")
    assert nodes["b200-003"].state_text == "IDLE+DRAIN" and reason_check_id(nodes["b200-003"].reason) == "ecc-uncorrected"
    assert nodes["b200-004"].drained and reason_check_id(nodes["b200-004"].reason) is None
    assert not nodes["b200-005"].drained and nodes["b200-001"].gpus == 8


def test_scontrol_json_for_one_node():
    one = nodes_from_json(fixture("24.11", "scontrol-show-node-b200-003.json"), "scontrol --json show node")
    assert one == [EXPECTED["b200-003"]]


def test_sinfo_json_rows_grouping_several_nodes():
    """24.11 `sinfo --json` puts alike nodes into one row (the dev cluster's nodes differ by port,
    a real site's don't): merge the two MIXED nodes' rows as Slurm does on a real site."""
    data = json.loads(fixture("24.11", "sinfo.json"))
    rows = []
    for row in data["sinfo"]:
        names = row["nodes"]["nodes"]
        if names == ["b200-002"]:
            continue
        if names == ["b200-001"]:
            row["nodes"]["nodes"] = ["b200-001", "b200-002"]
        rows.append(row)
    data["sinfo"] = rows
    nodes = {n.name: n for n in nodes_from_json(json.dumps(data), "sinfo --json")}
    assert nodes == EXPECTED
    # a group whose members differ in size gives no per-node number rather than a wrong one
    data["sinfo"][0]["cpus"]["minimum"] = 1
    first = data["sinfo"][0]["nodes"]["nodes"][0]
    assert {n.name: n for n in nodes_from_json(json.dumps(data), "sinfo --json")}[first].cpus == 0


def test_scontrol_text_free_text_fields():
    """Reason, Comment and Extra end the line and may hold spaces and '='."""
    line = next(l for l in fixture("24.11", "scontrol-show-node.txt").splitlines() if "b200-005" in l)
    kv = parse_kv_line(line, NODE_TEXT_TAIL)
    assert kv["Reason"].startswith("IB port 3 flapping [root@")
    assert kv["Comment"] == "rack 7, slot=3" and kv["Extra"] == "ticket=4712 vendor RMA"
    assert kv["State"] == "DOWN" and kv["OS"].startswith("Linux ") and kv["CfgTRES"].endswith("gres/gpu=8")
    assert "slot" not in kv and "ticket" not in kv


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        "[1, 2]",
        '{"errors": []}',
        '{"nodes": [{"name": "b200-001", "cpus": "many"}]}',
        '{"sinfo": [{"nodes": ["b200-001"]}]}',
    ],
)
def test_odd_json_is_one_clear_error(text):
    with pytest.raises(UnreachableError) as err:
        nodes_from_json(text, "sinfo --json")
    assert str(err.value).startswith("sinfo --json: ")


def test_sinfo_json_without_slurmctld_is_no_answer_not_an_empty_cluster():
    """22.05's sinfo --json exits 0 when slurmctld does not answer: no nodes and an error list
    (captured). Read as zero nodes it made `bmc power` say "Slurm does not know node(s) ..."."""
    with pytest.raises(UnreachableError) as err:
        nodes_from_json(fixture("22.05", "sinfo-no-slurmctld.json"), "sinfo --json")
    assert str(err.value) == "sinfo --json: no nodes, errors: Unspecified error (errno -1)"
    assert nodes_from_json('{"errors": [], "nodes": []}', "sinfo --json") == []  # an empty cluster is one


@pytest.mark.parametrize(
    "state,flags,base,out",
    [
        ("idle", [], "IDLE", set()),
        ("IDLE+DRAIN", None, "IDLE", {"DRAIN"}),
        ("drained", None, "IDLE", {"DRAIN"}),
        ("mixed*", None, "MIXED", {"NOT_RESPONDING"}),  # sinfo.1: `*` not responding
        (["ALLOCATED", "DRAIN", "COMPLETING"], None, "ALLOCATED", {"DRAIN", "COMPLETING"}),  # COMPLETING: a flag
        ("down", ["NOT_RESPONDING"], "DOWN", {"NOT_RESPONDING"}),
        (["IDLE", "RESERVED", "MAINTENANCE"], None, "IDLE", {"RESERVED", "MAINTENANCE"}),
        (["MIXED", "REBOOT_REQUESTED"], None, "MIXED", {"REBOOT_REQUESTED"}),
    ],
)
def test_split_state(state, flags, base, out):
    got_base, got_flags = split_state(state, flags)
    assert got_base == base and got_flags == out


def test_versions():
    assert parse_version("slurm-wlm 22.05.8") == (22, 5, 8)  # `sinfo --version`, Debian 12
    assert parse_version("slurm-wlm 24.11.5") == (24, 11, 5)  # Debian 13
    assert parse_version(json.loads(fixture("22.05", "sinfo.json"))["meta"]["Slurm"]["release"]) == (22, 5, 8)
    assert parse_version(json.loads(fixture("24.11", "sinfo.json"))["meta"]["slurm"]["release"]) == (24, 11, 5)
    with pytest.raises(UnreachableError):
        parse_version("no version here")


def test_wrapped_numbers_of_2411():
    node = json.loads(fixture("24.11", "scontrol-show-node.json"))["nodes"][0]
    assert node["free_mem"]["set"] and unwrap_number(node["free_mem"]) == node["free_mem"]["number"] > 0
    part = json.loads(fixture("24.11", "sinfo.json"))["sinfo"][0]["partition"]
    assert unwrap_number(part["maximums"]["time"]) == 7 * 24 * 60  # MaxTime=7-00:00:00, in minutes
    assert unwrap_number(part["maximums"]["nodes"]) is None  # {"set": false, "infinite": true}
    assert unwrap_number(part["defaults"]["time"]) is None  # {"set": false}: no DefaultTime
    assert unwrap_number(5) == 5


RESERVATIONS = (
    "ReservationName=slurmadm_burnin StartTime=2026-11-29T20:31:57 EndTime=2027-11-29T20:31:57 "
    "Duration=365-00:00:00 Nodes=b200-[001-002] NodeCnt=2 CoreCnt=4 Features=(null) PartitionName=(null) "
    "Flags=MAINT,IGNORE_JOBS,SPEC_NODES TRES=cpu=4 Users=root Groups=(null) Accounts=(null) "
    "Licenses=(null) State=ACTIVE BurstBuffer=(null) MaxStartDelay=(null)\n"
    "ReservationName=training StartTime=2026-12-01T08:00:00 EndTime=2026-12-01T18:00:00 Duration=10:00:00 "
    "Nodes=b200-[010-013] NodeCnt=4 CoreCnt=8 Features=(null) PartitionName=gpu Flags=SPEC_NODES "
    "TRES=cpu=8 Users=(null) Groups=(null) Accounts=ml-llm Licenses=(null) State=INACTIVE "
    "BurstBuffer=(null) MaxStartDelay=(null)\n"
)


def test_reservations():
    from slurmadm.slurm.parse import parse_reservations

    burnin, training = parse_reservations(RESERVATIONS)
    assert (burnin.name, burnin.nodes, burnin.users, burnin.state) == ("slurmadm_burnin", "b200-[001-002]",
                                                                       "root", "ACTIVE")
    assert burnin.maintenance and "IGNORE_JOBS" in burnin.flags
    assert not training.maintenance  # not a maintenance reservation, and not active yet
    assert parse_reservations("No reservations in the system\n") == []


def test_split_state_answers_the_same_from_its_cache():
    """Each distinct state spelling is split once; a repeat, or the same state with other flags,
    still answers right, and an unhashable oddity is split without the cache."""
    assert split_state("idle", ["DRAIN"]) == ("IDLE", frozenset({"DRAIN"}))
    assert split_state("idle") == ("IDLE", frozenset())
    assert split_state("idle", ["DRAIN"]) == ("IDLE", frozenset({"DRAIN"}))
    assert split_state(["MIXED", "DRAIN"]) == split_state(["MIXED", "DRAIN"]) == ("MIXED", frozenset({"DRAIN"}))
    assert split_state(["MIXED"]) == ("MIXED", frozenset())
    base, flags = split_state([{"odd": 1}, "IDLE"])
    assert base == "IDLE"


@pytest.mark.parametrize("release, name", [("22.05", "sinfo.json"), ("24.11", "scontrol-show-node.json")])
def test_a_large_listing_parses_as_a_small_one(release, name):
    """Over 1 MiB the listing goes through orjson when installed: the same nodes, the same error."""
    doc = json.loads((FIXTURES / release / name).read_text())
    small = nodes_from_json(json.dumps(doc), "fixture")
    big_doc = dict(doc, nodes=doc["nodes"] * (2 * 2**20 // len(json.dumps(doc["nodes"])) + 1))
    text = json.dumps(big_doc)
    assert len(text) > 2**20
    big = nodes_from_json(text, "fixture")
    assert big[: len(small)] == small and len(big) == len(big_doc["nodes"])
    with pytest.raises(UnreachableError) as err:
        nodes_from_json(text[:-10], "scontrol --json show node")
    assert str(err.value).startswith("scontrol --json show node: output is not JSON (")
    # the GC paused for the parse runs again after it, error or not; one paused by the caller stays so
    import gc

    assert gc.isenabled()
    gc.disable()
    try:
        nodes_from_json(text, "fixture")
        assert not gc.isenabled()
    finally:
        gc.enable()
