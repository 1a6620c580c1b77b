"""The head exporter's collector: the cluster as Slurm sees it, in one read per interval.

Per read: one node listing (the Slurm adapter: `sinfo --json` on 22.05, `scontrol --json show
node` from 23.11), one `squeue` (a narrow text format, every job), one `sshare`. The parse and the
aggregation are pure (`aggregate`), so a 10,000-node, 50,000-job cluster is measured in
bench/exporter.py. The Slurm exporters people use today repeat squeue dumps per scrape and take
minutes at 20,000 nodes; here a scrape between reads answers from the cache, and the collector
reports its own read duration and errors.
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Protocol

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from ..errors import UnreachableError
from ..slurm.model import NodeInfo
from ..slurm.ownership import OWNER_PREFIX, reason_check_id
from ..slurm.parse import BIG, gc_paused, json_loads
from .cache import CachedRead
from .node import source_metrics
from .storefacts import DRIFT_CHECK, LocalStoreFacts, StoreFacts  # noqa: F401 - DRIFT_CHECK re-exported

# squeue -O "Field:|": no width (so no padding and no truncation), "|" after each field; the job
# name last, as it is the one field that may itself hold a "|".
SQUEUE_FIELDS = ("JobID", "State", "Reason", "UserName", "Account", "Partition", "BatchFlag", "TimeUsed",
                 "tres-alloc", "NodeList", "Name")
SQUEUE_ARGV = ["squeue", "-h", "-a", "-O",
               ",".join(f"{f}:|" if i < len(SQUEUE_FIELDS) - 1 else f"{f}:" for i, f in enumerate(SQUEUE_FIELDS))]




@dataclass(slots=True)
class Job:
    job_id: str
    state: str
    reason: str
    user: str
    account: str
    partition: str
    batch: bool
    gpus: int
    nodes: str
    name: str


_GPU_TRES = re.compile(r"(?:^|,)gres/gpu=(\d+)")  # untyped gres/gpu (typed gres/gpu:b200=N is a subset)
_SIMPLE_RANGE = re.compile(r"^([A-Za-z0-9._-]*)\[([0-9,\-]+)\]$")


def parse_squeue(text: str) -> list[Job]:
    """Rows of SQUEUE_ARGV's output; rows with the wrong shape are skipped. A cluster's jobs share
    a few hundred distinct TRES strings: each one's GPU count is read once."""
    with gc_paused(len(text) > BIG):
        return _parse_squeue(text)


def _parse_squeue(text: str) -> list[Job]:
    jobs: list[Job] = []
    append = jobs.append
    n = len(SQUEUE_FIELDS)
    gpus_of: dict[str, int] = {}
    for line in text.splitlines():
        parts = line.split("|", n - 1)
        if len(parts) != n:
            continue
        jid, state, reason, user, account, part, batch, _used, tres, nodes, name = parts  # "Field:|": no padding
        gpus = gpus_of.get(tres)
        if gpus is None:
            m = _GPU_TRES.search(tres)
            gpus = gpus_of[tres] = int(m.group(1)) if m else 0
        append(Job(jid.strip(), state, reason, user, account, part, batch == "1", gpus, nodes, name.rstrip()))
    return jobs


# Job base states (Slurm's job_state_codes); 23.11+ JSON lists the base state with flags
# (["PENDING", "REQUEUED"], ["RUNNING", "COMPLETING"]).
JOB_BASE_STATES = frozenset({"PENDING", "RUNNING", "SUSPENDED", "COMPLETED", "CANCELLED", "FAILED", "TIMEOUT",
                             "NODE_FAIL", "PREEMPTED", "BOOT_FAIL", "DEADLINE", "OUT_OF_MEMORY"})


def jobs_from_squeue_json(text: str, command: str = "squeue --json") -> list[Job]:
    """`squeue --json` as the same Jobs as parse_squeue: 22.05 (openapi v0.0.38: `job_state` a
    string) and 24.11 (data_parser v0.0.42: `job_state` a list of the base state and flags,
    numbers wrapped as {set, infinite, number}); real samples of both in tests/fixtures/slurm.
    The head reads the narrow `squeue -O` rows instead (a few hundred bytes a job against
    several KiB: bench/exporter.py measures both); this reads a dump an admin or a tool made."""
    with gc_paused(len(text) > BIG):
        return _jobs_from_squeue_json(text, command)


