"""Slurm output of every supported release parses to the same NodeInfo."""

from __future__ import annotations

import json

import pytest

from slurmadm.errors import UnreachableError
from slurmadm.slurm.parse import (
    nodes_from_json,
    nodes_from_scontrol_text,
    parse_kv_line,
    parse_version,
    split_state,
    unwrap_number,
)

pytestmark = pytest.mark.unit

# sinfo --json, Slurm 22.05.8 (openapi v0.0.38), trimmed to the fields we read
SINFO_2205 = {
    "meta": {"plugin": {"type": "openapi/v0.0.38"}},
    "nodes": [
        {"name": "b200-001", "state": "idle", "state_flags": [], "reason": "", "reason_set_by_user": None,
         "gres": "gpu:b200:8", "partitions": ["gpu", "debug"], "features": "", "cpus": 224,
         "real_memory": 1992294},
        {"name": "b200-003", "state": "idle", "state_flags": ["DRAIN"],
         "reason": "slurmadm: ecc-uncorrected: GPU5 volatile DBE=2 [prolog]", "reason_set_by_user": "root",
         "gres": "gpu:b200:8", "partitions": ["gpu"], "features": "b200,su1", "cpus": 224, "real_memory": 1992294},
        {"name": "b200-004", "state": "down", "state_flags": ["DRAIN", "NOT_RESPONDING"],
         "reason": "admin: bad fan", "reason_set_by_user": "alice", "gres": "gpu:b200:8", "partitions": ["gpu"]},
    ],
}

# scontrol --json show node, Slurm 24.11 (data_parser v0.0.42), trimmed
SCONTROL_2411 = {
    "nodes": [
        {"name": "b200-003", "state": ["IDLE", "DRAIN"], "reason": "slurmadm: xid: GPU2 XID 79 [periodic]",
         "reason_set_by_user": "root", "gres": "gpu:b200:8", "partitions": ["gpu"], "features": ["b200", "su1"],
         "cpus": 224, "real_memory": {"set": True, "infinite": False, "number": 1992294}},
        {"name": "b200-005", "state": ["MIXED", "REBOOT_REQUESTED"], "reason": "", "gres": "gpu:b200:8",
         "partitions": ["gpu"], "cpus": 224, "real_memory": 1992294},
    ]
}

# sinfo --json, Slurm 24.11: rows grouped by state
SINFO_2411 = {
    "sinfo": [
        {"node": {"state": ["IDLE", "DRAIN"]}, "nodes": {"nodes": ["b200-003"]},
         "reason": {"description": "slurmadm: nvlink-down: GPU1 2 links down [prolog]", "user": "root"},
         "gres": {"total": "gpu:b200:8"}, "partition": {"name": "gpu"}, "features": {"total": "b200"}},
        {"node": {"state": ["IDLE"]}, "nodes": {"nodes": ["b200-001", "b200-002"]}, "reason": {"description": ""},
         "gres": {"total": "gpu:b200:8"}, "partition": {"name": "gpu"}},
    ]
}

SCONTROL_TEXT = (
    "NodeName=b200-003 Arch=x86_64 CoresPerSocket=56 CPUAlloc=0 CPUTot=224 Gres=gpu:b200:8 "
    "NodeAddr=127.0.0.1 RealMemory=1992294 State=IDLE+DRAIN Partitions=gpu,debug "
    "AvailableFeatures=b200,su1 Reason=admin: replace PSU 2 [alice@2026-11-29T10:00:00]\n"
    "NodeName=b200-001 CPUTot=224 Gres=gpu:b200:8 RealMemory=1992294 State=MIXED Partitions=gpu "
    "AvailableFeatures=(null)\n"
)


def test_2205_sinfo_json():
    nodes = {n.name: n for n in nodes_from_json(json.dumps(SINFO_2205), "sinfo --json")}
    assert nodes["b200-001"].state == "IDLE" and not nodes["b200-001"].drained
    n3 = nodes["b200-003"]
    assert n3.drained and n3.state_text == "IDLE+DRAIN" and n3.reason_user == "root"
    assert n3.reason.startswith("slurmadm: ecc-uncorrected") and n3.features == ("b200", "su1")
    assert n3.gpus == 8 and n3.cpus == 224 and n3.partitions == ("gpu",)
    n4 = nodes["b200-004"]
    assert n4.state == "DOWN" and n4.flags == {"DRAIN", "NOT_RESPONDING"} and n4.reason_user == "alice"


def test_2411_scontrol_json():
    nodes = {n.name: n for n in nodes_from_json(json.dumps(SCONTROL_2411), "scontrol --json")}
    assert nodes["b200-003"].drained and nodes["b200-003"].real_memory == 1992294
    assert nodes["b200-003"].features == ("b200", "su1")
    assert nodes["b200-005"].state == "MIXED" and "REBOOT_REQUESTED" in nodes["b200-005"].flags


def test_2411_sinfo_grouped_json():
    nodes = {n.name: n for n in nodes_from_json(json.dumps(SINFO_2411), "sinfo --json")}
    assert set(nodes) == {"b200-001", "b200-002", "b200-003"}
    assert nodes["b200-003"].reason.startswith("slurmadm: nvlink-down") and nodes["b200-003"].drained
    assert nodes["b200-002"].state == "IDLE" and not nodes["b200-002"].drained


def test_scontrol_text_with_spaces_in_reason():
    nodes = {n.name: n for n in nodes_from_scontrol_text(SCONTROL_TEXT)}
    n3 = nodes["b200-003"]
    assert n3.reason == "admin: replace PSU 2" and n3.reason_user == "alice" and n3.drained
    assert n3.partitions == ("gpu", "debug") and n3.cpus == 224
    assert nodes["b200-001"].features == () and nodes["b200-001"].state == "MIXED"


@pytest.mark.parametrize("text", ["not json", "[1, 2]", '{"errors": []}'])
def test_odd_json_is_one_clear_error(text):
    with pytest.raises(UnreachableError) as err:
        nodes_from_json(text, "sinfo --json")
    assert str(err.value).startswith("sinfo --json: ")


@pytest.mark.parametrize(
    "state,flags,base,out",
    [
        ("idle", [], "IDLE", set()),
        ("IDLE+DRAIN", None, "IDLE", {"DRAIN"}),
        ("drained", None, "IDLE", {"DRAIN"}),
        ("mixed*", None, "MIXED", set()),
        (["ALLOCATED", "DRAIN", "COMPLETING"], None, "COMPLETING", {"DRAIN"}),
        ("down", ["NOT_RESPONDING"], "DOWN", {"NOT_RESPONDING"}),
        (["IDLE", "RESERVED", "MAINTENANCE"], None, "IDLE", {"RESERVED", "MAINTENANCE"}),
    ],
)
def test_split_state(state, flags, base, out):
    got_base, got_flags = split_state(state, flags)
    assert got_base == base and got_flags == out


def test_versions_and_numbers():
    assert parse_version("slurm-wlm 22.05.8") == (22, 5, 8)
    assert parse_version("slurm 24.11.5") == (24, 11, 5)
    with pytest.raises(UnreachableError):
        parse_version("no version here")
    assert unwrap_number({"set": True, "infinite": False, "number": 7}) == 7
    assert unwrap_number({"set": False, "infinite": False, "number": 0}) is None
    assert unwrap_number(5) == 5


def test_kv_line():
    kv = parse_kv_line("NodeName=a State=IDLE Reason=two words here [x@y] Comment=(null)")
    assert kv["Reason"] == "two words here [x@y]" and kv["Comment"] == "(null)"
