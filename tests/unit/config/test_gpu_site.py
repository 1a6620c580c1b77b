"""Issue 16: the rendered slurm.conf is right for an 8-GPU site, not only valid: jobs billed in
GPUs, a memory default that follows CPUs, partition limits enforced at submit, a backfill window
covering the longest time limit, failover only with shared state, a MailProg, and slurmd ordered
after the GPU device files. (Behaviour on a real slurmctld: tests/integration/test_gpu_site.py.)"""

from __future__ import annotations

import pytest
import tomli_w
from click.testing import CliRunner

from slurmadm.cli import cli
from slurmadm.config import render
from slurmadm.config.apply import program_warnings
from slurmadm.config.diff import parse
from slurmadm.config.unit import dropin_text
from slurmadm.errors import SiteError

from .conftest import make_site, site_data

pytestmark = pytest.mark.unit


def conf(change=None) -> str:
    return render(make_site(change), (22, 5))["slurm.conf"]


def settings(text: str) -> dict[str, str]:
    return {k: v[1][-1] for k, v in parse(text, name="t").settings.items()}


def partitions(text: str) -> dict[str, dict[str, str]]:
    return {r["partitionname"]: r for r in parse(text, name="t").records if "partitionname" in r}


def problems(change) -> list[str]:
    with pytest.raises(SiteError) as err:
        make_site(change)
    return err.value.problems


def billed(weights: str, max_tres: bool, *, cpus: int, mem_mib: int, gpus: int) -> float:
    """Slurm's billing formula (slurm.conf.5, TRESBillingWeights), from the rendered weights."""
    w = {}
    for item in weights.split(","):
        key, value = item.split("=")
        scale = 1 / 1024 if value.endswith("G") else 1.0
        w[key.lower()] = float(value.rstrip("G")) * scale
    parts = [cpus * w.get("cpu", 0), mem_mib * w.get("mem", 0), gpus * w.get("gres/gpu", 0)]
    return max(parts) if max_tres else sum(parts)


# ------------------------------------------------------------------------------ 1. billing


def test_gpu_equivalent_billing_speaks_gpus():
    text = conf()
    weights = partitions(text)["gpu"]["tresbillingweights"]
    assert settings(text)["priorityflags"] == "MAX_TRES"
    real = 1992294  # RealMemory of the reference node
    # the two projects: 8 GPUs + 16 CPUs, and 1 GPU + 224 CPUs, both hold a whole node
    eight = billed(weights, True, cpus=16, mem_mib=16 * 8894, gpus=8)
    cpu_heavy = billed(weights, True, cpus=224, mem_mib=224 * 8894, gpus=1)
    assert eight == pytest.approx(8, abs=1e-3) and cpu_heavy == pytest.approx(8, abs=1e-3)
    assert cpu_heavy <= 8 and billed(weights, True, cpus=1, mem_mib=real, gpus=0) <= 8  # never above a node
    assert billed(weights, True, cpus=28, mem_mib=28 * 8894, gpus=1) == pytest.approx(1, abs=1e-3)


@pytest.mark.parametrize("mode, weights, flags", [
    ("gpus", "GRES/gpu=1", None),
    ("cpus", None, None),
])
def test_other_billing_modes(mode, weights, flags):
    text = conf(lambda d: d["slurm"].update(billing=mode))
    assert partitions(text)["gpu"].get("tresbillingweights") == weights
    assert settings(text).get("priorityflags") == flags


def test_partition_billing_weights_override():
    text = conf(lambda d: d["partitions"][1].update(billing_weights={"gres/gpu": 2.0, "cpu": 0.5}))
    assert partitions(text)["debug"]["tresbillingweights"] == "CPU=0.5,GRES/gpu=2"
    assert partitions(text)["gpu"]["tresbillingweights"].startswith("CPU=0.0357142,")


def test_all_zero_weights_are_refused():
    found = problems(lambda d: d["partitions"][1].update(billing_weights={"gres/gpu": 0.0}))
    assert found == ["partitions[1].billing_weights: every weight is 0, so no job in 'debug' would be charged "
                     "(omit the key for slurm.billing)"]


# ------------------------------------------------------------------------- 2. memory default


