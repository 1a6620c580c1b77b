"""Hostlists (`b200-[001-128]`) through ClusterShell's NodeSet; never parsed by hand."""

from __future__ import annotations

from collections.abc import Iterable

from ClusterShell.NodeSet import NodeSet, NodeSetException

from .errors import UsageError


def expand(pattern: str, *, what: str = "hostlist") -> list[str]:
    """Expand a hostlist to its names, in NodeSet order. Raises UsageError on bad syntax."""
    try:
        return list(NodeSet(pattern))
    except (NodeSetException, ValueError) as exc:  # ClusterShell's parse errors
        raise UsageError(f"{what}: {pattern!r} is not a valid hostlist ({exc})") from None


def nodeset(pattern: str | Iterable[str], *, what: str = "hostlist") -> NodeSet:
    try:
        if isinstance(pattern, str):
            return NodeSet(pattern)
        return NodeSet.fromlist(list(pattern))
    except (NodeSetException, ValueError) as exc:
        raise UsageError(f"{what}: {pattern!r} is not a valid hostlist ({exc})") from None


def compress(names: Iterable[str]) -> str:
    """Fold names into the shortest hostlist (`b200-[001-004,006]`)."""
    names = list(names)
    if not names:
        return ""
    return str(NodeSet.fromlist(names))
