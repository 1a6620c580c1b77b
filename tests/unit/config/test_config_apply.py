"""apply: backup, atomic writes, one audit event per file, idempotence, dry run, lock.
(`scontrol reconfigure` itself is exercised against the dev cluster in the integration tests.)"""

from __future__ import annotations

import fcntl
import os
import stat

import pytest

from slurmadm.config import render
from slurmadm.config.apply import BACKUP_DIR, LOCK_NAME, apply
from slurmadm.errors import LockBusy
from slurmadm.store import Store

from .conftest import make_site

pytestmark = pytest.mark.unit


@pytest.fixture()
def site_at(tmp_path):
    def make(change=None):
        def full(d):
            d["store"] = {"path": str(tmp_path / "store.db")}
            d["slurm"]["config_dir"] = str(tmp_path / "etc")
            # no partition QOS: checking one asks slurmdbd (tested against the dev cluster)
            del d["partitions"][1]["qos"]
            for part in d["partitions"]:  # nor AllowQos names (the same check)
                part.pop("allow_qos", None)
            if change:
                change(d)
        return make_site(full)
    return make


def events(site):
    with Store.for_site(site) as store:
        return store.events(action="config.apply")


def test_first_apply_writes_every_file_and_asks_to_start_the_daemons(site_at, tmp_path):
    site = site_at()
    result = apply(site, render(site, (22, 5)), reason="bootstrap")
    etc = tmp_path / "etc"
    assert result.written == ["slurm.conf", "gres.conf", "topology.conf", "cgroup.conf"]
    assert (etc / "slurm.conf").read_text() == render(site, (22, 5))["slurm.conf"]
    assert stat.S_IMODE((etc / "gres.conf").stat().st_mode) == 0o644
    assert result.backup is None and not result.reconfigured  # new files: restart, not reconfigure
    assert result.restart_steps(site) == ["restart slurmctld on head-01, head-02", "restart slurmd on b200-[001-128]"]
    evs = events(site)
    assert len(evs) == 4 and {e.reason for e in evs} == {"bootstrap"}
    assert {e.target for e in evs} == {str(etc / n) for n in result.written}
    assert all(e.detail["sha256_before"] is None and len(e.detail["sha256_after"]) == 64 for e in evs)


def test_second_apply_changes_nothing(site_at):
    site = site_at()
    apply(site, render(site, (22, 5)), reason="first")
    again = apply(site, render(site, (22, 5)), reason="second")
    assert again.written == [] and again.plan.files == [] and len(events(site)) == 4


def test_a_change_is_backed_up_and_keeps_the_file_mode(site_at, tmp_path):
    old_site = site_at()
    apply(old_site, render(old_site, (22, 5)), reason="first")
    etc = tmp_path / "etc"
    os.chmod(etc / "slurm.conf", 0o640)
    before = (etc / "slurm.conf").read_text()
    new_site = site_at(lambda d: d["slurm"]["priority"].update(weight_qos=20000))
    result = apply(new_site, render(new_site, (22, 5)), reason="more QOS weight", reconfigure=False)
    assert result.backup and result.backup.startswith(str(etc / BACKUP_DIR))
    assert (etc / BACKUP_DIR / os.path.basename(result.backup) / "slurm.conf").read_text() == before
    assert "PriorityWeightQOS=20000" in (etc / "slurm.conf").read_text()
    assert stat.S_IMODE((etc / "slurm.conf").stat().st_mode) == 0o640
    assert result.plan.needs_reconfigure and result.plan.restart == {}
    newest = [e for e in events(new_site) if e.reason == "more QOS weight"]
    assert len(newest) == 4  # the header (site digest) changed in every file
    conf = next(e for e in newest if e.target.endswith("slurm.conf"))
    assert conf.detail["backup"].endswith("/slurm.conf")
    want = {"what": "PriorityWeightQOS: 10000 -> 20000", "action": "reconfigure", "daemons": []}
    assert want in conf.detail["changes"]
    assert not list(etc.glob(".*.slurmadm-*"))  # no temporary files left


def test_dry_run_writes_nothing(site_at, tmp_path):
    site = site_at()
    result = apply(site, render(site, (22, 5)), reason="look", dry_run=True)
    assert result.dry_run and len(result.plan.files) == 4
    assert not (tmp_path / "etc" / "slurm.conf").exists() and events(site) == []


def test_a_second_apply_at_the_same_time_is_refused(site_at, tmp_path):
    site = site_at()
    (tmp_path / "etc").mkdir()
    fd = os.open(tmp_path / "etc" / LOCK_NAME, os.O_RDWR | os.O_CREAT)
    fcntl.flock(fd, fcntl.LOCK_EX)
    try:
        with pytest.raises(LockBusy, match="another `slurmadm config apply`"):
            apply(site, render(site, (22, 5)), reason="x")
    finally:
        os.close(fd)
    assert not (tmp_path / "etc" / "slurm.conf").exists()
