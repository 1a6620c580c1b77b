#!/usr/bin/env python3
"""`slurmadm exporter` speed (issue 13), each case against a peer measured in the same run.

  node   scrape time and the exporter's CPU per scrape on a stand-in 8-GPU node (NVML read on
         every scrape: node_cache_s = 0) against Debian's prometheus-node-exporter scraping the
         same host, interleaved, N scrapes each; CPU from /proc/<pid>/stat (utime + stime).
  head   head scrape on a real dev cluster (head_cache_s = 0: every scrape reads Slurm) against
         the time of the same Slurm reads alone (the node listing, reservations, squeue, sshare,
         run as plain processes, no parsing). Goal: within 1.5x.
  scale  the head's parse-and-aggregate (node JSON + squeue rows -> every metric, rendered) on a
         10,000-node, 50,000-job cluster built from the real shapes of tests/fixtures (22.05
         sinfo --json and 24.11 scontrol --json nodes; the jobs from each release's real
         squeue --json, served as the squeue -O rows the head reads), rendered as a scrape is.
         Goal: under 1 s. Peer in the same run: the same jobs read from `squeue --json`.

Usage (root for `head`): .venv/bin/python bench/exporter.py [--cases node,head,scale] [--scrapes 50]
       [--port-base 35800] [--state-dir /tmp/bench-exporter] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
import urllib.request
from pathlib import Path

import tomli_w

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from slurmadm.devcluster import gpus  # noqa: E402
from slurmadm.devcluster.daemons import wait_for  # noqa: E402
from slurmadm.site import BUILTIN_PROFILES, parse_site  # noqa: E402

FIX = REPO / "tests" / "fixtures" / "slurm"
TICK = os.sysconf("SC_CLK_TCK")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def scrape(url: str) -> tuple[float, int]:
    t0 = time.perf_counter()
    with urllib.request.urlopen(url, timeout=30) as r:
        body = r.read()
    return time.perf_counter() - t0, len(body)


def series(body_url: str) -> int:
    with urllib.request.urlopen(body_url, timeout=30) as r:
        return sum(1 for line in r.read().decode().splitlines() if line and not line.startswith("#"))


def start(argv, env, url) -> subprocess.Popen:
    p = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def up() -> bool:
        if p.poll() is not None:
            raise SystemExit(f"{argv[0]} died: {p.stderr.read().decode()[-400:]}")
        try:
            return scrape(url)[1] > 0
        except OSError:
            return False
    assert wait_for(up, 60, interval=0.2)
    return p


def case_node(n: int) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="bench-exporter-"))
    try:
        lib = tmp / "lib"
        gpus.build_library(lib)
        data = tomllib.loads((REPO / "site.example.toml").read_text())
        data["store"] = {"path": str(tmp / "s.db")}
        data["health"].update(results_log=str(tmp / "h.jsonl"), xid_source=str(tmp / "gpus/{node}.kmsg"))
        data["monitor"] = {"node_cache_s": 0, "job_map_dir": str(tmp / "jobs")}
        (tmp / "site.toml").write_text(tomli_w.dumps(data))
        gpus.write_healthy(tmp / "gpus", "b200-001", BUILTIN_PROFILES["hgx-b200"], driver_version="570.133.20")
        env = {**os.environ, **gpus.env_for(tmp / "gpus", lib), "SLURMD_NODENAME": "b200-001"}
        ours_port, peer_port = free_port(), free_port()
        ours_url, peer_url = f"http://127.0.0.1:{ours_port}/metrics", f"http://127.0.0.1:{peer_port}/metrics"
        ours = start([sys.executable, "-m", "slurmadm", "exporter", "--mode", "node", "--node", "b200-001",
                      "--site", str(tmp / "site.toml"), "--listen", f"127.0.0.1:{ours_port}"], env, ours_url)
        peer_bin = shutil.which("prometheus-node-exporter") or "/usr/bin/prometheus-node-exporter"
        peer = start([peer_bin, f"--web.listen-address=127.0.0.1:{peer_port}"], env, peer_url)
        try:
            for url in (ours_url, peer_url):  # warm-up
                for _ in range(3):
                    scrape(url)
            times = {"slurmadm": [], "node-exporter": []}
            sizes = {}
            cpu0 = {"slurmadm": cpu_s(ours.pid), "node-exporter": cpu_s(peer.pid)}
            for _ in range(n):
                for name, url in (("slurmadm", ours_url), ("node-exporter", peer_url)):
                    t, size = scrape(url)
                    times[name].append(t)
                    sizes[name] = size
            cpu = {"slurmadm": cpu_s(ours.pid) - cpu0["slurmadm"], "node-exporter": cpu_s(peer.pid) - cpu0["node-exporter"]}
            out = {}
            for name, url in (("slurmadm", ours_url), ("node-exporter", peer_url)):
                ts = sorted(times[name])
                out[name] = {"median_ms": statistics.median(ts) * 1000, "p95_ms": ts[int(0.95 * (len(ts) - 1))] * 1000,
                             "cpu_ms_per_scrape": cpu[name] / n * 1000, "bytes": sizes[name], "series": series(url)}
            return out
        finally:
            for p in (ours, peer):
                p.terminate()
                p.wait(10)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def case_head(n: int, port_base: int, state_dir: str) -> dict:
    from slurmadm.devcluster.cluster import DevCluster
    from slurmadm.exporter.head import SQUEUE_ARGV
    from slurmadm.slurm.accounting import SSHARE_FIELDS

    dc = DevCluster(state_dir)
    dc.down(purge=True)
    dc.up(nodes=4, port_base=port_base)
    try:
        env = {**os.environ, **dc.env()}
        site = dc.site()
        # a few jobs, so squeue has rows
        from tests.integration.helpers import ensure_burnin_accounting

        ensure_burnin_accounting(env, site)
        for spec in ("--gres=gpu:8", "--gres=gpu:4", "--gres=gpu:8 -N2", "--gres=gpu:8 -N4"):
            subprocess.run(["sbatch", "-A", site.burnin.account, "-q", site.burnin.qos, "-p", "gpu", *spec.split(),
                            "--wrap", "sleep 600"], env=env, check=True, capture_output=True)
        site_file = Path(state_dir) / "bench-site.toml"
        data = tomllib.loads(dc.site_path.read_text())
        data["monitor"]["head_cache_s"] = 0
        data["monitor"]["read_deadline_s"] = 60
        site_file.write_text(tomli_w.dumps(data))
        port = free_port()
        url = f"http://127.0.0.1:{port}/metrics"
        p = start([sys.executable, "-m", "slurmadm", "exporter", "--mode", "head", "--site", str(site_file),
                   "--listen", f"127.0.0.1:{port}"], env, url)
        release = subprocess.run(["sinfo", "--version"], env=env, capture_output=True, text=True).stdout
        nodes_argv = ["scontrol", "--json", "show", "node"] if " 2" in release and int(
            release.split()[1].split(".")[0]) >= 24 else ["sinfo", "--json"]
        reads = [nodes_argv, ["scontrol", "show", "reservation", "-o"], SQUEUE_ARGV,
                 ["sshare", "-a", "-P", "-o", SSHARE_FIELDS]]
        try:
            for _ in range(2):
                scrape(url)
            ours, peer = [], []
            for _ in range(n):
                ours.append(scrape(url)[0])
                t0 = time.perf_counter()
                for argv in reads:
                    subprocess.run(argv, env=env, capture_output=True, check=True)
                peer.append(time.perf_counter() - t0)
            o, q = statistics.median(ours), statistics.median(peer)
            return {"scrape_median_ms": o * 1000, "reads_alone_median_ms": q * 1000, "ratio": o / q,
                    "reads": [" ".join(a[:3]) for a in reads]}
        finally:
            p.terminate()
            p.wait(10)
    finally:
        dc.down(purge=True)


def synth_nodes(release: str, count: int, rng: random.Random) -> str:
    """count nodes in the fixture's own JSON shape (its first node as the template)."""
    fixture = "sinfo.json" if release == "22.05" else "scontrol-show-node.json"
    doc = json.loads((FIX / release / fixture).read_text())
    template = doc["nodes"][0]
    nodes = []
    for i in range(count):
        n = dict(template)
        n["name"] = n["hostname"] = f"b200-{i + 1:05d}"
        roll = rng.random()
        state, reason = "mixed", ""
        if roll < 0.03:
            state, reason = "idle", f"slurmadm: xid: GPU{i % 8} XID 79 [prolog]"
        elif roll < 0.05:
            state, reason = "idle", "swap DIMM A3"
        elif roll < 0.06:
            state = "down"
        elif roll < 0.5:
            state = "allocated"
        if release == "22.05":
            n["state"] = state
            n["state_flags"] = ["DRAIN"] if reason else []
        else:
            n["state"] = [state.upper()] + (["DRAIN"] if reason else [])
        n["reason"] = reason
        nodes.append(n)
    doc["nodes"] = nodes
    return json.dumps(doc)


