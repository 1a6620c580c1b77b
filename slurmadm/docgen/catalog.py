"""Metrics, alerts, drain-reason forms, exit codes, files and ports, read from the code."""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

PKG = Path(__file__).resolve().parents[1]


@dataclass
class Metric:
    name: str
    help: str
    exporter: str  # node | head | both
    source: str  # the module that emits it


def metrics() -> list[Metric]:
    """Every `slurmadm_*` series name the exporters write, with its HELP text: the string
    literals of slurmadm/exporter/ (a name followed by its help, as the collectors declare them)."""
    found: dict[str, Metric] = {}
    for path in sorted((PKG / "exporter").glob("*.py")):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            counter = False
            if isinstance(node, (ast.Tuple, ast.List)):
                items = node.elts
            elif isinstance(node, ast.Call):
                items = node.args
                fn = node.func.id if isinstance(node.func, ast.Name) else getattr(node.func, "attr", "")
                counter = "Counter" in fn or fn == "c"  # node.py's c(): a CounterMetricFamily per name
            else:
                continue
            strs = [i.value if isinstance(i, ast.Constant) and isinstance(i.value, str) else
                    _joined(i) for i in items]
            for i, s in enumerate(strs):
                if not s or not s.startswith("slurmadm_") or not s.replace("_", "").isalnum():
                    continue
                help_ = strs[i + 1] if i + 1 < len(strs) and strs[i + 1] and not strs[i + 1].startswith("slurmadm_") else ""
                kind = {"node.py": "node", "head.py": "head", "storefacts.py": "head", "jobmap.py": "node",
                        "dcgm.py": "node"}.get(path.name, "both")
                if counter and i == 0 and not s.endswith("_total"):
                    s += "_total"  # the text format's name of a counter
                m = found.get(s)
                if m is None:
                    found[s] = Metric(s, help_, kind, path.name)
                else:
                    if help_ and not m.help:
                        m.help = help_
                    if m.exporter != kind:
                        m.exporter = "both"
    for n in [n for n in found if f"{n}_total" in found]:  # a counter also named without _total
        found[f"{n}_total"].help = found[f"{n}_total"].help or found[n].help
        del found[n]
    for suffix in ("_bucket", "_sum", "_count", "_created"):
        for n in [n for n in found if n.endswith(suffix) and n[: -len(suffix)] in found]:
            del found[n]
    return sorted(found.values(), key=lambda m: m.name)


def _joined(node) -> str:
    """An implicitly concatenated or f-string-free string expression ("a" "b")."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _joined(node.left), _joined(node.right)
        return left + right if left and right else ""
    return ""


def alerts():
    """Every alert rule slurmadm generates, for both GPU sources (slurmadm's NVML exporter and
    dcgm-exporter), from the example site: [(Rule, sources)]."""
    from ..monitor import rules
    from ..site import parse_site
    from ..resources import example_site

    text = example_site().read_text()
    site = parse_site(text, source="site.example.toml")
    out: dict[str, tuple] = {}
    for source in ("slurmadm", "dcgm"):
        s = site.model_copy(update={"monitor": site.monitor.model_copy(update={"gpu_source": source})})
        for r in rules.build(s):
            prev = out.get(r.name)
            out[r.name] = (r, (*prev[1], source) if prev else (source,))
    return [out[k] for k in sorted(out)]


def drain_reasons() -> list[tuple[str, str, str]]:
    """(check id, context, where it comes from) for every drain slurmadm sets; the reason is
    `slurmadm: <check-id>: <detail> [<context>]` (slurm/ownership.py)."""
    from ..bmc import health as bmc_health
    from ..bmc import recover
    from ..fleet import actions, rollout
    from ..health.checks import CHECKS

    out = [(c.id, "prolog, epilog, periodic or run", f"health check: {c.title}") for c in CHECKS
           if c.on_fail == "drain"]
    out += [("burnin-<test>", "burnin", "a failed burn-in test (stress, dcgm, nccl, pair, health, ...)"),
            ("burnin-straggler", "burnin", "slower than the fleet in two sweeps in a row"),
            *[(c, "bmc", "slurmadm bmc health: BMC sensors and SEL") for c in bmc_health.CHECKS],
            (recover.CHECK_ID, "bmc", "slurmadm bmc recover: a dead node power-cycled, or down again"),
            ("bmc-power-<action>", "bmc", "slurmadm bmc power off|cycle|reset --drain"),
            ("bmc-firmware-update", "bmc", "slurmadm bmc firmware update --drain"),
            (actions.CHECK_ID, "drift", "slurmadm fleet drift --drain"),
            (rollout.CHECK_ID, "rollout", "slurmadm fleet rollout / deploy apply: the node being upgraded, or failed"),
            ("alert-<name>", "alert", "slurmadm monitor webhook: an alert monitor.actions maps to drain")]
    return out


def exit_codes() -> list[tuple[int, str]]:
    from .. import errors

    return [(errors.EXIT_OK, "all good"),
            (errors.EXIT_PROBLEMS, "the command worked and found problems (failed checks, drift, a non-empty "
                                   "plan with --check, a failed node)"),
            (errors.EXIT_USAGE, "bad usage or a bad site file; nothing was changed"),
            (errors.EXIT_UNREACHABLE, "an outside system (Slurm, slurmdbd, NVML, a BMC, SSH, the central store) "
                                      "was unreachable or timed out")]


def files_and_ports(keys=None) -> tuple[list, list]:
    """Paths and ports a site uses, with their defaults: the site keys that name a file, a
    directory or a port."""
    from . import sitekeys

    keys = keys if keys is not None else sitekeys.walk()
    files, ports = [], []
    for k in keys:
        leaf = k.path.rsplit(".", 1)[-1]
        if k.table or k.path.startswith("profiles."):  # profiles: hardware (an HCA's port number)
            continue
        if leaf.endswith(("port", "_port")) or leaf in ("listen", "webhook_listen") or leaf.endswith("_listen"):
            ports.append(k)
        elif leaf.endswith(("_file", "_dir", "path", "_log", "_path", "root")) or leaf in ("audit_log", "results_log"):
            files.append(k)
    return files, ports
