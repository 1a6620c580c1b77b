"""Helpers for integration tests (import: from tests.integration.helpers import ...)."""

from __future__ import annotations

import subprocess
import sys


def run_slurmadm(env: dict[str, str], *args: str, timeout: float = 120, input: str | None = None
                 ) -> subprocess.CompletedProcess[str]:
    """The real console entry point in a child process, with the dev cluster's environment."""
    return subprocess.run([sys.executable, "-m", "slurmadm", *args], env=env, capture_output=True,
                          text=True, timeout=timeout, input=input)


def ensure_burnin_accounting(env: dict[str, str], site) -> None:
    """What a burn-in sweep needs in slurmdbd, as `slurmadm accounts apply` would create it from
    the site: the burn-in QOS, the burn-in project under its organisation, root as a member."""
    def sacctmgr(*args: str, check: bool = True) -> str:
        return subprocess.run(["sacctmgr", *args], env=env, capture_output=True, text=True, timeout=60,
                              check=check).stdout

    b = site.burnin
    if b.qos not in sacctmgr("-n", "-P", "show", "qos", "format=name").split():
        sacctmgr("-i", "add", "qos", b.qos)
    parent = next(p.organization for p in site.projects if p.name == b.account)
    for account, up in ((parent, "root"), (b.account, parent)):
        if not sacctmgr("-n", "-P", "show", "account", account, "format=account").strip():
            sacctmgr("-i", "add", "account", account, f"parent={up}")
    sacctmgr("-i", "add", "user", "root", f"account={b.account}", check=False)  # exit 1: exists
    sacctmgr("-i", "modify", "user", "root", "where", f"account={b.account}", "set", f"qos=normal,{b.qos}")


def sh(env: dict[str, str], *argv: str, timeout: float = 60, check: bool = True) -> str:
    """A command's stdout; with check, a failure is an assertion naming the command."""
    p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=timeout)
    if check:
        assert p.returncode == 0, f"{argv}: {p.stderr}"
    return p.stdout


def delete_reservation(env: dict[str, str], name: str, timeout: float = 120) -> None:
    """Delete a reservation a test made, retried until slurmctld no longer has it: it refuses while
    a job still uses it (a cancelled one completing, on a loaded machine), and a reservation left
    behind keeps its nodes RESERVED for the rest of its duration, so every later module's job on
    them waits (a whole-suite run at stop 59: b200-002 held 30 minutes by test_hardening's)."""
    from slurmadm.devcluster.daemons import wait_for

    def gone() -> bool:
        sh(env, "scontrol", "delete", f"reservation={name}", check=False)
        return f"ReservationName={name} " not in sh(env, "scontrol", "show", "reservation", "-o", check=False)

    assert wait_for(gone, timeout, interval=1), sh(env, "scontrol", "show", "reservation", check=False)


def slurm_node(env: dict[str, str], name: str):
    """Slurm's view of one node through slurmadm's own adapter (sinfo/scontrol JSON)."""
    from slurmadm.slurm.cli_backend import CliBackend

    return CliBackend(env={"SLURM_CONF": env["SLURM_CONF"]}).nodes([name])[0]


def wait_until(cond, timeout: float = 90.0, what: str = "condition", interval: float = 0.3):
    """cond()'s first truthy value, polled until `timeout` (then an AssertionError naming `what`
    and the last value)."""
    import time

    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = cond()
        if last:
            return last
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what} (last: {last!r})")


def health_runs(dc, name: str, since: float) -> str:
    """What the node's health runs did since `since` (epoch s), one line per run, plus the tail
    of its slurmd log: the evidence a failed wait-for-a-drain prints."""
    import json
    from pathlib import Path

    runs: dict[str, list] = {}
    log = Path(dc.site().health.results_log or "")
    for line in (log.read_text(errors="replace").splitlines() if log.is_file() else []):
        try:
            r = json.loads(line)
        except ValueError:
            continue
        if r.get("node") == name and r.get("ts", 0) >= since:
            runs.setdefault(r["run_id"], []).append(r)
    out = []
    for rs in runs.values():
        bad = [f"{r.get('check_id')}={r['status']}/{r.get('action')}" if "status" in r else
               f"{r.get('event')}: {r.get('reason')}" for r in rs if r.get("status") != "pass"]
        out.append(f"{rs[0]['ts'] - since:+.1f}s {rs[0]['context']}: {', '.join(bad) or 'all pass'}")
    slurmd = dc.state_dir / "log" / f"slurmd-{name}.log"
    tail = slurmd.read_text(errors="replace").splitlines()[-8:] if slurmd.is_file() else []
    return "\n".join([f"{len(runs)} health run(s) of {name}:", *out, "slurmd log:", *tail])


