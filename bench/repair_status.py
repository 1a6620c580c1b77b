#!/usr/bin/env python3
"""`slurmadm repair status` at 128 nodes with 10,000 past incidents, and `repair run` with nothing
to do, beside a plain store query on the same file (issue 34: each under a second).

    .venv/bin/python bench/repair_status.py [--nodes 128] [--incidents 10000] [--repeat 5]

- Fill: one SQLite store as the head keeps it: `--incidents` past incidents over a year on
  `--nodes` nodes (rows, each with its evidence), all closed but the newest on every 8th node;
  GPU inventories in node_state; then one fresh drain per 16 nodes as health records it (a
  failing check result and a node.drain audit event), ingested in one pass (timed).
- status: the whole CLI in a child process (`slurmadm repair status --json`: interpreter start,
  site load, an ingest pass with nothing new, the open incidents with each one's next step), and
  its in-process part alone. run-idle: `slurmadm repair run --json` with nothing to do (the CLI).
- Peer: a plain query of the open incidents on the same file (sqlite3, no slurmadm), and
  `python -c pass` (the interpreter's own start), so the CLI's share is visible.
"""

from __future__ import annotations

import argparse
import json
import os
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

from slurmadm.repair import incidents, views  # noqa: E402
from slurmadm.site.load import load_site  # noqa: E402
from slurmadm.store import Store  # noqa: E402

YEAR = 365 * 86400.0
LINES = [("xid", "GPU{g} XID 46 ROBUST_CHANNEL_GPU_TIMEOUT_ERROR (RESET_GPU)"),
         ("xid", "GPU{g} XID 79 ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS (RESTART_BM)"),
         ("row-remap", "GPU{g} row remapping failed (corrected=0 uncorrected=2)"),
         ("nvlink", "GPU{g} NVLink 3 inactive"),
         ("infiniband", "mlx5_{g} port 1 state DOWN"),
         ("bmc-psu", "PSU{g} Status: failure detected")]


def site_file(tmp: Path) -> Path:
    data = tomllib.loads((REPO / "site.example.toml").read_text())
    data["store"] = {"path": str(tmp / "store.db")}
    f = tmp / "site.toml"
    f.write_text(tomli_w.dumps(data))
    return f


