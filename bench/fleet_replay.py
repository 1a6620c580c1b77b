#!/usr/bin/env python3
"""A month at the reference site in an hour (issue 37): replay a real fault mix and a job stream on
the dev cluster under three policies, and measure what each loses.

    .venv/bin/python bench/fleet_replay.py [--nodes 32] [--minutes 20] [--seed 1]
        [--compression 2000] [--rate-scale 1] [--policies a,b,c] [--jobs FILE] [--faults FILE]
        [--out DIR] [--port-base 24000] [--state-dir /tmp/slurmadm-replay] [--write-schedules DIR]
        [--burnin-every S] [--burnin-due-days D]

Root, as `dev-cluster up`. Per policy, one dev cluster of --nodes fake B200 nodes with BMCs and
sshd comes up fresh; two streams run at once for --minutes:
- jobs (bench/replay/schedule.py: sizes and durations, [ESTIMATE] shapes named there), each an
  sbatch of `srun python bench/replay/job.py` on every node: it trains for its duration and dies
  when one of its GPUs is lost or logs a fatal XID, as a real job does; a dead node ends it
  NODE_FAIL;
- faults (bench/replay/fault_mix.csv, a source per rate), injected through `dev-cluster gpu-fault`
  / `ib-fault` / `bmc-fault` or by stopping a node's slurmd, and repaired (cleared, the node
  booted) after the class's repair time; a fault no hook sees (a straggler, silent data
  corruption) stays until its active test finds it, and is repaired that long after.
Times are compressed (--compression site seconds per replay second); the dev cluster's Slurm and
health clocks are already short (devsite.py).

Policies, on the same schedules:
  a  slurmadm as a site runs it: per-node stores shipping to the central store, the alert path
     (node and head exporters, Prometheus, Alertmanager and the webhook, which drains a node an
     alert names; --no-monitoring leaves them out), the hooks, and every --repair-every replay
     seconds `repair run`
     (when this slurmadm has the repair ladder), `bmc health` (the BMC sweep a site runs from cron)
     and `bmc recover` for dead nodes; once a site night (--burnin-every) `burnin run` on up to
     the example's share of idle nodes (8 of 128: one at 8 nodes), whose known-answer test is
     the only path to a drain for silent data corruption, and whose fleet-relative verdict on
     the stand-in GPUs' rate the only one for a straggler (judged against the baseline that a
     commissioning sweep of 4 nodes seeds before the streams start; a busy node not burned in
     for --burnin-due-days site days is drained `burnin-due` for the next sweep, planned
     maintenance in the report). A sweep's own time is not compressed
     (about 40 s real, a site day at 2,000x): its nodes count as out of service meanwhile.
     And its people: when the schedule repairs a part (its repair time passed: the part was
     replaced) on a node the ladder holds as an RMA candidate, `repair clear` then `repair
     qualify` return it (Run.technician)
  b  no health enforcement: every check's on_fail = ignore (the hooks run and never drain)
  c  NHC-like: drain on a failed check, resume after one clean run, no ladder, no recovery

Schedules as files (--jobs / --faults), CSV with the columns documented in
bench/replay/schedule.py; --write-schedules DIR writes the drawn ones, so a run can be replayed
exactly. The report (--out DIR: replay.json, report.md, and report.html, the same with charts of
detection time per class, GPU-hours lost and ETTR per policy: bench/replay/html.py) holds per
policy: detection per class (p50/p95 from injection to drain, in site seconds), job harm, false
drains, repair, cost (GPU-hours lost, ETTR) and the ratios, the issue's targets, and the growth of
long-lived processes (RSS, open files) and of the store, sampled every --watch-every real seconds.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import threading
import time
from dataclasses import replace
from datetime import datetime
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import tomli_w  # noqa: E402
import tomllib  # noqa: E402

from bench.replay import html, measure, schedule, watch  # noqa: E402
from slurmadm.devcluster.bmcs import node_power  # noqa: E402
from slurmadm.devcluster.cluster import DevCluster  # noqa: E402
from slurmadm.hostlist import expand  # noqa: E402
from slurmadm.resources import example_site  # noqa: E402
from tests.integration.helpers import ensure_burnin_accounting  # noqa: E402

PY = sys.executable
POLICIES = ("a", "b", "c")
# how often a flapping link (fault kind `flap`) goes down while it lasts, site seconds [ESTIMATE]:
# the sources give how often links fail and how long their repair takes, not the flap rate
# (fault-taxonomy: "goes down at first then goes up again... usually lasts for several seconds")
FLAP_EVERY_SITE_S = 3600.0


def site_for(policy: str, out: Path, nodes: int = 128) -> Path:
    """The example site with the policy's health settings; its nightly burn-in takes the same
    share of the nodes a night as the example's (burnin.max_nodes of its 128), at least one."""
    data = tomllib.loads(Path(example_site()).read_text())
    burnin = data.setdefault("burnin", {})
    burnin["max_nodes"] = max(1, -(-nodes * int(burnin.get("max_nodes", 8)) // 128))
    health = data.setdefault("health", {})
    if policy == "b":
        from slurmadm.health.checks import BY_ID
        health["checks"] = {cid: {"on_fail": "ignore"} for cid in BY_ID}
    elif policy == "c":
        health["resume_after_clean_runs"] = 1
    path = out / f"site-{policy}.toml"
    path.write_text(tomli_w.dumps(data))
    return path


def straggler_verdicts(site_path: Path, *, due_days: float | None = None, compression: float = 1.0) -> None:
    """Policy (a)'s burn-in judges stragglers: the dev site leaves fleet verdicts off (its CPU
    stand-in's rate is the loaded machine's), so they are turned on for the stand-in GPUs' matmul
    rate (`stress-tflops`, burnin/node.py STANDIN_TFLOPS less the stand-in's slowdown), which no
    load moves; the site's thresholds otherwise. `due_days` (site days): burnin.due_days, in the
    replay's compressed time (burn-in reads the real clock). Edits the dev cluster's site file in
    place."""
    data = tomllib.loads(site_path.read_text())
    burnin = data.setdefault("burnin", {})
    burnin["straggler"] = {**burnin.get("straggler", {}), "enabled": True, "metrics": ["stress-tflops"]}
    if due_days is not None:
        burnin["due_days"] = due_days / compression
    site_path.write_text(tomli_w.dumps(data))


def commission(env: dict[str, str], site_path: Path, nodes: list[str], out: Path, attempts: int = 2) -> dict:
    """The site's commissioning burn-in, before the streams start: one sweep of the first
    max(burnin.straggler.min_nodes, 4) nodes at once (a copy of the site with burnin.max_nodes
    that large), whose passed fleet verdicts seed the profile's baseline (Sweep._seed_baselines).
    The nightly sweep takes 1 or 2 nodes, too few for a fleet verdict: the baseline judges them.
    A node that fails it was fixed before go-live: `repair clear --resume` ends what its drain
    opened and returns it, and the sweep runs again (at most `attempts` sweeps)."""
    data = tomllib.loads(site_path.read_text())
    size = min(len(nodes), max(4, int(data["burnin"].get("straggler", {}).get("min_nodes", 4))))
    data["burnin"]["max_nodes"] = size
    copy = out / "site-commissioning.toml"
    copy.write_text(tomli_w.dumps(data))
    names = ",".join(nodes[:size])
    sweeps, baseline = [], None
    for _ in range(attempts):
        r = slurmadm(env, "burnin", "run", "--site", str(copy), "--nodes", names, "--json", timeout=900)
        try:
            summary = json.loads(r.stdout)
        except ValueError:
            summary = {}
        failed = sorted(n["node"] for n in summary.get("nodes") or [] if n.get("verdict") != "pass")
        sweeps.append({"exit": r.returncode, "failed": failed,
                       **({"error": (r.stderr or r.stdout).strip()[-300:]} if r.returncode and not failed else {})})
        for node in failed:
            slurmadm(env, "repair", "clear", node, "--resume", "--reason", "fleet replay: fixed at commissioning")
        b = slurmadm(env, "burnin", "baseline", "show", "--json", timeout=120)
        try:
            baseline = json.loads(b.stdout).get("baselines") if b.returncode == 0 else None
        except ValueError:
            baseline = None
        if baseline or (r.returncode and not failed):
            break
    return {"nodes": names, "sweeps": sweeps, "exit": sweeps[-1]["exit"], "baselines": baseline}


def slurmadm(env: dict[str, str], *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return subprocess.run([PY, "-m", "slurmadm", *args], env=env, capture_output=True, text=True, timeout=timeout)


def shorten_health_interval(dc: DevCluster, env: dict[str, str], seconds: int) -> None:
    """Slurm's HealthCheckInterval to match the compression (the dev site sets 30 s: 17 site hours at
    2,000x); slurmctld reads it again on reconfigure."""
    conf = Path(dc.slurm_conf)
    text = re.sub(r"(?m)^HealthCheckInterval\s*=\s*\d+\s*$", f"HealthCheckInterval={seconds}", conf.read_text())
    conf.write_text(text)
    subprocess.run(["scontrol", "reconfigure"], env=env, capture_output=True, timeout=60, check=True)


IN_SERVICE = ("idle", "mix", "alloc", "comp", "plnd")
# A replay class whose repair is a part replaced (its schedule row has a repair time) -> the
# incident classes (slurmadm/repair/data/classes.toml) its fault opens: the technician returns a
# node the ladder holds as an RMA candidate only for such an incident, not for another part's.
_GPU_PART = ("RESET_GPU", "RESTART_BM", "GPU_LOST", "ECC", "NVLINK", "RMA", "PCIE", "MECHANICAL", "SDC")
REPLACED_PART_CLASSES = {"psu": ("PSU",), "fan": ("FAN",), "network": ("HCA",), "nic": ("HCA",),
                         "host": ("NODE_DOWN", "BOARD", "MEMORY"),
                         **{c: _GPU_PART for c in ("faulty-gpu", "gpu-hbm", "gpu-sram", "gpu-gsp", "sdc")},
                         # a straggler's GPU: its burn-in drain opens BURNIN, whose qualification
                         # (slow against the baseline) holds the node for RMA
                         "straggler": ("BURNIN", *_GPU_PART)}


def rma_for(incidents: list, cls: str) -> bool:
    """Whether one of a node's incidents (`repair history --json`) is an RMA hold of a class the
    replay class `cls`'s fault opens: the part the schedule replaced is the one held."""
    return any(isinstance(i, dict) and i.get("state") == "rma" and i.get("class") in REPLACED_PART_CLASSES.get(cls, ())
               for i in incidents)


def out_of_service(state: str) -> bool:
    """Whether sinfo's short state (%t) is a node out of service: anything but idle, mixed,
    allocated, completing or planned (a `*` only says slurmd was slow to answer a ping, which a
    loaded machine does). A node rebooting (`boot`, `@`, `^`), held in a maintenance reservation
    for its qualification (`maint`, `resv`), DOWN or drained is out: a repair ladder's reboot and
    qualification are one stretch out of service, not drains and returns in between."""
    st = state.strip().rstrip("*")
    return st not in IN_SERVICE


# burn-in's rotation (burnin.due_days): a busy node not burned in lately, drained so that the next
# sweep tests it. Planned maintenance, not a verdict on the node: no drain, its time apart.
DUE_REASON = "slurmadm: burnin-due:"


def reserved(state: str) -> bool:
    """sinfo's short state of a node in a reservation: `maint`, `resv`, or a `$` suffix
    (`idle$`, `alloc$`: in a maintenance reservation)."""
    st = state.strip().rstrip("*")
    return st.endswith("$") or st in ("maint", "resv")


def found_at(drains: list[measure.Drain], fault: schedule.Fault, since: float, *,
             confirmed: bool = False) -> float | None:
    """When a fault that no hook sees was found: the first drain of its node from `since` (its
    injection's start) by the active test that sees its class (`burnin-kat` for silent data
    corruption, `burnin-suspect` or `burnin-straggler` for a straggler, or the ladder's step for
    that drain: measure.active_detection); None: not found (yet). `confirmed`: only a drain that
    orders a repair (not a suspect's hold for its re-test, measure.SUSPICION_ONLY): the part is
    replaced its repair time after that."""
    def counts(reason: str) -> bool:
        m = measure.active_detection(fault.cls, reason)
        return bool(m) and not (confirmed and m in measure.SUSPICION_ONLY)

    return next((d.t_s for d in sorted(drains, key=lambda d: d.t_s)
                 if d.node == fault.node and d.t_s >= since and counts(d.reason)), None)


def maint_reserved(text: str) -> set[str]:
    """The nodes of the active MAINT reservations in `scontrol -o show reservation`'s lines. Slurm
    marks a node in a new reservation (`idle$`, `maint`) only at its next pass over the
    reservations, seconds later: a node the ladder's qualification resumes into its reservation
    looked in service in between (the straggler run's "returned by the ladder" between its
    reboot and its qualification)."""
    out: set[str] = set()
    for line in text.splitlines():
        kv = dict(w.split("=", 1) for w in line.split() if "=" in w)
        nodes = kv.get("Nodes", "")
        if kv.get("State") == "ACTIVE" and "MAINT" in kv.get("Flags", "").split(",") and nodes not in ("", "(null)"):
            out.update(expand(nodes))
    return out


def qualifying(text: str) -> set[str]:
    """The nodes in a qualification's own reservation (the repair ladder's, or `repair qualify`'s:
    `<burnin.reservation>-<node>` over that one node, repair/qualify.py), active, in `scontrol -o
    show reservation`'s lines. A node returned after one was returned by the ladder, whatever its
    drain reason said: a GPU reset takes a second and leaves the health check's reason in place
    (no `slurmadm: repair: ...` reason for the poll to see, unlike a reboot)."""
    out: set[str] = set()
    for line in text.splitlines():
        kv = dict(w.split("=", 1) for w in line.split() if "=" in w)
        node = kv.get("Nodes", "")
        if kv.get("State") == "ACTIVE" and "MAINT" in kv.get("Flags", "").split(",") \
                and kv.get("ReservationName", "").endswith(f"-{node}") and node:
            out.add(node)
    return out


def with_reservations(rows: list[tuple[str, str, str]], maint: set[str]) -> list[tuple[str, str, str]]:
    """sinfo's rows with a node in an active MAINT reservation shown as Slurm shows it once it has
    marked it (`idle` -> `idle$`)."""
    return [(node, state.strip().rstrip("*") + "$" if node in maint and not reserved(state) else state, reason)
            for node, state, reason in rows]


def as_observed(faults: list[schedule.Fault], took_effect: dict[int, float],
                repaired_at: dict[int, float], asked_at: dict[int, float] | None = None,
                until_found: set[int] | frozenset[int] = frozenset()) -> list[schedule.Fault]:
    """The faults that took effect, as they were in the run: from when the injection returned to
    when the repair did (the schedule's times are when each was asked for; on a loaded machine
    both take a while, and a fault shifted to its injection's return with the schedule's
    duration outlived its repair: a job started after the repair counted as started on a faulty
    node). A repair that had not come when the run ended keeps the schedule's end; a fault left
    to the ladder (duration 0) stays so. `asked_at`: when each injection began (`asked_s`: the
    injector writes the fault before it returns, so a check that ran in between saw it and its
    drain has a cause). `until_found`: the faults whose repair time counts from when they were
    found (no node-level signal): one not repaired when the run ended is in its part until its
    node returns after that detection, or to the end (duration 0, as measure reads it)."""
    asked_at = asked_at or {}
    out = []
    for i, f in enumerate(faults):
        if i not in took_effect:
            continue
        start = round(took_effect[i], 3)
        asked = round(min(asked_at.get(i, start), start), 3)
        if i in until_found and i not in repaired_at:
            out.append(replace(f, t_s=start, duration_s=0.0, asked_s=asked))
        elif f.duration_s > 0:
            end = repaired_at.get(i, f.t_s + f.duration_s)
            out.append(replace(f, t_s=start, duration_s=round(max(end - start, 0.001), 3), asked_s=asked))
        else:
            out.append(replace(f, t_s=start, asked_s=asked))
    return out


def store_bytes(dc: DevCluster) -> int:
    """The stores' size: the SQLite stores where the dev site puts them (the shared one, or each
    node's and the head's under stores/) and the central store's tables in MariaDB (one file per
    table). Not a walk of the whole state directory: slurmctld removes job directories under it
    while a walk is under way (a watch thread died of that), and it holds thousands of them."""
    from slurmadm.devcluster.devsite import CENTRAL_DB

    files = [*dc.state_dir.glob("*.db"), *dc.p("stores").glob("*.db"), *dc.p("mysql", CENTRAL_DB).glob("*")]
    total = 0
    for f in files:
        try:
            total += f.stat().st_size if f.is_file() else 0
        except OSError:  # a file gone between the listing and the stat (a store rotated)
            continue
    return total


class Stretches:
    """What the poll makes of sinfo's samples (node, short state, reason): a node taken out of
    service with no reason into a reservation (`idle$`, `alloc$`, `maint`: a burn-in sweep of idle
    nodes) opens a `maintenance (...)` stretch: not a drain (measure.maintenance), and its end not
    a repair; a drain during it (the sweep's verdict) is recorded as a drain then. A node is back
    in service when two samples in a row say so: the ladder's qualification resumes a node into
    its reservation a moment before Slurm shows the reservation, and that one sample is no return
    (the hour-long run's "returned by the ladder" at each qualification's start). The return is
    dated just after the last sample that saw the node out: it came back somewhere in between,
    and a job may start there before the next sample (sacct's start would precede the return)."""

    def __init__(self, drains: list, returns: list, lemons: set):
        self.drains, self.returns, self.lemons = drains, returns, lemons
        self.stretch: dict[str, str] = {}  # node -> what opened its stretch out of service, or the latest reason
        self.leaving: dict[str, tuple[float, str]] = {}  # node -> (when it came back, by what)
        self.last_out: dict[str, float] = {}  # node -> the last sample that saw it out of service
        self.qualified: set[str] = set()  # nodes seen in a qualification's reservation in this stretch

    def sample(self, t: float, rows: list[tuple[str, str, str]] | list[list[str]],
               qualifying: set[str] | frozenset[str] = frozenset()) -> None:
        """`qualifying`: the nodes in a qualification's own reservation now (qualifying())."""
        seen: dict[str, str] = {}
        for node, state, reason in rows:
            if out_of_service(state):
                if reason.startswith(DUE_REASON):  # burn-in's rotation: maintenance on a schedule
                    seen[node] = f"maintenance ({reason.strip()[:60]})"
                elif reason.strip() not in ("", "none"):
                    seen[node] = reason
                elif reserved(state):
                    seen[node] = f"maintenance ({state.strip()})"
                else:
                    seen[node] = f"none ({state.strip()})"
        for node, label in seen.items():
            self.last_out[node] = t
            if node in qualifying:
                self.qualified.add(node)
            self.leaving.pop(node, None)  # out again at the next sample: it never came back
            prev = self.stretch.get(node)
            named = not label.startswith(("none (", "maintenance ("))
            if prev is None or (named and prev.startswith("maintenance (")):
                self.drains.append(measure.Drain(t, node, label))
                self.stretch[node] = label
            elif named:
                self.stretch[node] = label
            if "repair: lemon" in label:
                self.lemons.add(node)
        for node in set(self.stretch) - set(seen):
            if node in self.leaving:
                first, by = self.leaving.pop(node)
                del self.stretch[node]
                self.qualified.discard(node)
                self.returns.append(measure.Return(first, node, by))
            else:
                prev = self.stretch[node]
                back = round(self.last_out.get(node, t) + 0.001, 3)
                ladder = prev.startswith("slurmadm: repair:") or node in self.qualified
                self.leaving[node] = (back, "ladder" if ladder else
                                      "maintenance" if prev.startswith("maintenance (") else "clean-runs")

    def finish(self) -> None:
        """The run ended: a node seen back once is back."""
        for node, (first, by) in sorted(self.leaving.items()):
            self.stretch.pop(node, None)
            self.qualified.discard(node)
            self.returns.append(measure.Return(first, node, by))
        self.leaving.clear()


def has_repair(env: dict[str, str]) -> bool:
    return slurmadm(env, "repair", "--help").returncode == 0


class Run:
    """One policy's run: the threads that submit jobs, inject faults, act as the policy, poll Slurm
    for drains and returns, and watch the long-lived processes."""

    def __init__(self, policy: str, dc: DevCluster, env: dict[str, str], jobs, faults, signal, args):
        self.policy, self.dc, self.env, self.jobs, self.faults, self.args = policy, dc, env, jobs, faults, args
        self.signal: dict[str, bool] = signal  # class -> has a node-level signal
        self.stop = threading.Event()
        self.t0 = 0.0
        self.drains: list[measure.Drain] = []
        self.returns: list[measure.Return] = []
        self.lemons: set[str] = set()
        self.errors: list[str] = []
        self.samples: dict[str, list[dict]] = {}
        self.job_ids: dict[str, str] = {}
        self.asked_at: dict[int, float] = {}  # schedule index -> replay time its injection began
        self.took_effect: dict[int, float] = {}  # schedule index -> replay time its injection returned
        self.repaired_at: dict[int, float] = {}  # schedule index -> replay time its repair (clear) returned
        self.found: dict[int, float] = {}  # schedule index -> replay time a fault no hook sees was confirmed
        self.nodelist = ",".join(f"b200-{i:03d}" for i in range(1, args.nodes + 1))
        self.user_fail = dc.p("replay-user-fail")
        self.user_fail.mkdir(exist_ok=True)
        self.replaced: dict[str, str] = {}  # node -> class of a part the schedule has repaired (replaced)
        self.technician_runs: list[dict] = []
        self.sinfo: dict[str, tuple[str, str]] = {}  # node -> (short state, reason): the poll's last read
        self.timer_runs: dict[str, list[tuple[float, float, int]]] = {}  # timer -> (start, end, exit) replay s

    def now(self) -> float:
        return time.monotonic() - self.t0

    def _at(self, t: float) -> bool:
        """Wait until replay time t; False when the run is over."""
        while not self.stop.is_set():
            left = t - self.now()
            if left <= 0:
                return True
            self.stop.wait(min(left, 1.0))
        return False

    # ---------------------------------------------------------------- streams
    def submit_jobs(self) -> None:
        script = REPO / "bench" / "replay" / "job.py"
        for job in self.jobs:
            if not self._at(job.t_s):
                return
            kmsg = f"{self.dc.p('gpus')}/$SLURMD_NODENAME.kmsg"
            wrap = (f"#!/bin/sh\nexec srun --kill-on-bad-exit=1 sh -c "
                    f"'exec {PY} {script} {job.duration_s} {kmsg} {self.user_fail}'\n")
            r = subprocess.run(["sbatch", "--parsable", "-J", job.name, "-N", str(job.nodes), "--gres=gpu:8",
                                "--exclusive", "--requeue", "-o", "/dev/null"],
                               input=wrap, env=self.env, capture_output=True, text=True, timeout=60)
            if r.returncode == 0:
                self.job_ids[job.name] = r.stdout.strip().split(";")[0]
            else:
                self.errors.append(f"sbatch {job.name}: {r.stderr.strip()[:200]}")

    def until_found(self, f: schedule.Fault) -> bool:
        """A fault no hook sees (its class has no node-level signal: a straggler, silent data
        corruption) with a repair time: at a site it stays until someone finds it, and its part is
        replaced that long after (schedule.py); never found, never replaced."""
        return f.duration_s > 0 and not self.signal.get(f.cls, True)

    def inject_faults(self) -> None:
        repairs: list[tuple[float, schedule.Fault]] = []
        pending = list(self.faults)
        waiting: list[schedule.Fault] = []  # injected, repaired only once found
        index = {id(f): i for i, f in enumerate(self.faults)}
        while not self.stop.is_set() and (pending or repairs or waiting):
            # while a fault waits to be found, look at the poll's drains once a replay second
            nxt = min([f.t_s for f in pending[:1]] + [t for t, _ in repairs]
                      + ([self.now() + 1.0] if waiting else []), default=None)
            if nxt is None or not self._at(nxt):
                return
            for f in list(waiting):
                # its part is replaced its repair time after a drain that orders a repair (a
                # suspect's hold for its re-test does not); measure reads the detection itself
                found = found_at(list(self.drains), f, self.asked_at[index[id(f)]], confirmed=True)
                if found is not None:
                    waiting.remove(f)
                    self.found[index[id(f)]] = found
                    repairs.append((found + f.duration_s, f))
            t = self.now()
            for due in [r for r in repairs if r[0] <= t]:
                repairs.remove(due)
                self._fault(due[1], clear=True)
                self.repaired_at[index[id(due[1])]] = self.now()
                self.replaced[due[1].node] = due[1].cls
            while pending and pending[0].t_s <= t:
                f = pending.pop(0)
                self.asked_at[index[id(f)]] = self.now()
                self._fault(f, clear=False)
                self.took_effect[index[id(f)]] = self.now()
                if self.until_found(f):
                    waiting.append(f)
                elif f.duration_s > 0:
                    repairs.append((f.t_s + f.duration_s, f))

    def _fault(self, f: schedule.Fault, *, clear: bool) -> None:
        sd = ["--state-dir", str(self.dc.state_dir)]
        if f.injector == "gpu":
            args = ["dev-cluster", "gpu-fault", f.node, "--gpu", f.part, "--kind", f.kind, *sd]
            args += ["--clear"] if clear else (["--value", f.value] if f.value else [])
        elif f.injector == "ib":
            args = ["dev-cluster", "ib-fault", f.node, "--hca", f.part, *sd]
            args += ["--clear"] if clear else ["--kind", f.kind]
            if not clear and f.kind == "flap" and f.duration_s > 0:
                # a bad cable goes on flapping until it is replaced (its repair clears it), across
                # the ladder's reboot: once a site hour [ESTIMATE], at least once a replay second
                args += ["--every", f"{max(1.0, FLAP_EVERY_SITE_S / self.args.compression):g}"]
        elif f.injector == "bmc":
            args = ["dev-cluster", "bmc-fault", f.node, *sd]
            args += ["--clear"] if clear else ["--kind", f.kind] + (["--value", f.value] if f.value else [])
        elif f.injector == "node":
            # the host dies as when its power goes (slurmd and sshd killed at once) and is booted
            # at its repair, as the BMC's power switch does it (devcluster/bmcs.py)
            node_power(self.dc, f.node, "on" if clear else "off")
            return
        else:  # user: the task on that node fails with its own bug (bench/replay/job.py)
            if not clear:
                (self.user_fail / f.node).touch()
            return
        r = slurmadm(self.env, *args)
        if r.returncode != 0:
            self.errors.append(f"{' '.join(args[:4])}: {(r.stderr or r.stdout).strip()[:200]}")

    # ---------------------------------------------------------------- the policy's own timers
    def timers(self) -> list[tuple[str, list[str], float]]:
        """The policy's own timers, (name, argv, every replay seconds), each in a thread of its own
        (a site's systemd timers do not wait for each other: a `repair run` busy qualifying a node
        does not hold up the BMC sweep)."""
        if self.policy != "a":
            return []
        every = self.args.repair_every
        out = [("repair", ["repair", "run", "--reason", "fleet replay"], every)] if has_repair(self.env) else []
        # the head node's BMC sweep, as a site runs it from cron: PSU, fan and temperature faults
        # have no other path to a drain (the hooks read the GPUs and HCAs, not the BMC)
        out.append(("bmc-health", ["bmc", "health", self.nodelist], every))
        out.append(("bmc-recover", ["bmc", "recover", "--sweep", "--reason", "fleet replay"], every))
        if not self.args.no_monitoring:
            # the head's records to the central store, as the site's cron does it (the central
            # store's how-to: `*/5 * * * * slurmadm store ship`; the nodes' go with their health runs)
            out.append(("store-ship", ["store", "ship"], every))
        # the nightly burn-in (cron at a site), once a site night: idle nodes, the known-answer test
        # among its tests (silent data corruption has no other path to a drain)
        if self.args.burnin_every > 0:
            out.append(("burnin", ["burnin", "run"], self.args.burnin_every))
        return out

    def act(self, name: str, argv: list[str], every: float) -> None:
        while self._at(self.now() + every):
            start = self.now()
            r = slurmadm(self.env, *argv, timeout=300)
            self.timer_runs.setdefault(name, []).append((round(start, 2), round(self.now(), 2), r.returncode))
            if r.returncode not in (0, 1):
                self.errors.append(f"{' '.join(argv[:2])}: exit {r.returncode}: {(r.stderr or r.stdout).strip()[:200]}")

    def technician(self) -> None:
        """Policy (a)'s people: a part the schedule repaired (its repair time passed: the failed
        PSU, fan, cable or HCA was replaced) on a node the ladder holds as an RMA candidate is
        returned the way a site does it with slurmadm: `repair clear` records the replacement,
        then `repair qualify` tests the node and resumes it on a pass. Without it a node whose
        part is replaced would stay held for good (the ladder's rma rung waits for a person)."""
        while not self.stop.wait(2.0):
            if not self.replaced:
                continue
            # drained and idle (`drain`, not `drng`: a job still running there ends first, as
            # `repair qualify` asks), as the poll last read sinfo
            held = {n for n, (state, reason) in dict(self.sinfo).items()
                    if reason.startswith("slurmadm: repair: rma") and state.strip().rstrip("*") == "drain"}
            for node in sorted(held & set(self.replaced)):
                cls = self.replaced[node]
                if not self._held_for(node, cls):
                    continue  # held for another part than the one replaced: still the ladder's
                del self.replaced[node]
                t = self.now()
                c = slurmadm(self.env, "repair", "clear", node, "--reason", f"fleet replay: {cls} part replaced",
                             timeout=120)
                q = slurmadm(self.env, "repair", "qualify", node, timeout=600) if c.returncode == 0 else None
                self.technician_runs.append({"t_s": round(t, 2), "node": node, "cls": cls, "clear": c.returncode,
                                             "qualify": None if q is None else q.returncode})
                if c.returncode != 0 or (q is not None and q.returncode not in (0, 1)):
                    bad = q if q is not None and c.returncode == 0 else c
                    self.errors.append(f"technician {node}: {(bad.stderr or bad.stdout).strip()[:200]}")

    def _held_for(self, node: str, cls: str) -> bool:
        """Whether one of the node's RMA incidents is of a class the replaced part's fault opens."""
        r = slurmadm(self.env, "repair", "history", node, "--json", timeout=60)
        try:
            incidents = json.loads(r.stdout) if r.returncode == 0 else []
        except ValueError:
            incidents = []
        return rma_for(incidents, cls)

    def poll(self) -> None:
        """Drains and returns as Slurm shows them, once a replay second (`Stretches`): the same for
        every policy and independent of what slurmadm records. A node in an active MAINT
        reservation is read as reserved before sinfo marks it (maint_reserved)."""
        seen = Stretches(self.drains, self.returns, self.lemons)
        while not self.stop.is_set():
            r = subprocess.run(["sinfo", "-h", "-N", "-o", "%N|%t|%E"], env=self.env, capture_output=True,
                               text=True, timeout=30)
            rows = [tuple((line.split("|", 2) + ["", ""])[:3]) for line in r.stdout.splitlines()]
            self.sinfo = {node: (state, reason) for node, state, reason in rows}
            res = subprocess.run(["scontrol", "-o", "show", "reservation"], env=self.env, capture_output=True,
                                 text=True, timeout=30)
            seen.sample(self.now(), with_reservations(rows, maint_reserved(res.stdout)), qualifying(res.stdout))
            self.stop.wait(1.0)
        seen.finish()

    def watch(self) -> None:
        try:
            self._watch()
        except Exception as exc:  # noqa: BLE001 - a dead watch is said in the report, not only on stderr
            self.errors.append(f"watch: {type(exc).__name__}: {exc}"[:300])

    def _watch(self) -> None:
        while not self.stop.wait(self.args.watch_every):
            for d in self.dc.extra_daemons() + [self.dc.daemon("slurmctld")]:
                pid = d.pid()
                s = watch.sample_pid(pid) if pid else None
                if s is not None:
                    self.samples.setdefault(d.name, []).append(s)
            self.samples.setdefault("stores", []).append({"bytes": store_bytes(self.dc)})

    # ---------------------------------------------------------------- whole run
    def run(self, seconds: float) -> measure.Observed:
        threads = [threading.Thread(target=fn, daemon=True, name=fn.__name__)
                   for fn in (self.submit_jobs, self.inject_faults, self.poll, self.watch)]
        threads += [threading.Thread(target=self.act, args=(name, argv, every), daemon=True, name=name)
                    for name, argv, every in self.timers()]
        if self.policy == "a" and has_repair(self.env):
            threads.append(threading.Thread(target=self.technician, daemon=True, name="technician"))
        self.t0 = time.monotonic()
        for th in threads:
            th.start()
        self.stop.wait(seconds)
        self.stop.set()
        for th in threads:
            th.join(timeout=120)
        subprocess.run(["scancel", "--full", "-u", "root"], env=self.env, capture_output=True, timeout=60)
        return measure.Observed(self.policy, self.args.compression, seconds,
                                [(f, self.signal[f.cls])
                                 for f in as_observed(self.faults, self.took_effect, self.repaired_at, self.asked_at,
                                                      {i for i, f in enumerate(self.faults) if self.until_found(f)})],
                                self.drains, self.returns, self.runs(), sorted(self.lemons))

    def runs(self) -> list[measure.Run]:
        """Every job run as sacct shows it (requeued runs apart), in replay seconds."""
        if not self.job_ids:
            return []
        r = subprocess.run(["sacct", "-X", "-n", "-P", "--duplicates", "-j", ",".join(self.job_ids.values()),
                            "-o", "JobName,NodeList,Start,End,State"],
                           env=self.env, capture_output=True, text=True, timeout=60)
        wall0 = time.time() - (time.monotonic() - self.t0)
        out = []
        for line in r.stdout.splitlines():
            name, nodelist, start, end, state = (line.split("|") + [""] * 5)[:5]
            if "Unknown" in (start, end) or "None" in (start, end) or not (start and end and nodelist):
                continue
            s = datetime.fromisoformat(start).timestamp() - wall0
            e = datetime.fromisoformat(end).timestamp() - wall0
            out.append(measure.Run(name, tuple(expand(nodelist)), s, e, state.split()[0]))
        return out


def keep_logs(dc: DevCluster, dest: Path) -> None:
    """The health results and the audit trail of a run, kept beside the report before the cluster
    is purged: what a person reads when a target is missed."""
    import shutil

    dest.mkdir(parents=True, exist_ok=True)
    for src in [dc.p("log", "health.jsonl"), *sorted(dc.p("log").glob("slurmctld*")),
                *sorted(dc.p("burnin", "repair").glob("*"))]:
        if src.is_file():
            shutil.copy(src, dest / src.name)
    # incidents, BMC check results, audit events: one consistent copy of the shared store, or
    # with the central store of the head's own (stores/<host>.db; the nodes' are shipped)
    try:
        head = Path(dc.site().store.local_path())
    except Exception:  # noqa: BLE001 - a cluster that never came up has no site to read
        head = dc.p("slurmadm.db")
    store = head if head.is_file() else dc.p("slurmadm.db")
    if store.is_file():
        import sqlite3

        with sqlite3.connect(store) as src, sqlite3.connect(dest / "slurmadm.db") as dst:
            src.backup(dst)


def cadence(runs: list[tuple[float, float, int]], *, every: float, compression: float) -> dict:
    """How often a timer really ran: a timer waits `every` replay seconds after its last run ends
    (fleet_replay.Run.act), so a run that takes long on a loaded machine stretches the site time
    between runs (a burn-in sweep of 100 s at 2,000x is 2.3 site days). Site hours; None when it
    ran fewer than twice."""
    starts = [r[0] for r in runs]
    took = sorted(r[1] - r[0] for r in runs)
    gaps = [b - a for a, b in zip(starts, starts[1:])]
    site_h = compression / 3600
    return {"runs": len(runs), "asked_site_h": round(every * site_h, 1),
            "every_site_h": round(sum(gaps) / len(gaps) * site_h, 1) if gaps else None,
            "took_p50_s": round(took[len(took) // 2], 1) if took else None,
            "failed": sum(1 for r in runs if r[2] not in (0, 1))}


def cadence_line(policy: str, name: str, c: dict) -> str:
    """`policy a's burnin: 4 runs, one every 84.2 site h (asked: 24.0); a run took 110.6 s (p50)`."""
    every = f"one every {c['every_site_h']:g} site h" if c["every_site_h"] is not None else "too few to space"
    failed = f"; {c['failed']} failed" if c["failed"] else ""
    took = f"; a run took {c['took_p50_s']:g} s (p50)" if c["took_p50_s"] is not None else ""
    return f"policy {policy}'s {name}: {c['runs']} runs, {every} (asked: {c['asked_site_h']:g}){took}{failed}"


def markdown(cmp: dict, results: dict, args, commissioned: dict | None = None,
             timers: dict | None = None) -> str:
    lines = [f"fleet replay: {args.nodes} nodes, {args.minutes} min, seed {args.seed}, "
             f"compression {args.compression:g}x, rate scale {args.rate_scale:g}", ""]
    for p, c in (commissioned or {}).items():
        base = ", ".join(f"{prof} stress-tflops {m['stress-tflops']['median']:g}"
                         for prof, m in sorted((c.get("baselines") or {}).items()) if "stress-tflops" in m)
        lines += [f"commissioning ({p}): burn-in of {c['nodes']}, {len(c.get('sweeps') or [])} sweep(s), "
                  f"exit {c['exit']}; baseline {base or 'none'}", ""]
    lines.append("| policy | faults detected | jobs on faulty nodes (known) | killed | false drains | returned by ladder | "
                 "lemons | node-h out | GPU-h lost | ETTR | GPU-h slowed |")
    lines.append("|---|---|---|---|---|---|---|---|---|---|---|")
    for p, r in results.items():
        det = sum(c["detected"] for c in r["per_class"].values())
        inj = sum(c["injected"] for c in r["per_class"].values())
        known = r["jobs"].get("started_on_known_faulty_node", 0)
        lines.append(f"| {p} | {det}/{inj} | {r['jobs']['started_on_faulty_node']} ({known}) | "
                     f"{r['jobs']['killed_by_faults']} | "
                     f"{r['drains']['false']} | {r['repair']['returned_by_ladder']} | {len(r['repair']['lemons'])} | "
                     f"{r['repair']['node_hours_out']} | {r['cost']['gpu_hours_lost']} | {r['cost']['ettr']} | "
                     f"{r['cost'].get('gpu_hours_slowed', 0)} |")
    lines += ["", "targets (policy a): " + ", ".join(f"{k}: {'met' if v else 'NOT met'}"
                                                     for k, v in cmp["targets"].items())]
    for p, by_name in (timers or {}).items():
        if "burnin" in by_name:
            lines += ["", cadence_line(p, "burn-in", by_name["burnin"])]
    return "\n".join(lines) + "\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--nodes", type=int, default=32)
    ap.add_argument("--minutes", type=float, default=20.0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--compression", type=float, default=2000.0)
    ap.add_argument("--rate-scale", type=float, default=1.0)
    ap.add_argument("--policies", default="a,b,c")
    ap.add_argument("--jobs")
    ap.add_argument("--faults")
    ap.add_argument("--write-schedules")
    ap.add_argument("--out", default="/tmp/slurmadm-replay-out")
    # below Linux's ephemeral range (32768-60999) with the wide plan's 2,200 ports: at 37000 an
    # outgoing connection's source port took a burn-in all-reduce's rendezvous port (EADDRINUSE,
    # the commissioning sweep of 2026-12-07); the tests' clusters start at 27000
    ap.add_argument("--port-base", type=int, default=24000)
    ap.add_argument("--state-dir", default="/tmp/slurmadm-replay")
    ap.add_argument("--repair-every", type=float, default=10.0)
    ap.add_argument("--watch-every", type=float, default=60.0)
    ap.add_argument("--burnin-every", type=float, default=None,
                    help="policy (a)'s nightly burn-in, every this many replay seconds (default: one site "
                         "night, 86400 / --compression; 0: none)")
    ap.add_argument("--burnin-due-days", type=float, default=None,
                    help="policy (a)'s burnin.due_days in site days (default: the site's, 30): a busy node not "
                         "burned in for that long is drained for the next sweep")
    ap.add_argument("--no-monitoring", action="store_true",
                    help="policy a without the alert path and the central store (local stores, no exporters, "
                         "Prometheus, Alertmanager or webhook)")
    ap.add_argument("--health-interval", type=int, default=10,
                    help="Slurm's HealthCheckInterval during the replay (real seconds)")
    args = ap.parse_args()
    if args.burnin_every is None:
        args.burnin_every = 86400 / args.compression
    policies = args.policies.split(",")
    if any(p not in POLICIES for p in policies):
        print(f"fleet_replay: --policies: {args.policies!r}: each one of a, b, c", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    nodes = [f"b200-{i:03d}" for i in range(1, args.nodes + 1)]
    days = args.minutes * 60 * args.compression / 86400
    mix = schedule.load_mix()
    try:
        faults = (schedule.read_faults(Path(args.faults).read_text(), args.faults, set(nodes)) if args.faults else
                  schedule.fault_schedule(mix, nodes, days=days, seed=args.seed, compression=args.compression,
                                          rate_scale=args.rate_scale))
        jobs = (schedule.read_jobs(Path(args.jobs).read_text(), args.jobs, args.nodes) if args.jobs else
                schedule.job_schedule(args.nodes, days=days, seed=args.seed, compression=args.compression))
    except schedule.ScheduleError as e:
        print(f"fleet_replay: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        print(f"fleet_replay: {e.filename}: {e.strerror}", file=sys.stderr)
        return 2
    if args.write_schedules:
        d = Path(args.write_schedules)
        d.mkdir(parents=True, exist_ok=True)
        (d / "faults.csv").write_text(schedule.write_faults(faults))
        (d / "jobs.csv").write_text(schedule.write_jobs(jobs))
    signal = {r.cls: r.signal == "node" for r in mix}
    results, watched, errors, timeline, technician, commissioned, timers = {}, {}, {}, {}, {}, {}, {}
    for policy in policies:
        dc = DevCluster(Path(args.state_dir) / policy)
        dc.down(purge=True)
        # policy a as a site runs slurmadm: per-node stores shipping to the central store, and the
        # alert path (exporters, Prometheus, Alertmanager, the webhook that isolates a node)
        full = policy == "a" and not args.no_monitoring
        dc.up(nodes=args.nodes, site_file=str(site_for(policy, out, args.nodes)), port_base=args.port_base, bmc=True, ssh=True,
              timeout=600, central_store=full)
        stack = None
        try:
            env = {**os.environ, **dc.env()}
            dc.wait_ready(timeout=300)
            if full:
                from slurmadm.monitor.stack import MonitorStack

                stack = MonitorStack(dc)
                stack.up(timeout=300)
            # what `accounts apply` creates at a site: the burn-in QOS and account that the repair
            # ladder's qualification jobs run under (without them Slurm refuses every one)
            ensure_burnin_accounting(env, dc.site())
            shorten_health_interval(dc, env, args.health_interval)
            if policy == "a" and args.burnin_every > 0:
                straggler_verdicts(dc.site_path, due_days=args.burnin_due_days, compression=args.compression)
                commissioned[policy] = commission(env, dc.site_path, nodes, out)
            run = Run(policy, dc, env, jobs, faults, signal, args)
            obs = run.run(args.minutes * 60)
            results[policy] = measure.measure(obs)
            watched[policy] = {k: {m: watch.growth([s[m] for s in v]) for m in v[0]} for k, v in run.samples.items()}
            errors[policy] = run.errors[:50]
            technician[policy] = run.technician_runs
            every = {name: e for name, _, e in run.timers()}
            timers[policy] = {name: {**cadence(runs, every=every[name], compression=args.compression), "at": runs}
                              for name, runs in run.timer_runs.items()}
            timeline[policy] = {"drains": [[round(d.t_s, 2), d.node, d.reason] for d in obs.drains],
                                "returns": [[round(r.t_s, 2), r.node, r.by] for r in obs.returns],
                                "runs": [[r.name, ",".join(r.nodes), round(r.start_s, 2), round(r.end_s, 2), r.state]
                                         for r in obs.runs]}
        finally:
            if stack is not None:
                stack.down()
            keep_logs(dc, out / f"logs-{policy}")
            dc.down(purge=True)
    cmp = measure.compare(results)
    report = {"args": vars(args), "results": results, "compare": cmp, "watched": watched, "errors": errors,
              "timeline": timeline, "technician": technician, "commissioning": commissioned, "timers": timers,
              "assumptions": measure.__doc__}
    (out / "replay.json").write_text(json.dumps(report, indent=2, sort_keys=True, default=str) + "\n")
    (out / "report.md").write_text(markdown(cmp, results, args, commissioned, timers))
    (out / "report.html").write_text(html.render_html(json.loads(json.dumps(report, default=str))))
    print(markdown(cmp, results, args, commissioned, timers))
    return 0


if __name__ == "__main__":
    sys.exit(main())
