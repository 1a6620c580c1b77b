"""Hostlists (`b200-[001-128]`) through ClusterShell's NodeSet; never parsed by hand."""

from __future__ import annotations

import re
from collections.abc import Hashable, Iterable
from dataclasses import dataclass
from typing import Any

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


NODE_TOKEN = "<node>"


def _own_name(node: str) -> re.Pattern:
    # the name whole: b200-001 in "b200-001-bmc: refused", not in "b200-0010"
    return re.compile(rf"(?<![A-Za-z0-9]){re.escape(node)}(?![0-9])")


def neutral(text: str, node: str) -> str:
    """`text` with the node's own name as `<node>`, so the same message from two nodes folds
    (`b200-001-bmc: refused` and `b200-002-bmc: refused` are one row)."""
    return _own_name(node).sub(NODE_TOKEN, text) if node and text else text


@dataclass(frozen=True)
class Folded:
    """Nodes that agree on `key` (one row for people)."""

    nodes: tuple[str, ...]
    key: Any

    @property
    def hostlist(self) -> str:
        return compress(self.nodes)

    @property
    def count(self) -> int:
        return len(self.nodes)

    def named(self, text: str) -> str:
        """A neutral() text for people: one node's own name put back; `<node>` for many."""
        return text.replace(NODE_TOKEN, self.nodes[0]) if len(self.nodes) == 1 else text


def fold(pairs: Iterable[tuple[str, Hashable]]) -> list[Folded]:
    """(node, key) pairs folded into one group per key, as `clush -b` gathers outputs: the
    largest group first, then by hostlist. The key is whatever must agree (a status, a message
    made neutral() of the node's name, a tuple of them)."""
    groups: dict[Hashable, list[str]] = {}
    for node, key in pairs:
        groups.setdefault(key, []).append(node)
    out = [Folded(tuple(str(n) for n in NodeSet.fromlist(ns)) if len(ns) > 1 else tuple(ns), k)
           for k, ns in groups.items()]
    return sorted(out, key=lambda f: (-f.count, f.hostlist))


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