def _jobs_from_squeue_json(text: str, command: str) -> list[Job]:
    try:
        data = json_loads(text)
    except ValueError as exc:
        raise UnreachableError(f"{command}: output is not JSON ({exc})") from None
    rows = data.get("jobs") if isinstance(data, dict) else None
    if not isinstance(rows, list):
        raise UnreachableError(f"{command}: unexpected JSON (no 'jobs' list)")
    jobs = []
    gpus_of: dict[str, int] = {}
    try:
        for j in rows:
            state = j.get("job_state")
            if isinstance(state, list):
                state = next((s for s in state if s in JOB_BASE_STATES), state[0] if state else "")
            tres = j.get("tres_alloc_str") or j.get("tres_req_str") or ""  # pending: what it asks for
            gpus = gpus_of.get(tres)
            if gpus is None:
                m = _GPU_TRES.search(tres)
                gpus = gpus_of[tres] = int(m.group(1)) if m else 0
            nodes = j.get("nodes") or ""
            if isinstance(nodes, dict):  # job_resources-style {"list": ...}
                nodes = nodes.get("list") or ""
            jobs.append(Job(str(j.get("job_id")), str(state or ""), str(j.get("state_reason") or ""),
                            str(j.get("user_name") or ""), str(j.get("account") or ""), str(j.get("partition") or ""),
                            bool(j.get("batch_flag")), gpus, str(nodes), str(j.get("name") or "")))
    except (AttributeError, TypeError) as exc:
        raise UnreachableError(f"{command}: unexpected JSON ({exc})") from None
    return jobs


def expand_nodes(hostlist: str, cache: dict[str, list[str]]) -> list[str]:
    """A job's node list as names: `b200-[001-004,007]` folded by hand (zero padding kept), anything
    fancier through ClusterShell; cached, as many jobs share one list."""
    got = cache.get(hostlist)
    if got is not None:
        return got
    if "[" not in hostlist and "," not in hostlist:
        got = [hostlist]
    else:
        m = _SIMPLE_RANGE.match(hostlist)
        if m:
            prefix, body = m.groups()
            got = []
            for item in body.split(","):
                lo, _, hi = item.partition("-")
                width = len(lo)
                got.extend(f"{prefix}{i:0{width}d}" for i in range(int(lo), int(hi or lo) + 1))
        else:
            from ..hostlist import expand

            got = expand(hostlist)
    cache[hostlist] = got
    return got


@dataclass(frozen=True)
class Snapshot:
    nodes: list[NodeInfo]
    jobs: list[Job]
    gpu_minutes_used: dict[str, float]  # account -> GrpTRESRaw gres/gpu (what the budget is charged)


class HeadSource(Protocol):
    def read(self) -> Snapshot: ...


class SlurmHead:
    """One node listing, one squeue and one sshare through the Slurm CLI."""

    def __init__(self, backend, *, env: Mapping[str, str] | None = None, timeout: float = 60.0):
        self.backend = backend
        self.env = dict(env) if env is not None else None
        self.timeout = timeout

    def read(self) -> Snapshot:
        from ..proc import run
        from ..slurm.accounting import JobReader, gpus_of

        nodes = self.backend.nodes()
        jobs = parse_squeue(run(SQUEUE_ARGV, timeout=self.timeout, env=self.env).stdout)
        used: dict[str, float] = {}
        try:
            for row in JobReader(env=self.env, timeout=self.timeout).shares():
                if not row.user and "gres/gpu" in row.grp_tres_raw:
                    used[row.account] = float(gpus_of(row.grp_tres_raw))
        except Exception:  # noqa: BLE001 - no slurmdbd (accounting_storage=none): no usage, not no metrics
            pass
        return Snapshot(nodes, jobs, used)


def owner_of(node: NodeInfo) -> str:
    if not node.drained:
        return ""
    return "slurmadm" if node.reason.startswith(OWNER_PREFIX) else "admin"


def reason_key(node: NodeInfo) -> str:
    """A bounded label for a drain reason: slurmadm's check id, or the admin's text cut short
    (free text would make one series per wording)."""
    if node.reason.startswith(OWNER_PREFIX):
        return reason_check_id(node.reason) or "slurmadm"
    text = " ".join(node.reason.split())
    return text[:40] if text else "none"


