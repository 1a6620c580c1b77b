"""Site model: nightly burn-in sweeps (`slurmadm burnin run`, see slurmadm/burnin/)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, PositiveInt, model_validator

from .accounts import SlurmName, SlurmTime
from .profiles import Strict

HHMM = Annotated[str, Field(pattern=r"^([01]\d|2[0-3]):[0-5]\d$")]
GBps = Annotated[float, Field(gt=0)]


# Fleet-relative metrics (slurmadm/burnin/fleet.py METRICS, the same ids).
FleetMetric = Literal["stress-tflops", "stress-copy", "stress-cpu", "gpu-clock", "gpu-temp", "allreduce-node",
                      "allreduce-pair", "hca-rate", "thermal", "hca-symbol-errors", "hca-link-recovery",
                      "hca-link-downed", "hca-rcv-errors"]
Percent = Annotated[float, Field(gt=0, lt=100)]


class StragglerSection(Strict):
    """Fleet-relative verdicts (`burnin.straggler`): each node's measurements against the median
    of the nodes of the same hardware profile in the same sweep (and of its scalable unit), and
    against the profile's baseline (`slurmadm burnin baseline`)."""

    enabled: bool = True
    # Below warn_percent of the median: a warning; below fail_percent: slow (drained after
    # drain_after sweeps in a row). Lower-is-better metrics (temperatures) mirror them: above
    # 200 - warn_percent (108%) warns, above 200 - fail_percent (115%) is slow.
    warn_percent: Percent = 92.0
    fail_percent: Percent = 85.0
    # A group (profile, or profile within a scalable unit) smaller than this gives no verdict.
    min_nodes: Annotated[int, Field(ge=3, le=100000)] = 4
    # Also at least this many robust deviations (1.4826 x MAD) from the median; 0: share alone.
    mad_k: Annotated[float, Field(ge=0, le=100)] = 3.0
    # Slow in this many sweeps in a row (the node's sweeps): drained `burnin-straggler`.
    drain_after: Annotated[int, Field(ge=1, le=10)] = 2
    # A node found slow in fewer sweeps than drain_after is held out of service (`burnin-suspect`,
    # no repair incident) until the next sweep re-tests it: drained again `burnin-straggler` if it
    # is slow again, resumed if not. On a busy fleet a node is rarely idle when a sweep comes, so
    # a suspect left in service waits weeks for its second verdict while it slows every
    # multi-node job it is in. false (or burnin.reservation ""; no sweep could re-test a drained
    # node): it stays in service until a sweep finds it idle.
    hold_suspects: bool = True
    # The metrics compared with the fleet (each node against its profile's peers in the sweep).
    metrics: list[FleetMetric] = ["stress-tflops", "stress-copy", "stress-cpu", "gpu-clock", "gpu-temp",
                                  "allreduce-node", "allreduce-pair", "hca-rate", "thermal", "hca-symbol-errors",
                                  "hca-link-recovery", "hca-link-downed", "hca-rcv-errors"]
    # (the hca-*-errors/-recovery/-downed metrics are error counts over the burn-in: they warn at
    # max(floor, 2 x the median), never drain; burnin/fleet.py COUNT_FLOORS)

    @model_validator(mode="after")
    def _fail_below_warn(self) -> "StragglerSection":
        if self.fail_percent >= self.warn_percent:
            raise ValueError(f"fail_percent {self.fail_percent:g} must be below warn_percent {self.warn_percent:g}")
        return self


