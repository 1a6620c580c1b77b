#!/usr/bin/env python3
"""The reference site whole (issue 27): one dev cluster of N fake B200 nodes (default 128: 1,024
stand-in GPUs, an sshd and an IPMI + Redfish BMC per node, per-node stores shipping to MariaDB)
and every capability run against it once, in one run.

    .venv/bin/python bench/reference_site.py [--nodes 128] [--port-base 35000]
        [--state-dir /tmp/slurmadm-ref] [--json OUT.json] [--only step,step] [--keep]

Root, as `dev-cluster up`. The cluster uses the wide port plan (base..base+2199, devsite.py). Each
step reports wall time, CPU (this process and the commands it waited for), the peak RSS of the
largest command, and whether its verdict was right (`ok`); the run exits 1 when a verdict was
wrong. The steps, in order:

  bring-up     `dev-cluster up --nodes N --bmc --ssh --central-store --wide-ports`, then the
               monitoring stack (N node exporters, the head exporter, Prometheus, Alertmanager);
               the RSS of every daemon, by kind, per node and in all (the memory budget)
  config       `config apply` (the dev cluster's files are already what the site renders: no change)
  array        a job array of N tasks, one per node with 8 GPUs each (N x 8 GPUs), whose prologs
               run at once; the prolog's wall time as slurmd runs it (a timing wrapper around
               prolog.sh) p50/p99, beside the peer: the same with 4 tasks (the 4-node figure)
               It runs before `accounts`: the example site's limits (normal QOS: 256 GPUs per
               user; physics 512) would hold one user's 1,024-GPU array to a quarter at once
  accounts     `accounts apply` of the example site's projects; a second apply plans nothing
  breaker      a row-remap fault on 4 nodes of one partition, drain_cap_fraction set for a cap of
               3: three drained, the fourth held back with a breaker alert
  scrape       every node exporter (8 GPUs each) and the head exporter (N nodes) scraped at once
  top          `top --once` and `jobs idle --json`
  drift        one node's driver changed: `fleet drift` finds that node and only it
  bmc          `bmc power status` of every node (all on); one node frozen until Slurm marks it
               DOWN, `bmc recover` power-cycles it back to idle
  ship         `store ship` from every node at once (8 in parallel); the central store holds rows
               of every node and no queue is left
  burnin       every node burnt in (stress, gloo all-reduce, pairs within and across scalable
               units) in sweeps of --burnin-group nodes (burnin.max_nodes), half from one unit and
               half from the next
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import tomllib
from collections import Counter
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from slurmadm.devcluster import devsite  # noqa: E402
from slurmadm.devcluster.cluster import DevCluster  # noqa: E402
from slurmadm.devcluster.daemons import wait_for, with_descendants  # noqa: E402
from slurmadm.hostlist import compress  # noqa: E402

STEPS = ["bring-up", "config", "array", "accounts", "breaker", "scrape", "top", "drift", "bmc", "ship", "burnin"]
PEER_NODES = 4


class Step:
    """One step's measurements: wall, CPU of this process and of every command it waited for,
    the largest command's peak RSS."""

    def __init__(self, name: str):
        self.name = name
        self.cpu_cmds = 0.0
        self.rss_kib = 0
        self.ok: bool | None = None
        self.verdict = ""
        self.extra: dict = {}
        self.lock = threading.Lock()

    def __enter__(self):
        self.t0 = time.monotonic()
        self.r0 = resource.getrusage(resource.RUSAGE_SELF)
        return self

    def __exit__(self, *exc):
        r1 = resource.getrusage(resource.RUSAGE_SELF)
        self.wall = time.monotonic() - self.t0
        self.cpu = (r1.ru_utime - self.r0.ru_utime) + (r1.ru_stime - self.r0.ru_stime) + self.cpu_cmds
        self.rss_kib = max(self.rss_kib, r1.ru_maxrss if self.name == "bring-up" else 0)
        return False

    def check(self, ok: bool, verdict: str) -> None:
        self.ok = ok if self.ok is None else (self.ok and ok)
        self.verdict = (self.verdict + "; " if self.verdict else "") + verdict

    def row(self) -> dict:
        return {"step": self.name, "wall_s": round(self.wall, 2), "cpu_s": round(self.cpu, 2),
                "peak_rss_mib": round(self.rss_kib / 1024, 1), "ok": self.ok, "verdict": self.verdict, **self.extra}