def state_of(node: NodeInfo) -> str:
    if "DRAIN" in node.flags:
        busy = node.state not in ("IDLE", "DOWN") or "COMPLETING" in node.flags
        return "draining" if busy else "drained"
    if node.state == "DOWN" or "NOT_RESPONDING" in node.flags:
        return "down"
    if "MAINTENANCE" in node.flags or "RESERVED" in node.flags:
        return "reserved"
    if node.state == "IDLE" and "COMPLETING" in node.flags:  # COMPLETING and PLANNED are flags (slurm.h)
        return "completing"
    if node.state == "IDLE" and "PLANNED" in node.flags:
        return "planned"
    return node.state.lower()


@dataclass
class Aggregate:
    nodes_by_state: Counter = field(default_factory=Counter)  # (partition, state)
    drains: Counter = field(default_factory=Counter)  # (owner, reason)
    gpus: Counter = field(default_factory=Counter)  # (partition, status) status: allocated idle drained down
    pending: Counter = field(default_factory=Counter)  # (partition, reason)
    running: Counter = field(default_factory=Counter)  # partition
    project_gpus: Counter = field(default_factory=Counter)  # account -> GPUs held by running jobs
    node_state: dict[str, tuple[str, str, str]] = field(default_factory=dict)  # node -> (state, owner, reason)


def aggregate(snap: Snapshot) -> Aggregate:
    """Every count the head exports, in one pass over the jobs and one over the nodes (plain dict
    updates and a cache per node list and per gres string: 50,000 jobs must stay well under 1 s)."""
    pending: dict = {}
    running: dict = {}
    project: dict = {}
    alloc_gpus: dict[str, int] = {}  # node -> GPUs held by running jobs
    per_list: dict[str, int] = {}  # a multi-node list -> GPUs per node its running jobs hold
    sizes: dict[str, int] = {}  # a multi-node list -> its node count
    names_of: dict[str, list[str]] = {}
    for job in snap.jobs:
        state = job.state
        if state == "PENDING":
            key = (job.partition, job.reason or "None")
            pending[key] = pending.get(key, 0) + 1
        elif state == "RUNNING":
            part, acct, gpus, nodes = job.partition, job.account, job.gpus, job.nodes
            running[part] = running.get(part, 0) + 1
            project[acct] = project.get(acct, 0) + gpus
            if gpus and nodes:
                if "[" not in nodes and "," not in nodes:  # one node: most jobs
                    alloc_gpus[nodes] = alloc_gpus.get(nodes, 0) + gpus
                else:
                    size = sizes.get(nodes)
                    if size is None:
                        size = sizes[nodes] = len(expand_nodes(nodes, names_of)) or 1
                    per_list[nodes] = per_list.get(nodes, 0) + gpus // size
    for nodes, per in per_list.items():  # each distinct node list expanded once
        for n in names_of[nodes]:
            alloc_gpus[n] = alloc_gpus.get(n, 0) + per
    agg = Aggregate(pending=Counter(pending), running=Counter(running), project_gpus=Counter(project))
    by_state: dict = {}
    drains: dict = {}
    gpus: dict = {}
    gpus_of: dict[str, int] = {}
    node_state = agg.node_state
    for node in snap.nodes:
        st = state_of(node)
        owner = owner_of(node)
        reason = reason_key(node) if owner else ""
        node_state[node.name] = (st, owner, reason)
        if owner:
            drains[(owner, reason)] = drains.get((owner, reason), 0) + 1
        total = gpus_of.get(node.gres)
        if total is None:
            total = gpus_of[node.gres] = node.gpus
        used = min(alloc_gpus.get(node.name, 0), total)
        if st == "down":
            split = (("down", total),)
        elif owner or st == "drained":
            split = (("allocated", used), ("drained", total - used))
        else:
            split = (("allocated", used), ("idle", total - used))
        for part in node.partitions or ("",):
            by_state[(part, st)] = by_state.get((part, st), 0) + 1
            for status, n in split:
                gpus[(part, status)] = gpus.get((part, status), 0) + n
    agg.nodes_by_state, agg.drains, agg.gpus = Counter(by_state), Counter(drains), Counter(gpus)
    return agg


