"""One node's slurmadm install: what it should have, what it has, and the shell that gets it there.

The layout on a node (`deploy.prefix`, default /opt/slurmadm):

    <prefix>/releases/<release>/     a virtualenv per release; `.slurmadm-release` is written
                                     last, so a release without it is an interrupted install
                                     (removed and installed again)
    <prefix>/releases/<release>/hooks -> the release's own prolog_epilog/ (inside the package)
    <prefix>/current  -> releases/<release>      switched by rename(2) of a new symlink: a hook
    <prefix>/previous -> releases/<release>      that starts meanwhile runs the old or the new
                                                 release, never a mix
    <prefix>/wheelhouse/<release>/   the copied wheels, removed once installed
    <slurm.prolog_dir>/{prolog,epilog,healthcheck,hook-env}.sh -> <prefix>/current/hooks/<same>
    <slurm.prolog_dir>/slurmadm.env  SLURMADM_SITE, SLURMADM_PYTHON=<prefix>/current/bin/python
    the site file, deploy.secrets (0600), <unit_dir>/slurmadm-exporter-node.service

Every path here comes from the site model's validated paths (no blanks, quotes or shell
characters), so the scripts can name them bare.
"""

from __future__ import annotations

import hashlib
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import UsageError

HOOKS = ("prolog.sh", "epilog.sh", "healthcheck.sh", "hook-env.sh")
MARKER = ".slurmadm-release"
UNIT = "slurmadm-exporter-node.service"


@dataclass(frozen=True)
class FileSpec:
    path: str
    data: bytes
    mode: int = 0o644
    secret: bool = False

    @property
    def sha(self) -> str:
        return hashlib.sha256(self.data).hexdigest()


@dataclass
class Desired:
    """What every node should have for one release."""

    release: str
    version: str
    prefix: str
    hook_dir: str
    files: list[FileSpec]
    links: dict[str, str]  # link -> target
    keep: int
    unit: str | None = None  # the exporter unit's path, when deploy.exporter

    @property
    def release_dir(self) -> str:
        return f"{self.prefix}/releases/{self.release}"


def site_file_path(site) -> str | None:
    from ..sitefile import site_path

    try:
        path = site_path(None).resolve()
    except Exception:
        return None
    return str(path) if path.is_file() else None


def env_text(site, site_file: str | None) -> str:
    d = site.deploy
    lines = ["# written by `slurmadm deploy`; read by hook-env.sh (the hooks next to it)"]
    if site_file:
        lines.append(f"SLURMADM_SITE={site_file}")
    lines.append(f"SLURMADM_PYTHON={d.prefix}/current/bin/python")
    lines += [f"{k}={shlex.quote(v)}" for k, v in sorted(d.env.items())
              if k not in ("SLURMADM_SITE", "SLURMADM_PYTHON")]
    return "\n".join(lines) + "\n"


def unit_text(site, site_file: str | None) -> str:
    from ..exporter.server import unit_text as render

    command = [f"{site.deploy.prefix}/current/bin/slurmadm", "exporter", "--mode", "node"]
    if site_file:
        command += ["--site", site_file]
    return render("node", command, site_file or "", {})


def desired(site, release: str, version: str, *, site_file: str | None = None) -> Desired:
    """Every node's wanted state: the release, the hook links, slurmadm.env, the site file,
    the secrets (read here, on the head; a missing one is a usage error naming it) and the unit."""
    d = site.deploy
    site_file = site_file or site_file_path(site)
    hook_dir = site.slurm.prolog_dir.rstrip("/")
    files: list[FileSpec] = []
    if d.copy_site and site_file:
        files.append(FileSpec(site_file, Path(site_file).read_bytes()))
    for path in d.secrets:
        try:
            files.append(FileSpec(path, Path(path).read_bytes(), 0o600, secret=True))
        except OSError as exc:
            raise UsageError(f"deploy.secrets: {path}: cannot read it on the head ({exc.strerror})") from None
    files.append(FileSpec(f"{hook_dir}/slurmadm.env", env_text(site, site_file).encode()))
    unit = None
    if d.exporter:
        unit = f"{d.unit_dir.rstrip('/')}/{UNIT}"
        files.append(FileSpec(unit, unit_text(site, site_file).encode()))
    links = {f"{hook_dir}/{h}": f"{d.prefix}/current/hooks/{h}" for h in HOOKS}
    return Desired(release, version, d.prefix, hook_dir, files, links, d.keep_releases, unit)


# ------------------------------------------------------------------------------ what a node has


