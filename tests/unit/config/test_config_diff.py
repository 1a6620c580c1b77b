"""diff: which changes need a daemon restart and which only `scontrol reconfigure`."""

from __future__ import annotations

import pytest

from slurmadm.config import render
from slurmadm.config.diff import classify, parse, plan
from slurmadm.errors import UsageError

from .conftest import make_site

pytestmark = pytest.mark.unit


def install(tmp_path, site):
    for name, text in render(site, (22, 5)).items():
        (tmp_path / name).write_text(text)
    return tmp_path


def changes_after(tmp_path, change):
    install(tmp_path, make_site())
    the_plan = plan(render(make_site(change), (22, 5)), tmp_path)
    return the_plan, {c.what: c for c in the_plan.changes if c.action != "none"}


def test_identical_files_plan_nothing(tmp_path, example):
    install(tmp_path, example)
    the_plan = plan(render(example, (22, 5)), tmp_path)
    assert the_plan.files == [] and the_plan.restart == {} and not the_plan.needs_reconfigure


def test_a_header_only_change_needs_nothing(tmp_path):
    the_plan, real = changes_after(tmp_path, lambda d: d["health"].update(check_timeout_s=7.0))
    assert real == {}
    assert {f.name for f in the_plan.files} == {"slurm.conf", "gres.conf", "topology.conf", "cgroup.conf"}
    assert {c.action for c in the_plan.changes} == {"none"} and the_plan.restart == {}
    assert "-# Site sha256" in the_plan.files[0].unified


def test_priority_weights_and_partitions_take_reconfigure(tmp_path):
    def change(d):
        d["slurm"]["priority"]["weight_age"] = 5000
        d["partitions"][0]["max_time"] = "3-00:00:00"
    the_plan, real = changes_after(tmp_path, change)
    # the backfill window follows the longest MaxTime (7 days -> 3 days)
    assert set(real) == {"PriorityWeightAge: 1000 -> 5000", "partition gpu: MaxTime changed",
                         "SchedulerParameters: nohold_on_prolog_fail,bf_continue,bf_window=10080,bf_resolution=420"
                         " -> nohold_on_prolog_fail,bf_continue,bf_window=4320,bf_resolution=180"}
    assert all(c.action == "reconfigure" for c in real.values())
    assert the_plan.restart == {} and the_plan.needs_reconfigure


@pytest.mark.parametrize("change, key, daemons", [
    (lambda d: d["slurm"].update(accounting_enforce=["associations", "limits"]), "AccountingStorageEnforce",
     ("slurmctld",)),
    (lambda d: d["slurm"].update(accounting_tres=["gres/gpu", "license/x"]), "AccountingStorageTRES", ("slurmctld",)),
    (lambda d: d["slurm"].update(task_plugins=["task/cgroup"]), "TaskPlugin", ("slurmd",)),
    (lambda d: d["slurm"].update(proctrack="linuxproc", constrain_cores=True), "ProctrackType",
     ("slurmctld", "slurmd")),
    (lambda d: d["slurm"].update(slurmctld_port=6900), "SlurmctldPort", ("slurmctld", "slurmd")),
    (lambda d: d["cluster"].update(controllers=["head-01"]), "SlurmctldHost", ("slurmctld",)),
])
def test_plugin_port_and_enforcement_changes_need_restarts(tmp_path, change, key, daemons):
    _, real = changes_after(tmp_path, change)
    mine = [c for what, c in real.items() if what.startswith(f"{key}:")]
    assert len(mine) == 1 and mine[0].action == "restart" and mine[0].daemons == daemons


def test_node_hardware_changes_restart_both_daemons_features_reconfigure(tmp_path):
    the_plan, real = changes_after(tmp_path, lambda d: d["slurm"].update(real_memory_fraction=0.9))
    gres_or_mem = [c for c in real.values() if "RealMemory" in c.what]
    assert len(gres_or_mem) == 1 and gres_or_mem[0].daemons == ("slurmctld", "slurmd")
    assert gres_or_mem[0].what.startswith("NodeName=b200-[001-128] RealMemory: 1992294 -> 1887436")
    assert the_plan.restart == {"slurmctld": "", "slurmd": "b200-[001-128]"}

    _, real = changes_after(tmp_path, lambda d: d["nodes"][0].update(features=["b200"]))
    feats = [c for c in real.values() if "Features" in c.what]
    assert feats and all(c.action == "reconfigure" for c in feats)