class HeadCollector:
    def __init__(self, *, site, source: HeadSource, cache_s: float, deadline_s: float, store_path: str = "",
                 store: StoreFacts | None = None, cost=None, cost_s: float = 600.0, replaced=()):
        """`store`: where the records come from (storefacts.for_site: the central store when the
        site has one); default: the SQLite file at `store_path`. `cost`: a function returning the
        day's GPU-hour figures (report/reliability.py today_figures), read every `cost_s`.
        `replaced`: the series Slurm exports itself (slurmseries.replaced), left out here."""
        self.site = site
        self.replaced = tuple(replaced)
        self._skip = {r.series for r in self.replaced if not r.status}
        self._skip_status = {r.status for r in self.replaced if r.series == "slurmadm_partition_gpus" and r.status}
        self.mode = "head"
        self.read = CachedRead("slurm", source.read, max_age_s=cache_s, deadline_s=deadline_s)
        self.store = store if store is not None else LocalStoreFacts(store_path)
        self.extra = CachedRead("store", self._store_read, max_age_s=cache_s, deadline_s=deadline_s)
        self._aggregated: tuple[Snapshot | None, Aggregate | None] = (None, None)
        self.cost = CachedRead("cost", cost, max_age_s=cost_s, deadline_s=deadline_s) if cost else None

    def describe(self) -> list[Metric]:
        return []

    def _store_read(self) -> dict:
        """Last burn-in verdict per node, latest health verdicts per node, fleet drift counts and
        (central store) arrivals, when the records have them."""
        return self.store.read()

    def collect(self) -> Iterator[Metric]:
        started = time.monotonic()
        reading = self.read.get()
        extra = self.extra.get()
        if reading.value is not None:
            if self._aggregated[0] is not reading.value:  # a scrape between reads reuses the counts
                self._aggregated = (reading.value, aggregate(reading.value))
            yield from self._metrics(reading.value, self._aggregated[1])
        if extra.value is not None:
            yield from self._extra(extra.value)
        if self.cost is not None:
            yield from cost_metrics(self.cost.get())
        yield from source_metrics({"slurm": self.read, "store": self.extra}, {"slurm": reading, "store": extra})
        d = GaugeMetricFamily("slurmadm_exporter_scrape_duration_seconds", "This scrape's collection time",
                              labels=["mode"])
        d.add_metric(["head"], time.monotonic() - started)
        yield d

    def _metrics(self, snap: Snapshot, agg: Aggregate) -> Iterator[Metric]:
        skip = self._skip
        for f in self._families(snap, agg):
            if f.name not in skip:
                yield f

    def _families(self, snap: Snapshot, agg: Aggregate) -> Iterator[Metric]:
        f = GaugeMetricFamily("slurmadm_nodes", "Nodes by partition and state", labels=["partition", "state"])
        for (part, st), n in sorted(agg.nodes_by_state.items()):
            f.add_metric([part, st], n)
        yield f
        f = GaugeMetricFamily("slurmadm_nodes_drained", "Drained nodes by owner (slurmadm or admin) and reason "
                              "(slurmadm's check id, or the admin's text cut to 40 characters)",
                              labels=["owner", "reason"])
        for (owner, reason), n in sorted(agg.drains.items()):
            f.add_metric([owner, reason], n)
        yield f
        f = GaugeMetricFamily("slurmadm_node_state", "One series per node: its state, drain owner and reason",
                              labels=["node", "state", "owner", "reason"])
        for name, (st, owner, reason) in sorted(agg.node_state.items()):
            f.add_metric([name, st, owner, reason], 1)
        yield f
        f = GaugeMetricFamily("slurmadm_node_partition_info", "One series per node and partition it is in, "
                              "value 1 (join on node for per-partition sums)", labels=["node", "partition"])
        for node in sorted(snap.nodes, key=lambda n: n.name):
            for part in node.partitions:
                f.add_metric([node.name, part], 1)
        yield f
        f = GaugeMetricFamily("slurmadm_partition_gpus", "GPUs per partition: allocated, idle, drained, down",
                              labels=["partition", "status"])
        parts = sorted({p for p, _ in agg.gpus} | {p.name for p in self.site.partitions})
        for part in parts:
            for status in ("allocated", "idle", "drained", "down"):
                if status not in self._skip_status:
                    f.add_metric([part, status], agg.gpus.get((part, status), 0))
        yield f
        f = GaugeMetricFamily("slurmadm_jobs_pending", "Pending jobs by partition and reason",
                              labels=["partition", "reason"])
        for (part, reason), n in sorted(agg.pending.items()):
            f.add_metric([part, reason], n)
        yield f
        f = GaugeMetricFamily("slurmadm_jobs_running", "Running jobs by partition", labels=["partition"])
        for part, n in sorted(agg.running.items()):
            f.add_metric([part], n)
        yield f
        in_use = GaugeMetricFamily("slurmadm_project_gpus_in_use", "GPUs held by the project's running jobs",
                                   labels=["project"])
        quota = GaugeMetricFamily("slurmadm_project_gpu_quota", "The project's concurrent GPU quota (site)",
                                  labels=["project"])
        # GPU time in seconds (Prometheus base units: `promtool check metrics` refuses `_hours`)
        used = GaugeMetricFamily("slurmadm_project_gpu_used_seconds", "GPU time charged to the budget (sshare), "
                                 "in GPU-seconds", labels=["project"])
        budget = GaugeMetricFamily("slurmadm_project_gpu_budget_seconds", "The project's GPU-time budget (site "
                                   "gpu_hours), in GPU-seconds", labels=["project"])
        for proj in self.site.projects:
            in_use.add_metric([proj.name], agg.project_gpus.get(proj.name, 0))
            if proj.gpu_quota is not None:
                quota.add_metric([proj.name], proj.gpu_quota)
            if proj.name in snap.gpu_minutes_used:
                used.add_metric([proj.name], snap.gpu_minutes_used[proj.name] * 60.0)
            if proj.gpu_hours is not None:
                budget.add_metric([proj.name], proj.gpu_hours * 3600.0)
        yield from (in_use, quota, used, budget)

    def _extra(self, extra: dict) -> Iterator[Metric]:
        if extra["burnin"]:
            ts = GaugeMetricFamily("slurmadm_burnin_last_timestamp_seconds", "The node's last burn-in verdict",
                                   labels=["node", "verdict"])
            for node, (when, verdict) in sorted(extra["burnin"].items()):
                ts.add_metric([node, verdict], when)
            yield ts
        if extra.get("burnin_fleet"):
            share = GaugeMetricFamily("slurmadm_burnin_fleet_share", "The node's measurement in its last burn-in "
                                      "as a share of the fleet median (same profile, same sweep)",
                                      labels=["node", "metric"])
            slow = GaugeMetricFamily("slurmadm_burnin_slow_sweeps", "Burn-in sweeps in a row, the last included, "
                                     "that found the node slower than the fleet (0: not slow)", labels=["node"])
            for node, f in sorted(extra["burnin_fleet"].items()):
                for metric, v in sorted(f["shares"].items()):
                    share.add_metric([node, metric], v)
                slow.add_metric([node], f["streak"])
            yield from (share, slow)
        if extra["drift"] is not None:
            f = GaugeMetricFamily("slurmadm_fleet_drift_nodes", "Nodes whose facts differ from the baseline")
            f.add_metric([], extra["drift"])
            yield f
        if extra["last"]:
            n = GaugeMetricFamily("slurmadm_store_node_checks_failing", "Health checks whose latest recorded "
                                  "verdict on the node is fail or error", labels=["node"])
            one = GaugeMetricFamily("slurmadm_store_check_failing", "1 for each check whose latest recorded verdict "
                                    "on the node is fail or error (failing ones only)", labels=["node", "check"])
            last = GaugeMetricFamily("slurmadm_store_node_last_result_timestamp_seconds",
                                     "When the node's newest health result was recorded", labels=["node"])
            for node, when in sorted(extra["last"].items()):
                failing = extra["failing"].get(node, [])
                n.add_metric([node], len(failing))
                last.add_metric([node], when)
                for check in sorted(failing):
                    one.add_metric([node, check], 1)
            by = GaugeMetricFamily("slurmadm_store_check_nodes", "Nodes whose latest recorded verdict of the "
                                   "check is the status", labels=["check", "status"])
            for (check, status), count in sorted(extra["checks"].items()):
                by.add_metric([check, status], count)
            yield from (n, one, last, by)
        if extra.get("repair") is not None:
            rep = extra["repair"]
            f = GaugeMetricFamily("slurmadm_repair_incidents", "Hardware incidents not closed (slurmadm repair), "
                                  "by class and state", labels=["class", "state"])
            for (cls, state), count in sorted(rep["open"].items()):
                f.add_metric([cls, state], count)
            since = GaugeMetricFamily("slurmadm_repair_node_since_timestamp_seconds", "When the node's oldest "
                                      "incident not closed opened (time in repair: time() minus this)",
                                      labels=["node"])
            for node, ts in sorted(rep["since"].items()):
                since.add_metric([node], ts)
            n = GaugeMetricFamily("slurmadm_repair_nodes", "Nodes with an incident not closed")
            n.add_metric([], len(rep["since"]))
            steps = CounterMetricFamily("slurmadm_repair_steps", "Repair steps taken on incidents (reset, "
                                        "reboot, qualify, resume, rma, lemon, ...), by how they ended",
                                        labels=["step", "outcome"])
            for (step, outcome), count in sorted(rep.get("steps", {}).items()):
                steps.add_metric([step, outcome], count)
            lemons = GaugeMetricFamily("slurmadm_repair_lemons", "Lemons (slurmadm repair lemons): nodes and GPU "
                                       "serials held as one or past the site's thresholds, by kind", labels=["kind"])
            lemon = GaugeMetricFamily("slurmadm_repair_lemon", "1 per lemon (node or GPU serial); held: already "
                                      "drained as one", labels=["kind", "name", "held"])
            counts = {"node": 0, "gpu": 0}
            for d in rep.get("lemons", []):
                counts[d["kind"]] = counts.get(d["kind"], 0) + 1
                lemon.add_metric([d["kind"], d["name"], "yes" if d["held"] else "no"], 1)
            for kind, count in sorted(counts.items()):
                lemons.add_metric([kind], count)
            yield from (f, since, n, steps, lemons, lemon)
        if extra.get("rma") is not None:
            yield from rma_metrics(extra["rma"])
        if extra["arrivals"] is not None:
            f = GaugeMetricFamily("slurmadm_store_host_last_arrival_timestamp_seconds", "When the host's records "
                                  "last arrived at the central store", labels=["host"])
            for host, when in sorted(extra["arrivals"].items()):
                f.add_metric([host], when)
            yield f
        if extra["silent"] is not None:
            f = GaugeMetricFamily("slurmadm_store_silent_nodes", "Site nodes whose records have not arrived for "
                                  "longer than store.stale_after_minutes")
            f.add_metric([], extra["silent"])
            yield f


