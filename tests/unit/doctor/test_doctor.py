"""`slurmadm doctor` without a cluster: the check registry, a broken check, a bad site file,
the hooks check against a slurm.conf on disk, and the reachability probes against a real IPMI
server (pyghmi's, the BMC emulators' base) and a real TCP listener on loopback."""

from __future__ import annotations

import json
import os
import socket
import threading
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurmadm import doctor
from slurmadm.cli import cli
from slurmadm.doctor import checks
from tests.unit.siteedit import put, site_file

pytestmark = pytest.mark.unit



def free_port(kind=socket.SOCK_STREAM) -> int:
    with socket.socket(socket.AF_INET, kind) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture()
def site(tmp_path, monkeypatch) -> Path:
    return site_file(tmp_path, monkeypatch, put("slurm.prolog_dir", str(tmp_path / "hooks")), slurm_conf=True)


def test_a_bad_site_fails_and_exits_1_with_the_fix(tmp_path):
    bad = tmp_path / "site.toml"
    bad.write_text("[cluster]\nnmae = 'x'\n")
    r = CliRunner().invoke(cli, ["doctor", "--site", str(bad), "--json", "--check", "site", "--check", "store"])
    assert r.exit_code == 1
    out = json.loads(r.stdout)
    by = {f["check"]: f for f in out["findings"]}
    assert out["ok"] is False and by["site"]["status"] == "fail"
    assert "slurmadm site validate" in by["site"]["fix"]
    assert by["store"]["status"] == "skip"  # needs the site


def test_checks_are_a_registry_others_extend_and_a_crash_is_a_finding(site):
    calls = []

    @doctor.register("demo-extra", "an extra check", after="store")
    def extra(ctx):
        calls.append(ctx.site.cluster.name)
        return doctor.Finding("demo-extra", "warn", "something to look at", "do this")

    @doctor.register("demo-broken", "a broken check")
    def broken(ctx):
        raise RuntimeError("boom")

    try:
        ids = [c.id for c in doctor.CHECKS]
        assert ids.index("demo-extra") == ids.index("store") + 1
        ctx = doctor.Context(site_file=str(site))
        found = {f.check: f for f in doctor.run(ctx, ["site", "demo-extra", "demo-broken"])}
        assert calls == ["b200"] and found["demo-extra"].status == "warn"
        assert found["demo-broken"].status == "fail" and "RuntimeError: boom" in found["demo-broken"].summary
        assert doctor.exit_code(list(found.values())) == 1
    finally:
        doctor.CHECKS[:] = [c for c in doctor.CHECKS if not c.id.startswith("demo-")]


def test_hooks_check_reads_slurm_conf_and_names_the_fix(site, tmp_path):
    hooks = tmp_path / "hooks"
    etc = tmp_path / "etc"
    etc.mkdir()
    (etc / "slurm.conf").write_text(f"ClusterName=b200\nProlog={hooks}/prolog.sh\nEpilog=/other/epilog.sh\n")
    ctx = doctor.Context(site_file=str(site))
    doctor.run(ctx, ["site"])
    f = checks.hooks(ctx)
    assert f.status == "fail" and f"{hooks}/prolog.sh missing" in f.summary
    assert "Epilog is /other/epilog.sh" in f.summary and "HealthCheckProgram is unset" in f.summary
    hooks.mkdir()
    for name in ("prolog.sh", "epilog.sh", "healthcheck.sh"):
        (hooks / name).write_text("#!/bin/sh\n")
        (hooks / name).chmod(0o755)
    (hooks / "slurmadm.env").write_text(f"SLURMADM_SITE={site}\n")
    (etc / "slurm.conf").write_text(f"Prolog={hooks}/prolog.sh\nEpilog={hooks}/epilog.sh\n"
                                    f"HealthCheckProgram={hooks}/healthcheck.sh\n")
    ctx = doctor.Context(site_file=str(site))
    doctor.run(ctx, ["site"])
    f = checks.hooks(ctx)
    assert f.status == "ok", f.summary


