#!/usr/bin/env python3
"""Central store: a day of a 128-node fleet's periodic results shipped into MariaDB, the head's
`health status` read from it, and the prolog with shipping on vs local-only, in one run.

    slurmadm dev-cluster up --central-store [--port-base N --state-dir DIR]   # its MariaDB
    .venv/bin/python bench/store_ship.py [--state-dir DIR] [--nodes 128] [--runs 20]

- Ship: 128 local SQLite stores (as on 128 nodes), each with 14 checks every 5 minutes for a
  day (288 runs: 4,032 rows a node, 516,096 in all) queued by the triggers, shipped with
  slurmadm's shipper by 8 processes at once into a fresh database of the dev cluster's MariaDB.
  Peer: the naive shipper (one INSERT and commit per row) on 2 nodes' rows, same database.
- Head read: `health status` for the 128 nodes, (a) the query on the central store, (b) the
  whole CLI (`slurmadm health status --json`, which also ships the head's own queue first);
  peer: the same query on one local SQLite file holding all 516,096 rows (the SQLite default).
- Prolog: `prolog_epilog/prolog.sh` as slurmd runs it on a healthy 8-GPU stand-in node, with
  store.url set (rows queued for shipping) vs unset, runs interleaved; the target is the
  shipping prolog's median within 5 ms of the local-only one. Its store part alone (open the
  store, record 14 results, with and without the outbox triggers) is timed apart too, since the
  whole prolog's wall time on a busy machine varies by far more than 5 ms.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import multiprocessing
import os
import shutil
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

from slurmadm.devcluster.cluster import DevCluster, default_state_dir  # noqa: E402
from slurmadm.site.store import StoreSection  # noqa: E402
from slurmadm.store import Store, central, read  # noqa: E402
from slurmadm.store.ship import ship  # noqa: E402

CHECKS = 14
RUNS_PER_DAY = 24 * 12
BENCH_DB = "slurmadm_bench"
DAY0 = time.time() - 86400  # yesterday: inside keep_days, so nothing is pruned


def node_name(i: int) -> str:
    return f"b200-{i + 1:03d}"


def fill(path: str, node: str, *, ship_on: bool = True) -> int:
    rows = [(DAY0 + run * 300 + k * 0.01, f"{node}-{run}", node, "periodic", f"check-{k:02d}",
             "pass" if (run + k) % 97 else "warn", "critical", "ok", float(k), 1.5)
            for run in range(RUNS_PER_DAY) for k in range(CHECKS)]
    with Store(path, ship=ship_on) as s, s.transaction() as db:
        db.executemany("INSERT INTO check_results (ts, run_id, node, context, check_id, status, severity, detail, "
                       "value, duration_ms) VALUES (?,?,?,?,?,?,?,?,?,?)", rows)
    return len(rows)


def _ship_one(args):
    section, node, path = args
    out = ship(section, host=node, local_path=path)
    return out.shipped


def prepare_db(dc: DevCluster) -> StoreSection:
    """A fresh bench database in the dev cluster's MariaDB, for its slurmadm user."""
    site = dc.site()
    if site.store.url is None:
        sys.exit("the dev cluster has no central store: run `slurmadm dev-cluster up --central-store` first")
    client = shutil.which("mariadb") or shutil.which("mysql")
    sql = (f"DROP DATABASE IF EXISTS `{BENCH_DB}`; CREATE DATABASE `{BENCH_DB}`; "
           f"GRANT ALL ON `{BENCH_DB}`.* TO 'slurmadm'@'127.0.0.1';")
    subprocess.run([client, "--no-defaults", "-S", str(dc.p("mysql", "mysqld.sock")), "-u", "root"], input=sql,
                   text=True, check=True, timeout=60)
    url = site.store.central()
    return StoreSection(path=str(dc.p("bench", "{node}.db")), password_file=site.store.password_file,
                        url=f"mysql://{url.user}@{url.host}:{url.port}/{BENCH_DB}", ship_batch=2000)


def bench_ship(section: StoreSection, nodes: int, tmp: Path) -> dict:
    with central.connected(section) as c:
        central.migrate(c)
    paths = {node_name(i): str(tmp / "nodes" / f"{node_name(i)}.db") for i in range(nodes)}
    total = sum(fill(p, n) for n, p in paths.items())
    t0 = time.perf_counter()
    with multiprocessing.Pool(8) as pool:
        shipped = sum(pool.map(_ship_one, [(section, n, p) for n, p in paths.items()]))
    wall = time.perf_counter() - t0
    with central.connected(section) as c:
        stored = c.query("SELECT count(*) AS n FROM check_results")[0]["n"]
    assert shipped == total == stored, (shipped, total, stored)

    # peer: one INSERT + commit per row, 2 nodes' rows
    peer_rows = []
    for n in list(paths)[:2]:
        with Store(paths[n]) as s:
            peer_rows += [(n, *r.values()) for r in s.query(
                "SELECT id, ts, run_id, node, context, check_id, status, severity, detail, value, duration_ms "
                "FROM check_results")]
    with central.connected(section) as c:
        c.execute("CREATE TABLE naive LIKE check_results")
        c.commit()
        t1 = time.perf_counter()
        for r in peer_rows:
            c.execute("INSERT INTO naive (origin, store_id, id, ts, run_id, node, context, check_id, status, severity,"
                      " detail, value, duration_ms) VALUES (?, 'x', ?,?,?,?,?,?,?,?,?,?,?)", r)
            c.commit()
        peer_wall = time.perf_counter() - t1
        c.execute("DROP TABLE naive")
        c.commit()
    return {"nodes": nodes, "rows": total, "wall_s": round(wall, 2), "rows_per_s": round(total / wall),
            "peer_rows": len(peer_rows), "peer_wall_s": round(peer_wall, 2),
            "peer_rows_per_s": round(len(peer_rows) / peer_wall)}


