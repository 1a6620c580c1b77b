"""The site model: the only reader of site.toml."""

from .load import DEFAULT_SITE, ENV_SITE, load_site, parse_site, site_hash, site_path
from .model import NodeGroup, Partition, Site
from .profiles import BUILTIN_PROFILES, GpuSpec, NodeProfile
from .validate import EXTRA_CHECKS, require_nodes

__all__ = [
    "BUILTIN_PROFILES",
    "DEFAULT_SITE",
    "ENV_SITE",
    "EXTRA_CHECKS",
    "GpuSpec",
    "NodeGroup",
    "NodeProfile",
    "Partition",
    "Site",
    "load_site",
    "parse_site",
    "require_nodes",
    "site_hash",
    "site_path",
]