def hook(dc, script, node_name, timeout=60):
    """Run a hook script exactly as slurmd does: no PATH, SLURMD_NODENAME, and SLURM_CONF for the
    prolog/epilog only (slurmd gives HealthCheckProgram none). Returns (process, seconds)."""
    import time

    env = {"SLURMD_NODENAME": node_name}
    if script != "healthcheck.sh":
        env["SLURM_CONF"] = str(dc.slurm_conf)
    started = time.monotonic()
    p = subprocess.run([str(dc.site().slurm.prolog_dir + f"/{script}")], env=env, capture_output=True,
                       text=True, timeout=timeout, cwd="/")
    return p, time.monotonic() - started


def monitor_stack(dev_cluster, gpu_source: str | None = None):
    """A module's monitoring stack on the session dev cluster (a generator for a module-scoped
    fixture: up, yield it, down)."""
    from slurmadm.monitor.stack import MonitorStack

    s = MonitorStack(dev_cluster, gpu_source=gpu_source)
    s.up(timeout=120)
    yield s
    s.down()


def accounting_env(dev_cluster) -> dict[str, str]:
    """os.environ plus the dev cluster's, with the burn-in account in Slurm's accounting."""
    import os

    e = {**os.environ, **dev_cluster.env()}
    ensure_burnin_accounting(e, dev_cluster.site())
    return e


def prom(stack, expr: str) -> list:
    """An instant query to the stack's Prometheus."""
    from slurmadm.monitor.stack import prom_query

    return prom_query(stack.urls()["prometheus"], expr)


class RepairSlate:
    """A repair module's clean slate on the session's shared dev cluster (issues 34-36): what
    earlier modules left on `nodes` (their drains as incidents, their XID lines, their failed
    qualifications counted towards a lemon) is not this module's, and what this module leaves is
    not the next one's. Enter: ingest once (earlier drains are consumed by the cursor), then forget
    those nodes' incidents; resume a node an earlier module left drained. Exit: clear the
    stand-in faults, forget the incidents again, roll the nodes' kernel logs back to where they
    were (only when they grew: a node boot empties one), resume what is still drained."""

    def __init__(self, dev_cluster, env: dict[str, str], nodes: tuple[str, ...]):
        self.dc, self.env, self.nodes = dev_cluster, env, nodes
        self.kmsg = {n: dev_cluster.p("gpus") / f"{n}.kmsg" for n in nodes}
        self.sizes: dict[str, int] = {}

    def _forget(self) -> None:
        from slurmadm.store import Store

        marks = ",".join("?" * len(self.nodes))
        with Store(self.dc.site().store.path) as store, store.transaction() as db:
            ids = [r[0] for r in db.execute(f"SELECT id FROM incidents WHERE node IN ({marks})", self.nodes)]
            # the incidents' event rows stay: their refs are how ingest knows a drain was taken, and
            # the central store's ingest looks back over the last drains (incidents.LOOKBACK); without
            # them the next module's ingest opened the forgotten incidents again (test_repair_ladder
            # acted on test_repair_incidents' GPU3 incident when its random id sorted first)
            for i in ids:
                db.execute("DELETE FROM qualifications WHERE incident_id=?", (i,))
            db.execute(f"DELETE FROM incidents WHERE node IN ({marks})", self.nodes)

    def _resume(self) -> None:
        for n in self.nodes:
            run_slurmadm(self.env, "dev-cluster", "gpu-fault", n, "--clear")
            info = slurm_node(self.env, n)
            if info.drained or info.state == "DOWN":
                sh(self.env, "scontrol", "update", f"nodename={n}", "state=resume", check=False)

    def __enter__(self) -> "RepairSlate":
        run_slurmadm(self.env, "repair", "status", "--json")  # ingest: earlier drains are read and done with
        self._forget()
        self._resume()
        self.sizes = {n: p.stat().st_size if p.exists() else 0 for n, p in self.kmsg.items()}
        return self

    def __exit__(self, *exc) -> None:
        for n in self.nodes:
            run_slurmadm(self.env, "repair", "clear", n, "--reason", "test clean-up")
        for n, p in self.kmsg.items():
            if p.exists() and p.stat().st_size > self.sizes[n]:
                with open(p, "r+b") as fh:
                    fh.truncate(self.sizes[n])
        run_slurmadm(self.env, "repair", "status", "--json")
        self._forget()
        self._resume()
