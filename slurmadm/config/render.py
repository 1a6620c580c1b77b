"""Render the site into slurm.conf, gres.conf, topology.conf and cgroup.conf (jinja2 templates in
templates/slurm/). Deterministic: the same site and release give byte-identical files."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

import jinja2

from ..errors import SiteError
from ..resources import templates_dir
from ..site import Site
from . import build
from .checks import check_release, check_site_config
from .release import Release, fmt

FILES = ("slurm.conf", "gres.conf", "topology.conf", "cgroup.conf")


@dataclass(frozen=True)
class Header:
    cluster: str
    release: str
    site_digest: str


@lru_cache(maxsize=1)
def _env() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,
    )


def validate(site: Site, release: Release, *, source: str = "site") -> None:
    """Raise SiteError (one line per problem, each naming the site key) unless the site can be
    rendered for this release."""
    problems = check_site_config(site) + check_release(site, release)
    if problems:
        raise SiteError(source, problems)


def render(site: Site, release: Release, *, source: str = "site") -> dict[str, str]:
    """File name -> text, in FILES order; topology.conf only with topology/tree."""
    validate(site, release, source=source)
    header = Header(site.cluster.name, fmt(release), site.digest)
    env = _env()

    def one(name: str, conf) -> str:
        return env.get_template(f"slurm/{name}.j2").render(header=header, conf=conf)

    layout = build.Layout.of(site)
    out = {
        "slurm.conf": one("slurm.conf", build.slurm_conf(site, layout, release)),
        "gres.conf": one("gres.conf", build.gres_conf(site, layout)),
    }
    if site.topology.plugin == "tree":
        out["topology.conf"] = one("topology.conf", build.topology_conf(site, layout))
    out["cgroup.conf"] = one("cgroup.conf", build.cgroup_conf(site))
    return out
