"""Hostlists (`b200-[001-128]`) through ClusterShell's NodeSet; never parsed by hand."""

from __future__ import annotations

from collections.abc import Iterable

from ClusterShell.NodeSet import NodeSet, NodeSetException
from ClusterShell.RangeSet import RangeSetException

from .errors import UsageError

# What ClusterShell raises for a pattern it cannot read (it asserts on a range too large).
_BAD_PATTERN = (NodeSetException, RangeSetException, ValueError, AssertionError)


def expand(pattern: str, *, what: str = "hostlist") -> list[str]:
    """Expand a hostlist to its names, in NodeSet order. Raises UsageError on bad syntax."""
    return list(nodeset(pattern, what=what))


def nodeset(pattern: str | Iterable[str], *, what: str = "hostlist") -> NodeSet:
    try:
        if isinstance(pattern, str):
            return NodeSet(pattern)
        return NodeSet.fromlist(list(pattern))
    except _BAD_PATTERN as exc:
        raise UsageError(f"{what}: {pattern!r} is not a valid hostlist ({exc})") from None


def compress(names: Iterable[str]) -> str:
    """Fold names into the shortest hostlist (`b200-[001-004,006]`)."""
    names = list(names)
    if not names:
        return ""
    return str(NodeSet.fromlist(names))
