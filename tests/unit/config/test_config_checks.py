"""Every validation rule: a bad site gives one line naming the site key; nothing renders."""

from __future__ import annotations

import pytest

from slurmadm.config import parse_release, render
from slurmadm.errors import SiteError, UsageError

from .conftest import make_site

pytestmark = pytest.mark.unit


def problems(change) -> list[str]:
    with pytest.raises(SiteError) as info:
        make_site(change)
    return info.value.problems


def only(change) -> str:
    found = problems(change)
    assert len(found) == 1, found
    return found[0]


def gpus(d):
    return d["profiles"]["hgx-b200"]["gpus"]


def test_the_reference_site_passes(example):
    assert render(example, (22, 5))


def test_cpus_must_be_sockets_times_cores_times_threads():
    line = only(lambda d: d["profiles"]["hgx-b200"].update(cpus=112))
    assert line.startswith("profiles.hgx-b200.cpus: 112 is not sockets x cores_per_socket x threads_per_core")
    assert line.endswith("= 224")


def test_cores_must_be_logical_core_indexes_not_os_cpu_ids():
    cores = ["0-55,112-167"] * 4 + ["56-111,168-223"] * 4
    found = problems(lambda d: gpus(d).update(cores=cores))
    assert len(found) == 8
    assert found[0].startswith("profiles.hgx-b200.gpus.cores[0]: '0-55,112-167' goes past core 111")
    assert "not OS CPU ids" in found[0]


def test_cores_must_stay_on_the_gpus_socket():
    cores = ["56-60"] + ["0-55"] * 3 + ["56-111"] * 4
    assert only(lambda d: gpus(d).update(cores=cores)) == (
        "profiles.hgx-b200.gpus.cores[0]: '56-60' leaves GPU0's socket 0 (its cores are 0-55)")


def test_cores_must_parse_and_cover_every_gpu():
    cores = ["zero"] + ["0-55"] * 3 + ["56-111"] * 4
    assert only(lambda d: gpus(d).update(cores=cores)).startswith(
        "profiles.hgx-b200.gpus.cores[0]: 'zero' is not a list of core indexes")
    assert only(lambda d: gpus(d).update(cores=["0-55"] * 7)) == (
        "profiles.hgx-b200.gpus: cores lists 7 GPUs but count is 8")


def test_gpu_files_per_node_must_equal_the_gres_count():
    assert only(lambda d: gpus(d).update(device_files="/dev/nvidia[0-6]")) == (
        "profiles.hgx-b200.gpus: device_files '/dev/nvidia[0-6]' names 7 files but count is 8")
    assert only(lambda d: gpus(d).update(device_files="nvidia[0-7]")) == (
        "profiles.hgx-b200.gpus.device_files: 'nvidia0' is not an absolute path")


def test_topology_covers_each_node_exactly_once():
    def twice(d):
        d["topology"]["units"][1]["nodes"] = "b200-[030-064]"
    assert "b200-[030-032] already belong to another unit" in only(twice)

    def missing(d):
        d["topology"]["units"][3]["nodes"] = "b200-[097-127]"
    assert only(missing) == "topology.units: nodes b200-128 are in no scalable unit"


def test_switch_names_are_unique():
    assert only(lambda d: d["topology"].update(spine="su2")) == (
        "topology.units[1].name: 'su2' is also the spine's name")
    assert only(lambda d: d["topology"].update(units_per_spine=2, core="spine1")) == (
        "topology.core: switch name 'spine1' is used twice (switch names must be unique)")

    def chunked(d):
        del d["topology"]["units"]
        d["topology"]["spine"] = "su3"
    assert only(chunked) == "topology.spine: switch name 'su3' is used twice (switch names must be unique)"


def test_gpu_limits_need_gres_gpu_in_accounting_tres():
    line = only(lambda d: d["slurm"].update(accounting_tres=["gres/gpu:b200"]))
    assert line.startswith("slurm.accounting_tres: ['gres/gpu:b200'] lacks 'gres/gpu'")
    assert "qos[0].max_gpus_per_user" in line


def test_gpu_limits_need_slurmdbd():
    assert only(lambda d: d["slurm"].update(accounting_storage="none")).startswith(
        "slurm.accounting_storage: 'none' cannot enforce the GPU limits set at qos[0].max_gpus_per_user")

    def no_limits(d):
        d["slurm"]["accounting_storage"] = "none"
        for q in d["qos"]:
            for key in ("max_gpus_per_user", "max_gpus_per_job", "grp_gpus"):
                q.pop(key, None)
        for entry in d["organizations"] + d["projects"]:
            for key in ("gpu_quota", "gpu_hours", "user_gpu_cap"):
                entry.pop(key, None)
    make_site(no_limits)  # no GPU limit: nothing to enforce, so allowed


def test_constraints_need_task_cgroup():
    found = problems(lambda d: d["slurm"].update(task_plugins=["task/affinity"]))
    assert [p.split(":")[0] for p in found] == ["slurm.constrain_cores", "slurm.constrain_devices",
                                               "slurm.constrain_ram_space", "slurm.constrain_swap_space"]
    assert "ConstrainDevices=yes is enforced by task/cgroup" in found[1]


