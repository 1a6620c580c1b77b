"""Import arrows that must stay gone (issue 34), read from the source with ast (every `import`,
at module level or inside a function: a lazy import is still an arrow).

- the store never imports health (it read hook errors through health/hookerror.py, which writes
  through health/record.py, which opens the store: a circle);
- health never imports the exporter (the prolog reached up into exporter/jobmap.py; the map now
  sits below both, slurmadm/jobmap.py);
- no import circle runs through the hook's path (hook, engine, record, hookerror, runner, actions,
  checks, config) or through the store.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

PKG = Path(__file__).resolve().parents[2] / "slurmadm"


def modules() -> dict[str, Path]:
    out = {}
    for path in PKG.rglob("*.py"):
        parts = path.relative_to(PKG.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        out[name] = path
    return out


def graph() -> dict[str, set[str]]:
    """module -> the slurmadm modules it imports (a name imported from a package counts as its
    submodule when there is one, else the package)."""
    mods = modules()

    def known(name: str) -> str | None:
        while name and name not in mods:
            name = name.rpartition(".")[0]
        return name or None

    g: dict[str, set[str]] = {m: set() for m in mods}
    for mod, path in mods.items():
        package = mod if path.name == "__init__.py" else mod.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1])
                    base = f"{base}.{node.module}" if node.module else base
                else:
                    base = node.module or ""
                targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in mods else base for a in node.names]
            for t in targets:
                k = known(t) if t.startswith("slurmadm") else None
                if k and k != mod:
                    g[mod].add(k)
    return g


def cycles(g: dict[str, set[str]]) -> list[set[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[set[str]] = []
    counter = 0
    for root, deps in g.items():
        if root in index:
            continue
        work = [(root, iter(sorted(deps)))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(g[w]))))
                    break
                if w in on:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = set()
                    while True:
                        w = stack.pop()
                        on.discard(w)
                        comp.add(w)
                        if w == v:
                            break
                    if len(comp) > 1:
                        out.append(comp)
    return out


G = graph()


def test_the_graph_sees_lazy_imports():
    """The reader itself: function-level and relative imports are arrows too."""
    assert "slurmadm.jobmap" in G["slurmadm.health.hook"]  # imported inside _record_job_gpus
    assert "slurmadm.store" in G["slurmadm.health.record"]  # inside open_store


def test_the_store_never_imports_health():
    up = {(m, d) for m, deps in G.items() if m.startswith("slurmadm.store") for d in deps
          if d.startswith("slurmadm.health")}
    assert up == set()


def test_health_never_imports_the_exporter():
    up = {(m, d) for m, deps in G.items() if m.startswith("slurmadm.health") for d in deps
          if d.startswith("slurmadm.exporter")}
    assert up == set()
    assert "slurmadm.jobmap" in G["slurmadm.exporter.node"]  # the map's reader, from below


def test_no_import_circle_through_the_hooks_path_or_the_store():
    path = {f"slurmadm.health.{m}" for m in ("hook", "engine", "record", "hookerror", "runner", "actions",
                                            "checks", "config", "nodechecks", "nccl", "sitecheck", "outcome")}
    found = [sorted(c) for c in cycles(G) if c & path or any(m.startswith("slurmadm.health") for m in c)]
    assert found == []
    assert [sorted(c) for c in cycles(G) if "slurmadm.health.hookerror" in c or "slurmadm.store.read" in c
            and any(m.startswith("slurmadm.health") for m in c)] == []
