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
- Slurm: no slurmctld is needed. `repair run` asks Slurm (sinfo/scontrol) for the nodes, so the
  CLI rows run with a stub Slurm first on PATH (`stub_slurm`): shell scripts that print Slurm
  22.05's own `sinfo --json` shape for the `--nodes` nodes, every node with an incident not closed
  drained by health and still running a job (the ladder waits: nothing to do), the rest idle.
  Each stub call is `cat` of a file; what the stub was asked is printed, and a command it does
  not know fails the bench (a change in what `repair run` asks shows up here).
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


STUB = """#!/bin/sh
# stub Slurm for bench/repair_status.py: answers from files beside it, logs what it was asked
echo "$(basename "$0") $*" >> "{log}"
case "$(basename "$0") $*" in
  "sinfo --version") echo "slurm 22.05.8" ;;
  "sinfo --json") cat "{dir}/sinfo.json" ;;
  "scontrol show reservation -o") echo "No reservations in the system" ;;
  *) echo "stub slurm: not known: $(basename "$0") $*" >&2; exit 1 ;;
esac
"""


class _Slurm:
    """In-process stand-in for the stub's answers, to settle them (see `stub_slurm`)."""

    def __init__(self, rows: list[dict]):
        self.rows = rows

    def nodes(self, names=None):
        from slurmadm.slurm.parse import node_from_json

        return [node_from_json(r) for r in self.rows if names is None or r["name"] in names]


def settled(site, store_path: Path, rows: list[dict]) -> list[dict]:
    """The nodes as Slurm shows them once earlier runs took their steps: a lemon's or an RMA
    candidate's drain reason is repair's (the first runs set it), so the ladder has nothing to do."""
    from slurmadm.repair import run as rr

    by = {r["name"]: r for r in rows}
    with Store(store_path) as store:
        ex = rr.Executor(site, _Slurm(rows), store)
        for _ in range(3):
            acting = [x for x in ex.plan() if x.acts]
            if not acting:
                return rows
            for x in acting:
                if x.reason and x.do in ("lemon", "rma"):
                    by[x.node].update(reason=x.reason, state_flags=["DRAIN"])
    raise SystemExit(f"the stub's nodes do not settle: {[(x.node, x.do) for x in acting][:4]}")


def stub_slurm(tmp: Path, site, nodes: int) -> tuple[Path, Path]:
    """A directory of stub `sinfo`/`scontrol` and the file they log to (see the docstring)."""
    import sqlite3

    d = tmp / "slurm-bin"
    d.mkdir()
    log = tmp / "slurm-asked.log"
    store_path = tmp / "store.db"
    db = sqlite3.connect(store_path)
    busy = {r[0] for r in db.execute("SELECT DISTINCT node FROM incidents WHERE state != 'closed'")}
    db.close()
    out = []
    for i in range(nodes):
        name = f"b200-{i + 1:03d}"
        drained = name in busy
        out.append({"name": name, "hostname": name, "address": name, "state": "mixed" if drained else "idle",
                    "state_flags": ["DRAIN"] if drained else [], "partitions": ["gpu"], "gres": "gpu:b200:8",
                    "gres_used": "gpu:b200:4(IDX:0-3)" if drained else "gpu:b200:0(IDX:N/A)", "cpus": 224,
                    "alloc_cpus": 64 if drained else 0, "real_memory": 2_000_000, "features": "b200,ib400",
                    "reason": "slurmadm: xid: GPU1 XID 46 ROBUST_CHANNEL_GPU_TIMEOUT_ERROR (RESET_GPU) [prolog]"
                    if drained else "", "reason_set_by_user": "root" if drained else None,
                    "boot_time": 1795974915, "slurmd_version": "22.05.8"})
    out = settled(site, store_path, out)
    (d / "sinfo.json").write_text(json.dumps({"meta": {}, "errors": [], "nodes": out}))
    for cmd in ("sinfo", "scontrol"):
        f = d / cmd
        f.write_text(STUB.format(log=log, dir=d))
        f.chmod(0o755)
    return d, log


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
        slurm_bin, asked = stub_slurm(tmp, load_site(str(f)), a.nodes)
        env = {**os.environ, "SLURMADM_SITE": str(f), "SLURMADM_SLURM_BACKEND": "cli",
               "PATH": f"{slurm_bin}{os.pathsep}{os.environ.get('PATH', '')}"}
        cli = [sys.executable, "-m", "slurmadm"]

        def status_cli():
            p = subprocess.run([*cli, "repair", "status", "--json"], env=env, capture_output=True, text=True,
                               timeout=120, check=True)
            return json.loads(p.stdout)

        def run_cli():
            p = subprocess.run([*cli, "repair", "run", "--json"], env=env, capture_output=True, text=True,
                               timeout=120)
            if p.returncode != 0:
                raise SystemExit(f"repair run: exit {p.returncode}: {p.stderr.strip()[-400:]}")
            report = json.loads(p.stdout)
            acting = [x for x in report["plan"] if x["step"] not in ("wait", "hold", "skip", "none")]
            if acting or report["done"]:
                raise SystemExit(f"repair run was to have nothing to do; it planned {acting[:3]}")

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
        asked.write_text("")
        run_cli()
        asked_once = ", ".join(dict.fromkeys(asked.read_text().splitlines()))
        rows = [("repair status --json (CLI)", timed(status_cli, a.repeat)),
                ("repair status, in-process part", timed(status_inproc, a.repeat)),
                ("repair run --json, nothing new (CLI)", timed(run_cli, a.repeat)),
                ("peer: plain query of open incidents", timed(peer_query, a.repeat)),
                ("peer: python -c pass", timed(python_start, a.repeat))]
    print(f"{a.nodes} nodes, {a.incidents} past incidents, {shown} shown by status; median of {a.repeat}")
    print(f"stub Slurm asked (per idle run): {asked_once}")
    print(f"{'':40s} {'wall':>8s} {'cpu':>8s}")
    for name, (wall, busy) in rows:
        print(f"{name:40s} {wall:7.3f}s {busy:7.3f}s")
    worst = max(rows[0][1][0], rows[2][1][0])
    print(f"status and idle run under 1 s (wall): {'PASS' if worst < 1.0 else 'FAIL'} ({worst:.3f} s; "
          f"load average {os.getloadavg()[0]:.1f})")
    return 0 if worst < 1.0 else 1


if __name__ == "__main__":
    sys.exit(main())
