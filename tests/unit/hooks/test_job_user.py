"""Issue 24: a job user cannot steer the root hooks. What a job controls (the environment it
sets, files in /tmp or /dev/shm or the directory it starts in, the job-map directory, a process
named like a daemon the checks look for) changes no verdict and no file slurmadm writes.
The hooks run as slurmd runs them (tests/unit/hooks/test_wrappers.py's fixture)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from slurmadm import jobmap
from slurmadm.devcluster import gpus
from slurmadm.health.nodechecks import process_running
from tests.unit.hooks.test_wrappers import NODE, hooks, run_hook  # noqa: F401  (the fixture)

pytestmark = pytest.mark.unit

SHADOW = "import os\nopen(os.environ.get('SHADOW_MARK', '/nonexistent/x'), 'w').write('ran')\nraise SystemExit(0)\n"


def planted(d: Path) -> Path:
    """What a job user leaves where it can: a `slurmadm` package and sitecustomize that would
    pass every job, next to where the hook starts, on PYTHONPATH and in TMPDIR."""
    for name in ("slurmadm/__init__.py", "slurmadm/health/__init__.py", "slurmadm/health/__main__.py",
                 "sitecustomize.py", "usercustomize.py"):
        (d / name).parent.mkdir(parents=True, exist_ok=True)
        (d / name).write_text(SHADOW)
    (d / "slurmadm.db").write_text("not a store")
    return d


def job_env(d: Path, mark: Path) -> dict[str, str]:
    return {"PYTHONPATH": str(d), "PYTHONSTARTUP": str(d / "sitecustomize.py"), "PYTHONUSERBASE": str(d),
            "PYTHONSAFEPATH": "", "TMPDIR": str(d), "HOME": str(d), "SHADOW_MARK": str(mark),
            "SLURMADM_SITE": str(d / "site.toml"), "SLURMADM_CACHE_DIR": str(d / "cache"),
            "SLURM_JOB_ID": "42", "SLURM_JOB_USER": "../../etc", "SLURM_JOB_GPUS": "0-7",
            "CUDA_VISIBLE_DEVICES": "", "SLURMADM_ACTOR": "someone-else"}


@pytest.mark.parametrize("script", ["prolog.sh", "healthcheck.sh"])
def test_the_jobs_environment_and_planted_files_change_no_verdict(hooks, tmp_path, script):  # noqa: F811
    d = planted(tmp_path / "user")
    mark = tmp_path / "shadow-ran"
    shm = Path("/dev/shm") / f"slurmadm-test-{os.getpid()}"
    planted(shm) if Path("/dev/shm").is_dir() else None
    try:
        p = subprocess.run([str(hooks / script)], env={**job_env(d, mark), **_slurmd_env(hooks)},
                           capture_output=True, text=True, timeout=120, cwd=str(d))
        assert p.returncode == 0 and "all clean" in p.stderr, p.stderr
        gpus.inject(hooks.gdir, NODE, 5, "ecc-uncorrected")
        p = subprocess.run([str(hooks / script)], env={**job_env(d, mark), **_slurmd_env(hooks)},
                           capture_output=True, text=True, timeout=120, cwd=str(d))
        assert "ecc-uncorrected fail" in p.stderr, p.stderr
        if script == "prolog.sh":
            assert p.returncode == 1  # the job is still refused
        assert not mark.exists()  # none of the planted code ran as root
        assert (d / "slurmadm.db").read_text() == "not a store"
    finally:
        shutil.rmtree(shm, ignore_errors=True)


def _slurmd_env(h) -> dict[str, str]:
    run_hook(h, "epilog.sh")  # writes the slurm.conf run_hook uses
    return {"SLURMD_NODENAME": NODE, "SLURM_CONF": str(h / "slurm" / "slurm.conf")}


def test_a_job_map_directory_a_user_could_change_is_not_written(tmp_path):
    env = {"SLURM_JOB_ID": "7", "SLURM_JOB_GPUS": "0,1", "SLURM_JOB_USER": "alice"}
    good = tmp_path / "jobs"
    assert jobmap.record_from_env(env, NODE, str(good), "prolog").startswith("recorded")
    assert sorted(jobmap.read(str(good), NODE)) == [0, 1]
    # a link planted as the node's directory: root would write (or remove) files where it points
    elsewhere = tmp_path / "etc"
    elsewhere.mkdir()
    linked = tmp_path / "linked"
    linked.mkdir()
    (linked / NODE).symlink_to(elsewhere)
    assert jobmap.record_from_env(env, NODE, str(linked), "prolog").startswith("not recorded")
    (elsewhere / "7.json").write_text("{}")
    assert jobmap.record_from_env(env, NODE, str(linked), "epilog").startswith("not recorded")
    assert os.listdir(elsewhere) == ["7.json"]
    # a world-writable directory
    open_dir = tmp_path / "open"
    (open_dir / NODE).mkdir(parents=True)
    os.chmod(open_dir, 0o1777)
    assert jobmap.record_from_env(env, NODE, str(open_dir), "prolog").startswith("not recorded")
    assert not os.listdir(open_dir / NODE)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to write a file as another user")
def test_a_job_map_file_another_user_wrote_is_ignored(tmp_path):
    d = tmp_path / "jobs"
    jobmap.record_from_env({"SLURM_JOB_ID": "7", "SLURM_JOB_GPUS": "0"}, NODE, str(d), "prolog")
    forged = d / NODE / "8.json"
    forged.write_text('{"job_id": "8", "user": "mallory", "gpus": [1, 2, 3]}')
    os.chown(forged, 65534, 65534)
    assert sorted(jobmap.read(str(d), NODE)) == [0]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to start a process as another user")
def test_a_job_users_process_named_like_fabric_manager_does_not_count():
    import tempfile

    where = Path(tempfile.mkdtemp(prefix="slurmadm-comm-", dir="/tmp"))  # a path another user can reach
    os.chmod(where, 0o755)
    exe = where / "nv-fabricmanager"
    shutil.copy(shutil.which("sleep"), exe)
    comm = "nv-fabricmanager"[:15]
    assert not process_running("nv-fabricmanager")  # none here

    def start(uid):
        return subprocess.Popen([str(exe), "60"], preexec_fn=(lambda: os.setuid(uid)) if uid else None)

    user = start(65534)
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not process_running("nv-fabricmanager", uid=None):
            time.sleep(0.05)
        assert process_running("nv-fabricmanager", uid=None)  # it is there, named like the daemon
        assert not process_running("nv-fabricmanager")  # but not root's: the check still fails
        root = start(0)
        try:
            deadline = time.monotonic() + 10
            while time.monotonic() < deadline and not process_running("nv-fabricmanager"):
                time.sleep(0.05)
            assert process_running("nv-fabricmanager")
        finally:
            root.kill()
            root.wait()
    finally:
        user.kill()
        user.wait()
        shutil.rmtree(where, ignore_errors=True)
    assert comm == "nv-fabricmanage"
