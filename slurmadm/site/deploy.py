"""Site model: `slurmadm deploy` (slurmadm itself on the head and the compute nodes)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from .profiles import Strict

# Paths that go into a node's shell script: absolute, no blanks, quotes or shell characters.
NodePath = Annotated[str, Field(pattern=r"^/[A-Za-z0-9_.@+,:=/\-]*$")]
EnvName = Annotated[str, Field(pattern=r"^[A-Z_][A-Z0-9_]{0,63}$")]


class DeploySection(Strict):
    # Each node's install: <prefix>/releases/<release> (one virtualenv per release) and
    # <prefix>/current (a symlink, switched by rename). The hooks in slurm.prolog_dir link to
    # <prefix>/current/hooks/, slurmadm.env says SLURMADM_PYTHON=<prefix>/current/bin/python.
    prefix: NodePath = "/opt/slurmadm"
    # Releases kept on a node besides the current and the previous one (older ones are pruned).
    keep_releases: Annotated[int, Field(ge=0, le=100)] = 2
    # The site's own package index for `pip wheel` on the head (none: pip's own configuration).
    index_url: Annotated[str, Field(pattern=r"^(https?|file)://[^\s'\"]+$")] | None = None
    # What to build: a checkout (directory with pyproject.toml) or a wheel file (default: the
    # checkout this slurmadm runs from, else slurmadm==<this version> from the index).
    source: NodePath | None = None
    # Wheelhouses built on the head: <wheelhouse_dir>/<release>/.
    wheelhouse_dir: NodePath = "/var/lib/slurmadm/wheelhouse"
    # The node's Python that makes the virtualenvs (the head's too, with install = "tarball").
    python: NodePath = "/usr/bin/python3"
    # "venv": each node makes its release's virtualenv from the copied wheelhouse (pip
    # --no-index --find-links; ~10 CPU-seconds a node); "tarball": the head makes it once, with the
    # same offline install, and each node unpacks it at its own path (the head and the nodes then
    # need the same deploy.python).
    install: Literal["venv", "tarball"] = "venv"
    # Files copied from the head to the same path on each node with mode 0600, over SFTP (their
    # content is never in a command line or a log): e.g. store.password_file.
    secrets: list[NodePath] = []
    # Copy the site file to the nodes (same path) and write slurmadm.env next to the hooks.
    copy_site: bool = True
    # Extra lines of slurmadm.env (SLURMADM_SITE and SLURMADM_PYTHON are written by deploy).
    env: dict[EnvName, Annotated[str, Field(pattern=r"^[A-Za-z0-9_.@+,:=/\-]*$")]] = {}
    # The node exporter's systemd unit (written to unit_dir; enabled and restarted when systemd runs).
    exporter: bool = True
    unit_dir: NodePath = "/etc/systemd/system"
    # `slurmadm doctor --check ...` after the install on each node; a failing check fails the node.
    doctor_checks: list[Annotated[str, Field(pattern=r"^[a-z][a-z0-9\-]*$")]] = [
        "site", "slurm", "slurmctld", "nvml", "store", "hooks"]
    install_timeout_s: Annotated[float, Field(gt=0, le=7200)] = 900.0  # per node: copy, venv, pip install
