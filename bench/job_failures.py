#!/usr/bin/env python3
"""`slurmadm jobs failures --since 30d` over 50,000 job runs, and `slurmadm report reliability
--since 30d` at 128 nodes, beside a bare `sacct` of the same range (issue 36: a few seconds).

    .venv/bin/python bench/job_failures.py [--runs 50000] [--nodes 128] [--days 30] [--repeat 3]

- Fill: a fake `sacct` (a shell script that prints a file, and answers --version as 22.05.8)
  whose output is `--runs` job runs over `--days` days on `--nodes` nodes in the text shape
  `slurmadm.slurm.sacct` asks for (each allocation with its batch and one srun step, 1-4 nodes,
  8 GPUs a node; 4% FAILED exit 1, 1% NODE_FAIL, 0.5% OUT_OF_MEMORY, 0.5% requeued, the rest
  COMPLETED); one SQLite store with a health run per node every 15 min for the whole range
  (the hour buckets a join needs to know a node was watched), an XID failure and a drain for
  every 4th NODE_FAIL, and 200 incidents (closed after 4 h) with their step events.
- Measured (median of --repeat, wall and CPU of the child): the whole CLI in a child process
  (`jobs failures --since 30d --json`, `report reliability --since 30d --json --html FILE`), and
  the peer: the same fake `sacct` alone (what a bare `sacct` of the range costs on top of
  slurmdbd's own time, here reading the file), so the CLI's share is the difference.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

import tomli_w

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from slurmadm.slurm.sacct import BASE_FIELDS, sacct_time  # noqa: E402
from slurmadm.store import Store  # noqa: E402

DAY = 86400.0


def fill(tmp: Path, runs: int, nodes: int, days: int, now: float) -> dict[str, int]:
    rnd = random.Random(36)
    names = [f"b200-{i + 1:03d}" for i in range(nodes)]
    since = now - days * DAY
    lines, counts = [], {"COMPLETED": 0, "FAILED": 0, "NODE_FAIL": 0, "OUT_OF_MEMORY": 0, "REQUEUED": 0}
    node_fails = []
    for k in range(runs):
        start = since + rnd.random() * (days * DAY - 7200)
        length = rnd.randint(60, 6 * 3600)
        end = min(start + length, now - 60)
        n = rnd.choice((1, 1, 1, 2, 4))
        first = rnd.randrange(0, nodes - n + 1)
        nl = names[first] if n == 1 else f"b200-[{first + 1:03d}-{first + n:03d}]"
        x = rnd.random()
        state, code = ("FAILED", "1:0") if x < 0.04 else ("NODE_FAIL", "0:0") if x < 0.05 else \
            ("OUT_OF_MEMORY", "0:125") if x < 0.055 else ("REQUEUED", "0:0") if x < 0.06 else ("COMPLETED", "0:0")
        counts[state] += 1
        if state == "NODE_FAIL":
            node_fails.append((names[first], end))
        jid = str(100000 + k)
        s, e = sacct_time(start), sacct_time(end)
        tres = f"billing={8 * n},cpu={16 * n},gres/gpu={8 * n},mem={64 * n}G,node={n}"
        lines.append(f"{jid}|{jid}|train-{k % 97}|user{k % 40}|proj{k % 12}|gpu|normal|{state}|{code}|0:0|None|"
                     f"{s}|{s}|{e}|{int(end - start)}|{nl}|{tres}")
        lines.append(f"{jid}.batch|{jid}.batch|batch||proj{k % 12}|||{state if state != 'REQUEUED' else 'CANCELLED'}|"
                     f"{code}|||{s}|{s}|{e}|{int(end - start)}|{names[first]}|cpu=16,gres/gpu=8,mem=64G,node=1")
        lines.append(f"{jid}.0|{jid}.0|python||proj{k % 12}|||{state if state != 'REQUEUED' else 'CANCELLED'}|"
                     f"{code}|||{s}|{s}|{e}|{int(end - start)}|{nl}|{tres}")
    out = tmp / "sacct.out"
    out.write_text("\n".join(lines) + "\n")
    bindir = tmp / "bin"
    bindir.mkdir()
    sacct = bindir / "sacct"
    sacct.write_text(f"#!/bin/sh\n[ \"$1\" = --version ] && {{ echo 'slurm 22.05.8'; exit 0; }}\nexec cat {out}\n")
    sacct.chmod(0o755)
    with Store(tmp / "store.db") as store, store.transaction() as db:
        rows = [(t, f"p{i}", node, "periodic", "xid", "pass", "drain", "", None, 1.0)
                for i, node in enumerate(names) for t in range(int(since - 3600), int(now), 900)]
        for j, (node, end) in enumerate(node_fails[::4]):
            rows.append((end - 30, f"f{j}", node, "periodic", "xid", "fail", "drain",
                         "GPU3 XID 79 ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS (RESTART_BM)", None, 1.0))
        db.executemany("INSERT INTO check_results (ts, run_id, node, context, check_id, status, severity, detail, "
                       "value, duration_ms) VALUES (?,?,?,?,?,?,?,?,?,?)", rows)
        db.executemany("INSERT INTO events (ts, actor, action, target, reason, detail) VALUES (?,?,?,?,?,?)",
                       [(end - 20, "bench", "node.drain", node, "slurmadm: xid: GPU3 XID 79 [periodic]", "{}")
                        for node, end in node_fails[::4]])
        inc = []
        for j in range(200):
            t = since + j * (days * DAY / 200)
            inc.append((f"rb{j:08d}", names[j % nodes], "gpu", f"SER{j}", "3", "RESTART_BM", "closed", "resume", "ok",
                        t, t + 4 * 3600, t + 4 * 3600, json.dumps([{"xid": 79}])))
        db.executemany("INSERT INTO incidents (id, node, part_kind, part_key, slot, class, state, step, outcome, "
                       "opened_ts, updated_ts, closed_ts, evidence) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?)", inc)
        db.executemany("INSERT INTO incident_events (incident_id, ts, kind, state, step) VALUES (?,?,?,?,?)",
                       [(r[0], r[9] + 3600, "step", "rebooting", "reboot") for r in inc])
    counts["health_rows"] = len(rows)
    return counts


def timed(argv: list[str], env: dict[str, str], repeat: int) -> tuple[float, float, str]:
    def cpu() -> float:
        u = resource.getrusage(resource.RUSAGE_CHILDREN)
        return u.ru_utime + u.ru_stime

    wall, busy, out = [], [], ""
    for _ in range(repeat):
        c0, t0 = cpu(), time.perf_counter()
        p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=600, check=False)
        wall.append(time.perf_counter() - t0)
        busy.append(cpu() - c0)
        if p.returncode not in (0, 1):
            raise SystemExit(f"{argv}: exit {p.returncode}: {p.stderr[-500:]}")
        out = p.stdout
    return statistics.median(wall), statistics.median(busy), out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--runs", type=int, default=50000)
    ap.add_argument("--nodes", type=int, default=128)
    ap.add_argument("--days", type=int, default=30)
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="failures-bench-") as d:
        tmp = Path(d)
        data = tomllib.loads((REPO / "site.example.toml").read_text())
        data["store"] = {"path": str(tmp / "store.db")}
        (tmp / "site.toml").write_text(tomli_w.dumps(data))
        now = time.time()
        t0 = time.perf_counter()
        counts = fill(tmp, a.runs, a.nodes, a.days, now)
        print(f"filled in {time.perf_counter() - t0:.1f}s: {a.runs} runs on {a.nodes} nodes over {a.days} days "
              f"{json.dumps(counts)}")
        env = {**os.environ, "SLURMADM_SITE": str(tmp / "site.toml"), "PATH": f"{tmp / 'bin'}:{os.environ['PATH']}"}
        cli = [sys.executable, "-m", "slurmadm"]
        since = f"{a.days}d"
        peer = timed(["sacct", "-a", "--duplicates", "-n", "-P", "-o", BASE_FIELDS], env, a.repeat)
        fail = timed([*cli, "jobs", "failures", "--since", since, "--json"], env, a.repeat)
        got = json.loads(fail[2])
        rep = timed([*cli, "report", "reliability", "--since", since, "--json", "--html", str(tmp / "r.html")],
                    env, a.repeat)
        r = json.loads(rep[2])
        py = timed([sys.executable, "-c", "pass"], env, a.repeat)
        print(f"runs read: {got['runs']}, failed: {len(got['failures'])} {json.dumps(got['summary'])}")
        print(f"report: {len(r['days'])} days, ETTR {r['ettr']['value']}, costliest {r['costliest_nodes'][0]['node']}")
        print(f"{'what':44s} {'wall s':>8s} {'cpu s':>8s}")
        for name, (w, c, _) in (("peer: bare sacct of the range (fake: cat)", peer),
                                ("python -c pass", py),
                                (f"slurmadm jobs failures --since {since} --json", fail),
                                (f"slurmadm report reliability --since {since} --json --html", rep)):
            print(f"{name:44s} {w:8.2f} {c:8.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
