#!/usr/bin/env python3
"""`slurmadm accounts` at scale (issue 4): 500 projects x 4 users on the dev cluster's real
slurmdbd, each case against peers measured in the same run.

Cases:
  from empty   `accounts apply` (backup, plan, QOS, one load, re-read and confirm)
               peer load:   the QOS one `sacctmgr add qos` each, then `sacctmgr load` of an
                            equivalent file (written here, independently of slurmadm)
               peer calls:  one `sacctmgr -i add` per entity, timed for the first 50 and
                            extrapolated to all entities
  no-op        `accounts plan --check` on a slurmdbd that matches (median of 5)
               peer load:   `sacctmgr load` of the same file again (it finds nothing new)
  10% change   50 project quotas and 200 member caps change (250 of 2,510 entities)
               peer load:   `sacctmgr load` of the changed file (modifies only, which it
                            does correctly when no default account changes with it)
               peer calls:  one `sacctmgr -i modify` per entity for the first 50, extrapolated

Goals: apply from empty no slower than sacctmgr load; no-op plan under 1 s.

Every case starts on a fresh 4-node dev cluster of its own (brought up and purged by the bench).

Usage (root): .venv/bin/python bench/accounts_apply.py [--state-dir DIR] [--port-base 19700]
              [--projects 500] [--users 4] [--per-entity 50] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

import tomli_w

from slurmadm.devcluster.cluster import DevCluster

QUOTAS = [8, 16, 24, 32]


def timed(fn) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


class Bench:
    """Every case starts on a freshly created dev cluster: slurmdbd gets slower with churn (rows of
    deleted associations stay behind), so a case measured after another's cleanup would lose."""

    def __init__(self, state_dir: Path, port_base: int, projects: int, users: int, per_entity: int):
        self.dc = DevCluster(state_dir)
        self.port_base = port_base
        self.n_projects, self.n_users, self.per_entity = projects, users, per_entity
        self.tmp = Path(tempfile.mkdtemp(prefix="bench-accounts-"))

    def fresh(self) -> None:
        self.dc.down(purge=True)
        self.dc.up(nodes=4, port_base=self.port_base, timeout=300)
        self.env = {**os.environ, **self.dc.env()}
        self.base = tomllib.loads(self.dc.site_path.read_text())
        self.cluster = self.base["cluster"]["name"]

    # ---- plumbing ----

    def sh(self, *argv: str, ok=(0,), timeout=900) -> subprocess.CompletedProcess:
        proc = subprocess.run(list(argv), env=self.env, capture_output=True, text=True, timeout=timeout)
        if proc.returncode not in ok:
            raise SystemExit(f"{' '.join(argv)[:200]}: exit {proc.returncode}: {(proc.stderr or proc.stdout)[-500:]}")
        return proc

    def slurmadm(self, *args: str, ok=(0,)) -> subprocess.CompletedProcess:
        return self.sh(sys.executable, "-m", "slurmadm", *args, ok=ok)

    def sacctmgr(self, *args: str, ok=(0,)) -> subprocess.CompletedProcess:
        return self.sh("sacctmgr", *args, ok=ok)

    # ---- the site and its equivalent load file ----

    def site(self, changed: bool = False) -> dict:
        data = dict(self.base)
        orgs = [{"name": f"org{i:02d}", "fairshare": 10 + i, "gpu_quota": 32} for i in range(10)]
        projects = []
        for i in range(self.n_projects):
            proj = {
                "name": f"p{i:03d}", "organization": f"org{i % 10:02d}", "fairshare": i % 7 + 1,
                "gpu_quota": QUOTAS[i % 4], "qos": ["normal", "high", "low"], "default_qos": "normal",
                "members": [f"u{i:03d}{chr(97 + k)}" for k in range(self.n_users)],
            }
            if i % 5 == 0:
                proj["gpu_hours"] = 1000 + i
            if changed and i % 10 == 0:  # 10%: 50 quotas, and 200 members get a cap
                proj["gpu_quota"] = QUOTAS[(i // 10 + 1) % 4] if QUOTAS[(i // 10 + 1) % 4] != proj["gpu_quota"] else 4
                proj["user_gpu_cap"] = min(4, proj["gpu_quota"])
            projects.append(proj)
        data.update(organizations=orgs, projects=projects, users=[])
        data["burnin"] = {**data["burnin"], "account": "p000"}
        return data

    def write_site(self, name: str, data: dict) -> str:
        path = self.tmp / name
        path.write_text(tomli_w.dumps(data))
        return str(path)

    def load_file(self, name: str, data: dict) -> str:
        lines = [f"Cluster - '{self.cluster}'", "Parent - 'root'"]
        for org in data["organizations"]:
            lines.append(f"Account - '{org['name']}':Fairshare={org['fairshare']}:GrpTRES=gres/gpu={org['gpu_quota']}")
        for org in data["organizations"]:
            lines.append(f"Parent - '{org['name']}'")
            for p in (p for p in data["projects"] if p["organization"] == org["name"]):
                opts = f":Fairshare={p['fairshare']}:GrpTRES=gres/gpu={p['gpu_quota']}"
                if "gpu_hours" in p:
                    opts += f":GrpTRESMins=gres/gpu={p['gpu_hours'] * 60}"
                lines.append(f"Account - '{p['name']}'{opts}:QOS='{','.join(p['qos'])}':DefaultQOS='{p['default_qos']}'")
        for p in data["projects"]:
            lines.append(f"Parent - '{p['name']}'")
            cap = f":GrpTRES=gres/gpu={p['user_gpu_cap']}" if "user_gpu_cap" in p else ""
            lines += [f"User - '{u}':DefaultAccount='{p['name']}'{cap}" for u in p["members"]]
        path = self.tmp / name
        path.write_text("\n".join(lines) + "\n")
        return str(path)

    def qos_commands(self) -> list[list[str]]:
        """The QOS as an admin creates them: one `sacctmgr add qos` with its settings each (a
        `modify` for those that exist: Slurm's normal, and the ones the dev cluster creates by
        name because its partitions name them)."""
        existing = set(self.sacctmgr("-n", "-P", "show", "qos", "format=name").stdout.split())
        out = []
        for q in self.base["qos"]:
            args = [f"Priority={q.get('priority', 0)}", f"UsageFactor={q.get('usage_factor', 1.0)}"]
            if q.get("preempt_mode", "cluster") != "cluster":
                args.append(f"PreemptMode={q['preempt_mode']}")
            if q.get("flags"):
                args.append(f"Flags={','.join(q['flags'])}")
            if q.get("max_gpus_per_user"):
                args.append(f"MaxTRESPerUser=gres/gpu={q['max_gpus_per_user']}")
            verb = ["modify", "qos", "where", f"name={q['name']}", "set"] if q["name"] in existing else \
                ["add", "qos", f"name={q['name']}"]
            out.append(["-i", *verb, *args])
        for q in self.base["qos"]:
            if q.get("preempt"):
                out.append(["-i", "modify", "qos", "where", f"name={q['name']}", "set", f"Preempt={','.join(q['preempt'])}"])
        return out

    # ---- cases ----

    def run(self) -> dict:
        try:
            return self._run()
        finally:
            self.dc.down(purge=True)
            shutil.rmtree(self.tmp, ignore_errors=True)

    def _run(self) -> dict:
        self.fresh()
        big, changed = self.site(), self.site(changed=True)
        big_site, changed_site = self.write_site("big.toml", big), self.write_site("changed.toml", changed)
        big_cfg, changed_cfg = self.load_file("big.cfg", big), self.load_file("changed.cfg", changed)
        entities = len(big["organizations"]) + len(big["projects"]) * (1 + self.n_users)
        out: dict = {"projects": self.n_projects, "users_per_project": self.n_users, "entities": entities}

        # slurmadm: from empty, no-op plan, 10% change
        out["empty_slurmadm_apply_s"] = timed(lambda: self.slurmadm("accounts", "apply", "--site", big_site))
        runs = [timed(lambda: self.slurmadm("accounts", "plan", "--check", "--site", big_site)) for _ in range(5)]
        out["noop_slurmadm_plan_s"] = statistics.median(runs)
        out["noop_slurmadm_plan_runs_s"] = runs
        out["noop_show_assoc_s"] = timed(lambda: self.sacctmgr("-n", "-P", "show", "assoc", "wopl"))
        plan = json.loads(self.slurmadm("accounts", "plan", "--json", "--site", changed_site, ok=(0, 1)).stdout)
        out["change_ops"] = plan["changes"]
        out["change_slurmadm_apply_s"] = timed(lambda: self.slurmadm("accounts", "apply", "--site", changed_site))

        # peer: sacctmgr load (QOS first, as an admin would)
        self.fresh()
        qos_cmds = self.qos_commands()  # read what exists before the clock starts
        out["empty_peer_qos_s"] = timed(lambda: [self.sacctmgr(*cmd) for cmd in qos_cmds])
        out["empty_peer_load_s"] = timed(lambda: self.sacctmgr("-i", "load", f"file={big_cfg}"))
        out["noop_peer_load_s"] = timed(lambda: self.sacctmgr("-i", "load", f"file={big_cfg}", ok=(0, 1)))
        out["change_peer_load_s"] = timed(lambda: self.sacctmgr("-i", "load", f"file={changed_cfg}"))
        left = json.loads(self.slurmadm("accounts", "plan", "--json", "--site", changed_site, ok=(0, 1)).stdout)
        # the peer's QOS differ from the site in what an admin's commands leave out (descriptions,
        # limits); what counts here is whether the load made the 250 account/user changes
        out["change_peer_load_left"] = sum(1 for op in left["ops"] if not op["kind"].endswith("-qos"))

        # peer: one sacctmgr call per entity, the first N timed
        self.fresh()
        for cmd in self.qos_commands():
            self.sacctmgr(*cmd)
        first = [["add", "account", f"name={o['name']}", "parent=root", f"Fairshare={o['fairshare']}",
                  f"GrpTRES=gres/gpu={o['gpu_quota']}"] for o in big["organizations"]]
        first += [["add", "account", f"name={p['name']}", f"parent={p['organization']}", f"Fairshare={p['fairshare']}",
                   f"GrpTRES=gres/gpu={p['gpu_quota']}", f"QOS={','.join(p['qos'])}", "DefaultQOS=normal"]
                  for p in big["projects"]]
        first = first[: self.per_entity]
        t = timed(lambda: [self.sacctmgr("-i", *cmd) for cmd in first])
        out["empty_peer_calls_first_n_s"] = t
        out["empty_peer_calls_all_est_s"] = t / len(first) * entities
        self.sacctmgr("-i", "load", f"file={big_cfg}")  # the rest, untimed
        firsts = [p for i, p in enumerate(changed["projects"]) if i % 10 == 0][: self.per_entity]
        cmds = [["modify", "account", "where", f"name={p['name']}", f"cluster={self.cluster}", "set",
                 f"GrpTRES=gres/gpu={p['gpu_quota']}"] for p in firsts]
        t = timed(lambda: [self.sacctmgr("-i", *cmd) for cmd in cmds])
        out["change_peer_calls_first_n_s"] = t
        out["change_peer_calls_all_est_s"] = t / len(cmds) * plan["changes"]
        return {k: (round(v, 2) if isinstance(v, float) else v) for k, v in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--state-dir", type=Path, default=Path("/tmp/bench-accounts-dc"),
                    help="where the bench's own dev clusters live (purged before each case and at the end)")
    ap.add_argument("--port-base", type=int, default=19700)
    ap.add_argument("--projects", type=int, default=500)
    ap.add_argument("--users", type=int, default=4)
    ap.add_argument("--per-entity", type=int, default=50)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    r = Bench(args.state_dir, args.port_base, args.projects, args.users, args.per_entity).run()
    if args.json:
        print(json.dumps(r, indent=2))
        return
    n = args.per_entity
    print(f"{r['projects']} projects x {r['users_per_project']} users = {r['entities']} entities")
    print(f"{'case':<12} {'slurmadm':>10} {'peer: sacctmgr load':>22} {f'peer: 1 call/entity ({n} timed)':>34}")
    print(f"{'from empty':<12} {r['empty_slurmadm_apply_s']:>9.2f}s "
          f"{r['empty_peer_load_s']:>9.2f}s (+{r['empty_peer_qos_s']:.2f}s QOS) "
          f"{r['empty_peer_calls_all_est_s']:>12.0f}s est. ({r['empty_peer_calls_first_n_s']:.1f}s for {n})")
    print(f"{'no-op':<12} {r['noop_slurmadm_plan_s']:>9.2f}s {r['noop_peer_load_s']:>9.2f}s"
          f"{'':>14} (sacctmgr show assoc alone: {r['noop_show_assoc_s']:.2f}s)")
    print(f"{'10% change':<12} {r['change_slurmadm_apply_s']:>9.2f}s {r['change_peer_load_s']:>9.2f}s"
          f"{'':>14} {r['change_peer_calls_all_est_s']:>6.0f}s est. ({r['change_peer_calls_first_n_s']:.1f}s for {n}); "
          f"{r['change_ops']} changes ({r['change_peer_load_left']} left undone by the load)")


if __name__ == "__main__":
    main()
