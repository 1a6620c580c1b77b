"""`slurmadm fleet`: one software stack on every node.

The operations, importable for scripts (they return data and print nothing):

    from slurmadm.site import load_site
    from slurmadm import fleet

    site = load_site("/etc/slurmadm/site.toml")
    got = fleet.facts(site, ["b200-001", "b200-002"])          # {node: NodeFacts}
    found = fleet.drift(site, got)                              # [Difference] grouped by value
    replies = fleet.run(site, ["b200-001"], "uptime")           # [Reply]
    groups = fleet.fold(replies)                                 # clush -b style groups
    from slurmadm.fleet import rollout                          # canary rollouts: rollout.py

Facts come over SSH (`ssh.ParamikoRemote`, or any `ssh.Remote`), one command per node, and are
stored with their time (store table fleet_facts). When the site's BMCs can be reached (`slurmadm
bmc`: [bmc] with its password file), each BMC's firmware inventory is read at the same time (Redfish
FirmwareInventory, else the IPMI BMC firmware) as facts `fw:<component>` (`fw:BIOS`, `fw:BMC`,
`fw:HGX_FW_GPU_SXM_1`, ...), compared with [bmc.firmware]. Drift compares each fact with the site's
[software] baseline, and facts the site sets no value for with the fleet's most common value
(confluent's `collate` idea: the odd ones out).
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from ..hostlist import compress
from ..store import Store
from . import collector as factsmod
from .ssh import ParamikoRemote, Remote, Reply

__all__ = ["Difference", "NodeFacts", "Remote", "Reply", "bmc_configured", "bmc_firmware", "drift", "facts", "fold",
           "remote_for", "run", "stored_facts"]


@dataclass
class NodeFacts:
    node: str
    ts: float | None
    facts: dict[str, str] = field(default_factory=dict)
    error: str = ""
    kind: str = ""  # "" when collected; else the Reply kind (unreachable, hostkey, timeout, ...)
    fresh: bool = True  # collected by this call (False: read from the store)
    bmc_error: str = ""  # why the BMC's firmware facts are missing ("" when read, or not asked)

    def as_dict(self) -> dict:
        return {"node": self.node, "ts": self.ts, "facts": self.facts, "error": self.error, "kind": self.kind,
                "fresh": self.fresh, "bmc_error": self.bmc_error}


def remote_for(site) -> Remote:
    return ParamikoRemote(site.fleet)


def _collector(site) -> str:
    """The fact collector for this site: with the release `slurmadm deploy` switched to
    (fact `slurmadm`) and the hashes of the hook scripts in slurm.prolog_dir (`file:<path>`,
    through their links: the scripts that run), so a node left behind drifts."""
    from ..deploy.node import HOOKS

    import re

    hooks = [f"{site.slurm.prolog_dir.rstrip('/')}/{h}" for h in HOOKS]
    hooks = [h for h in hooks if re.fullmatch(r"/[A-Za-z0-9_./\-]+", h)]  # what the collector may name
    files = list(dict.fromkeys([*site.software.hash_files, *hooks]))
    return factsmod.script(files, factsmod.packages_of(site.software.extra), slurmadm_prefix=site.deploy.prefix)


FW_PREFIX = "fw:"


def bmc_configured(site) -> bool:
    """Whether `slurmadm bmc` has what it needs to try the BMCs: the password file [bmc] names
    exists (a site without BMC credentials is not asked, and costs no BMC timeouts)."""
    import os

    return os.path.isfile(site.bmc.password_file)


def bmc_firmware(site, nodes: Sequence[str]) -> dict[str, dict[str, str] | str]:
    """Each node's BMC firmware inventory through `slurmadm bmc` ({component: version}), or a
    one-line reason it could not be read. Never raises for a BMC or credential problem."""
    from ..bmc.fanout import Fleet
    from ..errors import SlurmadmError

    if not nodes:
        return {}
    try:
        bmcs = Fleet(site)
    except SlurmadmError as exc:
        return {n: f"bmc: {exc}" for n in nodes}

    def read(c) -> dict[str, str]:
        if site.bmc.redfish:
            return dict(c.redfish.firmware())
        inv = c.bmc.inventory()
        return {"BMC": inv["bmc_firmware"]} if inv.get("bmc_firmware") else {}

    rows = bmcs.run(list(nodes), read, deadline_s=bmcs.login_deadline + 6 * site.bmc.timeout_s)
    return {r.node: (r.value if r.ok else f"bmc: {r.error}") for r in rows}


def facts(site, nodes: Sequence[str], *, refresh: bool = True, remote: Remote | None = None,
          store: Store | None = None, on_node: Callable[[NodeFacts], None] | None = None,
          bmc: bool | None = None) -> dict[str, NodeFacts]:
    """Each node's facts: collected over SSH (all nodes when `refresh`, else only those with
    nothing stored), stored with their time. Unreachable nodes are entries with `error` set.
    `bmc` (default: when `bmc_configured(site)`): also each BMC's firmware inventory as
    `fw:<component>` facts, read while SSH runs; a BMC that does not answer sets `bmc_error`."""
    own_remote = remote is None and refresh
    if own_remote:
        remote = remote_for(site)  # first: a missing key or known_hosts changes nothing
    own_store = store is None
    store = store or Store.for_site(site)
    try:
        have = {} if refresh else stored_facts(store, nodes)
        todo = [n for n in nodes if n not in have]
        got: dict[str, NodeFacts] = dict(have)
        if todo:
            if remote is None:
                own_remote = True
                remote = remote_for(site)
            firmware: dict = {}
            reader = None
            if bmc if bmc is not None else bmc_configured(site):
                import threading

                def read_bmcs() -> None:
                    try:
                        firmware.update(bmc_firmware(site, todo))
                    except Exception as exc:  # a library's surprise: no firmware facts, never a traceback
                        firmware.update({n: f"bmc: {type(exc).__name__}" for n in todo})

                reader = threading.Thread(target=read_bmcs, name="fleet-bmc-facts", daemon=True)
                reader.start()
            try:
                def done(reply: Reply) -> None:
                    if on_node and reader is None:
                        on_node(_node_facts(reply))

                replies = remote.run(todo, "/bin/sh -s", stdin=_collector(site),
                                     timeout=site.fleet.command_timeout_s, on_reply=done)
            finally:
                if own_remote:
                    remote.close()
                    own_remote = False
                if reader is not None:
                    reader.join()
            fresh = {r.node: _node_facts(r) for r in replies}
            for n, fw in firmware.items():
                if isinstance(fw, str):
                    fresh[n].bmc_error = fw
                else:
                    fresh[n].facts.update({FW_PREFIX + k: v for k, v in fw.items()})
            if on_node and reader is not None:
                for nf in fresh.values():
                    on_node(nf)
            _save(store, [nf for nf in fresh.values() if not nf.error])
            got.update(fresh)
        return {n: got[n] for n in nodes}
    finally:
        if own_remote and remote is not None:
            remote.close()
        if own_store:
            store.close()


def _node_facts(reply: Reply) -> NodeFacts:
    now = time.time()
    if reply.exit is None:
        return NodeFacts(reply.node, None, error=reply.error, kind=reply.kind)
    try:
        return NodeFacts(reply.node, now, factsmod.parse(reply.output))
    except ValueError as exc:
        return NodeFacts(reply.node, None, error=f"facts: {exc}", kind="collector")


def _save(store: Store, got: list[NodeFacts]) -> None:
    if not got:
        return
    with store.transaction() as db:
        for nf in got:
            db.execute("DELETE FROM fleet_facts WHERE node=?", (nf.node,))
            db.executemany("INSERT INTO fleet_facts (node, fact, value, ts) VALUES (?,?,?,?)",
                           [(nf.node, k, v, nf.ts) for k, v in sorted(nf.facts.items())])


def stored_facts(store: Store, nodes: Sequence[str] | None = None) -> dict[str, NodeFacts]:
    out: dict[str, NodeFacts] = {}
    for row in store.db.execute("SELECT node, fact, value, ts FROM fleet_facts ORDER BY node, fact"):
        if nodes is not None and row["node"] not in nodes:
            continue
        nf = out.setdefault(row["node"], NodeFacts(row["node"], row["ts"], fresh=False))
        nf.facts[row["fact"]] = row["value"]
        nf.ts = min(nf.ts or row["ts"], row["ts"])
    return out


# ---------------------------------------------------------------------------------------- drift


@dataclass
class Difference:
    fact: str
    have: str  # "(none)" when the node lacks the fact
    want: str
    source: str  # "baseline" (the site's [software]) or "fleet" (the most common value)
    nodes: list[str]

    @property
    def hostlist(self) -> str:
        return compress(self.nodes)

    def line(self) -> str:
        what = "baseline" if self.source == "baseline" else "fleet's most common"
        return f"{self.hostlist}: {self.fact} {_short(self.have)} ({what} {_short(self.want)})"

    def as_dict(self) -> dict:
        return {"fact": self.fact, "have": self.have, "want": self.want, "source": self.source,
                "nodes": self.hostlist, "count": len(self.nodes)}


MISSING = "(none)"


def _short(value: str) -> str:
    return value[:12] if len(value) == 64 and all(c in "0123456789abcdef" for c in value) else value


def drift(site, got: dict[str, NodeFacts]) -> list[Difference]:
    """Every fact of every node that answered, against the baseline, else the fleet's most
    common value; one Difference per (fact, value, wanted) with all its nodes."""
    want = factsmod.baseline(site.software)
    by_node = {n: nf.facts for n, nf in got.items() if not nf.error}
    if any(k.startswith(FW_PREFIX) for fs in by_node.values() for k in fs):
        want.update({FW_PREFIX + k: v for k, v in site.bmc.firmware.items()})
    return compare(by_node, want)


def compare(by_node: dict[str, dict[str, str]], want: dict[str, str]) -> list[Difference]:
    groups: dict[tuple[str, str, str, str], list[str]] = {}
    all_facts = sorted({f for fs in by_node.values() for f in fs} | set(want))
    for fact in all_facts:
        if fact in factsmod.NOT_COMPARED:
            continue
        if fact in want:
            wanted, source = want[fact], "baseline"
        else:
            counts = Counter(fs.get(fact, MISSING) for fs in by_node.values())
            if len(counts) < 2:
                continue
            wanted = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))[0][0]
            source = "fleet"
        for node, fs in by_node.items():
            if fact.startswith(FW_PREFIX) and not any(k.startswith(FW_PREFIX) for k in fs):
                continue  # its BMC was not read (unreachable, or not asked): not firmware drift
            have = fs.get(fact, MISSING)
            if have != wanted:
                groups.setdefault((fact, have, wanted, source), []).append(node)
    return [Difference(f, h, w, s, sorted(ns)) for (f, h, w, s), ns in
            sorted(groups.items(), key=lambda kv: (kv[0][0], -len(kv[1]), kv[0][1]))]


def per_node(diffs: list[Difference]) -> dict[str, list[Difference]]:
    out: dict[str, list[Difference]] = {}
    for d in diffs:
        for n in d.nodes:
            out.setdefault(n, []).append(d)
    return out


# ------------------------------------------------------------------------------------------ run


def run(site, nodes: Sequence[str], command: str, *, timeout: float | None = None, remote: Remote | None = None,
        on_reply: Callable[[Reply], None] | None = None) -> list[Reply]:
    """`command` (a shell command line, run by the login shell as ssh would) on every node."""
    own = remote is None
    remote = remote or remote_for(site)
    try:
        return remote.run(list(nodes), command, timeout=timeout or site.fleet.command_timeout_s,
                          on_reply=on_reply)
    finally:
        if own:
            remote.close()


@dataclass
class Group:
    nodes: list[str]
    exit: int | None
    output: str
    error: str = ""

    @property
    def hostlist(self) -> str:
        return compress(self.nodes)

    def as_dict(self) -> dict:
        return {"nodes": self.hostlist, "count": len(self.nodes), "exit": self.exit, "output": self.output,
                "error": self.error}


def fold(replies: list[Reply]) -> list[Group]:
    """Nodes with identical output and exit code (or the same error) in one group, as `clush -b`
    gathers them; largest groups first."""
    groups: dict[tuple, list[str]] = {}
    for r in replies:
        key = (r.exit, r.output if not r.error else "", r.error if r.kind != "timeout" else r.error)
        groups.setdefault(key, []).append(r.node)
    out = [Group(sorted(ns), e, o, err) for (e, o, err), ns in groups.items()]
    return sorted(out, key=lambda g: (g.error != "", -len(g.nodes), g.hostlist))