def cost_metrics(reading) -> Iterator[Metric]:
    """The day's GPU-hours by what they went to, and the day's ETTR (issue 36)."""
    day = reading.value
    if day is None:
        return
    # seconds, Prometheus' base unit (promtool check metrics refuses "hours" in a name)
    f = GaugeMetricFamily("slurmadm_gpu_time_today_seconds", "GPU time of the day so far by what it went to: "
                          "completed, lost_<verdict>, other, out_of_service (out_<cause>), idle, total", labels=["kind"])
    for kind, v in sorted(day["gpu_hours"].items()):
        f.add_metric([kind], float(v) * 3600)
    yield f
    if day.get("ettr") is not None:
        e = GaugeMetricFamily("slurmadm_ettr_today", "Effective training time ratio of the day's jobs (Meta's "
                              "definition; a failed run's time counts as lost)")
        e.add_metric([], float(day["ettr"]))
        yield e
    r = GaugeMetricFamily("slurmadm_failed_job_runs_today", "Failed job runs of the day by verdict", labels=["verdict"])
    for verdict, n in sorted(day.get("failed_runs", {}).items()):
        r.add_metric([verdict], n)
    yield r
    a = GaugeMetricFamily("slurmadm_cost_read_age_seconds", "Age of the day's figures (recomputed every 10 min)")
    a.add_metric([], max(0.0, time.time() - reading.ts) if reading.ts else -1.0)
    yield a

