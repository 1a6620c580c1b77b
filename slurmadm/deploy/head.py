"""The head node in a deploy: the same install as a compute node, done here without SSH, plus
`slurmadm config apply` when slurm.conf's hook paths are not the deployed hooks."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

from ..fleet.ssh import Reply

HOOK_KEYS = {"Prolog": "prolog.sh", "Epilog": "epilog.sh", "HealthCheckProgram": "healthcheck.sh"}


def name() -> str:
    return socket.gethostname().split(".")[0]


class LocalRemote:
    """The Remote protocol for this machine (`run` and `put`), for the head's own deploy."""

    def run(self, nodes, command, *, timeout, stdin=None, on_reply=None):
        out = []
        for n in nodes:
            try:
                p = subprocess.run(["/bin/sh", "-c", command], input=stdin or "", capture_output=True, text=True,
                                   timeout=timeout)
                r = Reply(n, p.returncode, p.stdout + p.stderr)
            except subprocess.TimeoutExpired:
                r = Reply(n, None, error=f"command ran past its {timeout:g} s limit", kind="timeout")
            if on_reply:
                on_reply(r)
            out.append(r)
        return out

    def put(self, nodes, files, *, timeout, on_reply=None):
        out = []
        for n in nodes:
            try:
                for f in files:
                    path = Path(f.path)
                    tmp = path.with_name(f".{path.name}.slurmadm-{os.getpid()}")
                    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, f.mode)
                    with os.fdopen(fd, "wb") as fh:
                        os.fchmod(fh.fileno(), f.mode)
                        fh.write(f.data if f.data is not None else Path(f.source).read_bytes())
                    os.replace(tmp, path)
                r = Reply(n, 0, "")
            except OSError as exc:
                r = Reply(n, 1, error=f"{exc.strerror}: {exc.filename}")
            if on_reply:
                on_reply(r)
            out.append(r)
        return out

    def close(self) -> None:
        pass

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass


def stale_hooks(site) -> dict[str, tuple[str, str]]:
    """slurm.conf's hook keys that do not name the deployed hooks: {key: (has, wants)}."""
    conf = Path(site.slurm.config_dir) / "slurm.conf"
    have: dict[str, str] = {}
    try:
        for line in conf.read_text().splitlines():
            key, sep, value = line.split("#", 1)[0].strip().partition("=")
            if sep:
                have[key.strip()] = value.strip()
    except OSError:
        pass
    d = site.slurm.prolog_dir.rstrip("/")
    return {k: (have.get(k, ""), f"{d}/{s}") for k, s in HOOK_KEYS.items() if have.get(k, "") != f"{d}/{s}"}


def apply_config(site, site_file: str | None, reason: str, *, dry_run: bool = False):
    """`slurmadm config apply` of the site's rendered configs (which carry the hook paths)."""
    from ..config import apply as apply_mod
    from ..config import render, resolve_release

    conf = Path(site.slurm.config_dir) / "slurm.conf"
    rel = resolve_release(site, None, env={"SLURM_CONF": str(conf)} if conf.exists() else None)
    files = render(site, rel, source=site_file or "")
    return apply_mod.apply(site, files, reason=reason, dry_run=dry_run)


# ---- man pages and shell completion on the head (issue 39) ----

MAN_DIR = "/usr/local/share/man/man1"
BASH_COMPLETION = "/etc/bash_completion.d/slurmadm"
ZSH_COMPLETION = "/usr/local/share/zsh/site-functions/_slurmadm"


def docs_files() -> dict[str, str]:
    """{absolute path: content}: a man page per command group (slurmadm.1, slurmadm-<group>.1),
    generated from this release's click tree, and the bash and zsh completion scripts."""
    from click.shell_completion import get_completion_class

    from ..cli import cli
    from ..docgen.cli import man_pages

    out = {f"{MAN_DIR}/{name}": text for name, text in man_pages().items()}
    for shell, path in (("bash", BASH_COMPLETION), ("zsh", ZSH_COMPLETION)):
        comp = get_completion_class(shell)(cli, {}, "slurmadm", "_SLURMADM_COMPLETE")
        out[path] = comp.source().rstrip("\n") + "\n"
    return out


def docs_changes(root: str = "/") -> list[str]:
    """The man page and completion files that are missing or differ under `root`."""
    out = []
    for path, text in docs_files().items():
        target = Path(root) / path.lstrip("/")
        try:
            if target.read_text() == text:
                continue
        except OSError:
            pass
        out.append(path)
    return out


def install_docs(root: str = "/", *, dry_run: bool = False) -> list[str]:
    """Write the man pages and completion scripts that changed (mode 0644, one rename each);
    return their paths. Stale slurmadm-*.1 pages of groups that no longer exist are removed."""
    from ..files import write_atomic

    files = docs_files()
    changed = docs_changes(root)
    man_dir = Path(root) / MAN_DIR.lstrip("/")
    stale = [p for p in sorted(man_dir.glob("slurmadm*.1")) if f"{MAN_DIR}/{p.name}" not in files] \
        if man_dir.is_dir() else []
    if dry_run:
        return changed + [f"{MAN_DIR}/{p.name} (removed)" for p in stale]
    for path in changed:
        target = Path(root) / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(target, files[path], mode=0o644)
    for p in stale:
        p.unlink(missing_ok=True)
    if changed and Path(root) == Path("/"):
        import shutil

        if shutil.which("mandb"):  # refresh whatis/apropos; harmless when it fails
            subprocess.run(["mandb", "-q", str(Path(MAN_DIR).parent)], capture_output=True, timeout=120)
    return changed + [f"{MAN_DIR}/{p.name} (removed)" for p in stale]
