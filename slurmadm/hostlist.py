"""Hostlists (`b200-[001-128]`) through ClusterShell's NodeSet; never parsed by hand."""

from __future__ import annotations

import re
from collections.abc import Iterable

from ClusterShell.NodeSet import NodeSet, NodeSetException
from ClusterShell.RangeSet import RangeSetException

from .errors import UsageError

# Largest hostlist slurmadm expands: ClusterShell builds every index of a range in memory (two
# million names take seconds), and Slurm's own hostlist code treats a range of more than 64K hosts
# as an error (MAX_RANGE in src/common/hostlist.c).
MAX_HOSTLIST_NODES = 64 * 1024

# What ClusterShell raises for a pattern it cannot read (it asserts on a range too large).
_BAD_PATTERN = (NodeSetException, RangeSetException, ValueError, AssertionError)


def expand(pattern: str, *, what: str = "hostlist") -> list[str]:
    """Expand a hostlist to its names, in NodeSet order. Raises UsageError on bad syntax."""
    return list(nodeset(pattern, what=what))


def nodeset(pattern: str | Iterable[str], *, what: str = "hostlist") -> NodeSet:
    if isinstance(pattern, str):
        size = hostlist_size(pattern)
        if size is not None and size > MAX_HOSTLIST_NODES:
            raise UsageError(f"{what}: {pattern[:60]!r} names {size:,} nodes, more than the "
                             f"{MAX_HOSTLIST_NODES:,} one hostlist may hold")
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


def hostlist_size(pattern: str) -> int | None:
    """How many names a hostlist like `b200-[001-128],login[1-2]` names, without expanding it.
    None when it cannot tell (ClusterShell then reports the syntax)."""
    total = 0
    depth, start, parts = 0, 0, []
    for i, ch in enumerate(pattern):
        if ch == "[":
            depth += 1
        elif ch == "]":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(pattern[start:i])
            start = i + 1
    parts.append(pattern[start:])
    for part in parts:
        count = 1
        for group in re.findall(r"\[([^\[\]]*)\]", part):
            n = 0
            for item in group.split(","):
                m = re.fullmatch(r"\s*(\d+)\s*(?:-\s*(\d+)\s*(?:/\s*(\d+)\s*)?)?", item)
                if not m:
                    return None
                lo = int(m.group(1))
                hi = int(m.group(2)) if m.group(2) is not None else lo
                step = int(m.group(3)) if m.group(3) else 1
                if hi < lo or step < 1:
                    return None
                n += (hi - lo) // step + 1
            count *= n
        total += count
    return total
