"""Multi-node all-reduce plan: which pairs of nodes run together, in which round, and how a pair
below the floor is bisected so that the bad node or link is named, not the pair. Pure logic.

Rounds (pairs inside one round share no node, so they run in parallel):
  1. pairs inside each scalable unit (node + its leaf switches);
  2. pairs across units (the spine), nodes interleaved unit by unit;
  then, until nothing is left to learn:
  3. bisection: each member of a failed pair is paired with a known-good node, preferably of its
     own unit, so one test isolates one node. Member fails with a good partner: that node is bad.
     Both members pass with good partners: the link between them is bad (named, nodes kept).
     A node that was never paired (odd count) gets a known-good partner the same way.

A known-good node passed at least one pair and failed none. When no known-good node exists
(e.g. the only pair failed), the pair is reported as unresolved and both members count as
failed: a bad node must not stay in service because its only partner could not vouch for it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .model import PairResult

INTRA = "intra-unit"
CROSS = "cross-unit"
BISECT = "bisect"
PARTNER = "partner"


@dataclass(frozen=True)
class Pair:
    a: str
    b: str
    kind: str
    round: int


@dataclass
class NodeFinding:
    node: str
    detail: str  # why this node is bad


@dataclass
class LinkFinding:
    a: str
    b: str
    detail: str


@dataclass
class PairPlan:
    """Feed it results with `record()`; ask for the next round with `next_round()` until empty."""

    units: list[tuple[str, list[str]]]  # (unit name, nodes under test), nodes in unit order
    floor_gbps: float
    results: list[PairResult] = field(default_factory=list)
    _round: int = 0
    _initial: list[list[Pair]] = field(default_factory=list)
    _tried: set[tuple[str, str]] = field(default_factory=set)  # (suspect, good partner)

    def __post_init__(self) -> None:
        self.units = [(name, list(nodes)) for name, nodes in self.units if nodes]
        self.unit_of = {n: name for name, nodes in self.units for n in nodes}
        self.nodes = [n for _, nodes in self.units for n in nodes]
        intra = [(m[i], m[i + 1], INTRA) for _, m in self.units for i in range(0, len(m) - 1, 2)]
        cross = []
        if len(self.units) > 1:
            interleaved = [m[i] for i in range(max(len(m) for _, m in self.units))
                           for _, m in self.units if i < len(m)]
            cross = [(interleaved[i], interleaved[i + 1]) for i in range(0, len(interleaved) - 1, 2)]
            cross = [(a, b, CROSS if self.unit_of[a] != self.unit_of[b] else INTRA) for a, b in cross]
        for pairs in (intra, cross):
            if pairs:
                self._initial.append([Pair(a, b, kind, 0) for a, b, kind in pairs])

    # ---------------------------------------------------------------- evidence
    def record(self, result: PairResult) -> None:
        """Keep a result. One that did not run (status skip) is kept for the report but is no
        evidence either way."""
        self.results.append(result)

    @property
    def evidence(self) -> list[PairResult]:
        return [r for r in self.results if r.status != "skip"]

    @staticmethod
    def _failed(r: PairResult) -> bool:
        return r.status != "pass"

    def _bisect_outcomes(self) -> dict[str, list[PairResult]]:
        """suspect -> its results with known-good partners (the suspect is always `a`)."""
        out: dict[str, list[PairResult]] = {}
        for r in self.evidence:
            if r.kind in (BISECT, PARTNER):
                out.setdefault(r.a, []).append(r)
        return out

    def _verdict(self, node: str, outcomes: dict[str, list[PairResult]]) -> str:
        """bad | ok | unknown, from the tests with known-good partners."""
        rs = outcomes.get(node)
        if not rs:
            return "unknown"
        return "bad" if all(self._failed(r) for r in rs) else "ok"

    def good_nodes(self) -> list[str]:
        """Passed a pair, and either failed no initial pair or passed with a known-good partner.
        A known-good partner is never blamed for a bisection failure."""
        outcomes = self._bisect_outcomes()
        passed = {n for r in self.evidence if not self._failed(r) for n in (r.a, r.b)}
        implicated = {n for r in self.evidence if r.kind in (INTRA, CROSS) and self._failed(r)
                      for n in (r.a, r.b)}
        return [n for n in self.nodes if n in passed and self._verdict(n, outcomes) != "bad"
                and (n not in implicated or self._verdict(n, outcomes) == "ok")]

    def _suspects(self) -> list[str]:
        """Nodes still needing a test with a known-good partner: members of failed initial
        pairs and never-paired nodes, minus those already tested with a good partner."""
        outcomes = self._bisect_outcomes()
        paired = {n for r in self.evidence for n in (r.a, r.b)}
        todo = [n for r in self.evidence if r.kind in (INTRA, CROSS) and self._failed(r) for n in (r.a, r.b)]
        todo += [n for n in self.nodes if n not in paired]
        return [n for n in dict.fromkeys(todo) if n not in outcomes]

    # ---------------------------------------------------------------- planning
    def next_round(self) -> list[Pair]:
        if self._initial:
            self._round += 1
            return [Pair(p.a, p.b, p.kind, self._round) for p in self._initial.pop(0)]
        suspects = self._suspects()
        good = self.good_nodes()
        if not suspects or not good:
            return []
        paired = {n for r in self.evidence for n in (r.a, r.b)}
        busy: set[str] = set()
        pairs = []
        for node in suspects:
            mine = self.unit_of.get(node)
            # a good partner not used in this round, own unit first, never the same one twice
            candidates = [g for g in good if g not in busy and g != node and (node, g) not in self._tried]
            candidates.sort(key=lambda g: (self.unit_of.get(g) != mine, self.nodes.index(g)))
            if not candidates:
                continue
            g = candidates[0]
            busy.update((node, g))
            self._tried.add((node, g))
            pairs.append(Pair(node, g, BISECT if node in paired else PARTNER, 0))
        if not pairs:
            return []
        self._round += 1
        return [Pair(p.a, p.b, p.kind, self._round) for p in pairs]

    # ---------------------------------------------------------------- conclusions
    def conclusions(self) -> tuple[list[NodeFinding], list[LinkFinding], list[str]]:
        """(bad nodes, bad links, nodes never tested in a pair)."""
        floor = f"floor {self.floor_gbps:g} GB/s"
        outcomes = self._bisect_outcomes()
        bad: dict[str, str] = {}
        for node, rs in outcomes.items():
            if self._verdict(node, outcomes) == "bad":
                bad[node] = f"{_describe(rs[-1])} with known-good {rs[-1].b} ({floor})"
        links: list[LinkFinding] = []
        for r in self.evidence:
            if r.kind not in (INTRA, CROSS) or not self._failed(r):
                continue
            va, vb = self._verdict(r.a, outcomes), self._verdict(r.b, outcomes)
            if va == vb == "ok":
                links.append(LinkFinding(r.a, r.b, f"{_describe(r)} between {r.a} and {r.b}; both pass "
                                                   f"with known-good partners ({floor})"))
            elif va == vb == "unknown":  # nobody could vouch for either: fail both, keep no bad node
                for n in (r.a, r.b):
                    bad.setdefault(n, f"pair {r.label} {_describe(r)} ({floor}); no known-good node to "
                                      f"bisect against")
            elif "unknown" in (va, vb) and "ok" in (va, vb):  # the other passes with a good node
                n, other = (r.a, r.b) if va == "unknown" else (r.b, r.a)
                bad.setdefault(n, f"pair {r.label} {_describe(r)} ({floor}); {other} passes with a "
                                  f"known-good node")
        paired = {n for r in self.evidence for n in (r.a, r.b)}
        untested = [n for n in self.nodes if n not in paired]
        return [NodeFinding(n, d) for n, d in bad.items()], links, untested


def _describe(r: PairResult) -> str:
    if r.busbw_gbps is not None and r.status in ("pass", "fail"):
        return f"busbw {r.busbw_gbps:.3g} GB/s"
    return r.detail or r.status
