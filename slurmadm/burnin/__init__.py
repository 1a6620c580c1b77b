"""Burn-in: sweeps that run as Slurm jobs and qualify or quarantine nodes (`slurmadm burnin`).

One sweep (`burnin run`, nightly from cron or a systemd timer), safe to leave unattended on a
busy cluster:

1. **Lock and recover.** An flock next to the store keeps two sweeps from overlapping. What a
   sweep that died (SIGKILL, power loss) left behind is undone first: its jobs are cancelled, the
   nodes it had resumed for re-qualification are drained again with their old reasons, its
   reservation is deleted, its record is marked interrupted.
2. **Select** (select.py): nodes named with --nodes, nodes slurmadm drained that await
   re-qualification, and idle nodes inside the burn-in window, never more than burnin.max_nodes.
   Nodes drained by anyone else, in someone else's reservation, rebooting, down or busy are left
   alone.
3. **Reserve.** A maintenance reservation (`burnin.reservation`, Flags=MAINT,IGNORE_JOBS,
   Users=<the sweep's user>, no end time) is created over exactly those nodes. A drained node
   runs no job, not even in a reservation, so a node awaiting re-qualification is resumed *inside
   the reservation*: user jobs still cannot reach it, only the sweep's jobs (which name the
   reservation). Its old drain reason is written to the store before the resume, so a crash from
   then on drains it again at the next start (step 1); the reservation has no end time for the
   same reason: a dead sweep leaves its nodes held, never open to users.
4. **Per node** (node.py), one job per node, all at once, each `srun --exclusive` of the whole
   node in QOS `burnin.qos` and account `burnin.account` (so it is scheduled and accounted like
   any job): the GPU stress (stress.py: torch on every GPU, `dcgmi diag` where DCGM is
   installed, a clearly labelled CPU stand-in where there is no GPU), the single-node all-reduce
   (slurmadm.health.allreduce), then the health suite (`slurmadm health run --dry-run --json`) on the node
   fresh from the load (the prolog checked it idle). srun brings the jobs' output back to the
   head node: no shared filesystem is needed.
5. **Across nodes** (pairs.py): two-node all-reduces launched with srun, first pairs inside a
   scalable unit, then across units; a pair below `burnin.pair_busbw_floor_gbps` is bisected
   against known-good nodes, naming the bad node (or the link, when both members pass elsewhere).
6. **Act.** Failed nodes are drained with `slurmadm: burnin-<test>: <detail> [burnin]` (ownership
   rules and the health.drain_cap_fraction breaker apply to nodes that were in service); nodes
   that passed re-qualification stay resumed; untested ones go back to their old drain. All
   drains happen before the reservation is deleted, so a failed node never becomes available.
7. **Record.** Sweep, node and pair results in the store (history.py), an HTML report and a JSON
   summary (report.py) with a comparison to the previous sweep. Exit 1 when anything failed.

Every job has `burnin.job_time_limit`; a job that has not started within `burnin.start_timeout`
is cancelled (its node skipped); the sweep stops at `burnin.sweep_time_limit`. SIGTERM/SIGINT
cancel the sweep's jobs, restore its nodes and record the sweep as interrupted.
"""