class Bench:
    def __init__(self, args):
        self.args = args
        self.n = args.nodes
        self.dc = DevCluster(Path(args.state_dir))
        self.steps: list[Step] = []

    # ------------------------------------------------------------------ helpers
    @property
    def env(self) -> dict[str, str]:
        return {**os.environ, **self.dc.env()}

    def sm(self, step: Step, *args: str, timeout: float = 600, input: str | None = None) -> subprocess.CompletedProcess:
        return self.timed(step, [sys.executable, "-m", "slurmadm", *args], timeout=timeout, input=input)

    def timed(self, step: Step, argv: list[str], *, timeout: float = 600, input: str | None = None,
              env: dict | None = None) -> subprocess.CompletedProcess:
        """Run argv; add its CPU and peak RSS (it and the children it waited for: wait4) to the step."""
        # through /usr/bin/time: a child forked from this process starts with its RSS (wait4's
        # ru_maxrss would report this process's size for every command); time's own fork is small
        rss_file = tempfile.NamedTemporaryFile(prefix="rss", delete=False)
        rss_file.close()
        argv = ["/usr/bin/time", "-f", "%M", "-o", rss_file.name, *argv]
        with tempfile.TemporaryFile() as fo, tempfile.TemporaryFile() as fe:
            proc = subprocess.Popen(argv, stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                                    stdout=fo, stderr=fe, env=env or self.env)
            if input is not None:
                proc.stdin.write(input.encode())
                proc.stdin.close()
            timer = threading.Timer(timeout, proc.kill)
            timer.start()
            try:
                _, status, ru = os.wait4(proc.pid, 0)
            finally:
                timer.cancel()
            proc.returncode = os.waitstatus_to_exitcode(status)
            fo.seek(0)
            fe.seek(0)
            out, err = fo.read().decode(errors="replace"), fe.read().decode(errors="replace")
        try:
            rss = int(Path(rss_file.name).read_text().split()[-1])
        except (OSError, ValueError, IndexError):
            rss = 0
        os.unlink(rss_file.name)
        with step.lock:
            step.cpu_cmds += ru.ru_utime + ru.ru_stime
            step.rss_kib = max(step.rss_kib, rss)
        return subprocess.CompletedProcess(argv, proc.returncode, out, err)

    def slurm(self, *argv: str, timeout: float = 60) -> str:
        return subprocess.run(list(argv), env=self.env, capture_output=True, text=True, timeout=timeout,
                              check=True).stdout

    def states(self) -> dict[str, tuple[str, str]]:
        out = self.slurm("sinfo", "-N", "-h", "-o", "%N|%T|%E")
        return {p[0]: (p[1], p[2]) for line in out.splitlines() if len(p := line.split("|")) >= 3}

    def wait_idle(self, nodes: list[str], timeout: float) -> bool:
        return wait_for(lambda: all(self.states().get(n, ("",))[0].rstrip("*") == "idle" for n in nodes),
                        timeout, interval=1.0)

    def edit_site(self, fn) -> None:
        data = tomllib.loads(self.dc.site_path.read_text())
        fn(data)
        devsite.write(data, self.dc.site_path, source=self.dc.record()["source_site"])

    # ------------------------------------------------------------------ steps
    def bring_up(self, s: Step) -> None:
        rec = self.dc.record() or {}
        reuse = self.args.reuse and rec.get("nodes") == self.n and all(d.alive() for d in self.dc.daemons())
        if not reuse:
            self.dc.down(purge=True)
        s.extra["reused"] = reuse
        t0 = time.monotonic()
        status = self.dc.up(nodes=self.n, port_base=self.args.port_base, bmc=True, ssh=True, central_store=True,
                            wide_ports=True, timeout=900, progress=lambda m: print(f"  {m}", flush=True))
        up_s = time.monotonic() - t0
        from slurmadm.monitor.stack import MonitorStack

        t1 = time.monotonic()
        MonitorStack(self.dc).up(timeout=300 + self.n, progress=lambda m: print(f"  {m}", flush=True))
        mon_s = time.monotonic() - t1
        nodes = status["nodes"]
        s.check(len(nodes) == self.n and all(v.rstrip("*") == "idle" for v in nodes.values()),
                f"{sum(v.rstrip('*') == 'idle' for v in nodes.values())}/{self.n} nodes idle")
        s.extra.update(up_s=round(up_s, 1), monitor_up_s=round(mon_s, 1), port_plan=self.dc.record()["port_plan"],
                       memory=self.memory())

    def memory(self) -> dict:
        """RSS of every daemon of the cluster (and what runs below it), by kind."""
        kinds: dict[str, list[int]] = {}
        from slurmadm.monitor.stack import MonitorStack

        daemons = self.dc.daemons() + MonitorStack(self.dc).daemons()
        for d in daemons:
            pid = d.pid()
            if pid is None:
                continue
            kind = re.sub(r"-b200-\d+$", "", d.name)
            kinds.setdefault(kind, []).append(sum(_rss_kib(p) for p in with_descendants({pid})))
        total = sum(sum(v) for v in kinds.values())
        out = {k: {"count": len(v), "total_mib": round(sum(v) / 1024, 1), "each_mib": round(statistics.mean(v) / 1024, 1)}
               for k, v in sorted(kinds.items())}
        per_node = sum(sum(v) for k, v in kinds.items() if len(v) == self.n)
        return {"by_kind": out, "total_mib": round(total / 1024), "per_node_mib": round(per_node / self.n / 1024, 1)}

    def config(self, s: Step) -> None:
        p = self.sm(s, "config", "apply", "--reason", "reference-site bench", "--json")
        s.check(p.returncode == 0, f"config apply exit {p.returncode}" + (f": {p.stderr.strip()[-200:]}" if p.returncode else ""))
        p = self.sm(s, "config", "apply", "--dry-run", "--json")
        s.check(p.returncode == 0, "second apply: exit 0")

    def accounts(self, s: Step) -> None:
        p = self.sm(s, "accounts", "apply", "--reason", "reference-site bench", "--json", timeout=900)
        s.check(p.returncode == 0, f"apply exit {p.returncode}" + (f": {p.stderr.strip()[-200:]}" if p.returncode else ""))
        p = self.sm(s, "accounts", "apply", "--dry-run", "--json", timeout=600)
        try:
            empty = json.loads(p.stdout)["changes"] == 0
        except (json.JSONDecodeError, KeyError, TypeError):
            empty = False
        s.check(p.returncode == 0 and empty, "second apply plans nothing" if empty else f"second plan: {p.stdout[:200]}")
        site = self.dc.site()
        s.extra["projects"] = len(site.projects)

    def _array(self, s: Step, tasks: int, tag: str) -> dict:
        out_dir = self.dc.p("bench", f"array-{tag}")
        out_dir.mkdir(parents=True, exist_ok=True)
        for f in out_dir.glob("*.out"):  # an earlier run's (--reuse)
            f.unlink()
        log = self.dc.p("bench", "prolog-times.log")
        log.unlink(missing_ok=True)
        # every node idle first (the previous array's nodes may still be completing), and each task
        # holds its node until every task has started (its output file exists) or 180 s passed: a
        # task that ended at once freed its node for one not yet started, and Slurm's main
        # scheduler starts at most default_queue_depth (100) tasks in one pass
        s.extra.setdefault("idle_before", {})[tag] = self.wait_idle(self.dc.nodes(), 180)
        barrier = (f'n=0; while [ "$(ls {shlex.quote(str(out_dir))} | wc -l)" -lt {tasks} ] && [ $n -lt 900 ];'
                   ' do sleep 0.2; n=$((n+1)); done')
        t0 = time.time()
        p = self.timed(s, ["sbatch", "--parsable", f"--array=0-{tasks - 1}", "-N1", "--exclusive", "--gres=gpu:8",
                           "-t", "00:05:00", "-J", f"ref-{tag}", "-o", f"{out_dir}/%a.out",
                           "--wrap", 'echo "$SLURMD_NODENAME ${CUDA_VISIBLE_DEVICES:-$SLURM_JOB_GPUS}"; ' + barrier])
        if p.returncode != 0:
            s.check(False, f"sbatch: {p.stderr.strip()}")
            return {}
        job = p.stdout.strip().split(";")[0]
        done = wait_for(lambda: not self.slurm("squeue", "-h", "-j", job, "-o", "%i").strip(), 300 + 2 * tasks,
                        interval=1.0)
        wall = time.time() - t0
        seen = {}
        for f in out_dir.glob("*.out"):
            parts = f.read_text().split()
            if len(parts) >= 2:
                seen[parts[0]] = len(parts[1].split(","))
        times = []
        for line in log.read_text().splitlines() if log.exists() else []:
            parts = line.split()
            if len(parts) == 5:
                times.append((int(parts[2]) / 1e9, int(parts[3]) / 1e9, int(parts[4]), parts[1]))
        walls = sorted((e - b) * 1000 for b, e, _, _ in times)
        starts = sorted(b for b, _, _, _ in times)
        # how many prologs ran at the same moment, at most
        events = sorted([(b, 1) for b, _, _, _ in times] + [(e, -1) for _, e, _, _ in times])
        conc = peak = 0
        for _, d in events:
            conc += d
            peak = max(peak, conc)
        gpus = sum(seen.values())
        s.check(done and len(seen) == tasks and gpus == 8 * tasks and len(times) == tasks
                and all(rc == 0 for *_, rc, _ in times),
                f"{tag}: {len(seen)} tasks on distinct nodes, {gpus} GPUs, {len(times)} prologs"
                f" ({sum(rc != 0 for *_, rc, _ in times)} failed)")
        return {"tasks": tasks, "gpus": gpus, "wall_s": round(wall, 1),
                "prolog_p50_ms": round(_pct(walls, 50)) if walls else None,
                "prolog_p99_ms": round(_pct(walls, 99)) if walls else None,
                "prolog_max_ms": round(walls[-1]) if walls else None,
                "prolog_start_spread_s": round(starts[-1] - starts[0], 2) if starts else None,
                "prologs_at_once": peak}

    def array(self, s: Step) -> None:
        hooks = self.dc.p("prolog_epilog")
        real, link = hooks / "prolog.real.sh", hooks / "prolog.sh"
        target = link.resolve()
        real.unlink(missing_ok=True)
        real.symlink_to(target)
        self.dc.p("bench").mkdir(exist_ok=True)
        wrapper = (
            "#!/bin/sh\n# bench/reference_site.py: the real prolog, timed as slurmd runs it\n"
            "s=$(/bin/date +%s%N)\n\"${0%/*}/prolog.real.sh\"\nrc=$?\ne=$(/bin/date +%s%N)\n"
            f"echo \"${{SLURM_JOB_ID:-}} ${{SLURMD_NODENAME:-}} $s $e $rc\" >> {shlex.quote(str(self.dc.p('bench', 'prolog-times.log')))}\n"
            "exit $rc\n")
        tmp = hooks / "prolog.sh.bench"
        tmp.write_text(wrapper)
        tmp.chmod(0o755)
        os.replace(tmp, link)
        try:
            s.extra["peer_4"] = self._array(s, PEER_NODES, "4")
            s.extra[f"all_{self.n}"] = self._array(s, self.n, str(self.n))
        finally:
            link.unlink(missing_ok=True)
            link.symlink_to(target)
            real.unlink(missing_ok=True)

    def _four(self) -> list[str]:
        site = self.dc.site()
        names = site.node_names
        parts = {n: frozenset(p.name for p in site.partitions if n in site.partition_nodes(p)) for n in names}
        for n in reversed(names):  # four nodes with the same partitions, from the end
            same = [m for m in reversed(names) if parts[m] == parts[n]]
            if len(same) >= 4:
                return sorted(same[:4])
        raise SystemExit("no four nodes share their partitions")

    def breaker(self, s: Step) -> None:
        four = self._four()
        site = self.dc.site()
        parts = [p for p in site.partitions if four[0] in site.partition_nodes(p)]
        smallest = min(len(site.partition_nodes(p)) for p in parts)
        old = site.health.drain_cap_fraction
        fraction = round(3.5 / smallest, 6)
        self.edit_site(lambda d: d["health"].__setitem__("drain_cap_fraction", fraction))
        # what is measured is the hooks' breaker: the monitoring stack's alert path (which drains
        # `alert-...` as soon as a node exporter shows the fault) is silenced for these four nodes
        # until the run ends, or it drains some first and the hooks find them drained already
        self._silence(four, "reference_site breaker step: the hooks' breaker is measured")
        t0 = time.time()
        try:
            for n in four:
                self.sm(s, "dev-cluster", "gpu-fault", n, "--gpu", "1", "--kind", "row-remap-failed",
                        "--state-dir", str(self.dc.state_dir))
            said = {}
            for n in four:  # one after another, as four periodic runs that do not race
                p = self.timed(s, [str(self.dc.p("prolog_epilog", "healthcheck.sh"))], env={"SLURMD_NODENAME": n},
                               timeout=120)
                said[n] = f"exit {p.returncode}: {(p.stdout + p.stderr).strip()[-300:]}"
            st = self.states()
            drained = [n for n in four if st[n][1].startswith("slurmadm: row-remap:")]
            held = [n for n in four if n not in drained]
            alerts = []  # the hooks' own records (with a central store, each node's store has its events)
            log = Path(self.dc.site().health.results_log)
            for line in log.read_text().splitlines() if log.exists() else []:
                row = json.loads(line)
                if row.get("event") == "alert" and row.get("ts", 0) >= t0 and "breaker" in row.get("reason", ""):
                    alerts.append(row["node"])
            ok = len(drained) == 3 and len(held) == 1 and held[0] in alerts
            s.check(ok, f"{compress(drained) or 'none'} drained, {compress(held) or 'none'} held back "
                        f"(breaker alert for {compress(alerts) or 'none'}); cap 3 of {smallest} (fraction {fraction:g})")
            if not ok:
                s.extra["hooks"] = said
        finally:
            for n in four:
                self.sm(s, "dev-cluster", "gpu-fault", n, "--clear", "--state-dir", str(self.dc.state_dir))
            self.edit_site(lambda d: d["health"].__setitem__("drain_cap_fraction", old))
            for n in four:
                self.slurm("scontrol", "update", f"nodename={n}", "state=resume", timeout=30) if \
                    self.states()[n][1].startswith("slurmadm:") else None

    def _silence(self, nodes: list[str], comment: str) -> None:
        """An Alertmanager silence (its v2 API) on alerts of `nodes` for the rest of the run."""
        from datetime import datetime, timedelta, timezone

        from slurmadm.monitor.stack import MonitorStack

        now = datetime.now(timezone.utc)
        body = json.dumps({"matchers": [{"name": "node", "value": "|".join(nodes), "isRegex": True, "isEqual": True}],
                           "startsAt": now.isoformat(), "endsAt": (now + timedelta(hours=6)).isoformat(),
                           "createdBy": "bench/reference_site.py", "comment": comment}).encode()
        req = urllib.request.Request(MonitorStack(self.dc).urls()["alertmanager"] + "/api/v2/silences", data=body,
                                     headers={"Content-Type": "application/json"}, method="POST")
        with urllib.request.urlopen(req, timeout=30) as r:  # noqa: S310 - loopback
            if r.status != 200:
                raise RuntimeError(f"Alertmanager refused the silence: HTTP {r.status}")

    def scrape(self, s: Step) -> None:
        from slurmadm.monitor.stack import MonitorStack

        urls = MonitorStack(self.dc).urls()
        nodes = self.dc.nodes()

        def get(url):
            t = time.monotonic()
            with urllib.request.urlopen(url, timeout=30) as r:  # noqa: S310 - loopback
                return r.read().decode(), time.monotonic() - t

        t0 = time.monotonic()
        with ThreadPoolExecutor(16) as pool:
            got = dict(zip(nodes, pool.map(lambda n: get(urls[f"exporter_{n}"]), nodes)))
        node_wall = time.monotonic() - t0
        head, head_s = get(urls["head_exporter"])
        gpus = {n: sum(1 for line in text.splitlines() if line.startswith("slurmadm_gpu_info{")) for n, (text, _) in got.items()}
        head_nodes = set(re.findall(r'^slurmadm_node_partition_info\{[^}]*node="([^"]+)"', head, re.M))
        lat = sorted(t for _, t in got.values())
        s.check(all(v == 8 for v in gpus.values()) and len(gpus) == self.n,
                f"{sum(v == 8 for v in gpus.values())}/{self.n} node exporters with 8 GPUs")
        s.check(head_nodes == set(nodes), f"head exporter: {len(head_nodes)} nodes")
        s.extra.update(all_nodes_s=round(node_wall, 2), node_p50_ms=round(_pct(lat, 50) * 1000),
                       node_p99_ms=round(_pct(lat, 99) * 1000), head_ms=round(head_s * 1000),
                       node_kib=round(statistics.mean(len(t) for t, _ in got.values()) / 1024, 1),
                       head_kib=round(len(head) / 1024, 1))

    def top(self, s: Step) -> None:
        p = self.sm(s, "top", "--once", timeout=300)
        s.check(p.returncode == 0 and p.stdout.strip() != "", f"top --once exit {p.returncode}, {len(p.stdout.splitlines())} lines")
        p = self.sm(s, "jobs", "idle", "--json", timeout=300)
        try:
            found = json.loads(p.stdout)
            s.check(p.returncode in (0, 1), f"jobs idle exit {p.returncode}")
            s.extra["idle_found"] = len(found) if isinstance(found, list) else len(found.get("jobs", []))
        except json.JSONDecodeError:
            s.check(False, f"jobs idle: no JSON (exit {p.returncode}: {p.stderr.strip()[-200:]})")

    def drift(self, s: Step) -> None:
        victim = self.dc.nodes()[self.n // 2]
        self.sm(s, "dev-cluster", "set-software", victim, "driver=999.99.99", "--state-dir", str(self.dc.state_dir))
        try:
            p = self.sm(s, "fleet", "drift", "--json", timeout=900)
            rows = _json_or_wrong(s, p, "fleet drift")
            if rows is None:
                return
            text = json.dumps(rows)
            drifted = sorted(set(re.findall(r"b200-\d{3}", json.dumps(_drifted(rows)))))
            s.check(p.returncode == 1 and drifted == [victim],
                    f"exit {p.returncode}, drifted: {compress(drifted) or 'none'} (expected {victim})")
            s.extra["json_kib"] = round(len(text) / 1024, 1)
        finally:
            base = self.dc.site().software.driver_version
            self.sm(s, "dev-cluster", "set-software", victim, f"driver={base}", "--state-dir", str(self.dc.state_dir))

    def bmc(self, s: Step) -> None:
        nodes = self.dc.nodes()
        p = self.sm(s, "bmc", "power", "status", compress(nodes), "--json", timeout=300)
        try:
            rows = json.loads(p.stdout)
            on = sum(1 for r in rows if r.get("power") == "on")
        except (json.JSONDecodeError, AttributeError):
            on = -1
        s.check(p.returncode == 0 and on == self.n, f"power status: {on}/{self.n} on (exit {p.returncode})")
        t_status = s.extra["power_status_s"] = None
        victim = nodes[self.n // 4]  # clear of the breaker step's four (the last ones) and the drift node
        d = self.dc.daemon(f"slurmd-{victim}")
        pid = d.pid()
        os.kill(pid, signal.SIGSTOP)  # a hung node: Slurm marks it DOWN after SlurmdTimeout
        t0 = time.monotonic()
        try:
            down = wait_for(lambda: self.states().get(victim, ("",))[0].rstrip("*").startswith("down"), 180,
                            interval=1.0)
            grace = self.dc.site().bmc.recover.grace_s
            wait_for(lambda: False, grace + 1)  # past the grace period (nothing to poll: time itself)
            down_s = time.monotonic() - t0
            p = self.sm(s, "bmc", "recover", "--nodes", victim, "--reason", "reference-site bench", timeout=600)
            back = self.wait_idle([victim], 180)
            m = re.search(r"for (\d+) s", p.stdout + p.stderr)
            said = int(m.group(1)) if m else None
            s.check(down and p.returncode == 0 and back and said is not None and said > 0,
                    f"recover {victim}: exit {p.returncode}, idle again: {back}, reported down {said} s "
                    f"(frozen {down_s:.0f} s before)")
            s.extra["recover_out"] = (p.stdout + p.stderr).strip()[-300:]
        finally:
            if d.pid() == pid:
                os.kill(pid, signal.SIGCONT)
        del t_status

    def ship(self, s: Step) -> None:
        nodes = self.dc.nodes()

        def one(n):
            return self.sm(s, "store", "ship", "--node", n, "--json", timeout=600)

        with ThreadPoolExecutor(8) as pool:
            res = list(pool.map(one, nodes))
        bad = [n for n, p in zip(nodes, res) if p.returncode != 0]
        client = "mariadb"
        sql = ("SELECT COUNT(DISTINCT origin) FROM check_results; SELECT COUNT(*) FROM check_results;")
        q = subprocess.run([client, "--no-defaults", "-N", "-S", str(self.dc.p("mysql", "mysqld.sock")), "-u", "root",
                            devsite.CENTRAL_DB, "-e", sql], capture_output=True, text=True, timeout=60)
        vals = q.stdout.split()
        origins, rows = (int(vals[0]), int(vals[1])) if len(vals) >= 2 else (-1, -1)
        left = 0
        import sqlite3

        for n in nodes:
            path = self.dc.p("stores", f"{n}.db")
            if path.exists():
                with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as c:
                    left += c.execute("SELECT COUNT(*) FROM outbox").fetchone()[0]
        s.check(not bad and origins >= self.n and left == 0,
                f"{self.n - len(bad)}/{self.n} shipped, {origins} origins in check_results ({rows} rows), "
                f"{left} rows still queued" + (f"; failed: {compress(bad)}: {res[nodes.index(bad[0])].stderr.strip()[-200:]}" if bad else ""))

    def burnin(self, s: Step) -> None:
        """Every node burnt in, in sweeps of --burnin-group nodes (burnin.max_nodes: a sweep runs
        all its node jobs at once, each importing torch, ~140 MiB of PSS: 128 at once would need
        ~18 GiB beside the cluster's 9 GiB on a 24 GiB machine). Each sweep takes half its nodes
        from one scalable unit and half from the next, so it pairs within and across units; the
        verdict: every node passed once, and every sweep had pairs of both kinds."""
        site = self.dc.site()
        units = [list(members) for _, members in site.scalable_units]
        k = max(2, min(self.args.burnin_group, self.n))
        groups: list[list[str]] = []
        for a, b in zip(units[0::2], units[1::2] + [[]] * (len(units) % 2)):
            half = k // 2 if b else k
            for i in range(0, max(len(a), len(b)), half):
                groups.append(a[i:i + half] + b[i:i + half])
        gpus = site.profile(site.nodes[0].profile).gpus.count

        def widen(d: dict) -> None:  # the example's burnin QOS holds burn-in to 8 nodes (grp_gpus = 64)
            d["burnin"]["max_nodes"] = k
            for q in d.get("qos", []):
                if q["name"] == d["burnin"].get("qos", "burnin") and "grp_gpus" in q:
                    q["grp_gpus"] = max(q["grp_gpus"], k * gpus)

        self.edit_site(widen)
        p = self.sm(s, "accounts", "apply", "--reason", "reference-site bench: burn-in of every node", "--json",
                    timeout=600)
        if p.returncode != 0:
            s.check(False, f"accounts apply for the burn-in QOS: exit {p.returncode}: {p.stderr.strip()[-200:]}")
            return
        passed: set[str] = set()
        sweeps = []
        for g in groups:
            t0 = time.monotonic()
            p = self.sm(s, "burnin", "run", "--nodes", compress(g), "--json", timeout=1800)
            wall = time.monotonic() - t0
            out = _json_or_wrong(s, p, "burnin run")
            if out is None:
                return
            ok_nodes = [n["node"] for n in out.get("nodes", []) if n.get("verdict") == "pass"]
            passed.update(ok_nodes)
            kinds = dict(Counter(pr.get("kind", "?") for pr in out.get("pairs", []) if pr.get("status") == "pass"))
            sweeps.append({"nodes": compress(g), "exit": p.returncode, "passed": len(ok_nodes),
                           "wall_s": round(wall, 1), "pairs_passed": kinds})
            s.check(p.returncode == 0 and len(ok_nodes) == len(g),
                    f"sweep of {compress(g)}: exit {p.returncode}, {len(ok_nodes)}/{len(g)} passed")
            if len(units) > 1:
                s.check(bool(kinds.get("intra-unit")) and bool(kinds.get("cross-unit")),
                        f"sweep of {compress(g)}: pairs passed {kinds} (want intra-unit and cross-unit)")
        s.check(passed == set(self.dc.nodes()),
                f"{len(passed)}/{self.n} nodes burnt in over {len(groups)} sweeps of up to {k}"
                + (f"; not: {compress(set(self.dc.nodes()) - passed)}" if passed != set(self.dc.nodes()) else ""))
        s.extra["sweeps"] = sweeps
        s.extra["group"] = k

    # ------------------------------------------------------------------ driver
    def run(self) -> int:
        only = set(self.args.only.split(",")) if self.args.only else set(STEPS)
        fns = {"bring-up": self.bring_up, "config": self.config, "accounts": self.accounts, "array": self.array,
               "breaker": self.breaker, "scrape": self.scrape, "top": self.top, "drift": self.drift, "bmc": self.bmc,
               "ship": self.ship, "burnin": self.burnin}
        t0 = time.monotonic()
        try:
            for name in STEPS:
                if name not in only:
                    continue
                print(f"== {name}", flush=True)
                with Step(name) as s:
                    try:
                        fns[name](s)
                    except Exception as exc:  # a step that breaks is a wrong verdict, the run goes on
                        s.check(False, f"{type(exc).__name__}: {exc}")
                self.steps.append(s)
                print(json.dumps(s.row(), sort_keys=True), flush=True)
                if name == "bring-up" and not s.ok:
                    break
        finally:
            if not self.args.keep:
                from slurmadm.monitor.stack import MonitorStack

                t = time.monotonic()
                try:
                    MonitorStack(self.dc).down()
                except Exception:  # noqa: BLE001 - the cluster's down stops what is left
                    pass
                self.dc.down(purge=True)
                print(f"== down in {time.monotonic() - t:.1f} s", flush=True)
        rows = [s.row() for s in self.steps]
        result = {"nodes": self.n, "gpus": 8 * self.n, "total_s": round(time.monotonic() - t0, 1),
                  "load_avg": os.getloadavg(), "steps": rows}
        if self.args.json:
            Path(self.args.json).write_text(json.dumps(result, indent=2, sort_keys=True) + "\n")
        print(table(rows))
        return 0 if all(s.ok for s in self.steps) else 1


def _drifted(rows):
    """The parts of `fleet drift --json` that name drifted nodes (shape-tolerant)."""
    if isinstance(rows, dict):
        for key in ("drift", "drifted", "rows", "facts"):
            if key in rows:
                return _drifted(rows[key])
        return [rows]
    return [r for r in rows if not isinstance(r, dict) or r.get("status", r.get("verdict", "drift")) not in ("ok", "agree")]


def _rss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _json_or_wrong(s, p, what: str):
    """A command's --json answer, or None after marking the step wrong with what it printed."""
    try:
        return json.loads(p.stdout)
    except json.JSONDecodeError:
        s.check(False, f"{what}: no JSON (exit {p.returncode}: {p.stderr.strip()[-300:]})")
        return None


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    values = sorted(values)
    k = (len(values) - 1) * q / 100
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def table(rows: list[dict]) -> str:
    lines = [f"{'step':10} {'wall s':>8} {'CPU s':>8} {'RSS MiB':>8}  ok     verdict"]
    for r in rows:
        lines.append(f"{r['step']:10} {r['wall_s']:8.1f} {r['cpu_s']:8.1f} {r['peak_rss_mib']:8.1f}  "
                     f"{str(r['ok']):6} {r['verdict']}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, default=128)
    ap.add_argument("--port-base", type=int, default=35000)
    ap.add_argument("--state-dir", default="/tmp/slurmadm-ref")
    ap.add_argument("--json", default=None, help="write the results here")
    ap.add_argument("--only", default=None, help=f"comma-separated steps ({','.join(STEPS)}); bring-up always runs first")
    ap.add_argument("--keep", action="store_true", help="leave the cluster up afterwards")
    ap.add_argument("--burnin-group", type=int, default=32,
                    help="nodes per burn-in sweep (burnin.max_nodes); the sweeps together cover every node")
    ap.add_argument("--reuse", action="store_true", help="use the running cluster of --nodes nodes in --state-dir "
                    "(bring-up then measures only `up` on it and the monitoring stack)")
    args = ap.parse_args(argv)
    if args.only and "bring-up" not in args.only.split(","):
        args.only += ",bring-up"
    if os.geteuid() != 0:
        print("reference_site.py: must run as root (dev-cluster up)", file=sys.stderr)
        return 2
    return Bench(args).run()


if __name__ == "__main__":
    sys.exit(main())
