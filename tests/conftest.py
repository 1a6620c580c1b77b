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


def pytest_collection_modifyitems(config, items):
    """Every test is `unit` or `integration`: the test command selects by marker, so a test with
    neither would never run and still look done."""
    bare = [item.nodeid for item in items
            if not any(item.get_closest_marker(m) for m in ("unit", "integration"))]
    if bare:
        raise pytest.UsageError(f"tests marked neither unit nor integration (they would never run): {bare[:5]}")
