"""The wheelhouse: slurmadm and every dependency as wheels, built once on the head.

`pip wheel` of this slurmadm (its checkout, a wheel file, or `slurmadm==<version>` from the index)
with the head's pip configuration, or `--index-url` of the site's own index when
`deploy.index_url` names one. The nodes never reach an index: they install with `--no-index
--find-links` from the copy. A release is named `<version>-<12 hex>`: the hash covers every wheel's
name and its RECORD (the sha256 of each file inside), so a rebuild of the same code is the same
release and any changed file (the hook scripts included) is a new one.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

from ..errors import SlurmadmError, UsageError
from ..proc import run

RELEASE_RE = re.compile(r"^[0-9A-Za-z.+_]+-[0-9a-f]{12}$")


@dataclass(frozen=True)
class Release:
    name: str  # <version>-<hash12>
    version: str
    dir: Path
    wheels: tuple[str, ...]

    def as_dict(self) -> dict:
        return {"release": self.name, "version": self.version, "wheelhouse": str(self.dir),
                "wheels": list(self.wheels)}


def _record(wheel: Path) -> bytes:
    try:
        with zipfile.ZipFile(wheel) as z:
            names = [n for n in z.namelist() if n.endswith(".dist-info/RECORD")]
            return z.read(names[0]) if names else hashlib.sha256(wheel.read_bytes()).digest()
    except zipfile.BadZipFile:
        raise UsageError(f"{wheel}: not a wheel (bad zip file)") from None


def load(directory: str | Path) -> Release:
    """The release a directory of wheels makes (one slurmadm wheel and its dependencies)."""
    d = Path(directory)
    wheels = sorted(p for p in d.glob("*.whl") if p.is_file())
    ours = [w for w in wheels if w.name.startswith("slurmadm-")]
    if len(ours) != 1:
        raise UsageError(f"{d}: expected exactly one slurmadm-*.whl in the wheelhouse, found {len(ours)}")
    version = ours[0].name.split("-")[1]
    h = hashlib.sha256()
    for w in wheels:
        h.update(w.name.encode() + b"\0" + hashlib.sha256(_record(w)).digest())
    return Release(f"{version}-{h.hexdigest()[:12]}", version, d, tuple(w.name for w in wheels))


def default_source() -> str:
    """This slurmadm's checkout when it runs from one, else `slurmadm==<this version>`."""
    from .. import __version__

    here = Path(__file__).resolve().parents[2]
    if (here / "pyproject.toml").is_file() and (here / "slurmadm" / "__init__.py").is_file():
        return str(here)
    return f"slurmadm=={__version__}"


def build(site, *, source: str | None = None, out_dir: str | Path | None = None, timeout: float = 1800.0,
          progress=lambda m: None) -> Release:
    """pip wheel of slurmadm and its dependencies into <wheelhouse_dir>/<release>/ (an existing
    one of the same release is kept as it is)."""
    spec = source or site.deploy.source or default_source()
    base = Path(out_dir or site.deploy.wheelhouse_dir)
    base.mkdir(parents=True, exist_ok=True)
    tmp = base / f".build-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    argv = [sys.executable, "-m", "pip", "wheel", "--quiet", "--disable-pip-version-check", "--wheel-dir", str(tmp),
            spec]
    if site.deploy.index_url:
        argv += ["--index-url", site.deploy.index_url]
    progress(f"building the wheelhouse of {spec}")
    try:
        proc = run(argv, timeout=timeout, check=False)
        if proc.returncode != 0:
            last = [ln for ln in (proc.stderr or proc.stdout).splitlines() if ln.strip()
                    and "is ignored" not in ln][-3:]
            raise SlurmadmError(f"pip wheel {spec} failed (exit {proc.returncode}): {' / '.join(last)[:300]}")
        rel = load(tmp)
        final = base / rel.name
        if final.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            os.replace(tmp, final)
        return load(final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def tarball(site, rel: Release, *, timeout: float = 1800.0, progress=lambda m: None) -> Path:
    """deploy.install = "tarball": the release's virtualenv built once here (deploy.python, the
    same offline `pip install --no-index --find-links` of the wheelhouse a node would run), packed
    as <wheelhouse_dir>/<release>.tar.gz; each node unpacks it and points the scripts' `#!` lines
    at its own path (a virtualenv runs from any path through `bin/python -m`; only the `#!` lines
    and bin/activate* name the path it was made at). Made once per release and kept."""
    out = rel.dir.parent / f"{rel.name}.tar.gz"
    if out.is_file():
        return out
    stage = rel.dir.parent / f".stage-{os.getpid()}"
    shutil.rmtree(stage, ignore_errors=True)
    venv = stage / rel.name
    progress(f"building the virtualenv of {rel.name} once, here")
    try:
        steps = [
            [site.deploy.python, "-m", "venv", str(venv)],
            [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet", "--no-index", "--find-links",
             str(rel.dir), "--disable-pip-version-check", "--no-warn-script-location", f"slurmadm=={rel.version}"],
        ]
        for argv in steps:
            p = run(argv, timeout=timeout, check=False, env={"PIP_CONFIG_FILE": os.devnull})
            if p.returncode != 0:
                raise SlurmadmError(f"{' '.join(argv[:3])} ... failed (exit {p.returncode}): "
                                    f"{(p.stderr or p.stdout).strip().splitlines()[-1:]}")
        hooks = run([str(venv / "bin" / "python"), "-I", "-c",
                     "from slurmadm.resources import prolog_epilog_dir; print(prolog_epilog_dir())"],
                    timeout=60).stdout.strip()
        os.symlink(os.path.relpath(hooks, venv), venv / "hooks")
        (venv / ".slurmadm-stage").write_text(str(venv) + "\n")  # the path to rewrite on the node
        tmp = out.with_name(out.name + f".{os.getpid()}")
        run(["tar", "-C", str(stage), "-czf", str(tmp), rel.name], timeout=timeout)
        os.replace(tmp, out)
        return out
    finally:
        shutil.rmtree(stage, ignore_errors=True)
