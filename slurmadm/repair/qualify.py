"""The gate before return: a qualification job on one repaired node.

A drained node runs no job, not even in a reservation, so the node is qualified the way a
burn-in sweep re-qualifies one (slurmadm/burnin/): a maintenance reservation over just that node
(`<burnin.reservation or slurmadm-repair>-<node>`, Flags=MAINT,IGNORE_JOBS, only our user), its
drain reason written to the store (`repair-qualify`) *before* it is resumed inside the
reservation, then one whole-node job in the burn-in partition, QOS and account:

    python -m slurmadm.repair.qualify --spec '{...}'    (on the node, by srun)

which first writes what repair's reset or reboot cleared into the node's own store as the XID
check's acknowledgement (`acknowledge_xids`: the head's time travels in the spec; the link flaps
logged before repair's reboot or an admin's `repair clear` likewise), then runs, in order, a short
GPU stress (burnin/stress.py), the single-node all-reduce (the burn-in's), the known-answer
compute test (kat.py), the link watch (burn-in's `links_test`: no compute HCA port went down
while the job ran, by the kernel log's "Link down" lines and link_downed; a node repaired for an
HCA is watched at least `repair.link_watch_s`) and the full health suite (`slurmadm health run
--dry-run --json`, as burn-in runs it), printing burn-in's JSON event lines; a node slow against its
profile's burn-in baseline fails too (`against_baseline`). Afterwards the
node is drained again with its old reason *before* the reservation goes, whatever the outcome:
`repair run` resumes it only on a pass. An interrupted qualification (SIGKILL, power loss) is
undone by the next run (`recover()`): its job cancelled, the node drained again, the reservation
deleted.
"""

from __future__ import annotations

import argparse
import getpass
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import SlurmadmError
from ..slurm import jobs as sjobs
from ..slurm.model import NodeInfo

JOB_PREFIX = "slurmadm-repair"
QUALIFY_KEY = "repair-qualify"  # node_state: the drain reason while the node is held for qualification
# node_state (head's store): when repair's reboot cleared the node's XIDs (every one logged
# before), and when its GPU reset cleared the reset-class ones (a reboot-class XID, 79 and its
# kind, NVIDIA's catalog RESTART_BM, waits for a reboot); the job writes them into the node's own
# store as the XID check's acknowledgements (`acknowledge_xids`)
XID_ACK_KEY = "repair-xid-ack"
XID_RESET_ACK_KEY = "repair-xid-reset-ack"
QUALIFY_STRESS_MAX_S = 120  # a short stress: burnin.stress_seconds, at most this
POLL_S = 0.5
TESTS = ("stress", "allreduce-node", "kat", "links", "health")
REFUSED = "refused"  # failed_test of a job Slurm would not allocate: nothing ran on the node
# srun's words when slurmctld refuses the allocation outright (an unknown account or QOS, an
# account/partition pair with no association, a partition gone): the site's setup, not the node
REFUSED_BY_SLURM = "Unable to allocate resources"


@dataclass
class Qualification:
    node: str
    status: str  # pass | fail | error (the job did not run to a result)
    detail: str
    failed_test: str = ""
    job_id: str = ""
    tests: list[dict[str, Any]] = field(default_factory=list)
    duration_s: float = 0.0
    blamed: list[dict[str, str]] = field(default_factory=list)  # the GPUs a failed one names (blame.py)

    @property
    def passed(self) -> bool:
        return self.status == "pass"

    @property
    def refused(self) -> bool:
        """Slurm refused the job: the node was never tested, so this is no verdict on it."""
        return self.status == "error" and self.failed_test == REFUSED

    def to_json(self) -> dict[str, Any]:
        return {"node": self.node, "status": self.status, "detail": self.detail, "failed_test": self.failed_test,
                "job_id": self.job_id, "tests": self.tests, "duration_s": round(self.duration_s, 1),
                **({"blamed": self.blamed} if self.blamed else {})}


def events(stdout: str, kind: str) -> list[dict[str, Any]]:
    from ..burnin.sweep import job_events

    return job_events(stdout, kind)


