"""Compare rendered configs with the installed ones: a unified diff per file, and each change
classified as needing a daemon restart or only `scontrol reconfigure`.

Which changes need a restart (slurm.conf.5, gres.conf.5 and cgroup.conf.5 of 22.05, and the
code paths behind `scontrol reconfigure`): plugin choices, ports, paths of state and pid files,
authentication, AccountingStorageEnforce/TRES, SelectTypeParameters, GresTypes, any node added,
removed or given other hardware, and any gres.conf change. Partitions, topology.conf, node
features, priority weights, timers and the cgroup.conf Constrain* keys take `scontrol
reconfigure`. Comment-only changes (the header) need nothing.
"""

from __future__ import annotations

import difflib
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import UsageError
from ..hostlist import compress, expand

CTLD = ("slurmctld",)
SLURMD = ("slurmd",)
BOTH = ("slurmctld", "slurmd")

RESTART_KEYS: dict[str, tuple[str, ...]] = {
    "accountingstorageenforce": CTLD,
    "accountingstoragehost": CTLD,
    "accountingstorageport": CTLD,
    "accountingstoragetres": CTLD,
    "accountingstoragetype": CTLD,
    "authinfo": BOTH,
    "authtype": BOTH,
    "clustername": BOTH,
    "corespecplugin": SLURMD,
    "credtype": BOTH,
    "grestypes": BOTH,
    "jobacctgathertype": BOTH,
    "jobcomptype": CTLD,
    "jobcontainertype": BOTH,
    "maxjobcount": CTLD,
    "maxnodecount": CTLD,
    "mcsplugin": CTLD,
    "metricstype": CTLD,  # a plugin slurmctld loads at start (25.11+; metrics.shtml "Plugin Loading")
    "plugindir": BOTH,
    "powerplugin": CTLD,
    "preempttype": CTLD,
    "prioritytype": CTLD,
    "proctracktype": BOTH,
    "schedulertype": CTLD,
    "selecttype": BOTH,
    "selecttypeparameters": CTLD,
    "slurmctldhost": CTLD,
    "slurmctldparameters": CTLD,
    "slurmctldpidfile": CTLD,
    "slurmctldport": BOTH,
    "slurmdpidfile": SLURMD,
    "slurmdport": BOTH,
    "slurmdspooldir": SLURMD,
    "slurmduser": SLURMD,
    "slurmuser": CTLD,
    "statesavelocation": CTLD,
    "switchtype": BOTH,
    "taskplugin": SLURMD,
    "topologyplugin": BOTH,
}
# Node keys that `scontrol reconfigure` applies; any other node change needs restarts.
NODE_SOFT_KEYS = frozenset({"features", "weight", "state", "reason"})
RECORD_KEYS = ("nodename", "partitionname", "switchname", "nodeset", "downnodes")


@dataclass(frozen=True)
class Change:
    file: str
    what: str
    daemons: tuple[str, ...] = ()  # to restart; empty: reconfigure is enough (unless no_action)
    nodes: str = ""  # slurmd restarts only on these nodes ("" means all)
    no_action: bool = False  # comments only
    note: str = ""

    @property
    def action(self) -> str:
        if self.no_action:
            return "none"
        return "restart" if self.daemons else "reconfigure"


@dataclass
class FileDiff:
    name: str
    old: str | None  # None: the file does not exist yet
    new: str
    changes: list[Change] = field(default_factory=list)

    @property
    def unified(self) -> str:
        old_lines = [] if self.old is None else self.old.splitlines(keepends=True)
        return "".join(difflib.unified_diff(
            old_lines, self.new.splitlines(keepends=True),
            fromfile=f"installed/{self.name}" if self.old is not None else "/dev/null",
            tofile=f"rendered/{self.name}",
        ))