def test_task_none_stands_alone():
    def change(d):
        d["slurm"].update(task_plugins=["task/none", "task/cgroup"])
    assert only(change) == "slurm.task_plugins: task/none cannot be combined with other task plugins"


def test_resume_timeout_covers_the_boot_when_slurm_reboots_nodes():
    assert only(lambda d: d["slurm"].update(resume_timeout=300)) == (
        "slurm.resume_timeout: 300 s is shorter than profile hgx-b200's boot_seconds 600; "
        "nodes that Slurm reboots (slurm.reboot_program) would be marked DOWN")
    make_site(lambda d: d["slurm"].update(resume_timeout=300, reboot_program=""))


def _model(d, name):
    """Rename the GPU model, thresholds included (the health checks want them to match)."""
    gpus(d).update(model=name)
    d["health"]["models"][name] = d["health"]["models"].pop("b200")


def test_nvml_autodetect_needs_a_matching_type():
    assert only(lambda d: (d["slurm"].update(has_nvml=True), _model(d, "blackwell")))
    line = only(lambda d: (d["slurm"].update(has_nvml=True), _model(d, "b100")))
    assert line.startswith("profiles.hgx-b200.gpus.model: 'b100' must be part of NVML's type 'nvidia_b200'")


def test_extra_cannot_override_generated_keys():
    assert only(lambda d: d["slurm"].update(extra={"SchedulerParameters": "bf_continue"})) == (
        "slurm.extra.SchedulerParameters: slurmadm writes SchedulerParameters itself; set it through its own site key")
    assert only(lambda d: d["slurm"].update(extra={"nodename": "x"})).startswith("slurm.extra.nodename:")
    assert only(lambda d: d["slurm"].update(extra={"MailProg": "/usr/bin/s-nail"})).startswith("slurm.extra.MailProg:")
    make_site(lambda d: d["slurm"].update(extra={"MailDomain": "example.org"}))


def test_several_slurmd_per_host_need_their_own_spool_and_ports():
    assert only(lambda d: d["nodes"][0].update(addr="127.0.0.1", port=17000)).startswith(
        "slurm.slurmd_spool_dir: several slurmd share a host")

    def clash(d):
        d["nodes"][0].update(addr="127.0.0.1", port=6800)
        d["slurm"]["slurmd_spool_dir"] = "/var/spool/slurmd/%n"
    assert only(clash) == "nodes[0].port: the nodes' ports 6800-6927 include slurm.slurmctld_port 6817"


def test_release_dependent_keys_are_checked_at_render():
    site = make_site(lambda d: d["slurm"].update(cgroup_plugin="disabled"))
    with pytest.raises(SiteError) as info:
        render(site, (22, 5), source="site.toml")
    assert info.value.lines() == ["site.toml: slurm.cgroup_plugin: 'disabled' exists from Slurm 23.02; "
                                  "the target is 22.05 (use 'autodetect', or set slurm.release)"]
    assert render(site, (23, 2))


def test_release_parsing():
    assert parse_release("22.05") == (22, 5) and parse_release("24.11.5") == (24, 11)
    with pytest.raises(UsageError, match="not a Slurm release"):
        parse_release("latest")
    with pytest.raises(UsageError, match="older than 22.05"):
        parse_release("21.08")


@pytest.mark.parametrize("state,since", [("START_ONLY", (25, 11)), ("REBOOT_ONLY", (26, 5))])
def test_health_check_node_state_values_by_release(state, since):
    site = make_site(lambda d: d["slurm"].update(health_check_node_state=[state]))
    older = (since[0], since[1] - 1) if since[1] > 5 else (since[0] - 1, 11)
    with pytest.raises(SiteError) as info:
        render(site, older, source="site.toml")
    assert info.value.lines() == [
        f"site.toml: slurm.health_check_node_state[0]: {state!r} exists from Slurm {since[0]}.{since[1]:02d}; "
        f"the target is {older[0]}.{older[1]:02d} (use ANY, or set slurm.release)"]
    assert f"HealthCheckNodeState={state}" in render(site, since)["slurm.conf"]


def test_job_container_key_is_written_as_the_target_release_names_it():
    """25.11 renamed JobContainerType=job_container/tmpfs to NamespaceType=namespace/tmpfs."""
    site = make_site(lambda d: d["slurm"].update(extra={"JobContainerType": "job_container/tmpfs"}))
    assert "JobContainerType=job_container/tmpfs" in render(site, (24, 11))["slurm.conf"]
    new = render(site, (25, 11))["slurm.conf"]
    assert "NamespaceType=namespace/tmpfs" in new and "JobContainerType" not in new
    back = make_site(lambda d: d["slurm"].update(extra={"NamespaceType": "namespace/tmpfs"}))
    assert "JobContainerType=job_container/tmpfs" in render(back, (22, 5))["slurm.conf"]


def test_site_release_accepts_every_supported_release():
    for rel in ("22.05", "24.11", "25.05", "25.11", "26.05"):
        assert make_site(lambda d, rel=rel: d["slurm"].update(release=rel)).slurm.release == rel