def median_s(fn, runs: int) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def bench_read(section: StoreSection, nodes: int, tmp: Path, runs: int) -> dict:
    with central.connected(section) as c:
        r = read.Reader(c, central=True, host="head")
        n_rows = len(read.latest_results(r))
        central_q = median_s(lambda: read.latest_results(r), runs)
    shared = str(tmp / "shared.db")  # peer: the SQLite default, every node's rows in one file
    for i in range(nodes):
        fill(shared, node_name(i), ship_on=False)
    with Store(shared) as s:
        r = read.Reader(s, central=False, host="head")
        assert len(read.latest_results(r)) == n_rows == nodes * CHECKS
        local_q = median_s(lambda: read.latest_results(r), runs)

    data = tomllib.loads((REPO / "site.example.toml").read_text())
    data["store"] = {"path": str(tmp / "head" / "{node}.db"), "url": section.url,
                     "password_file": section.password_file}
    site = tmp / "head-site.toml"
    site.write_text(tomli_w.dumps(data))
    env = {**os.environ, "SLURMADM_SITE": str(site)}

    def cli():
        p = subprocess.run([sys.executable, "-m", "slurmadm", "health", "status", "--json"], env=env,
                           capture_output=True, text=True, timeout=300)
        assert p.returncode in (0, 1), p.stderr
        assert len(json.loads(p.stdout)) == nodes * CHECKS

    cli_s = median_s(cli, max(3, runs // 4))
    return {"latest_rows": n_rows, "central_query_ms": round(central_q * 1000, 1),
            "cli_ms": round(cli_s * 1000), "peer_local_query_ms": round(local_q * 1000, 1)}


def bench_prolog(section: StoreSection, runs: int, tmp: Path) -> dict:
    spec = importlib.util.spec_from_file_location("prolog_vs_gcm", REPO / "bench" / "prolog_vs_gcm.py")
    pv = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(pv)
    out = {}
    setups = {}
    for mode in ("local", "shipping"):
        d = tmp / f"prolog-{mode}"
        d.mkdir()
        nvml_env, hooks = pv.setup(d)
        if mode == "shipping":
            site = d / "site.toml"
            data = tomllib.loads(site.read_text())
            data["store"].update(url=section.url, password_file=section.password_file)
            site.write_text(tomli_w.dumps(data))
        setups[mode] = (nvml_env, hooks)
    env = {"SLURMD_NODENAME": pv.NODE, "SLURM_JOB_ID": "1"}
    samples = {m: [] for m in setups}
    for _mode, (_nvml_env, hooks) in setups.items():  # warm: the first run parses site.toml
        pv.timed([str(hooks / "prolog.sh")], {**env})
    for _ in range(runs):
        for mode, (_nvml_env, hooks) in setups.items():
            wall, rss, code, text = pv.timed([str(hooks / "prolog.sh")], {**env})
            assert code == 0, text
            samples[mode].append((wall, rss, pv.CPU[-1]))  # CPU time: what a loaded machine inflates least
    for mode in setups:
        out[mode] = pv.summary(samples[mode])
    with Store(str(tmp / "prolog-shipping" / "slurmadm.db")) as s:
        out["shipping_queued_rows"] = s.query("SELECT count(*) AS n FROM outbox")[0]["n"]
    out["delta_median_ms"] = round(out["shipping"]["median_ms"] - out["local"]["median_ms"], 1)
    out["delta_cpu_median_ms"] = round(out["shipping"]["cpu_median_ms"] - out["local"]["cpu_median_ms"], 1)
    return out


def bench_recording(tmp: Path, runs: int) -> dict:
    """What shipping adds inside a prolog, measured alone (the whole prolog's wall time on a
    loaded machine is far noisier than this): open the node's store and record 14 results, as
    a hook run does, with the outbox triggers (store.url set) and without; interleaved."""
    from slurmadm.health.record import Recorder, open_store
    from slurmadm.health.runner import Result

    results = [Result(f"check-{k:02d}", "pass", "critical", "drain", "ok", None, 1.0) for k in range(CHECKS)]
    times: dict[bool, list[float]] = {False: [], True: []}
    for _ in range(runs):
        for ship_on in (False, True):
            path = str(tmp / f"rec-{ship_on}.db")
            t0 = time.perf_counter()
            store, _ = open_store(path, None, 5.0, ship=ship_on)
            Recorder(node="b200-001", context="prolog", run_id="r", results_log="", store=store,
                     use_syslog=False).results(results)
            store.close()
            times[ship_on].append(time.perf_counter() - t0)
    local, shipping = (statistics.median(times[k]) * 1000 for k in (False, True))
    return {"runs": runs, "local_ms": round(local, 2), "shipping_ms": round(shipping, 2),
            "delta_ms": round(shipping - local, 2)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--state-dir", default=str(default_state_dir()), help="the dev cluster (with --central-store)")
    ap.add_argument("--nodes", type=int, default=128)
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--skip-ship", action="store_true", help="only the prolog parts")
    args = ap.parse_args()
    dc = DevCluster(Path(args.state_dir))
    section = prepare_db(dc)
    with tempfile.TemporaryDirectory(prefix="slurmadm-bench-ship-") as tmp_name:
        tmp = Path(tmp_name)
        (tmp / "nodes").mkdir()
        result = {}
        if not args.skip_ship:
            result["ship"] = bench_ship(section, args.nodes, tmp)
            result["read"] = bench_read(section, args.nodes, tmp, args.runs)
        result["prolog"] = bench_prolog(section, args.runs, tmp)
        result["prolog_recording"] = bench_recording(tmp, 500)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