def test_adding_nodes_restarts_everything(tmp_path):
    def change(d):
        d["nodes"].append({"names": "b200-[129-130]", "profile": "hgx-b200"})
        d["topology"]["units"].append({"name": "su5", "nodes": "b200-[129-130]"})
    the_plan, real = changes_after(tmp_path, change)
    assert real["nodes added: b200-[129-130]"].daemons == ("slurmctld", "slurmd")
    assert the_plan.restart == {"slurmctld": "", "slurmd": ""}  # every slurmd must learn the new nodes
    assert real["switches changed"].action == "reconfigure"


def test_removing_a_partition_warns_about_its_jobs(tmp_path):
    def change(d):
        del d["partitions"][1]
    _, real = changes_after(tmp_path, change)
    assert real["partition debug removed"].note == "jobs in partition debug are cancelled"


def test_gres_changes_restart_and_warn_to_drain(tmp_path):
    _, real = changes_after(tmp_path, lambda d: d["profiles"]["hgx-b200"]["gpus"].update(
        sockets=[0, 0, 1, 1, 0, 0, 1, 1]))
    gres = [c for c in real.values() if c.file == "gres.conf"]
    assert len(gres) == 1 and gres[0].daemons == ("slurmctld", "slurmd") and gres[0].note == ""

    _, real = changes_after(tmp_path, lambda d: d["profiles"]["hgx-b200"]["gpus"].update(
        device_files="/dev/gpu[0-7]"))
    gres = [c for c in real.values() if c.file == "gres.conf"]
    assert gres[0].note == "drain b200-[001-128] first: their GPU devices change"


def test_cgroup_constraints_reconfigure_but_the_plugin_restarts_slurmd(tmp_path):
    _, real = changes_after(tmp_path, lambda d: d["slurm"].update(constrain_swap_space=False))
    assert real["ConstrainSwapSpace: yes -> no"].action == "reconfigure"
    _, real = changes_after(tmp_path, lambda d: d["slurm"].update(cgroup_plugin="cgroup/v2"))
    assert real["CgroupPlugin: autodetect -> cgroup/v2"].daemons == ("slurmd",)


def test_new_files_need_the_daemons_started(tmp_path, example):
    the_plan = plan(render(example, (22, 5)), tmp_path)
    assert [f.old for f in the_plan.files] == [None] * 4
    assert the_plan.restart == {"slurmctld": "", "slurmd": ""}
    assert the_plan.files[0].unified.startswith("--- /dev/null\n+++ rendered/slurm.conf")


def test_parse_settings_records_and_quotes():
    p = parse('A=1 # comment\nSlurmctldHost=h1\nSlurmctldHost=h2\nRebootProgram="/bin/x y"\n'
              'NodeName=n[1-2] CPUs=4\n', name="slurm.conf")
    assert p.settings["a"] == ("A", ["1"]) and p.settings["slurmctldhost"][1] == ["h1", "h2"]
    assert p.settings["rebootprogram"][1] == ["/bin/x y"]
    assert p.records == [{"nodename": "n[1-2]", "cpus": "4"}]
    with pytest.raises(UsageError, match=r"slurm.conf line 2: 'oops' is not KEY=VALUE"):
        parse("A=1\noops\n", name="slurm.conf")
    with pytest.raises(UsageError, match="slurm.conf line 1: cannot parse"):
        parse('A="unclosed\n', name="slurm.conf")


def test_a_hand_edit_of_the_installed_file_shows_up():
    new = "ClusterName=b200\nSelectTypeParameters=CR_Core_Memory\n"
    old = "ClusterName=b200\nSelectTypeParameters=CR_Core\n"
    (change,) = classify("slurm.conf", old, new)
    assert change.what == "SelectTypeParameters: CR_Core -> CR_Core_Memory" and change.daemons == ("slurmctld",)