def test_cpu_only_job_gets_memory_per_cpu_not_the_node():
    part = partitions(conf())["gpu"]
    assert part["defmempercpu"] == str(1992294 // 224)
    assert "defmempergpu" not in part and "defmempernode" not in part  # mutually exclusive in Slurm
    # a GPU job's default (DefCpuPerGPU x DefMemPerCPU) stays about one eighth of the node
    assert int(part["defcpupergpu"]) * int(part["defmempercpu"]) == pytest.approx(1992294 / 8, rel=0.001)
    assert partitions(conf(lambda d: d["partitions"][0].update(def_mem_per_cpu_mib=4000)))["gpu"]["defmempercpu"] == "4000"


# ------------------------------------------------------------- 3. partition limits at submit


def test_enforce_part_limits():
    assert settings(conf())["enforcepartlimits"] == "ALL"
    assert settings(conf(lambda d: d["slurm"].update(enforce_part_limits="ANY")))["enforcepartlimits"] == "ANY"


# ---------------------------------------------------------------------------- 5. backfill


def sched(text: str) -> dict[str, str]:
    return dict(p.split("=") for p in settings(text)["schedulerparameters"].split(",") if "=" in p)


def test_backfill_window_covers_the_longest_max_time():
    assert sched(conf()) == {"bf_window": "10080", "bf_resolution": "420"}  # 7 days
    short = conf(lambda d: [p.update(max_time="02:00:00") for p in d["partitions"]])
    assert sched(short) == {"bf_window": "1440", "bf_resolution": "60"}  # never below Slurm's default
    endless = conf(lambda d: d["partitions"][0].update(max_time="INFINITE"))
    assert sched(endless) == {"bf_window": "43200", "bf_resolution": "1800"}  # Slurm's maximum
    mine = conf(lambda d: d["slurm"].update(bf_window_minutes=20000, bf_resolution_s=900))
    assert sched(mine) == {"bf_window": "20000", "bf_resolution": "900"}


def test_backfill_window_shorter_than_max_time_is_refused():
    found = problems(lambda d: d["slurm"].update(bf_window_minutes=1440))
    assert found == ["slurm.bf_window_minutes: 1440 is shorter than the longest partition max_time (10080 minutes); "
                     "backfill could not plan the longest jobs, which starve (omit it to derive it)"]
    found = problems(lambda d: d["slurm"].update(scheduler_parameters=["bf_continue", "bf_window=60"]))
    assert found == ["slurm.scheduler_parameters[1]: set bf_window through slurm.bf_window_minutes "
                     "(slurmadm derives it from the partitions)"]


# -------------------------------------------------------------------------- 6. failover


def test_two_controllers_need_shared_state():
    found = problems(lambda d: d["slurm"].update(state_save_shared=False))
    assert len(found) == 1 and found[0].startswith("cluster.controllers: 2 controllers fail over through "
                                                   "slurm.state_save_location '/mnt/slurm-state/slurmctld'")
    one = make_site(lambda d: (d["cluster"].update(controllers=["head-01"]),
                               d["slurm"].update(state_save_shared=False)))
    assert "SlurmctldHost=head-01\n" in render(one, (22, 5))["slurm.conf"]


# ------------------------------------------------------------------------- 7. MailProg, slurmd


def test_mail_prog():
    assert settings(conf())["mailprog"] == "/usr/bin/mail"
    assert settings(conf(lambda d: d["slurm"].update(mail_prog="")))["mailprog"] == "/bin/true"
    assert problems(lambda d: d["slurm"].update(mail_prog="mail"))[0].startswith("slurm.mail_prog:")
    assert problems(lambda d: d["slurm"].update(mail_prog="/usr/bin/mail -s"))[0].startswith("slurm.mail_prog:")


def test_a_missing_mailer_is_a_warning_at_apply(tmp_path):
    missing = str(tmp_path / "no-mail")
    assert program_warnings(make_site(lambda d: d["slurm"].update(mail_prog=missing))) == [
        f"slurm.mail_prog: {missing} is not an executable program on this host, so slurmctld cannot send job "
        f"mail (install a mailer such as bsd-mailx, or set mail_prog = \"\")"]
    assert program_warnings(make_site(lambda d: d["slurm"].update(mail_prog="/bin/sh"))) == []
    assert program_warnings(make_site(lambda d: d["slurm"].update(mail_prog=""))) == []


def test_slurmd_dropin_orders_slurmd_after_the_gpu_units(tmp_path):
    text = dropin_text(make_site())
    assert "[Unit]\nAfter=nvidia-persistenced.service\nWants=nvidia-persistenced.service\n" in text
    assert "/dev/nvidia[0-7]" in text
    assert problems(lambda d: d["slurm"].update(slurmd_after=["nvidia; rm -rf /"]))[0].startswith(
        "slurm.slurmd_after[0]:")
    store = tmp_path / "store.db"
    site_file = tmp_path / "site.toml"
    site_file.write_text(tomli_w.dumps(site_data(lambda d: d.update(store={"path": str(store)}))))
    args = ["config", "slurmd-unit", "--site", str(site_file), "--dest", str(tmp_path / "systemd")]
    dry = CliRunner().invoke(cli, [*args, "--dry-run"])
    assert dry.exit_code == 0 and not (tmp_path / "systemd").exists() and "After=nvidia-persistenced" in dry.output
    first = CliRunner().invoke(cli, [*args, "--reason", "boot order"])
    assert first.exit_code == 0, first.output
    path = tmp_path / "systemd" / "slurmd.service.d" / "slurmadm.conf"
    assert path.read_text() == text
    again = CliRunner().invoke(cli, [*args, "--reason", "boot order"])
    assert "unchanged" in again.output


# ------------------------------------------------------------------ 4. AllowQos against slurmdbd


def test_apply_refuses_allow_qos_that_slurmdbd_lacks(tmp_path, monkeypatch):
    """A stand-in sacctmgr that knows every QOS but 'burnin': the AllowQos name is refused like a
    partition QOS, before anything is written (the real slurmdbd: tests/integration/test_gpu_site.py)."""
    from slurmadm.config.apply import check_partition_qos
    from slurmadm.errors import UsageError

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "sacctmgr"
    fake.write_text("#!/bin/sh\nprintf 'normal\\nhigh\\nlow\\ndebug\\n'\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:/usr/bin:/bin")
    site = make_site()
    with pytest.raises(UsageError) as err:
        check_partition_qos(site, render(site, (22, 5))["slurm.conf"])
    assert str(err.value) == (
        "partitions[0].allow_qos[3]: QOS 'burnin' does not exist in slurmdbd, and slurmctld would silently drop "
        "it from AllowQos; create it first (slurmadm accounts apply), then apply again. Nothing written.")
    fake.write_text("#!/bin/sh\nprintf 'normal\\nhigh\\nlow\\ndebug\\nburnin\\n'\n")
    check_partition_qos(site, render(site, (22, 5))["slurm.conf"])  # all known: no error
