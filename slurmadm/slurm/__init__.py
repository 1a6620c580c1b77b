"""The Slurm adapter. Capabilities ask for a `SlurmBackend` and never know which one they got:

- `pyslurm` when `import pyslurm` works and its release matches the running Slurm;
- `cli` (scontrol/sinfo) otherwise, the default and the one tested against real Slurm.

$SLURMADM_SLURM_BACKEND=cli|pyslurm|auto overrides the choice (auto is the default).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import subprocess
import sys

from ..errors import UsageError
from .cli_backend import CliBackend
from .model import FOREIGN_FLAGS, JobInfo, NodeInfo, SlurmBackend
from .pyslurm_backend import PyslurmBackend, pyslurm_release

__all__ = [
    "FOREIGN_FLAGS",
    "CliBackend",
    "JobInfo",
    "NodeInfo",
    "PyslurmBackend",
    "SlurmBackend",
    "choose_backend",
    "get_backend",
]


def choose_backend(prefer: str, pyslurm_module, slurm_version: tuple[int, int, int]) -> str:
    """Pure decision: which backend to use given what imported and what is running."""
    if prefer not in ("auto", "cli", "pyslurm"):
        raise UsageError(f"SLURMADM_SLURM_BACKEND: {prefer!r} is not one of auto, cli, pyslurm")
    if prefer == "cli":
        return "cli"
    release = pyslurm_release(pyslurm_module) if pyslurm_module is not None else None
    matches = release is not None and release == slurm_version[:2]
    if prefer == "pyslurm" and not matches:
        have = "not installed" if pyslurm_module is None else f"release {release}"
        raise UsageError(
            f"SLURMADM_SLURM_BACKEND=pyslurm but pyslurm is {have} and Slurm is "
            f"{slurm_version[0]}.{slurm_version[1]:02d}"
        )
    return "pyslurm" if matches else "cli"


def _import_pyslurm(timeout: float = 10.0):
    """pyslurm, or None. `import pyslurm` is probed in a child process first: libslurm calls
    exit() when it finds no configuration (no SLURM_CONF, no /etc/slurm/slurm.conf), which would
    end this process with no report, and it can block with the GIL held. Only when the child
    imported it cleanly within `timeout` is it imported here."""
    try:
        if importlib.util.find_spec("pyslurm") is None:
            return None
    except (ImportError, ValueError):
        return None
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    try:
        probe = subprocess.run([sys.executable, "-c", "import pyslurm"], env=env, stdin=subprocess.DEVNULL,
                               capture_output=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return None
    if probe.returncode != 0:
        return None
    try:
        return importlib.import_module("pyslurm")
    except Exception:  # ImportError, or its own "Slurm version mismatch" RuntimeError
        return None


def get_backend(prefer: str | None = None, *, timeout: float | None = None) -> SlurmBackend:
    """The backend to use; `timeout` bounds each scontrol/sinfo call (and the pyslurm probe)."""
    prefer = prefer or os.environ.get("SLURMADM_SLURM_BACKEND", "auto")
    cli = CliBackend() if timeout is None else CliBackend(timeout=timeout)
    if prefer == "cli":
        return cli
    if prefer not in ("auto", "pyslurm"):
        choose_backend(prefer, None, (0, 0, 0))  # the one-line UsageError
    module = _import_pyslurm(cli.timeout)
    choice = choose_backend(prefer, module, cli.version())
    if choice == "pyslurm":
        return PyslurmBackend(module, cli.version(), cli.reservations)
    return cli
