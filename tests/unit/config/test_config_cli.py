"""`slurmadm config render|diff|apply` through the CLI: output, exit codes, one-line errors."""

from __future__ import annotations

import json

import pytest
import tomli_w
from click.testing import CliRunner

from slurmadm.cli import cli
from slurmadm.config import golden

from .conftest import EXAMPLE, site_data

pytestmark = pytest.mark.unit


def invoke(*args):
    return CliRunner().invoke(cli, list(args))


@pytest.fixture()
def site_file(tmp_path):
    def write(change=None):
        def full(d):
            d["store"] = {"path": str(tmp_path / "store.db")}
            d["slurm"].update(config_dir=str(tmp_path / "etc"), release="22.05")
            del d["partitions"][1]["qos"]
            for part in d["partitions"]:  # nor AllowQos names (the same check)
                part.pop("allow_qos", None)  # checking a partition QOS asks slurmdbd
            if change:
                change(d)
        path = tmp_path / "site.toml"
        path.write_text(tomli_w.dumps(site_data(full)))
        return str(path)
    return write


def test_render_out_writes_the_golden_files(tmp_path):
    out = tmp_path / "out"
    result = invoke("config", "render", "--site", str(EXAMPLE), "--release", "22.05", "--out", str(out))
    assert result.exit_code == 0, result.output
    for name in ("slurm.conf", "gres.conf", "topology.conf", "cgroup.conf"):
        assert (out / name).read_text() == (golden.GOLDEN_DIR / name).read_text()


def test_render_prints_every_file_and_json_has_hashes():
    result = invoke("config", "render", "--site", str(EXAMPLE), "--release", "22.05")
    assert result.exit_code == 0
    assert [line for line in result.output.splitlines() if line.startswith("==> ")] == [
        "==> slurm.conf <==", "==> gres.conf <==", "==> topology.conf <==", "==> cgroup.conf <=="]
    data = json.loads(invoke("config", "render", "--site", str(EXAMPLE), "--release", "22.05", "--json").output)
    assert data["release"] == "22.05" and data["files"]["gres.conf"]["text"].endswith("Cores=56-111\n")
    assert len(data["site_digest"]) == 64


def test_a_bad_site_is_refused_with_one_line_per_problem(site_file, tmp_path):
    path = site_file(lambda d: (d["slurm"].update(task_plugins=["task/affinity"]),
                                d["profiles"]["hgx-b200"].update(cpus=100)))
    result = invoke("config", "render", "--site", path, "--out", str(tmp_path / "out"))
    assert result.exit_code == 2 and "Traceback" not in result.output
    lines = result.output.splitlines()
    assert len(lines) == 5 and all(line.startswith(f"slurmadm: error: {path}: ") for line in lines)
    assert any("profiles.hgx-b200.cpus: 100 is not" in line for line in lines)
    assert not (tmp_path / "out").exists()  # validation before anything is written


def test_bad_release_is_a_usage_error(site_file):
    result = invoke("config", "render", "--site", site_file(), "--release", "x")
    assert result.exit_code == 2 and result.output.strip() == (
        "slurmadm: error: --release: 'x' is not a Slurm release like 22.05 or 24.11")


def test_diff_exit_codes(site_file, tmp_path):
    path = site_file()
    assert invoke("config", "render", "--site", path, "--out", str(tmp_path / "etc")).exit_code == 0
    same = invoke("config", "diff", "--site", path)
    assert same.exit_code == 0 and "no differences" in same.output
    conf = tmp_path / "etc" / "slurm.conf"
    conf.write_text(conf.read_text().replace("CR_Core_Memory", "CR_Core"))
    drift = invoke("config", "diff", "--site", path)
    assert drift.exit_code == 1
    assert "-SelectTypeParameters=CR_Core\n+SelectTypeParameters=CR_Core_Memory" in drift.output
    data = json.loads(invoke("config", "diff", "--site", path, "--json").output)
    assert data["restart"] == {"slurmctld": ""} and data["changed"] == ["slurm.conf"]


def test_apply_dry_run_then_apply_then_nothing_to_do(site_file, tmp_path):
    path = site_file()
    dry = invoke("config", "apply", "--site", path, "--dry-run")
    assert dry.exit_code == 0 and "dry run" in dry.output and not (tmp_path / "etc" / "slurm.conf").exists()
    first = json.loads(invoke("config", "apply", "--site", path, "--reason", "install", "--json").output)
    assert first["written"] == ["slurm.conf", "gres.conf", "topology.conf", "cgroup.conf"]
    assert first["restart_steps"] == ["restart slurmctld on head-01, head-02", "restart slurmd on b200-[001-128]"]
    assert not first["reconfigured"] and len(first["events"]) == 4
    again = invoke("config", "apply", "--site", path)
    assert again.exit_code == 0 and "up to date" in again.output
    log = json.loads(invoke("audit", "log", "--site", path, "--json").output)
    assert [e["reason"] for e in log] == ["install"] * 4
