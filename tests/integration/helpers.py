"""Helpers for integration tests (import: from tests.integration.helpers import ...)."""

from __future__ import annotations

import subprocess
import sys


def run_slurmadm(env: dict[str, str], *args: str, timeout: float = 120, input: str | None = None
                 ) -> subprocess.CompletedProcess[str]:
    """The real console entry point in a child process, with the dev cluster's environment."""
    return subprocess.run([sys.executable, "-m", "slurmadm", *args], env=env, capture_output=True,
                          text=True, timeout=timeout, input=input)