def _state(job: dict) -> str:
    state = job["job_state"]
    return state if isinstance(state, str) else next(s for s in state if s in ("RUNNING", "PENDING"))


def synth_jobs(release: str, count: int, nodes: int, rng: random.Random) -> tuple[dict, list[dict]]:
    """count jobs as `squeue --json` job objects of the release's real shape: the document and a
    running and a pending job of tests/fixtures/slurm/<release>/squeue.json (real output of Slurm
    22.05.8 / 24.11.5) as templates, with ids, accounts, users, GPU counts, node lists and pending
    reasons varied. (Their nested job_resources stays the template's: no parser here reads it.)"""
    doc = json.loads((FIX / release / "squeue.json").read_text())
    run_t = next(j for j in doc["jobs"] if _state(j) == "RUNNING")
    pend_t = next(j for j in doc["jobs"] if _state(j) == "PENDING")
    reasons = ["Priority", "Resources", "QOSGrpGRES", "AssocGrpGRESMinutes", "Dependency", "ReqNodeNotAvail"]
    jobs = []
    for i in range(count):
        g = rng.choice((1, 2, 4, 8))
        common = {"job_id": i + 1, "account": f"proj{i % 300:03d}", "user_name": f"user{i % 2000}", "partition": "gpu"}
        if rng.random() < 0.6:
            first = rng.randrange(1, nodes - 4)
            span = rng.choice((1, 1, 1, 2, 4))
            nl = f"b200-{first:05d}" if span == 1 else f"b200-[{first:05d}-{first + span - 1:05d}]"
            tres = f"cpu={g * 14},mem={g * 200}G,node={span},billing={g * 14},gres/gpu={g * span}"
            j = dict(run_t, **common, nodes=nl, tres_alloc_str=tres, tres_req_str=tres, name=f"train-{i}")
        else:
            tres = f"cpu={g * 14},mem={g * 200}G,node=1,billing={g * 14},gres/gpu={g}"
            j = dict(pend_t, **common, state_reason=rng.choice(reasons), tres_req_str=tres, name=f"sweep|{i}")
        jobs.append(j)
    return doc, jobs


