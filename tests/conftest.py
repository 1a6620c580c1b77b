"""Fixtures shared by unit and integration tests. Keep each one small and generic."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurmadm.devcluster import gpus


@pytest.fixture(scope="session")
def fake_nvml_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Directory holding the stand-in libnvidia-ml.so.1, compiled once per session.
    Pass it to `gpus.env_for(state_dir, fake_nvml_lib, node)`."""
    return gpus.build_library(tmp_path_factory.mktemp("fakenvml")).parent
