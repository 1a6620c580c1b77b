"""`dev-cluster gpu-fault --help-kinds` lists the kinds without a NODE (issue 25.8)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner

from slurmadm.cli import cli
from slurmadm.devcluster import gpus

pytestmark = pytest.mark.unit


def test_help_kinds_needs_no_node():
    result = CliRunner().invoke(cli, ["dev-cluster", "gpu-fault", "--help-kinds"])
    assert result.exit_code == 0, result.output
    assert all(kind in result.output for kind in ("xid", "ecc-uncorrected", "recovery-action", "reset-fail", "corrupt",
                                                  "replace", "after-reset"))
    assert len(gpus.FAULT_KINDS) > 10


def test_without_help_kinds_a_node_is_still_required(tmp_path):
    result = CliRunner().invoke(cli, ["dev-cluster", "gpu-fault", "--state-dir", str(tmp_path)])
    assert result.exit_code == 2 and "NODE" in result.output and "Traceback" not in result.output
