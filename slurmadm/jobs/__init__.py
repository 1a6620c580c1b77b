"""`slurmadm jobs idle`: running jobs that keep their GPUs idle, or GPUs used without an allocation.

Data comes from Prometheus (the node exporters' `slurmadm_gpu_job_idle_seconds`, judged on every
sample as Princeton's job_defense_shield does: a GPU is idle only while every sample is at or under
monitor.idle_util_percent) and one `squeue` for the jobs' batch flag and partition (interactive
jobs and monitor.idle_exempt_partitions are exempt). The site's policy (monitor.idle_action):
report only; mail the user once; or mail, then cancel after monitor.idle_cancel_after_minutes
more. Actions run only with --act, show their plan with --dry-run, and are recorded in the audit
trail; the warning time lives in the store so a re-run (cron) carries on where the last stopped.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Protocol

from ..errors import UnreachableError

WARNED_KEY = "monitor.idle.warned"  # node_state row of node "job:<id>": unix time of the warning


@dataclass
class IdleJob:
    job_id: str
    user: str
    account: str
    nodes: list[str]
    gpus: int
    idle_minutes: float
    mean_util_percent: float | None
    partition: str = ""
    interactive: bool = False
    exempt: str = ""  # why the policy leaves it alone
    action: str = "report"  # report | mail | cancel | none
    why: str = ""

    def to_json(self) -> dict:
        return asdict(self)


@dataclass
class UnallocatedUse:
    node: str
    gpu: str


@dataclass
class Findings:
    jobs: list[IdleJob] = field(default_factory=list)
    unallocated: list[UnallocatedUse] = field(default_factory=list)


class Metrics(Protocol):
    def query(self, expr: str) -> list[dict]: ...


class JobFacts(Protocol):
    # id -> (batch, partition, state[, user, account])
    def facts(self, job_ids: list[str]) -> dict[str, tuple]: ...


class PrometheusMetrics:
    def __init__(self, url: str):
        self.url = url.rstrip("/")

    def query(self, expr: str) -> list[dict]:
        from ..monitor.stack import prom_query

        return prom_query(self.url, expr)


class SqueueFacts:
    def __init__(self, env=None, timeout: float = 30.0):
        self.env, self.timeout = env, timeout

    def facts(self, job_ids: list[str]) -> dict[str, tuple[bool, str, str]]:
        from ..proc import run

        if not job_ids:
            return {}
        out = run(["squeue", "-h", "-a", "-j", ",".join(job_ids), "-O",
                   "JobID:|,BatchFlag:|,Partition:|,State:|,UserName:|,Account:"],
                  env=self.env, timeout=self.timeout, check=False).stdout
        got = {}
        for line in out.splitlines():
            parts = [p.strip() for p in line.split("|")]
            if len(parts) == 6:  # (batch, partition, state, user, account)
                got[parts[0]] = (parts[1] == "1", parts[2], parts[3].upper(), parts[4], parts[5])
        return got


def dcgm_queries(site, metrics: Metrics) -> tuple[list[dict], list[dict], list[dict]]:
    """With monitor.gpu_source "dcgm": the idle clock, GPU count and mean utilisation of each job
    from dcgm-exporter's DCGM_FI_DEV_GPU_UTIL and its `hpc_job` label (the prolog's per-GPU job
    files), in the shapes find() reads. A job's GPUs on a node are idle since the later of its
    first sample and its last sample above monitor.idle_util_percent (a subquery over a lookback
    long enough for the idle period plus the cancel warning)."""
    m = site.monitor
    thr = f"{m.idle_util_percent:g}"
    sel = 'DCGM_FI_DEV_GPU_UTIL{hpc_job!=""}'
    look = f"{int(m.idle_minutes + m.idle_cancel_after_minutes) + 60}m"
    by = "by (Hostname, hpc_job)"
    now = time.time()
    first = {(r["metric"].get("Hostname", ""), r["metric"].get("hpc_job", "")): float(r["value"][1]) for r in
             metrics.query(f"min {by} (min_over_time(timestamp({sel})[{look}:15s]))")}
    busy = {(r["metric"].get("Hostname", ""), r["metric"].get("hpc_job", "")): float(r["value"][1]) for r in
            metrics.query(f"max {by} (max_over_time(timestamp({sel} > {thr})[{look}:15s]))")}
    idle, count = [], []
    for r in metrics.query(f"count {by} ({sel})"):
        key = (r["metric"].get("Hostname", ""), r["metric"].get("hpc_job", ""))
        since = max(first.get(key, now), busy.get(key, 0.0))
        lab = {"jobid": key[1], "node": key[0], "user": "", "account": ""}
        idle.append({"metric": lab, "value": [now, str(max(0.0, now - since))]})
        count.append({"metric": lab, "value": r["value"]})
    window = max(1, int(m.idle_minutes))
    util = [{"metric": {"jobid": r["metric"].get("hpc_job", "")}, "value": r["value"]} for r in
            metrics.query(f"avg by (hpc_job) (avg_over_time({sel}[{window}m]))")]
    return idle, count, util


def find(site, metrics: Metrics, jobs: JobFacts) -> Findings:
    m = site.monitor
    window = max(1, int(m.idle_minutes))
    if m.gpu_source == "dcgm":
        idle, count, util = dcgm_queries(site, metrics)
    else:
        idle = metrics.query("min by (jobid, user, account, node) (slurmadm_gpu_job_idle_seconds)")
        count = metrics.query("count by (jobid, node) (slurmadm_gpu_job_idle_seconds)")
        util = metrics.query(f'avg by (jobid) (avg_over_time(slurmadm_gpu_utilization_percent{{jobid!=""}}[{window}m]))')
    gpus_of = {(r["metric"].get("jobid", ""), r["metric"].get("node", "")): int(float(r["value"][1])) for r in count}
    util_of = {r["metric"].get("jobid", ""): float(r["value"][1]) for r in util}
    by_job: dict[str, IdleJob] = {}
    for r in idle:
        lab = r["metric"]
        jid = lab.get("jobid", "")
        if not jid:
            continue
        minutes = float(r["value"][1]) / 60.0
        job = by_job.get(jid)
        if job is None:
            job = by_job[jid] = IdleJob(jid, lab.get("user", ""), lab.get("account", ""), [], 0, minutes,
                                        util_of.get(jid))
        job.nodes.append(lab.get("node", ""))
        job.gpus += gpus_of.get((jid, lab.get("node", "")), 0)
        job.idle_minutes = min(job.idle_minutes, minutes)  # idle only as long as its least idle node
    found = [j for j in by_job.values() if j.idle_minutes >= m.idle_minutes]
    facts = jobs.facts([j.job_id for j in found])
    out = Findings()
    for j in sorted(found, key=lambda j: -j.idle_minutes):
        j.nodes.sort()
        batch, part, state, *who = facts.get(j.job_id, (True, "", ""))
        if facts and state and state != "RUNNING":
            continue  # ended since the last scrape
        if who and not j.user:  # dcgm-exporter labels carry the job id only
            j.user, j.account = who[0], who[1]
        j.partition, j.interactive = part, not batch
        if m.idle_exempt_interactive and j.interactive:
            j.exempt = "interactive job"
        elif part and part in m.idle_exempt_partitions:
            j.exempt = f"partition {part} is exempt"
        out.jobs.append(j)
    for r in metrics.query("max by (node, gpu) (slurmadm_gpu_unallocated_in_use) == 1"):
        out.unallocated.append(UnallocatedUse(r["metric"].get("node", ""), r["metric"].get("gpu", "")))
    return out


def plan(site, findings: Findings, warned_at: Callable[[str], float | None], now: float) -> None:
    """Set each job's action under the site's policy (pure; `warned_at(job)` reads the store)."""
    m = site.monitor
    for j in findings.jobs:
        if j.exempt:
            j.action, j.why = "none", j.exempt
            continue
        if m.idle_action == "report":
            j.action, j.why = "report", "site policy: report only"
            continue
        warned = warned_at(j.job_id)
        if warned is None:
            j.action, j.why = "mail", f"idle {j.idle_minutes:.0f} min"
            if m.idle_action == "cancel":
                j.why += f"; cancelled in {m.idle_cancel_after_minutes:g} min if it stays idle"
        elif m.idle_action == "cancel" and now - warned >= m.idle_cancel_after_minutes * 60 \
                and j.idle_minutes >= m.idle_minutes + m.idle_cancel_after_minutes:
            j.action, j.why = "cancel", (f"idle {j.idle_minutes:.0f} min, warned {(now - warned) / 60:.0f} min ago")
        else:
            j.action, j.why = "none", "already warned"


class Actuator(Protocol):
    def mail(self, user: str, subject: str, body: str) -> None: ...

    def cancel(self, job_id: str) -> None: ...


class SlurmActuator:
    def __init__(self, mail_command: str, env=None):
        self.mail_command, self.env = mail_command, env

    def mail(self, user: str, subject: str, body: str) -> None:
        from ..proc import run

        proc = run([self.mail_command, "-s", subject, user], input=body, env=self.env, timeout=30, check=False)
        if proc.returncode != 0:
            raise UnreachableError(f"{self.mail_command}: exit {proc.returncode}: {proc.stderr.strip()[:200]}")

    def cancel(self, job_id: str) -> None:
        from ..proc import run

        run(["scancel", job_id], env=self.env, timeout=30)


def act(site, findings: Findings, store, actuator: Actuator, *, reason: str) -> list[str]:
    """Carry out the planned actions; returns problems (one line each)."""
    problems = []
    for j in findings.jobs:
        if j.action not in ("mail", "cancel"):
            continue
        target = f"job:{j.job_id}"
        try:
            if j.action == "mail":
                body = (f"Your job {j.job_id} ({j.account}) has kept {j.gpus} GPU(s) on {','.join(j.nodes)} idle for "
                        f"{j.idle_minutes:.0f} minutes (mean utilisation "
                        f"{0 if j.mean_util_percent is None else j.mean_util_percent:.1f}%). {j.why}.\n")
                actuator.mail(j.user, f"[slurmadm] job {j.job_id}: idle GPUs", body)
                store.set_node_state(target, WARNED_KEY, f"{time.time():.0f}")
                store.audit("jobs.idle-warn", target, reason, user=j.user, idle_minutes=round(j.idle_minutes, 1))
            else:
                actuator.cancel(j.job_id)
                store.audit("jobs.idle-cancel", target, reason, user=j.user, why=j.why)
        except Exception as exc:  # noqa: BLE001 - one job's failure must not stop the others
            problems.append(f"job {j.job_id}: {j.action}: {exc}")
    return problems


def warned_reader(store) -> Callable[[str], float | None]:
    def read(job_id: str) -> float | None:
        v = store.get_node_state(f"job:{job_id}", WARNED_KEY)
        try:
            return float(v) if v is not None else None
        except ValueError:
            return None

    return read