class BurninSection(Strict):
    # Cron expression (five fields) for `burnin install-schedule`.
    schedule: Annotated[str, Field(pattern=r"^\S+\s+\S+\s+\S+\s+\S+\s+\S+$")] = "30 1 * * *"
    # Idle nodes are picked only while the local time is inside [window_start, window_end)
    # (the window may span midnight; start == end means any time). Nodes slurmadm drained and
    # nodes named with --nodes are taken at any time.
    window_start: HHMM = "01:00"
    window_end: HHMM = "05:00"
    # Never more than this many nodes under burn-in at once (users keep capacity).
    max_nodes: PositiveInt = 8
    # A node not burned in for this many days is due: a sweep in the window that finds it busy
    # drains it `burnin-due` (its jobs finish; no repair incident) so that the next sweep, which
    # takes the nodes slurmadm drained first and at any hour, tests it. Up to max_nodes held at
    # once, oldest first, under the drain breaker; days count from the store's first sweep for a
    # node never tested. On a busy fleet the nodes Slurm fills first are never idle in the window
    # and would never be tested. 0: never (idle nodes only).
    due_days: Annotated[float, Field(ge=0, le=3650)] = 30.0
    # A node held for the next sweep (a suspect straggler, a node due) and idle this many hours
    # fires BurninHoldStuck: the sweeps are not running or refuse it. Such a hold opens no repair
    # incident, so nothing else alerts on it. Above the schedule's longest gap between sweeps
    # (nightly: a day, and slack).
    hold_alert_after_h: Annotated[float, Field(gt=0, le=8760)] = 36.0
    partition: SlurmName | None = None  # default: the default partition
    qos: SlurmName = "burnin"
    account: SlurmName = "ops"
    # Maintenance reservation slurmadm creates over the nodes of each sweep (and deletes after):
    # it keeps user jobs off them between phases and lets nodes slurmadm drained run the burn-in
    # jobs. "" runs without one: then only idle nodes can be tested, never drained ones.
    reservation: Annotated[str, Field(pattern=r"^([A-Za-z][A-Za-z0-9_\-]{0,63})?$")] = "slurmadm_burnin"
    stress_seconds: Annotated[int, Field(ge=1, le=86400)] = 600
    # The known-answer compute test (repair/kat.py: one fixed-seed computation on every GPU, its
    # answers compared bit for bit) in every node job. Silent data corruption has no passive
    # signal: only such a test, run on a schedule, finds it (Meta's Ripple and Fleetscanner,
    # fault-taxonomy-2026-12.md 3.7). false: only `repair qualify` runs it.
    known_answer: bool = True
    # `dcgmi diag -r LEVEL` on nodes that have DCGM (2: ~2 min, 3: ~15 min); 0: never.
    dcgm_level: Literal[0, 2, 3] = 2
    # Known defects of DCGM releases per GPU model (slurmadm/burnin/data/known_tool_issues.toml,
    # each with its source) that burn-in works around: `dcgmi diag -r 2` hangs on B200 and is not
    # started (dcgm-247). A site whose DCGM build has the fix names the entry here to run it anyway.
    ignore_known_issues: list[Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9\-]{0,63}$")]] = []
    # Each burn-in job's time limit, the time a job may wait to start, and the whole sweep's.
    job_time_limit: SlurmTime = "02:00:00"
    start_timeout: SlurmTime = "00:15:00"
    sweep_time_limit: SlurmTime = "03:30:00"
    # Collective library of the all-reduce tests: "nccl" on GPU nodes; "gloo" runs on the CPU
    # (dev cluster, CI) and is labelled as such in the report.
    collective: Literal["nccl", "gloo"] = "nccl"
    allreduce_mib: Annotated[int, Field(ge=1, le=65536)] = 1024  # message size per all-reduce
    allreduce_iters: Annotated[int, Field(ge=1, le=1000)] = 20  # timed iterations (after 5 warm-up)
    # Bus bandwidth floors, GB/s: single node (default: health.models.<gpu model>
    # .nccl_busbw_floor_gbps) and two nodes (inter-node fabric).
    node_busbw_floor_gbps: GBps | None = None
    pair_busbw_floor_gbps: GBps = 40.0
    # A node or pair whose bus bandwidth dropped more than this many percent since the previous
    # sweep is a warning in the report and in `burnin status` (the floors decide failures).
    slowdown_warn_percent: Annotated[float, Field(gt=0, le=100)] = 10.0
    # All-reduce rendezvous: rank 0 listens on this port + (job id % rendezvous_ports). On a real
    # cluster only jobs that share a node can collide; the dev cluster (every node on 127.0.0.1)
    # widens the range so that a sweep's concurrent jobs never share a port.
    rendezvous_port: Annotated[int, Field(ge=1024, le=65435)] = 29500
    rendezvous_ports: Annotated[int, Field(ge=1, le=1000)] = 100
    # Python with slurmadm (and torch) on the compute nodes; default: the one running the sweep.
    python: Annotated[str, Field(pattern=r"^/")] | None = None
    report_dir: Annotated[str, Field(pattern=r"^/")] = "/var/lib/slurmadm/burnin"
    straggler: StragglerSection = StragglerSection()

    @model_validator(mode="after")
    def _known_issues_exist(self) -> "BurninSection":
        if not self.ignore_known_issues:
            return self  # the hooks load the site on every job: the data is read only when named
        from ..burnin import known

        bad = known.unknown(self.ignore_known_issues)
        if bad:
            raise ValueError(f"ignore_known_issues: {', '.join(bad)} is no known issue (known: {', '.join(known.ids())})")
        return self

    @model_validator(mode="after")
    def _rendezvous_fits(self) -> "BurninSection":
        if self.rendezvous_port + self.rendezvous_ports - 1 > 65535:
            raise ValueError(f"rendezvous_port {self.rendezvous_port} + rendezvous_ports {self.rendezvous_ports} "
                             "passes port 65535")
        return self