def rma_metrics(figs: dict) -> Iterator[Metric]:
    """Vendor RMA cases (slurmadm/repair/rma.py figures): by state, per GPU model and class, and
    the median fault-to-RMA time and vendor turnaround."""
    f = GaugeMetricFamily("slurmadm_rma_cases", "RMA cases (slurmadm repair rma), by state", labels=["state"])
    for state, n in figs["by_state"].items():
        f.add_metric([state], n)
    model = GaugeMetricFamily("slurmadm_rma_cases_per_gpu_model", "GPU RMA cases, by GPU model", labels=["model"])
    for m, n in figs["per_gpu_model"].items():
        model.add_metric([m], n)
    cls = GaugeMetricFamily("slurmadm_rma_cases_per_class", "RMA cases, by incident class", labels=["class"])
    for c, n in figs["per_class"].items():
        cls.add_metric([c], n)
    out = [f, model, cls]
    for key, name, text in (("fault_to_rma", "slurmadm_rma_fault_to_rma_seconds",
                             "Median time from a part's first incident to its RMA case"),
                            ("vendor_turnaround", "slurmadm_rma_vendor_turnaround_seconds",
                             "Median time from shipped (else opened) to the replacement seen")):
        if figs[key]["n"]:
            g = GaugeMetricFamily(name, text)
            g.add_metric([], figs[key]["median_s"])
            out.append(g)
    yield from out