def judge(node: str, stdout: str, stderr: str, returncode: int | None, on_error: str = "fail") -> Qualification:
    """The job's JSON lines -> a verdict. Every test must pass (a skip passes: torch or DCGM absent
    is the site's choice; an error fails when health.on_error is "fail")."""
    from ..burnin.model import is_failure

    started = events(stdout, "started")
    job_id = str(started[0].get("job_id", "")) if started else ""
    final = events(stdout, "result")
    tests = final[-1].get("tests", []) if final else events(stdout, "test")
    tests = [{k: v for k, v in t.items() if k != "event"} for t in tests]
    if not started:
        tail = (stderr.strip().splitlines() or ["no output"])[-1][:300]
        if REFUSED_BY_SLURM in stderr:
            return Qualification(node, "error", f"qualification job refused by Slurm: {tail}", REFUSED, job_id, tests)
        return Qualification(node, "error", f"qualification job did not start: {tail}", "job", job_id, tests)
    bad = [t for t in tests if is_failure(str(t.get("status", "error")), on_error)]
    if bad:
        return Qualification(node, "fail", f"{bad[0].get('test')}: {bad[0].get('detail', '')}",
                             str(bad[0].get("test", "")), job_id, tests)
    if not final:
        tail = (stderr.strip().splitlines() or [f"exit {returncode}"])[-1][:300]
        return Qualification(node, "error", f"qualification job ended without a result: {tail}", "job", job_id, tests)
    return Qualification(node, "pass", "; ".join(f"{t.get('test')} {t.get('status')}" for t in tests), "", job_id,
                         tests)


