"""The hook scripts Slurm runs (prolog_epilog/*.sh) never fail a job for a broken site or a broken
install, only for a node fault (issue 15, item 2). Each test breaks one thing and runs the real
scripts, linked into a directory with their slurmadm.env as `slurmadm dev-cluster up` does, with
the environment slurmd gives them (no PATH)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import tomli_w

from slurmadm.devcluster import gpus, ibsysfs
from slurmadm.resources import prolog_epilog_dir
from slurmadm.site import BUILTIN_PROFILES
from tests.unit.siteedit import standin_node_data

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[3]
NODE = "b200-003"
HOOKS = ("prolog.sh", "epilog.sh", "healthcheck.sh")


@pytest.fixture()
def hooks(tmp_path, fake_nvml_lib):
    """<tmp>/hooks: links to the real scripts, a valid site, healthy stand-in GPUs, a slurmadm.env."""
    data = standin_node_data(tmp_path, check_timeout_s=10.0, prolog_timeout_s=60.0, epilog_timeout_s=60.0,
                             periodic_timeout_s=50.0)
    data["health"]["checks"]["nccl-allreduce"] = {"contexts": ["run"]}  # nothing to all-reduce on here
    site = tmp_path / "site.toml"
    site.write_text(tomli_w.dumps(data))
    site.chmod(0o644)
    gdir = tmp_path / "gpus"
    gpus.write_healthy(gdir, NODE, BUILTIN_PROFILES["hgx-b200"], driver_version="570.133.20")
    ibsysfs.write_healthy(gdir, NODE, BUILTIN_PROFILES["hgx-b200"])
    d = tmp_path / "hooks"
    d.mkdir()
    for script in prolog_epilog_dir().glob("*.sh"):
        (d / script.name).symlink_to(script)
    env = {"SLURMADM_SITE": str(site), "SLURMADM_PYTHON": sys.executable,
           "SLURMADM_CACHE_DIR": str(tmp_path / "cache"), **gpus.env_for(gdir, fake_nvml_lib)}

    def write_env(**changes):
        values = {**env, **changes}
        (d / "slurmadm.env").write_text("".join(f"{k}={v}\n" for k, v in values.items() if v is not None))

    write_env()
    return Hooks(d, site, gdir, write_env)


class Hooks:
    def __init__(self, d: Path, site: Path, gdir: Path, write_env):
        self.dir, self.site, self.gdir, self.write_env = d, site, gdir, write_env

    def __truediv__(self, name: str) -> Path:
        return self.dir / name


def run_hook(h: Hooks, script: str, **env) -> subprocess.CompletedProcess[str]:
    """As slurmd runs it: no PATH; SLURM_CONF (here a controller nobody listens for: Slurm cannot
    be reached to act, and says so at once)."""
    conf = h / "slurm" / "slurm.conf"
    if not conf.exists():
        conf.parent.mkdir()
        conf.write_text("ClusterName=x\nSlurmctldHost=localhost\nSlurmctldPort=1\nTCPTimeout=1\nMessageTimeout=1\n"
                        "NodeName=b200-003 CPUs=1\n"
                        "PartitionName=gpu Nodes=b200-003\n")
    base = {"SLURMD_NODENAME": NODE, "SLURM_CONF": str(conf)}
    return subprocess.run([str(h / script)], env={**base, **env}, capture_output=True, text=True, timeout=120,
                          cwd="/")


def loud(p: subprocess.CompletedProcess[str], *words: str) -> None:
    # a prolog/epilog lets the job run; the periodic hook has none and says enforcement is off
    periodic = p.args[0].endswith("healthcheck.sh")
    assert "slurmadm" in p.stderr, p.stderr
    assert ("health enforcement is off" if periodic else "the job runs") in p.stderr, p.stderr
    assert not periodic or "the job runs" not in p.stderr, p.stderr
    for w in words:
        assert w in p.stderr, p.stderr
    assert "Traceback" not in p.stderr, p.stderr


def test_healthy_node_runs_the_job_and_a_faulty_one_refuses_it(hooks):
    for script in HOOKS:
        p = run_hook(hooks, script)
        assert p.returncode == 0, p.stderr
        assert "all clean" in p.stderr and "Traceback" not in p.stderr
    gpus.inject(hooks.gdir, NODE, 5, "ecc-uncorrected")
    for script in ("prolog.sh", "epilog.sh"):
        p = run_hook(hooks, script)
        # Slurm cannot be reached to drain it, but the fault still keeps the job off the node
        assert p.returncode == 1, p.stderr
        assert "ecc-uncorrected fail" in p.stderr


@pytest.mark.parametrize("script", HOOKS)
def test_site_with_an_undecodable_byte_lets_the_job_run(hooks, script):
    hooks.site.write_bytes(hooks.site.read_bytes().replace(b'name = "', b'name = "\xff', 1))
    p = run_hook(hooks, script)
    assert p.returncode == 0
    loud(p, "not UTF-8")


def test_missing_site_and_bad_toml_let_the_job_run(hooks):
    hooks.site.write_text("[cluster\n")
    p = run_hook(hooks, "prolog.sh")
    assert p.returncode == 0
    loud(p, "TOML")
    hooks.write_env(SLURMADM_SITE=str(hooks / "nowhere.toml"))
    p = run_hook(hooks, "prolog.sh")
    assert p.returncode == 0
    loud(p, "does not exist")


def test_no_slurmadm_env_lets_the_job_run(hooks):
    (hooks / "slurmadm.env").unlink()
    p = run_hook(hooks, "prolog.sh")
    assert p.returncode == 0
    loud(p, "no slurmadm.env")


def test_slurmadm_env_with_a_syntax_error_lets_the_job_run(hooks):
    (hooks / "slurmadm.env").write_text("SLURMADM_SITE=(\nif then fi\n")
    p = run_hook(hooks, "epilog.sh")
    assert p.returncode == 0
    loud(p, "slurmadm.env")


@pytest.mark.parametrize("python", ["/nonexistent/venv/bin/python", "/etc/hostname"])
def test_wrong_python_lets_the_job_run(hooks, python):
    hooks.write_env(SLURMADM_PYTHON=python)
    p = run_hook(hooks, "prolog.sh")
    assert p.returncode == 0
    loud(p, python)


def test_venv_without_slurmadm_lets_the_job_run(hooks, tmp_path):
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    hooks.write_env(SLURMADM_PYTHON=str(venv / "bin" / "python"))
    for script in HOOKS:
        p = run_hook(hooks, script)
        assert p.returncode == 0, p.stderr
        loud(p)


def test_python_that_crashes_lets_the_job_run(hooks, tmp_path):
    """Any exit the hook does not define (a traceback's 1, a signal, argparse's 2) is not a node
    fault: only the hook's own 'refuse' code fails the job."""
    for code, expect in (("1", 0), ("2", 0), ("139", 0), ("0", 0)):
        fake = tmp_path / f"py{code}"
        fake.write_text(f"#!/bin/sh\nexit {code}\n")
        fake.chmod(0o755)
        hooks.write_env(SLURMADM_PYTHON=str(fake))
        assert run_hook(hooks, "prolog.sh").returncode == expect, code
    fake = tmp_path / "pyrefuse"
    fake.write_text('#!/bin/sh\nexit "$SLURMADM_REFUSE_EXIT"\n')
    fake.chmod(0o755)
    hooks.write_env(SLURMADM_PYTHON=str(fake))
    assert run_hook(hooks, "prolog.sh").returncode == 1


