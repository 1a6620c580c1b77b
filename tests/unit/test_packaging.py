"""Repository-level promises: CI runs the README's test command; compose runs the native dev cluster."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]


def test_ci_runs_the_readme_test_command():
    readme = (REPO / "README.md").read_text()
    commands = re.findall(r"^git clone .*&& (scripts/\S+)$", readme, re.M)
    assert commands == ["scripts/demo.sh", "scripts/test.sh"]
    ci = (REPO / ".ci" / "run").read_text()
    assert "apt-get update" in ci and "./scripts/test.sh" in ci


def test_compose_runs_the_same_dev_cluster_in_the_foreground():
    compose = yaml.safe_load((REPO / "docker-compose.slurm.yml").read_text())
    service = compose["services"]["slurm"]
    assert service["image"].startswith("debian:")
    assert "slurmadm dev-cluster up --nodes 4 --foreground" in service["command"]


def test_top_level_layout():
    for name in ["pyproject.toml", "slurmadm", "prolog_epilog", "templates", "site.example.toml", "tests",
                 "docker-compose.slurm.yml", "README.md", ".ci/run"]:
        assert (REPO / name).exists(), name