def fill(path: Path, nodes: int, n: int, now: float) -> float:
    """`n` incidents over a year on `nodes` nodes, all closed but the newest on every 8th node
    (written as rows), then one fresh drain per 16 nodes ingested the way `repair run` does."""
    names = [f"b200-{i + 1:03d}" for i in range(nodes)]
    classes = ["RESET_GPU", "GPU_LOST", "RMA", "NVLINK", "HCA", "PSU"]
    with Store(path) as store:
        with store.transaction() as db:
            db.executemany("INSERT INTO node_state (node, key, value, ts) VALUES (?,?,?,?)", [
                (node, "health.gpus", json.dumps([{"index": g, "bus_id": f"00000000:{0x18 + g:02X}:00.0",
                                                    "serial": f"1655{i:04d}{g}", "uuid": f"GPU-{i}-{g}"}
                                                   for g in range(8)]), now) for i, node in enumerate(names)])
            rows = []
            for k in range(n):
                i, ts, g = k % nodes, now - YEAR + k * (YEAR / n), (k // nodes) % 8
                cls = classes[k % len(classes)]
                serial = f"1655{i:04d}{g}"
                ev = json.dumps([{"ts": ts, "kind": "signal", "source": "health", "check": "xid",
                                  "line": f"GPU{g} XID 46 ROBUST_CHANNEL_GPU_TIMEOUT_ERROR (RESET_GPU)"},
                                 {"ts": ts + 600, "kind": "step", "step": "reset", "outcome": "ok"},
                                 {"ts": ts + 1800, "kind": "step", "step": "qualify", "outcome": "ok"}])
                rows.append((f"rb{k:09d}", names[i], "gpu", serial, str(g), serial, f"GPU-{i}-{g}", cls, "closed",
                             "resume", "ok", 0, ts, ts + 3600, ts + 3600, 1, ev, "health", "qualified"))
            db.executemany("INSERT INTO incidents (id, node, part_kind, part_key, slot, serial, uuid, class, state, "
                           "step, outcome, rung, opened_ts, updated_ts, closed_ts, count, evidence, source, why) "
                           "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)", rows)
            db.execute("UPDATE incidents SET state='open', step='', outcome='', closed_ts=NULL WHERE id IN "
                       "(SELECT max(id) FROM incidents GROUP BY node) AND (CAST(substr(node, 6) AS INTEGER) % 8) = 1")
            results, events = [], []
            for k, node in enumerate(names[::16]):
                check, text = LINES[k % len(LINES)]
                results.append((now, f"fresh-{k}", node, "prolog", check, "fail", "critical", text.format(g=1), None,
                                1.0))
                events.append((now, "bench", "node.drain", node, f"slurmadm: {check}: {text.format(g=1)} [prolog]",
                               json.dumps({"context": "prolog", "run_id": f"fresh-{k}"})))
            db.executemany("INSERT INTO check_results (ts, run_id, node, context, check_id, status, severity, "
                           "detail, value, duration_ms) VALUES (?,?,?,?,?,?,?,?,?,?)", results)
            db.executemany("INSERT INTO events (ts, actor, action, target, reason, detail) VALUES (?,?,?,?,?,?)",
                           events)
        started = time.perf_counter()
        got = incidents.ingest(store, now=now)
        took = time.perf_counter() - started
        open_n = store.query("SELECT count(*) AS n FROM incidents WHERE state != 'closed'")[0]["n"]
        total = store.query("SELECT count(*) AS n FROM incidents")[0]["n"]
    print(f"filled: {total} incidents on {nodes} nodes, {open_n} not closed; ingest of {len(events)} fresh drains "
          f"({got.opened} opened, {got.extended} extended): {took:.3f}s")
    return took


def timed(fn, repeat: int) -> tuple[float, float]:
    """Median wall time and median CPU time (this process and its children) of `fn`."""
    import resource

    def cpu() -> float:
        return sum(getattr(resource.getrusage(w), f) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)
                   for f in ("ru_utime", "ru_stime"))

    wall, busy = [], []
    for _ in range(repeat):
        c0, started = cpu(), time.perf_counter()
        fn()
        wall.append(time.perf_counter() - started)
        busy.append(cpu() - c0)
    return statistics.median(wall), statistics.median(busy)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=128)
    ap.add_argument("--incidents", type=int, default=10000)
    ap.add_argument("--repeat", type=int, default=5)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="repair-bench-") as d:
        tmp = Path(d)
        f = site_file(tmp)
        now = time.time()
        fill(tmp / "store.db", a.nodes, a.incidents, now)
        env = {**os.environ, "SLURMADM_SITE": str(f)}
        cli = [sys.executable, "-m", "slurmadm"]

        def status_cli():
            p = subprocess.run([*cli, "repair", "status", "--json"], env=env, capture_output=True, text=True,
                               timeout=120, check=True)
            return json.loads(p.stdout)

        def run_cli():
            subprocess.run([*cli, "repair", "run", "--json"], env=env, capture_output=True, text=True, timeout=120,
                           check=True)

        site = load_site(str(f))

        def status_inproc():
            with views.opened(site) as store:
                views.ingest(site, store)
                items = incidents.list_incidents(store, states=["open", "resetting", "rebooting", "qualifying",
                                                                "rma", "lemon"])
                rows = views.status_json(items, views.settings_of(site), store, time.time())
                views.status_rows(rows, time.time())

        def peer_query():
            import sqlite3

            db = sqlite3.connect(tmp / "store.db")
            db.execute("SELECT * FROM incidents WHERE state != 'closed' ORDER BY opened_ts").fetchall()
            db.close()

        def python_start():
            subprocess.run([sys.executable, "-c", "pass"], check=True)

        shown = len(status_cli())
        rows = [("repair status --json (CLI)", timed(status_cli, a.repeat)),
                ("repair status, in-process part", timed(status_inproc, a.repeat)),
                ("repair run --json, nothing new (CLI)", timed(run_cli, a.repeat)),
                ("peer: plain query of open incidents", timed(peer_query, a.repeat)),
                ("peer: python -c pass", timed(python_start, a.repeat))]
    print(f"{a.nodes} nodes, {a.incidents} past incidents, {shown} shown by status; median of {a.repeat}")
    print(f"{'':40s} {'wall':>8s} {'cpu':>8s}")
    for name, (wall, busy) in rows:
        print(f"{name:40s} {wall:7.3f}s {busy:7.3f}s")
    worst = max(rows[0][1][0], rows[2][1][0])
    print(f"status and idle run under 1 s (wall): {'PASS' if worst < 1.0 else 'FAIL'} ({worst:.3f} s; "
          f"load average {os.getloadavg()[0]:.1f})")
    return 0 if worst < 1.0 else 1


if __name__ == "__main__":
    sys.exit(main())