def test_any_exception_while_loading_lets_the_job_run(monkeypatch, capsys):
    from slurmadm.health import config, hook

    def boom(node, site, **_):
        raise RuntimeError("something nobody foresaw")

    monkeypatch.setattr(config, "load", boom)
    for context in ("prolog", "epilog", "periodic"):
        with pytest.raises(SystemExit) as exc:
            hook.main([context, "--node", NODE])
        assert exc.value.code == 0
        err = capsys.readouterr().err
        assert "unexpected RuntimeError: something nobody foresaw" in err
        # issue 25.5: the periodic hook has no job to run; it says enforcement is off instead
        assert ("the job runs" in err) == (context != "periodic"), err
        assert context != "periodic" or "health enforcement is off" in err


@pytest.mark.skipif(os.geteuid() != 0, reason="the rule is for hooks running as root")
@pytest.mark.parametrize("mode,owner", [(0o666, 0), (0o646, 0), (0o664, 0), (0o644, 65534)])
def test_root_hook_refuses_a_site_file_others_can_write(hooks, mode, owner):
    """As sshd's StrictModes: a root hook does not follow a site file (it says where to write
    and what to run) that another user can change. It refuses it loudly and lets the job run."""
    gid = 0 if mode != 0o664 else 65534
    os.chown(hooks.site, owner, gid)
    hooks.site.chmod(mode)
    p = run_hook(hooks, "prolog.sh")
    assert p.returncode == 0
    loud(p, str(hooks.site))
    assert "writable" in p.stderr or "owned by" in p.stderr
    assert not (hooks / "cache").exists() or not list((hooks.site.parent / "cache").glob("*"))


@pytest.mark.skipif(os.geteuid() != 0, reason="the rule is for hooks running as root")
def test_root_hook_refuses_a_site_in_a_directory_others_can_write(hooks, tmp_path):
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)  # not sticky: anyone may replace the file
    site = open_dir / "site.toml"
    site.write_bytes(hooks.site.read_bytes())
    hooks.write_env(SLURMADM_SITE=str(site))
    p = run_hook(hooks, "prolog.sh")
    assert p.returncode == 0
    loud(p, str(open_dir))


def test_slurmadm_env_cannot_turn_a_crash_into_a_refusal(hooks, tmp_path):
    fake = tmp_path / "py1"
    fake.write_text("#!/bin/sh\nexit 1\n")
    fake.chmod(0o755)
    hooks.write_env(SLURMADM_PYTHON=str(fake), SLURMADM_REFUSE_EXIT="1")
    assert run_hook(hooks, "prolog.sh").returncode == 0
