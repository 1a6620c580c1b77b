"""The Slurm adapter. Capabilities ask for a `SlurmBackend` and never know which one they got:

- `pyslurm` when `import pyslurm` works and its release matches the running Slurm;
- `cli` (scontrol/sinfo) otherwise, the default and the one tested against real Slurm.

$SLURMADM_SLURM_BACKEND=cli|pyslurm|auto overrides the choice (auto is the default).
"""

from __future__ import annotations

import importlib
import os

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


def _import_pyslurm():
    try:
        return importlib.import_module("pyslurm")
    except Exception:  # ImportError, or its own "Slurm version mismatch" RuntimeError
        return None


def get_backend(prefer: str | None = None) -> SlurmBackend:
    prefer = prefer or os.environ.get("SLURMADM_SLURM_BACKEND", "auto")
    cli = CliBackend()
    if prefer == "cli":
        return cli
    module = _import_pyslurm()
    choice = choose_backend(prefer, module, cli.version())
    if choice == "pyslurm":
        return PyslurmBackend(module, cli.version(), cli.reservations)
    return cli
