"""BMC fan-out rows for people: the nodes whose BMCs gave the same answer (or the same error)
as one row with a clush-style hostlist, so `bmc power status` of 128 nodes that are all on is
one row. `--json` stays one row per node."""

from __future__ import annotations

from ..hostlist import Folded, fold, neutral
from .fanout import Row


def fold_rows(rows: list[Row]) -> list[Folded]:
    """Groups keyed (answered, text): text is the value, or the error with the node's own name
    read as `<node>` (Folded.named puts it back for one node). Answers first, then errors; the
    largest group first within each."""
    groups = fold((r.node, (True, str(r.value)) if r.ok else (False, neutral(r.error, r.node))) for r in rows)
    return sorted(groups, key=lambda g: (not g.key[0], -g.count, g.hostlist))