def against_baseline(site, store, node: str, tests: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The worst of the node's qualification metrics when one is slow against its profile's
    burn-in baseline (burnin/fleet.py, the site's burnin.straggler thresholds), else None: a
    straggler must not pass the gate that returned it, whatever its incident was. Nothing is
    judged with the site's fleet verdicts off or no baseline kept for the profile."""
    cfg = site.burnin.straggler
    group = site.node_group_of.get(node)
    if not cfg.enabled or group is None:
        return None
    from ..burnin import fleet, history

    baselines = history.baselines(store)
    if not baselines.get(group.profile):
        return None
    result = fleet.evaluate({"nodes": [{"node": node, "verdict": "pass", "tests": tests}], "pairs": []},
                            profile_of={node: group.profile}, unit_of={}, settings=fleet.Settings.from_site(cfg),
                            baselines=baselines)
    entry = result["nodes"].get(node) or {}
    return entry.get("worst") if entry.get("level") == "slow" else None


class Qualifier:
    """Runs qualification jobs from the head (see the module docstring)."""

    def __init__(self, site, backend, store, *, site_file: str | None = None,
                 progress: Callable[[str], None] = lambda m: None, log_dir: str | None = None):
        from ..site.accounts import slurm_time_seconds

        self.site = site
        self.backend = backend
        self.store = store
        self.site_file = site_file
        self.progress = progress
        self.user = getpass.getuser()
        self.prefix = site.burnin.reservation or "slurmadm-burnin"
        self.prefix = self.prefix.replace("burnin", "repair") if "burnin" in self.prefix else self.prefix + "-repair"
        self.log_dir = Path(log_dir or site.burnin.report_dir) / "repair"
        self.job_s = slurm_time_seconds(site.burnin.job_time_limit) or 3600
        self.start_s = slurm_time_seconds(site.burnin.start_timeout) or 600

    def reservation(self, node: str) -> str:
        return f"{self.prefix}-{node}"

    def job_name(self, node: str) -> str:
        return f"{JOB_PREFIX}.{node}"

    # ------------------------------------------------------------------ the job
    def spec(self, node: str, link_watch_s: float = 0.0) -> dict[str, Any]:
        from ..burnin.sweep import Sweep
        from . import incidents, ladder

        sweep = Sweep(self.site, backend=self.backend, store=self.store, site_file=self.site_file)
        spec = sweep.node_spec(node)
        stress_s = self.site.repair.qualify_stress_seconds or min(self.site.burnin.stress_seconds,
                                                                  QUALIFY_STRESS_MAX_S)
        spec.update(stress_seconds=stress_s, dcgm_level=0, kat=True, link_watch_s=link_watch_s)
        for key, name in ((XID_ACK_KEY, "xid_ack"), (XID_RESET_ACK_KEY, "xid_reset_ack")):
            try:
                ack = float(self.store.get_node_state(node, key) or 0)
            except ValueError:
                ack = 0.0
            if ack > 0:
                spec[name] = round(ack, 3)
        # the link flaps logged before repair's reboot, or before an admin's `repair clear` (the
        # cable replaced), are acknowledged as the XIDs are: the watch judges what comes after
        cleared = ladder.cleared_at(node, incidents.list_incidents(self.store, node=node))
        link_ack = max(float(spec.get("xid_ack") or 0), cleared)
        if link_ack > 0:
            spec["link_ack"] = round(link_ack, 3)
        return spec

    def request(self, node: str, link_watch_s: float = 0.0) -> sjobs.JobRequest:
        from ..burnin.select import burnin_partition
        from ..site import site_path

        b = self.site.burnin
        argv = [b.python or sys.executable, "-m", "slurmadm.repair.qualify", "--spec",
                json.dumps(self.spec(node, link_watch_s), sort_keys=True)]
        return sjobs.JobRequest(
            name=self.job_name(node), nodes=[node], argv=argv, time_limit=b.job_time_limit,
            partition=burnin_partition(self.site), qos=b.qos, account=b.account, reservation=self.reservation(node),
            tasks_per_node=1, gpus_per_node=self.site.node_profile(node).gpus.count,
            env={"SLURMADM_SITE": str(site_path(self.site_file).resolve())})

    # ------------------------------------------------------------------ recovery
    def leftovers(self, nodes: Sequence[str]) -> dict[str, str]:
        """node -> the drain reason of a qualification that did not finish."""
        out = {}
        for n in nodes:
            reason = self.store.get_node_state(n, QUALIFY_KEY)
            if reason:
                out[n] = reason
        return out

    def recover(self, nodes: Sequence[str]) -> list[str]:
        """Undo what an interrupted qualification left: cancel its job, drain the node again with
        its old reason, delete its reservation. Returns the nodes restored."""
        left = self.leftovers(nodes)
        if not left:
            return []
        mine = {j.name: j.job_id for j in sjobs.queued_jobs(user=self.user) if j.name.startswith(JOB_PREFIX + ".")}
        for node, reason in left.items():
            job = mine.get(self.job_name(node))
            if job:
                sjobs.cancel([job])
                deadline = time.monotonic() + 120
                while time.monotonic() < deadline and any(
                        j.job_id == job for j in sjobs.queued_jobs(user=self.user)):
                    time.sleep(POLL_S)
            n = self.backend.nodes([node])[0]
            if not n.drained:
                self.backend.drain([node], reason)
            if sjobs.reservation(self.reservation(node)) is not None:
                sjobs.delete_reservation(self.reservation(node))
            self.store.delete_node_state(node, QUALIFY_KEY)
            self.store.audit("repair.qualify.recover", node, "qualification interrupted: node drained again, "
                             "reservation deleted", was=reason, job=job or "")
        return list(left)

    # ------------------------------------------------------------------ one node
    def qualify(self, node: NodeInfo, on_error: str = "fail", *, link_watch_s: float = 0.0) -> Qualification:
        """Hold `node` (drained by repair, no job) in its own reservation, run the job, drain it
        again with its reason, delete the reservation; the verdict. `link_watch_s`: how long the
        job watches the node's links at least (a node repaired for an HCA)."""
        name, prior = node.name, node.reason
        res = self.reservation(name)
        t0 = time.monotonic()
        request = self.request(name, link_watch_s)
        if sjobs.reservation(res) is None:
            sjobs.create_reservation(res, [name], users=self.user, flags=["MAINT", "IGNORE_JOBS"])
        self.store.audit("repair.reservation.create", res, f"qualification of {name}", nodes=name)
        try:
            self.store.set_node_state(name, QUALIFY_KEY, prior)  # first: a crash from here re-drains it
            self.backend.resume([name])
            self.progress(f"{name}: qualification job in reservation {res}")
            job = sjobs.SrunJob(request, self.log_dir)
            deadline = time.monotonic() + self.job_s + self.start_s + 60
            try:
                while job.poll() is None:
                    if time.monotonic() >= deadline or (
                            time.monotonic() - t0 > self.start_s and '"event": "started"' not in job.stdout()):
                        sjobs.stop_all([job])
                        break
                    time.sleep(POLL_S)
            except BaseException:
                sjobs.stop_all([job])
                raise
            verdict = judge(name, job.stdout(), job.stderr(), job.poll(), on_error)
        finally:
            try:
                now = self.backend.nodes([name])[0]
                if not now.drained:
                    self.backend.drain([name], prior)
            finally:
                sjobs.delete_reservation(res)
                self.store.audit("repair.reservation.delete", res, f"qualification of {name} ended")
                self.store.delete_node_state(name, QUALIFY_KEY)
        verdict.duration_s = time.monotonic() - t0
        slow = against_baseline(self.site, self.store, name, verdict.tests) if verdict.passed else None
        if slow is not None:
            from ..burnin.fleet import describe

            verdict.status, verdict.failed_test = "fail", "straggler"
            verdict.detail = f"straggler: {describe(slow)}"
        if verdict.status != "pass":
            from . import blame, incidents

            verdict.blamed = blame.parts(verdict.tests, incidents.gpu_inventory(self.store, name))
        return verdict


# ---------------------------------------------------------------------- the job (on the node)


def kat_test():
    """The known-answer test on this node's devices, as the burn-in's node job runs it."""
    from ..burnin.node import kat_test as known_answer_test

    return known_answer_test()


def acknowledge_xids(node: str, ack: float, reset_ack: float = 0.0, link_ack: float = 0.0) -> dict[str, Any]:
    """On the node: what repair's reboot (`ack`: every XID line before it) or GPU reset
    (`reset_ack`: the reset-class lines before it) cleared is acknowledged where this node's
    health reads it (its own store, `health.xid-ack` / `health.xid-reset-ack`, never moved back;
    `health.xid-held` 0: the drain is repair's now, and no admin's resume is to be read into its
    end); `link_ack` likewise the link flaps logged before it (`health.ib-ack`, `health.ib-held`
    0). The event line."""
    from ..health.checks import XID_ACK_KEY as HEALTH_ACK
    from ..health.checks import XID_RESET_ACK_KEY as HEALTH_RESET_ACK
    from ..health.engine import HELD, XID_HELD_KEY
    from ..health.record import NodeState
    from ..site import load_site
    from ..store import Store

    ib_held, ib_ack = HELD["infiniband"]
    try:
        site = load_site()
        with Store.for_site(site, node=node) as store:
            state = NodeState(store, node)
            for key, value in ((HEALTH_ACK, ack), (HEALTH_RESET_ACK, reset_ack), (ib_ack, link_ack)):
                if value <= 0:
                    continue
                try:
                    before = float(state.get(key) or 0)
                except ValueError:
                    before = 0.0
                state.set(key, f"{max(before, value):.3f}")
            if ack > 0 or reset_ack > 0:
                state.set(XID_HELD_KEY, "0")
            if link_ack > 0:
                state.set(ib_held, "0")
            state.flush()
            path = site.store.local_path(node)
    except Exception as exc:  # noqa: BLE001 - the tests still run; the health test says what it finds
        return {"event": "xid-ack", "ok": False, "ts": ack or reset_ack or link_ack,
                "detail": f"{type(exc).__name__}: {' '.join(str(exc).split())}"[:300]}
    what = "; ".join(filter(None, [f"XID lines up to {ack:.3f}" if ack > 0 else "",
                                   f"reset-class XID lines up to {reset_ack:.3f}" if reset_ack > 0 else "",
                                   f"link flaps up to {link_ack:.3f}" if link_ack > 0 else ""]))
    return {"event": "xid-ack", "ok": True, "ts": ack or reset_ack or link_ack,
            "detail": f"{what} acknowledged in {path}"}


def main(argv: Sequence[str] | None = None) -> int:
    from ..burnin import node as bnode
    from ..burnin import stress
    from ..burnin.model import TestResult
    from ..health.hook import local_node

    ap = argparse.ArgumentParser(prog="python -m slurmadm.repair.qualify")
    ap.add_argument("--spec", required=True, help="JSON: what to run (written by `repair run`)")
    spec = json.loads(ap.parse_args(argv).spec)
    node = local_node(None)
    bnode._emit({"event": "started", "node": node, "job_id": os.environ.get("SLURM_JOB_ID", ""), "pid": os.getpid()})
    started, counters = time.time(), bnode.read_counters(spec)
    spec.setdefault("node", node)
    ack = (acknowledge_xids(node, float(spec.get("xid_ack") or 0), float(spec.get("xid_reset_ack") or 0),
                            float(spec.get("link_ack") or 0))
           if spec.get("xid_ack") or spec.get("xid_reset_ack") or spec.get("link_ack") else None)
    if ack is not None:
        bnode._emit(ack)
    steps = [
        ("stress", lambda: stress.stress(spec["stress_seconds"], cpu_only=spec["collective"] == "gloo")),
        ("allreduce-node", lambda: bnode.single_node_allreduce(spec)),
        ("kat", kat_test),
        # the link watch before the health suite, as in burn-in's job: a link that went down while
        # watched fails as `links: ... mlx5_3 2x`, not as the infiniband check's flap count
        ("links", lambda: bnode.links_test(spec, started, counters)),
        ("health", lambda: bnode.health_suite(spec["step_timeout"])),
    ]
    tests = []
    standin = bnode.stand_in_gpus(node)  # the dev cluster's stand-in straggler and GPU rates, as burn-in's job
    for name, step in steps:
        start = time.monotonic()
        try:
            result = step()
        except Exception as exc:  # noqa: BLE001 - an unexpected failure is this test's error
            result = TestResult(name, "error", f"{type(exc).__name__}: {' '.join(str(exc).split())}"[:400])
        result.duration_s = result.duration_s or time.monotonic() - start
        result = bnode.as_stand_in(result, standin)
        if name == "health" and ack is not None and not ack["ok"] and result.status != "pass":
            result.detail = f"{result.detail} (repair's XID acknowledgement was not written: {ack['detail']})"
        tests.append(result)
        bnode._emit({"event": "test", **result.to_json()})
    bnode._emit({"event": "result", "node": node, "tests": [t.to_json() for t in tests]})
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except SlurmadmError as exc:
        print(f"slurmadm.repair.qualify: error: {exc}", file=sys.stderr)
        sys.exit(exc.exit_code if hasattr(exc, "exit_code") else 1)