@dataclass
class Plan:
    target: Path
    files: list[FileDiff]  # only the files that differ

    @property
    def changes(self) -> list[Change]:
        return [c for f in self.files for c in f.changes]

    @property
    def restart(self) -> dict[str, str]:
        """daemon -> the nodes it must be restarted on ("" for all of them)."""
        scope: dict[str, set[str] | None] = {}  # None: everywhere
        for c in self.changes:
            for daemon in c.daemons:
                if daemon == "slurmd" and c.nodes and scope.get(daemon, set()) is not None:
                    scope.setdefault(daemon, set()).update(expand(c.nodes))
                else:
                    scope[daemon] = None
        return {d: "" if nodes is None else compress(nodes) for d, nodes in sorted(scope.items())}

    @property
    def needs_reconfigure(self) -> bool:
        return any(c.action == "reconfigure" for c in self.changes)

    def as_dict(self) -> dict:
        return {
            "target": str(self.target),
            "changed": [f.name for f in self.files],
            "changes": [
                {"file": c.file, "what": c.what, "action": c.action, "daemons": list(c.daemons),
                 "nodes": c.nodes, "note": c.note}
                for c in self.changes
            ],
            "restart": self.restart,
            "reconfigure": self.needs_reconfigure,
        }


# ---------------------------------------------------------------------------- parsing


@dataclass
class Parsed:
    settings: dict[str, tuple[str, list[str]]] = field(default_factory=dict)  # key -> (Key, values)
    records: list[dict[str, str]] = field(default_factory=list)  # lowered keys, in file order
    names: dict[str, str] = field(default_factory=dict)  # lowered key -> spelling, for messages


def parse(text: str, *, name: str) -> Parsed:
    """Slurm's key=value format: one setting per line, or a record of several pairs per line."""
    out = Parsed()
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.split("#", 1)[0].strip()
        if not line:
            continue
        try:
            words = shlex.split(line)
        except ValueError as exc:
            raise UsageError(f"{name} line {number}: cannot parse ({exc})") from None
        pairs = []
        for word in words:
            key, sep, value = word.partition("=")
            if not sep:
                raise UsageError(f"{name} line {number}: {word!r} is not KEY=VALUE")
            out.names.setdefault(key.lower(), key)
            pairs.append((key.lower(), value))
        if len(pairs) == 1 and pairs[0][0] not in RECORD_KEYS:
            key, value = pairs[0]
            out.settings.setdefault(key, (out.names[key], []))[1].append(value)
        else:
            out.records.append(dict(pairs))
    return out


def _nodes(records: list[dict[str, str]], name: str) -> dict[str, dict[str, str]]:
    per_node: dict[str, dict[str, str]] = {}
    for rec in records:
        if "nodename" in rec:
            attrs = {k: v for k, v in rec.items() if k != "nodename"}
            for node in expand(rec["nodename"], what=f"{name} NodeName"):
                per_node.setdefault(node, {}).update(attrs)
    return per_node


def _by_key(records: list[dict[str, str]], key: str) -> dict[str, dict[str, str]]:
    return {rec[key]: rec for rec in records if key in rec}


# ------------------------------------------------------------------------ classification


def _settings_changes(file: str, old: Parsed, new: Parsed, restart_keys: dict[str, tuple[str, ...]]) -> list[Change]:
    changes = []
    for key in sorted(set(old.settings) | set(new.settings)):
        before = old.settings.get(key, ("", []))[1]
        after = new.settings.get(key, ("", []))[1]
        if before == after:
            continue
        spelled = (new.settings.get(key) or old.settings[key])[0]
        what = f"{spelled}: {','.join(before) or '(unset)'} -> {','.join(after) or '(unset)'}"
        changes.append(Change(file, what, restart_keys.get(key, ())))
    return changes


