"""`slurmadm accounts` bad usage: one line, the right exit code, nothing changed."""

from __future__ import annotations

from pathlib import Path

import pytest
from click.testing import CliRunner

from slurmadm.cli import cli

pytestmark = pytest.mark.unit

EXAMPLE = str(Path(__file__).resolve().parents[3] / "site.example.toml")


def invoke(*args, env=None):
    return CliRunner().invoke(cli, list(args), env=env)


def test_csv_and_json_exclude_each_other():
    result = invoke("accounts", "report", "--site", EXAMPLE, "--json", "--csv")
    assert result.exit_code == 2 and "--json and --csv exclude each other" in result.output


def test_bad_since_is_refused_before_slurm_is_asked(tmp_path):
    result = invoke("accounts", "report", "--site", EXAMPLE, "--since", "last tuesday", env={"PATH": str(tmp_path)})
    assert result.exit_code == 2 and "--since: 'last tuesday' is not a date" in result.output


@pytest.mark.parametrize("args", [["plan"], ["apply", "--dry-run"], ["report"]])
def test_missing_sacctmgr_is_one_line_exit_3(args, tmp_path):
    result = invoke("accounts", *args, "--site", EXAMPLE, env={"PATH": str(tmp_path)})
    assert result.exit_code == 3, result.output
    assert "sacctmgr: command not found" in result.output
    assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1


def test_missing_site_is_exit_2(tmp_path):
    result = invoke("accounts", "plan", "--site", str(tmp_path / "nope.toml"))
    assert result.exit_code == 2 and "does not exist" in result.output