@dataclass
class Actual:
    current: str | None = None  # release name
    previous: str | None = None
    releases: dict[str, bool] = field(default_factory=dict)  # name -> complete
    files: dict[str, tuple[str, str]] = field(default_factory=dict)  # path -> (sha or -, mode or -)
    links: dict[str, str] = field(default_factory=dict)  # path -> target or -


def probe_script(want: Desired) -> str:
    p = want.prefix
    files = " ".join(f.path for f in want.files)
    links = " ".join(want.links)
    return "\n".join([
        "export LC_ALL=C PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        "r() { readlink \"$1\" 2>/dev/null || echo -; }",
        f"echo \"current $(r {p}/current)\"",
        f"echo \"previous $(r {p}/previous)\"",
        f"for d in {p}/releases/*/; do [ -d \"$d\" ] || continue; n=${{d%/}}; n=${{n##*/}}; "
        f"if [ -f \"$d{MARKER}\" ]; then echo \"release $n ok\"; else echo \"release $n partial\"; fi; done",
        f"for f in {files}; do if [ -f \"$f\" ] && [ ! -L \"$f\" ]; then "
        "echo \"file $f $(sha256sum < \"$f\" | cut -d' ' -f1) $(stat -c %a \"$f\")\"; "
        "else echo \"file $f - -\"; fi; done" if files else "true",
        f"for l in {links}; do echo \"link $l $(r $l)\"; done",
        "",
    ])


def _release_of(target: str) -> str | None:
    if target in ("", "-"):
        return None
    return target.rstrip("/").rsplit("/", 1)[-1]


def parse_probe(text: str) -> Actual:
    a = Actual()
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 2:
            continue
        kind = parts[0]
        if kind == "current":
            a.current = _release_of(parts[1])
        elif kind == "previous":
            a.previous = _release_of(parts[1])
        elif kind == "release" and len(parts) == 3:
            a.releases[parts[1]] = parts[2] == "ok"
        elif kind == "file" and len(parts) == 4:
            a.files[parts[1]] = (parts[2], parts[3])
        elif kind == "link" and len(parts) == 3:
            a.links[parts[1]] = parts[2]
    if not text.strip().startswith("current"):
        raise ValueError("unexpected probe output: " + (text.strip().splitlines() or ["(none)"])[0][:120])
    return a


# ------------------------------------------------------------------------------ the plan


@dataclass(frozen=True)
class Change:
    action: str  # install | switch | write | link | prune
    path: str
    detail: str = ""

    def line(self) -> str:
        return f"{self.action} {self.path}" + (f" ({self.detail})" if self.detail else "")

    def as_dict(self) -> dict:
        return {"action": self.action, "path": self.path, "detail": self.detail}


def plan(want: Desired, have: Actual) -> list[Change]:
    """What apply would change on this node, in the order it does it (empty: nothing)."""
    out: list[Change] = []
    if not have.releases.get(want.release):
        out.append(Change("install", want.release_dir,
                          "an interrupted install: redone" if want.release in have.releases else
                          f"virtualenv of slurmadm {want.version} from the copied wheelhouse"))
    if have.current != want.release:
        out.append(Change("switch", f"{want.prefix}/current", f"{have.current or 'none'} -> {want.release}"))
    for f in want.files:
        sha, mode = have.files.get(f.path, ("-", "-"))
        what = "secret, 0600, content not shown" if f.secret else f"mode {f.mode:o}"
        if sha == "-":
            out.append(Change("write", f.path, f"new, {what}"))
        elif sha != f.sha:
            out.append(Change("write", f.path, f"changed, {what}"))
        elif mode != f"{f.mode:o}":
            out.append(Change("write", f.path, f"mode {mode} -> {f.mode:o}"))
    for link, target in want.links.items():
        if have.links.get(link, "-") != target:
            out.append(Change("link", link, f"-> {target}"))
    for name in prunable(want, have):
        out.append(Change("prune", f"{want.prefix}/releases/{name}", "older than the releases kept"))
    return out


def prunable(want: Desired, have: Actual, *, current: str | None = None, previous: str | None = None) -> list[str]:
    """Complete releases beyond the newest `keep` that are neither current nor previous after
    this deploy (sorted by name: the hash part makes that order arbitrary within a version, so
    the keep counts the releases of the latest versions first)."""
    cur = current or want.release
    prev = previous if previous is not None else (have.current if have.current != want.release else have.previous)
    others = sorted((n for n, ok in have.releases.items() if ok and n not in (cur, prev)),
                    key=_version_key, reverse=True)
    return sorted(others[want.keep:])


def _version_key(name: str):
    version = name.rsplit("-", 1)[0]
    return [(0, int(p), "") if p.isdigit() else (1, 0, p) for p in version.replace("+", ".").split(".")]


# ------------------------------------------------------------------------------ the scripts


def install_script(want: Desired, python: str) -> str:
    """The release's virtualenv from the copied wheelhouse, offline (no index, no pip config)."""
    r, w = want.release_dir, f"{want.prefix}/wheelhouse/{want.release}"
    return _release_script(want, [
        f"{python} -m venv {r}",
        f"PIP_CONFIG_FILE=/dev/null {r}/bin/python -m pip install --quiet --no-index --find-links {w} "
        f"--disable-pip-version-check --no-warn-script-location slurmadm=={want.version}",
        f"hooks=$({r}/bin/python -I -c 'from slurmadm.resources import prolog_epilog_dir; print(prolog_epilog_dir())')",
        f"ln -s \"$hooks\" {r}/hooks",
    ], f"rm -rf {w}")


def unpack_script(want: Desired) -> str:
    """deploy.install = "tarball": the virtualenv the head built, unpacked at this node's path;
    the `#!` lines and bin/activate* that name the head's build path are pointed here."""
    r, t = want.release_dir, f"{want.prefix}/wheelhouse/{want.release}.tar.gz"
    return _release_script(want, [
        f"tar -C {want.prefix}/releases -xzf {t}",
        f"old=$(cat {r}/.slurmadm-stage)",
        f"for f in {r}/bin/*; do [ -L \"$f\" ] || [ ! -f \"$f\" ] || sed -i \"s|$old|{r}|g\" \"$f\"; done",
        f"rm -f {r}/.slurmadm-stage",
        f"{r}/bin/python -I -c 'import slurmadm.health' && [ -e {r}/hooks/prolog.sh ]",
    ], f"rm -rf {t} {want.prefix}/wheelhouse/{want.release}")


def _release_script(want: Desired, build: list[str], cleanup: str) -> str:
    """A release directory made afresh by `build`, marked done only when all of it ran (set -e),
    then `cleanup` of what was copied for it."""
    return "\n".join([
        "set -e",
        "export LC_ALL=C PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        f"rm -rf {want.release_dir}",
        *build,
        f"echo {want.release} > {want.release_dir}/{MARKER}",
        cleanup,
        "",
    ])


def _swap(link: str, target: str) -> str:
    """Point `link` at `target` by renaming a new symlink over it (atomic for a reader)."""
    tmp = f"{link}.slurmadm-new"
    return f"rm -f {tmp} && ln -s {target} {tmp} && mv -T -f {tmp} {link}"


def switch_script(want: Desired, have: Actual, target: str | None = None) -> str:
    """current -> the release (previous -> what current was), in one rename each."""
    p = want.prefix
    target = target or want.release
    lines = ["set -e", f"mkdir -p {p}"]
    if have.current and have.current != target:
        lines.append(_swap(f"{p}/previous", f"releases/{have.current}"))
    lines.append(_swap(f"{p}/current", f"releases/{target}"))
    return "\n".join(lines) + "\n"


def links_script(want: Desired) -> str:
    return "\n".join(["set -e", f"mkdir -p {want.hook_dir}"]
                     + [_swap(link, target) for link, target in want.links.items()]) + "\n"


def dirs_script(want: Desired, install: bool = True) -> str:
    dirs = sorted({f.path.rsplit("/", 1)[0] or "/" for f in want.files} | {want.hook_dir, f"{want.prefix}/releases"}
                  | ({f"{want.prefix}/wheelhouse/{want.release}"} if install else set()))
    return "set -e\nmkdir -p " + " ".join(dirs) + "\n"


def systemd_script(want: Desired) -> str:
    """When systemd runs the node: reload, enable and restart the exporter (it runs the new release)."""
    if not want.unit:
        return ""
    name = UNIT
    return (f"if [ -d /run/systemd/system ] && command -v systemctl >/dev/null 2>&1; then "
            f"systemctl daemon-reload && systemctl enable --quiet {name} && systemctl restart {name}; fi\n")


def prune_script(want: Desired, names: list[str]) -> str:
    return "".join(f"rm -rf {want.prefix}/releases/{n}\n" for n in names) or "true\n"


def doctor_command(site, node: str) -> str:
    d = site.deploy
    env = f"{site.slurm.prolog_dir.rstrip('/')}/slurmadm.env"
    checks = " ".join(f"--check {c}" for c in d.doctor_checks)
    return (f"set -a; [ -r {env} ] && . {env}; set +a; "
            f"{d.prefix}/current/bin/slurmadm doctor --json --node {node} {checks}")