def _slurm_conf_changes(old: Parsed, new: Parsed) -> list[Change]:
    file = "slurm.conf"
    changes = _settings_changes(file, old, new, RESTART_KEYS)

    old_nodes, new_nodes = _nodes(old.records, file), _nodes(new.records, file)
    added = sorted(set(new_nodes) - set(old_nodes))
    removed = sorted(set(old_nodes) - set(new_nodes))
    if added:
        changes.append(Change(file, f"nodes added: {compress(added)}", BOTH))
    if removed:
        changes.append(Change(file, f"nodes removed: {compress(removed)}", BOTH))
    hard: dict[str, list[str]] = {}
    soft: dict[str, list[str]] = {}
    for node in set(old_nodes) & set(new_nodes):
        a, b = old_nodes[node], new_nodes[node]
        for key in sorted(set(a) | set(b)):
            if a.get(key) != b.get(key):
                label = f"{new.names.get(key) or old.names[key]}: {a.get(key, '(unset)')} -> {b.get(key, '(unset)')}"
                (soft if key in NODE_SOFT_KEYS else hard).setdefault(label, []).append(node)
    for label, nodes in sorted(hard.items()):
        changes.append(Change(file, f"NodeName={compress(nodes)} {label}", BOTH, nodes=compress(nodes)))
    for label, nodes in sorted(soft.items()):
        changes.append(Change(file, f"NodeName={compress(nodes)} {label}"))

    old_parts, new_parts = _by_key(old.records, "partitionname"), _by_key(new.records, "partitionname")
    for part in sorted(set(old_parts) | set(new_parts)):
        if part not in new_parts:
            changes.append(Change(file, f"partition {part} removed", note=f"jobs in partition {part} are cancelled"))
        elif part not in old_parts:
            changes.append(Change(file, f"partition {part} added"))
        elif old_parts[part] != new_parts[part]:
            a, b = old_parts[part], new_parts[part]
            keys = [new.names.get(k) or old.names[k] for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]
            changes.append(Change(file, f"partition {part}: {', '.join(keys)} changed"))
    return changes


def _gres_changes(old: Parsed, new: Parsed) -> list[Change]:
    if old.settings == new.settings and old.records == new.records:
        return []
    old_files, new_files = _gres_files(old), _gres_files(new)
    moved = sorted(n for n in set(old_files) | set(new_files) if old_files.get(n) != new_files.get(n))
    note = f"drain {compress(moved)} first: their GPU devices change" if moved else ""
    return [Change("gres.conf", "GPU definitions changed (read when the daemons start)", BOTH, note=note)]


def _gres_files(parsed: Parsed) -> dict[str, list[str]]:
    """node -> its GPU device files, in file order."""
    files: dict[str, list[str]] = {}
    for rec in parsed.records:
        if "nodename" in rec and "file" in rec:
            devices = expand(rec["file"], what="gres.conf File")
            for node in expand(rec["nodename"], what="gres.conf NodeName"):
                files.setdefault(node, []).extend(devices)
    return files


def classify(name: str, old_text: str | None, new_text: str) -> list[Change]:
    if old_text is None:
        daemons = {"slurm.conf": BOTH, "gres.conf": BOTH, "cgroup.conf": SLURMD}.get(name, ())
        return [Change(name, "new file", daemons)]
    old, new = parse(old_text, name=name), parse(new_text, name=name)
    changes: list[Change]
    if name == "slurm.conf":
        changes = _slurm_conf_changes(old, new)
    elif name == "gres.conf":
        changes = _gres_changes(old, new)
    elif name == "cgroup.conf":
        changes = _settings_changes(name, old, new, {"cgroupplugin": SLURMD})
    else:  # topology.conf: switches only
        changes = [Change(name, "switches changed")] if old.records != new.records else []
    return changes or [Change(name, "comments only", no_action=True)]


def plan(rendered: dict[str, str], target: str | Path) -> Plan:
    """What writing `rendered` into `target` would change."""
    target = Path(target)
    files = []
    for name, text in rendered.items():
        path = target / name
        try:
            old = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            old = None
        except OSError as exc:
            raise UsageError(f"{path}: cannot read ({exc.strerror})") from None
        if old == text:
            continue
        files.append(FileDiff(name, old, text, classify(name, old, text)))
    return Plan(target, files)