def squeue_rows(jobs: list[dict]) -> str:
    """The same jobs as the head's `squeue -O` rows (exporter.head.SQUEUE_FIELDS; the shape of
    tests/fixtures/slurm/22.05/squeue-O-monitor.txt: tres-alloc shows a pending job's request)."""
    rows = []
    for j in jobs:
        state = _state(j)
        used = "1:02:03" if state == "RUNNING" else "0:00"
        rows.append(f"{j['job_id']}|{state}|{j['state_reason']}|{j['user_name']}|{j['account']}|{j['partition']}|"
                    f"{1 if j['batch_flag'] else 0}|{used}|{j['tres_alloc_str'] or j['tres_req_str']}|{j['nodes']}|"
                    f"{j['name']}")
    return "\n".join(rows) + "\n"


def case_scale(nodes: int, jobs: int, repeat: int) -> dict:
    """The head's parse + aggregate + render (what a scrape serves, slurmadm.exporter.exposition)
    from the node JSON and the `squeue -O` rows; the peer in the same run: the same with the same
    jobs read from `squeue --json` (jobs_from_squeue_json), run once (hundreds of MiB of JSON)."""
    from prometheus_client import CollectorRegistry

    from slurmadm.exporter.exposition import render
    from slurmadm.exporter.head import HeadCollector, Snapshot, jobs_from_squeue_json, parse_squeue
    from slurmadm.slurm.parse import nodes_from_json

    rng = random.Random(13)
    site = parse_site((REPO / "site.example.toml").read_text(), source="site.example.toml")

    def scrape_from(nodes_text: str, read_jobs) -> tuple[float, float, int]:
        t0, c0 = time.perf_counter(), time.process_time()
        snap = Snapshot(nodes_from_json(nodes_text, "bench"), read_jobs(), {})

        class Fixed:
            def read(self):
                return snap

        reg = CollectorRegistry(auto_describe=False)
        reg.register(HeadCollector(site=site, source=Fixed(), cache_s=0, deadline_s=60))
        body = render(reg)
        return time.perf_counter() - t0, time.process_time() - c0, len(body)

    out = {}
    for release in ("22.05", "24.11"):
        nodes_text = synth_nodes(release, nodes, rng)
        doc, objs = synth_jobs(release, jobs, nodes, rng)
        squeue_text = squeue_rows(objs)
        times, cpu = [], []
        for _ in range(repeat):
            t, c, size = scrape_from(nodes_text, lambda squeue_text=squeue_text: parse_squeue(squeue_text))
            times.append(t)
            cpu.append(c)
        squeue_json = json.dumps(dict(doc, jobs=objs))
        del objs
        peer_t, _, _ = scrape_from(nodes_text, lambda squeue_json=squeue_json: jobs_from_squeue_json(squeue_json))
        out[release] = {"median_s": statistics.median(times), "cpu_median_s": statistics.median(cpu),
                        "node_json_mib": len(nodes_text) / 2**20, "squeue_mib": len(squeue_text) / 2**20,
                        "metrics_kib": size / 1024, "squeue_json_s": peer_t,
                        "squeue_json_mib": len(squeue_json) / 2**20}
        del squeue_json
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default="node,head,scale")
    ap.add_argument("--scrapes", type=int, default=50)
    ap.add_argument("--port-base", type=int, default=35800)
    ap.add_argument("--state-dir", default="/tmp/bench-exporter")
    ap.add_argument("--nodes", type=int, default=10000)
    ap.add_argument("--jobs", type=int, default=50000)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    cases = args.cases.split(",")
    result = {}
    if "node" in cases:
        r = result["node"] = case_node(args.scrapes)
        if not args.json:
            print(f"node scrape ({args.scrapes} each, interleaved)   median     p95   CPU/scrape   series    bytes")
            for name, v in r.items():
                print(f"  {name:26} {v['median_ms']:8.1f}ms {v['p95_ms']:6.1f}ms {v['cpu_ms_per_scrape']:9.1f}ms "
                      f"{v['series']:8d} {v['bytes']:8d}")
    if "head" in cases:
        r = result["head"] = case_head(args.scrapes, args.port_base, args.state_dir)
        if not args.json:
            print(f"head scrape on the dev cluster: {r['scrape_median_ms']:.1f} ms; the same Slurm reads alone "
                  f"({', '.join(r['reads'])}): {r['reads_alone_median_ms']:.1f} ms; ratio {r['ratio']:.2f} "
                  f"(goal <= 1.5): {'PASS' if r['ratio'] <= 1.5 else 'FAIL'}")
    if "scale" in cases:
        r = result["scale"] = case_scale(args.nodes, args.jobs, 3)
        if not args.json:
            for rel in ("22.05", "24.11"):
                v = r[rel]
                print(f"head parse+aggregate+render, {args.nodes} nodes ({rel} JSON, {v['node_json_mib']:.1f} MiB) + "
                      f"{args.jobs} jobs (squeue -O rows, {v['squeue_mib']:.1f} MiB): {v['median_s']:.3f} s wall, "
                      f"{v['cpu_median_s']:.3f} s CPU (goal < 1 s): {'PASS' if v['median_s'] < 1 else 'FAIL'}")
                print(f"  the same jobs from {rel} squeue --json ({v['squeue_json_mib']:.0f} MiB): "
                      f"{v['squeue_json_s']:.2f} s")
    result["load_average"] = os.getloadavg()
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"load average during the run: {' '.join(f'{x:.2f}' for x in os.getloadavg())} "
              f"({os.cpu_count()} CPUs, shared with other work)")


if __name__ == "__main__":
    main()