@pytest.mark.parametrize("index", ["", "[0]"])
def test_hooks_check_reads_scontrol_show_config_of_22_05_and_24_11(site, tmp_path, monkeypatch, index):
    """24.11 prints `Prolog[0] = ...` (several Prologs allowed; seen on Debian 13's 24.11.5),
    22.05 `Prolog = ...`."""
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    for name in ("prolog.sh", "epilog.sh", "healthcheck.sh"):
        (hooks / name).write_text("#!/bin/sh\n")
        (hooks / name).chmod(0o755)
    (hooks / "slurmadm.env").write_text(f"SLURMADM_SITE={site}\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(
        "#!/bin/sh\ncat <<'EOF'\n"
        f"Epilog{index}               = {hooks}/epilog.sh\nEpilogMsgTime           = 2000 usec\n"
        f"HealthCheckProgram      = {hooks}/healthcheck.sh\n"
        f"Prolog{index}               = {hooks}/prolog.sh\nPrologEpilogTimeout     = 65534\n"
        "PrologFlags             = Alloc\nEOF\n")
    (bin_dir / "scontrol").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    ctx = doctor.Context(site_file=str(site))
    doctor.run(ctx, ["site"])
    f = checks.hooks(ctx)
    assert f.status == "ok", f.summary
    assert f.data["config_source"] == "scontrol show config"


def test_ipmi_probe_gets_an_answer_from_a_real_ipmi_server_and_none_from_a_closed_port():
    from pyghmi.ipmi.bmc import Bmc

    port = free_port(socket.SOCK_DGRAM)
    bmc = Bmc({"admin": "not-a-real-secret"}, port=port, address="127.0.0.1")
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            bmc.listen(timeout=0.2)

    t = threading.Thread(target=serve, daemon=True)
    t.start()
    try:
        assert checks.ipmi_ping("127.0.0.1", port, 5.0) is None
    finally:
        stop.set()
        t.join(timeout=5)
    assert checks.ipmi_ping("127.0.0.1", free_port(socket.SOCK_DGRAM), 0.3) is not None


def test_tcp_probe():
    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        assert checks.tcp_ping("127.0.0.1", srv.getsockname()[1], 2.0) is None
    assert "refused" in checks.tcp_ping("127.0.0.1", free_port(), 2.0).lower()


def test_bmc_and_ssh_report_which_nodes_do_not_answer(site):
    ctx = doctor.Context(site_file=str(site))
    doctor.run(ctx, ["site"])
    targets = {"b200-001": ("127.0.0.1", free_port()), "b200-002": ("127.0.0.1", free_port())}
    f = checks._reach_finding("ssh", "node SSH", {"b200-001": None, "b200-002": "Connection refused"}, targets,
                              "check sshd")
    assert f.status == "warn" and "1 of 2 do not answer: b200-002" in f.summary and f.fix == "check sshd"


def _fake_scontrol(tmp_path, monkeypatch, config: str) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "scontrol").write_text(f"#!/bin/sh\ncat <<'EOF'\n{config}EOF\n")
    (bin_dir / "scontrol").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")


@pytest.mark.parametrize("tres,status", [
    ("cpu,mem,energy,node,billing,fs/disk,vmem,pages", "warn"),  # Slurm's default (slurm.conf.5)
    ("cpu,mem,energy,node,billing,fs/disk,vmem,pages,gres/gpu", "ok"),
    ("cpu,mem,gres/gpu:b200", "ok"),  # a typed GPU TRES tracks gres/gpu too
])
def test_gpu_tres_check_says_when_slurm_counts_gpu_jobs_as_zero(site, tmp_path, monkeypatch, tres, status):
    _fake_scontrol(tmp_path, monkeypatch, f"AccountingStorageTRES   = {tres}\nAccountingStorageType   = "
                                          "accounting_storage/slurmdbd\n")
    ctx = doctor.Context(site_file=str(site))
    doctor.run(ctx, ["site"])
    f = checks.gpu_tres(ctx)
    assert f.status == status, f.summary
    assert f.data["tracked"] is (status == "ok")
    if status == "warn":
        assert "0 GPUs" in f.summary and "AccountingStorageTRES" in f.fix


def test_doctor_names_the_slurm_release_pyslurm_was_built_for():
    from slurmadm.slurm.pyslurm_backend import pyslurm_built_for

    class Old:
        __version__ = "24.11.0"

    class New:
        __version__ = "25.11.1"

        @staticmethod
        def slurm_api_version():
            return (25, 11, 2)

    assert pyslurm_built_for(Old) == "24.11 (from pyslurm's version)"
    assert pyslurm_built_for(New) == "25.11.2"
