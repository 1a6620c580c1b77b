"""The exporters' parts: the cached read with a deadline, the prolog's GPU -> job map, InfiniBand
from a sysfs tree, the head's parse and aggregation on real Slurm output, and the node exporter
as a process over the stand-in NVML through the real pynvml (faults show; a hung GPU makes the
scrape answer stale values within the deadline instead of hanging)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
import tomllib
import urllib.request
from pathlib import Path

import pytest
import tomli_w
from prometheus_client.parser import text_string_to_metric_families

from slurmadm import jobmap
from slurmadm.devcluster import gpus
from slurmadm.devcluster.daemons import wait_for
from slurmadm.exporter.cache import CachedRead
from slurmadm.exporter.head import Snapshot, aggregate, parse_squeue
from slurmadm.exporter.sources import SysfsInfiniband
from slurmadm.exporter.storefacts import LocalStoreFacts
from slurmadm.site import BUILTIN_PROFILES, parse_site
from slurmadm.slurm.parse import nodes_from_json

pytestmark = pytest.mark.unit
REPO = Path(__file__).resolve().parents[3]
FIX = REPO / "tests" / "fixtures" / "slurm"


# ------------------------------------------------------------------------ cached read + deadline

def test_a_hung_read_answers_the_last_value_marked_stale_within_the_deadline():
    release = threading.Event()
    calls = []

    def read():
        calls.append(1)
        if len(calls) > 1:
            release.wait(30)  # the second read hangs, like an NVML call on a wedged GPU
        return len(calls)

    r = CachedRead("gpu", read, max_age_s=0, deadline_s=0.2)
    first = r.get()
    assert (first.value, first.stale) == (1, False)
    t0 = time.monotonic()
    second = r.get()
    assert time.monotonic() - t0 < 5  # bounded by the deadline, not by the hung call
    assert (second.value, second.stale) == (1, True) and "no answer" in second.error
    r.get()
    assert len(calls) == 2  # no second thread piles up behind the hung one
    release.set()
    assert wait_for(lambda: not r.get().stale, 10)
    assert r.get().value == 3


def test_a_failing_read_keeps_the_last_value_and_counts_errors():
    state = {"fail": False}

    def read():
        if state["fail"]:
            raise OSError("store locked")
        return "ok"

    r = CachedRead("store", read, max_age_s=0, deadline_s=5)
    assert r.get().value == "ok"
    state["fail"] = True
    got = r.get()
    assert got.value == "ok" and got.stale and "store locked" in got.error and r.errors_total == 1


def test_reads_are_cached_for_the_interval():
    n = []
    r = CachedRead("slurm", lambda: n.append(1) or len(n), max_age_s=3600, deadline_s=5)
    assert [r.get().value for _ in range(5)] == [1] * 5


# ------------------------------------------------------------------------------- the GPU job map

def test_prolog_records_and_epilog_removes_the_jobs_gpus(tmp_path):
    env = {"SLURM_JOB_ID": "4242", "SLURM_JOB_USER": "alice", "SLURM_JOB_ACCOUNT": "ml-llm",
           "SLURM_JOB_PARTITION": "gpu", "SLURM_JOB_GPUS": "0,1,4-5"}
    jobmap.record_from_env(env, "b200-003", str(tmp_path), "prolog")
    got = jobmap.read(str(tmp_path), "b200-003")
    assert sorted(got) == [0, 1, 4, 5]
    assert (got[4].job_id, got[4].user, got[4].account) == ("4242", "alice", "ml-llm")
    assert jobmap.read(str(tmp_path), "b200-004") == {}
    jobmap.record_from_env(env, "b200-003", str(tmp_path), "epilog")
    assert jobmap.read(str(tmp_path), "b200-003") == {}


def test_hostile_job_environment_never_reaches_a_path_or_label(tmp_path):
    env = {"SLURM_JOB_ID": "../../etc/passwd", "SLURM_JOB_GPUS": "0"}
    assert jobmap.record_from_env(env, "b200-003", str(tmp_path), "prolog") == "no job"
    env = {"SLURM_JOB_ID": "7", "SLURM_JOB_USER": 'x"} evil{', "SLURM_JOB_GPUS": "zero"}
    jobmap.record_from_env(env, "b200-003", str(tmp_path), "prolog")
    (tmp_path / "b200-003" / "8.json").write_text("{not json")
    got = jobmap.read(str(tmp_path), "b200-003")
    assert got == {}  # no GPUs parsed, the bad user dropped, the corrupt file skipped
    assert list((tmp_path / "b200-003").glob("7.json"))


def test_the_health_hook_writes_the_map_in_a_real_prolog_run(tmp_path):
    lib = tmp_path / "lib"
    gpus.build_library(lib)
    data = tomllib.loads((REPO / "site.example.toml").read_text())
    data["store"] = {"path": str(tmp_path / "s.db")}
    data["health"].update(results_log=str(tmp_path / "h.jsonl"), xid_source=str(tmp_path / "gpus/{node}.kmsg"),
                          sysfs_root=str(tmp_path / "gpus/{node}.sysfs"), fabric_manager_process="", mounts=[])
    data["health"]["checks"]["nccl-allreduce"] = {"contexts": ["run"]}
    # this machine's memory stands in for the node's 2 TB (host-memory reads the real /proc/meminfo)
    data["profiles"]["hgx-b200"]["memory_gib"] = max(1, os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE") >> 30)
    data["monitor"] = {"job_map_dir": str(tmp_path / "jobs")}
    (tmp_path / "site.toml").write_text(tomli_w.dumps(data))
    gpus.write_healthy(tmp_path / "gpus", "b200-003", BUILTIN_PROFILES["hgx-b200"], driver_version="570.133.20")
    from slurmadm.devcluster import ibsysfs

    ibsysfs.write_healthy(tmp_path / "gpus", "b200-003", BUILTIN_PROFILES["hgx-b200"])
    env = {"PATH": "/usr/bin:/bin", "SLURMADM_SITE": str(tmp_path / "site.toml"),
           "SLURMADM_CACHE_DIR": str(tmp_path / "cache"), **gpus.env_for(tmp_path / "gpus", lib),
           "SLURM_JOB_ID": "99", "SLURM_JOB_USER": "bob", "SLURM_JOB_ACCOUNT": "bio-fold", "SLURM_JOB_GPUS": "2,3"}
    for context in ("prolog", "epilog"):
        p = subprocess.run([sys.executable, "-I", "-m", "slurmadm.health", context, "--node", "b200-003"],
                           env=env, capture_output=True, text=True, timeout=60, cwd=tmp_path)
        assert p.returncode == 0, p.stderr
        held = jobmap.read(str(tmp_path / "jobs"), "b200-003")
        if context == "prolog":
            assert sorted(held) == [2, 3] and held[2].user == "bob"
        else:
            assert held == {}


# --------------------------------------------------------------------------------- InfiniBand

def _port(root: Path, hca: str, port: str, state: str, phys: str, rate: str, **counters: int) -> None:
    d = root / "class" / "infiniband" / hca / "ports" / port
    (d / "counters").mkdir(parents=True)
    (d / "state").write_text(state + "\n")
    (d / "phys_state").write_text(phys + "\n")
    (d / "rate").write_text(rate + "\n")
    (d / "link_layer").write_text("InfiniBand\n")
    for k, v in counters.items():
        (d / "counters" / k).write_text(f"{v}\n")


def test_infiniband_ports_from_sysfs(tmp_path):
    # the sysfs formats of the anchor notes: "4: ACTIVE", "5: LinkUp", "400 Gb/sec (4X NDR)"
    _port(tmp_path, "mlx5_0", "1", "4: ACTIVE", "5: LinkUp", "400 Gb/sec (4X NDR)", symbol_error=3,
          port_xmit_data=1000, link_downed=255)
    _port(tmp_path, "mlx5_1", "1", "1: DOWN", "3: Disabled", "10 Gb/sec (4X SDR)")
    ports = {p.hca: p for p in SysfsInfiniband(str(tmp_path)).read()}
    assert (ports["mlx5_0"].state, ports["mlx5_0"].phys_state, ports["mlx5_0"].rate_gbps) == (4, 5, 400.0)
    assert ports["mlx5_0"].counters == {"port_xmit_data": 1000, "symbol_error": 3, "link_downed": 255}
    assert ports["mlx5_1"].state == 1
    assert SysfsInfiniband(str(tmp_path / "none")).read() == []


# --------------------------------------------------------------------------------------- head

def test_squeue_rows_of_the_real_output(tmp_path):
    jobs = parse_squeue((FIX / "22.05" / "squeue-O-monitor.txt").read_text() + "garbage line\n")
    assert len(jobs) == 4
    by_id = {j.job_id: j for j in jobs}
    running = [j for j in jobs if j.state == "RUNNING"]
    assert len(running) == 1 and running[0].gpus == 32 and running[0].nodes == "b200-[001-004]"
    assert any(j.name == "idle|pipe" for j in jobs)  # the name may hold the separator
    assert {j.reason for j in jobs if j.state == "PENDING"} == {"QOSGrpGRES"}
    assert all(j.batch for j in by_id.values())


@pytest.mark.parametrize("release", ["22.05", "24.11", "26.05"])
def test_squeue_json_of_both_releases_reads_as_the_text_rows(release):
    """Real `squeue --json` of 22.05 (job_state a string) and 24.11 (a list, wrapped numbers):
    every job squeue's text output lists comes out with the same fields (squeue.txt is
    `%i|%j|%u|%a|%q|%P|%T|%r|%N|%b` captured at the same moment)."""
    from slurmadm.exporter.head import jobs_from_squeue_json

    jobs = {j.job_id: j for j in jobs_from_squeue_json((FIX / release / "squeue.json").read_text())}
    rows = [line.split("|") for line in (FIX / release / "squeue.txt").read_text().splitlines() if line]
    assert rows
    for jid, name, user, account, _qos, part, state, reason, nodes, gres in rows:
        j = jobs[jid]
        assert (j.name, j.user, j.account, j.partition, j.state, j.reason, j.nodes) == (
            name, user, account, part, state, reason, nodes)
        assert j.gpus == int(gres.rsplit(":", 1)[1]) and j.batch
    # 22.05 still lists the finished jobs 1 and 2 (squeue --json ignores the default state filter)
    assert {j.state for j in jobs.values()} - {"RUNNING", "PENDING"} == (
        {"COMPLETED", "FAILED"} if release == "22.05" else set())
    agg = aggregate(Snapshot([], list(jobs.values()), {}))
    assert agg.project_gpus == {"phys-lattice": 12, "ops-burnin": 2} and agg.pending[("gpu", "QOSGrpGRES")] == 1


def test_squeue_json_flags_beside_the_state_and_odd_output():
    from slurmadm.errors import UnreachableError
    from slurmadm.exporter.head import jobs_from_squeue_json

    doc = json.loads((FIX / "24.11" / "squeue.json").read_text())
    doc["jobs"][0]["job_state"] = ["RUNNING", "COMPLETING"]  # the base state with flags
    doc["jobs"][-1]["job_state"] = ["REQUEUED", "PENDING"]
    got = jobs_from_squeue_json(json.dumps(doc))
    assert got[0].state == "RUNNING" and got[-1].state == "PENDING"
    for bad in ("not json", "[]", '{"jobs": {}}', '{"jobs": [1]}'):
        with pytest.raises(UnreachableError) as err:
            jobs_from_squeue_json(bad)
        assert str(err.value).startswith("squeue --json: ")


@pytest.mark.parametrize("release, nodes_file", [("22.05", "sinfo.json"), ("24.11", "scontrol-show-node.json"),
                                                 ("26.05", "scontrol-show-node.json")])
def test_aggregate_real_nodes_and_jobs(release, nodes_file):
    nodes = nodes_from_json((FIX / release / nodes_file).read_text(), "fixture")
    jobs = parse_squeue((FIX / "22.05" / "squeue-O-monitor.txt").read_text())
    agg = aggregate(Snapshot(nodes, jobs, {}))
    assert sum(n for (p, _), n in agg.nodes_by_state.items() if p == "gpu") == len(
        [n for n in nodes if "gpu" in n.partitions])
    total = sum(n.gpus for n in nodes if "gpu" in n.partitions)
    assert sum(v for (p, _), v in agg.gpus.items() if p == "gpu") == total
    drained = [n for n in nodes if n.drained]
    assert sum(agg.drains.values()) == len(drained)
    for n in drained:
        owner = "slurmadm" if n.reason.startswith("slurmadm:") else "admin"
        assert agg.node_state[n.name][1] == owner
    assert agg.pending[("gpu", "QOSGrpGRES")] == 3 and agg.project_gpus["ops-burnin"] == 32


def test_aggregate_counts_gpus_of_multi_node_jobs_per_node():
    from slurmadm.exporter.head import Job
    from slurmadm.slurm.model import NodeInfo

    nodes = [NodeInfo(name=f"b200-{i:03d}", state="MIXED", gres="gpu:b200:8", partitions=("gpu",)) for i in range(1, 5)]
    jobs = [Job("1", "RUNNING", "None", "u", "a", "gpu", True, 16, "b200-[001-002]", "x"),  # 8 per node
            Job("2", "RUNNING", "None", "u", "a", "gpu", True, 6, "b200-[001-002]", "x"),  # 3 per node
            Job("3", "RUNNING", "None", "u", "b", "gpu", True, 4, "b200-003", "x"),
            Job("4", "RUNNING", "None", "u", "b", "gpu", True, 2, "b200-003,b200-004", "x"),  # 1 per node
            Job("5", "RUNNING", "None", "u", "b", "gpu", True, 0, "b200-004", "cpu only"),
            Job("6", "PENDING", "Priority", "u", "b", "gpu", True, 8, "", "x")]
    agg = aggregate(Snapshot(nodes, jobs, {}))
    # b200-001/002: 8 + 3 = 11, capped at their 8 GPUs; b200-003: 4 + 1; b200-004: 1
    assert agg.gpus[("gpu", "allocated")] == 8 + 8 + 5 + 1
    assert agg.gpus[("gpu", "idle")] == 0 + 0 + 3 + 7
    assert agg.project_gpus == {"a": 22, "b": 6} and agg.running["gpu"] == 5
    assert agg.pending[("gpu", "Priority")] == 1


# ---------------------------------------------------------------------- the node exporter process

@pytest.fixture(scope="module")
def node_exporter(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ne")
    lib = tmp / "lib"
    gpus.build_library(lib)
    data = tomllib.loads((REPO / "site.example.toml").read_text())
    data["store"] = {"path": str(tmp / "s.db")}
    data["health"].update(results_log=str(tmp / "h.jsonl"), xid_source=str(tmp / "gpus/{node}.kmsg"))
    data["monitor"] = {"job_map_dir": str(tmp / "jobs"), "node_cache_s": 0, "read_deadline_s": 1.0,
                       "sysfs_root": str(tmp / "sys")}
    (tmp / "site.toml").write_text(tomli_w.dumps(data))
    parse_site((tmp / "site.toml").read_text(), source="t")
    gpus.write_healthy(tmp / "gpus", "b200-002", BUILTIN_PROFILES["hgx-b200"], driver_version="570.133.20")
    _port(tmp / "sys", "mlx5_0", "1", "4: ACTIVE", "5: LinkUp", "400 Gb/sec (4X NDR)", symbol_error=0)
    jobmap.record_from_env({"SLURM_JOB_ID": "77", "SLURM_JOB_USER": "carol", "SLURM_JOB_ACCOUNT": "ml-vision",
                            "SLURM_JOB_GPUS": "0,1,2,3,4,5,6,7"}, "b200-002", str(tmp / "jobs"), "prolog")
    env = {**os.environ, **gpus.env_for(tmp / "gpus", lib), "SLURMD_NODENAME": "b200-002"}
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "slurmadm", "exporter", "--mode", "node", "--node", "b200-002",
                             "--site", str(tmp / "site.toml"), "--listen", f"127.0.0.1:{port}"],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)

    def scrape() -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=20) as r:
            return r.read().decode()

    def up() -> bool:
        if proc.poll() is not None:
            raise AssertionError(proc.stderr.read().decode())
        try:
            return "slurmadm_gpus" in scrape()
        except OSError:
            return False

    assert wait_for(up, 60, interval=0.2)
    scrape.gdir = tmp / "gpus"
    scrape.jobs = tmp / "jobs"
    yield scrape
    proc.terminate()
    proc.wait(10)


def value(text: str, name: str, **labels: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                return s.value
    raise KeyError(f"{name} {labels}")


def test_node_exporter_reports_the_stand_in_gpus_with_job_labels(node_exporter):
    text = node_exporter()
    assert value(text, "slurmadm_gpus", node="b200-002") == 8
    assert value(text, "slurmadm_gpu_memory_total_bytes", gpu="3", jobid="77", user="carol",
                 account="ml-vision") == 180 * 2**30
    assert value(text, "slurmadm_gpu_power_limit_watts", gpu="0") == 1000
    assert value(text, "slurmadm_ib_port_up", hca="mlx5_0", port="1") == 1
    assert value(text, "slurmadm_ib_port_rate_bytes_per_second", hca="mlx5_0") == 400e9 / 8
    assert value(text, "slurmadm_exporter_source_stale", source="gpu") == 0
    assert value(text, "slurmadm_gpu_job_idle_seconds", gpu="5", jobid="77") >= 0


def test_node_exporter_shows_injected_faults(node_exporter):
    g = node_exporter.gdir
    gpus.inject(g, "b200-002", 5, "ecc-uncorrected", 2)
    gpus.inject(g, "b200-002", 1, "pcie-replay", 1000)
    gpus.inject(g, "b200-002", 2, "thermal", 97)
    gpus.inject(g, "b200-002", 3, "row-remap-failed")
    gpus.inject(g, "b200-002", 4, "xid", 79)
    try:
        def shows() -> bool:
            t = node_exporter()
            return (value(t, "slurmadm_gpu_ecc_errors_total", gpu="5", type="uncorrected", scope="volatile") == 2
                    and value(t, "slurmadm_gpu_pcie_replay_total", gpu="1") == 1000
                    and value(t, "slurmadm_gpu_temperature_celsius", gpu="2") == 97
                    and value(t, "slurmadm_gpu_clock_event_active", gpu="2", reason="hw_thermal_slowdown") == 1
                    and value(t, "slurmadm_gpu_row_remap_failure", gpu="3") == 1
                    and value(t, "slurmadm_gpu_last_xid", gpu="4") == 79
                    and value(t, "slurmadm_gpu_xid_fatal", gpu="4") == 1)
        assert wait_for(shows, 20, interval=0.2)
        t = node_exporter()
        assert value(t, "slurmadm_gpu_ecc_errors_total", gpu="4", type="uncorrected", scope="volatile") == 0
    finally:
        gpus.clear(g, "b200-002")


def test_a_hung_gpu_makes_the_scrape_stale_not_slow(node_exporter):
    g = node_exporter.gdir
    before = value(node_exporter(), "slurmadm_gpu_temperature_celsius", gpu="6")
    gpus.inject(g, "b200-002", 6, "hang")
    try:
        def stale() -> bool:
            t0 = time.monotonic()
            text = node_exporter()
            assert time.monotonic() - t0 < 10, "a scrape waited on the hung NVML call"
            return value(text, "slurmadm_exporter_source_stale", source="gpu") == 1
        assert wait_for(stale, 30, interval=0.2)
        text = node_exporter()
        assert value(text, "slurmadm_gpu_temperature_celsius", gpu="6") == before  # the last good value
        assert value(text, "slurmadm_exporter_source_stale", source="host") == 0  # other sources carry on
    finally:
        gpus.clear(g, "b200-002")
    assert wait_for(lambda: value(node_exporter(), "slurmadm_exporter_source_stale", source="gpu") == 0, 60)


def test_head_reads_last_burnin_verdicts_and_drift_from_the_store(tmp_path):
    from slurmadm.burnin import history  # noqa: F401  (declares the burn-in tables)
    from slurmadm.exporter.head import DRIFT_CHECK, HeadCollector
    from slurmadm.store import Store

    site = parse_site((REPO / "site.example.toml").read_text(), source="site.example.toml")
    with Store(tmp_path / "s.db") as store, store.transaction() as db:
        for sweep, ts, verdict in (("s1", 100.0, "fail"), ("s2", 200.0, "pass")):
            db.execute("INSERT INTO burnin_nodes (sweep_id, node, why, verdict, ts) VALUES (?,?,?,?,?)",
                       (sweep, "b200-001", "idle", verdict, ts))
        for i, (node, status) in enumerate((("b200-001", "warn"), ("b200-001", "pass"), ("b200-002", "fail"),
                                            ("b200-003", "pass"))):
            db.execute("INSERT INTO check_results (ts, run_id, node, context, check_id, status, severity, detail,"
                       " value, duration_ms) VALUES (?, 'r', ?, 'periodic', ?, ?, 'warning', '', NULL, 1)",
                       (i, node, DRIFT_CHECK, status))
    class NoSlurm:
        def read(self):
            raise AssertionError("not read here")

    c = HeadCollector(site=site, source=NoSlurm(), cache_s=0, deadline_s=5, store_path=str(tmp_path / "s.db"))
    got = c._store_read()
    assert got["burnin"] == {"b200-001": (200.0, "pass")}
    assert got["drift"] == 1  # b200-002; b200-001's latest is a pass
    assert got["failing"] == {"b200-001": [], "b200-002": [DRIFT_CHECK], "b200-003": []}
    assert got["arrivals"] is None  # a local store has no arrivals
    empty = HeadCollector(site=site, source=NoSlurm(), cache_s=0, deadline_s=5, store_path=str(tmp_path / "none.db"))
    assert empty._store_read()["burnin"] == {} and empty._store_read()["drift"] is None
    assert not (tmp_path / "none.db").exists()  # a scrape creates nothing


def test_head_reads_every_nodes_records_from_the_central_store(tmp_path):
    """store.url set: the head's burn-in, health and drift metrics are every node's, from the
    central store (a central SQLite file: the code path of MariaDB but for the driver;
    tests/integration/test_store_central.py runs it on the dev cluster's MariaDB), and not from
    the head's own store file."""
    from prometheus_client.core import CollectorRegistry

    from slurmadm.exporter import storefacts
    from slurmadm.exporter.exposition import render
    from slurmadm.exporter.head import DRIFT_CHECK, HeadCollector
    from slurmadm.store import Store, central
    from slurmadm.store.ship import ship

    data = tomllib.loads((REPO / "site.example.toml").read_text())
    data["store"] = {"path": str(tmp_path / "stores" / "{node}.db"), "url": f"sqlite://{tmp_path}/central.db"}
    site = parse_site(tomli_w.dumps(data), source="site.toml")
    c = central.connect(site.store)
    central.migrate(c)
    c.close()

    def results(node, rows):
        with Store(site.store.local_path(node), ship=True) as s, s.transaction() as db:
            for ts, check, status in rows:
                db.execute("INSERT INTO check_results (ts, run_id, node, context, check_id, status, severity, "
                           "detail, value, duration_ms) VALUES (?, 'r', ?, 'periodic', ?, ?, 'critical', '', NULL, 1)",
                           (ts, node, check, status))
        ship(site.store, host=node, local_path=site.store.local_path(node), audit_log=None)

    results("b200-001", [(100.0, "ecc-uncorrected", "pass"), (200.0, "ecc-uncorrected", "fail"),
                         (200.0, "gpu-count", "pass"), (150.0, DRIFT_CHECK, "warn")])
    results("b200-002", [(300.0, "ecc-uncorrected", "pass"), (300.0, DRIFT_CHECK, "pass")])
    with Store(site.store.local_path("b200-003"), ship=True) as s, s.transaction() as db:
        db.execute("INSERT INTO burnin_nodes (sweep_id, node, why, verdict, ts) VALUES ('s9', 'b200-003', 'idle', "
                   "'fail', 400.0)")
    ship(site.store, host="b200-003", local_path=site.store.local_path("b200-003"), audit_log=None)

    class NoSlurm:
        def read(self):
            raise AssertionError("not read here")

    facts = storefacts.for_site(site)
    assert isinstance(facts, storefacts.CentralStoreFacts)
    reg = CollectorRegistry(auto_describe=False)
    reg.register(HeadCollector(site=site, source=NoSlurm(), cache_s=0, deadline_s=10, store=facts))
    text = render(reg).decode()
    assert value(text, "slurmadm_exporter_source_stale", source="store") == 0
    assert value(text, "slurmadm_store_node_checks_failing", node="b200-001") == 1
    assert value(text, "slurmadm_store_check_failing", node="b200-001", check="ecc-uncorrected") == 1
    assert value(text, "slurmadm_store_node_checks_failing", node="b200-002") == 0
    assert value(text, "slurmadm_store_node_last_result_timestamp_seconds", node="b200-002") == 300.0
    assert value(text, "slurmadm_store_check_nodes", check="ecc-uncorrected", status="fail") == 1
    assert value(text, "slurmadm_store_check_nodes", check="ecc-uncorrected", status="pass") == 1
    assert value(text, "slurmadm_fleet_drift_nodes") == 1
    assert value(text, "slurmadm_burnin_last_timestamp_seconds", node="b200-003", verdict="fail") == 400.0
    assert {"b200-001", "b200-002", "b200-003"} <= {
        s.labels["host"] for f in text_string_to_metric_families(text) for s in f.samples
        if s.name == "slurmadm_store_host_last_arrival_timestamp_seconds"}
    # the four example nodes never shipped: reported silent
    assert value(text, "slurmadm_store_silent_nodes") == len(site.node_names) - 3
    # the head's own store file holds none of it
    assert LocalStoreFacts(site.store.local_path(None)).read()["last"] == {}


def test_an_unreadable_central_store_marks_the_store_source_stale(tmp_path):
    from prometheus_client.core import CollectorRegistry

    from slurmadm.exporter import storefacts
    from slurmadm.exporter.exposition import render
    from slurmadm.exporter.head import HeadCollector

    data = tomllib.loads((REPO / "site.example.toml").read_text())
    data["store"] = {"path": str(tmp_path / "{node}.db"), "url": f"sqlite://{tmp_path}/never-migrated.db"}
    site = parse_site(tomli_w.dumps(data), source="site.toml")

    class NoSlurm:
        def read(self):
            raise RuntimeError("no Slurm here")

    reg = CollectorRegistry(auto_describe=False)
    reg.register(HeadCollector(site=site, source=NoSlurm(), cache_s=0, deadline_s=10,
                               store=storefacts.for_site(site)))
    text = render(reg).decode()
    assert value(text, "slurmadm_exporter_source_stale", source="store") == 1
    assert value(text, "slurmadm_exporter_source_errors_total", source="store") >= 1


def test_a_process_on_a_gpu_no_job_holds_is_flagged(node_exporter):
    job = {"SLURM_JOB_ID": "77", "SLURM_JOB_USER": "carol", "SLURM_JOB_ACCOUNT": "ml-vision",
           "SLURM_JOB_GPUS": "0,1,2,3,4,5,6,7"}
    jobmap.record_from_env(job, "b200-002", str(node_exporter.jobs), "epilog")  # the job ended
    gpus.inject(node_exporter.gdir, "b200-002", 7, "leftover-process", 4242)
    try:
        assert wait_for(lambda: value(node_exporter(), "slurmadm_gpu_unallocated_in_use", gpu="7", jobid="") == 1,
                        20, interval=0.2)
        text = node_exporter()
        assert value(text, "slurmadm_gpu_processes", gpu="7") == 1
        assert value(text, "slurmadm_gpu_unallocated_in_use", gpu="6") == 0
    finally:
        gpus.clear(node_exporter.gdir, "b200-002")
        jobmap.record_from_env(job, "b200-002", str(node_exporter.jobs), "prolog")


def test_utilisation_on_a_gpu_no_job_holds_is_flagged(node_exporter):
    """No process NVML can list (a container's, another PID namespace's), yet the GPU is busy:
    with no job holding it in the GPU->job map that is use without an allocation too."""
    job = {"SLURM_JOB_ID": "77", "SLURM_JOB_USER": "carol", "SLURM_JOB_ACCOUNT": "ml-vision",
           "SLURM_JOB_GPUS": "0,1,2,3,4,5,6,7"}
    gpus.inject(node_exporter.gdir, "b200-002", 6, "busy", 85)
    try:
        # while job 77 holds it, a busy GPU is simply in use (and not idle)
        assert wait_for(lambda: value(node_exporter(), "slurmadm_gpu_utilization_percent", gpu="6") == 85,
                        20, interval=0.2)
        text = node_exporter()
        assert value(text, "slurmadm_gpu_unallocated_in_use", gpu="6", jobid="77") == 0
        assert value(text, "slurmadm_gpu_job_idle_seconds", gpu="6", jobid="77") == 0
        jobmap.record_from_env(job, "b200-002", str(node_exporter.jobs), "epilog")  # the job ended
        assert wait_for(lambda: value(node_exporter(), "slurmadm_gpu_unallocated_in_use", gpu="6", jobid="") == 1,
                        20, interval=0.2)
        text = node_exporter()
        assert value(text, "slurmadm_gpu_processes", gpu="6") == 0  # no process: the utilisation told
        assert value(text, "slurmadm_gpu_unallocated_in_use", gpu="5", jobid="") == 0  # idle and unheld: fine
    finally:
        gpus.clear(node_exporter.gdir, "b200-002")
        jobmap.record_from_env(job, "b200-002", str(node_exporter.jobs), "prolog")
    assert wait_for(lambda: value(node_exporter(), "slurmadm_gpu_unallocated_in_use", gpu="6") == 0, 20, interval=0.2)


def test_infiniband_64_bit_counters_roce_ports_and_transmit_wait(tmp_path):
    """counters_ext/*_64 (OFED's 64-bit data and packet counters) win over the 32-bit files; an
    Ethernet (RoCE) port is read like an InfiniBand one; port_xmit_wait is read; a counter at its
    width's maximum is saturated, one past it is read wider and is not."""
    from slurmadm.exporter.sources import saturated

    _port(tmp_path, "mlx5_0", "1", "4: ACTIVE", "5: LinkUp", "400 Gb/sec (4X NDR)", port_xmit_data=4294967295,
          port_rcv_data=7, port_xmit_wait=12, symbol_error=65535)
    ext = tmp_path / "class" / "infiniband" / "mlx5_0" / "ports" / "1" / "counters_ext"
    ext.mkdir()
    (ext / "port_xmit_data_64").write_text("123456789012\n")
    _port(tmp_path, "mlx5_bond_0", "1", "4: ACTIVE", "5: LinkUp", "200 Gb/sec (4X HDR)", port_rcv_data=99)
    (tmp_path / "class" / "infiniband" / "mlx5_bond_0" / "ports" / "1" / "link_layer").write_text("Ethernet\n")
    ports = {p.hca: p for p in SysfsInfiniband(str(tmp_path)).read()}
    ib, roce = ports["mlx5_0"], ports["mlx5_bond_0"]
    assert ib.counters["port_xmit_data"] == 123456789012 and "port_xmit_data" in ib.wide
    assert ib.counters["port_rcv_data"] == 7 and ib.counters["port_xmit_wait"] == 12
    assert roce.link_layer == "Ethernet" and roce.counters["port_rcv_data"] == 99
    assert saturated("symbol_error", 65535) and not saturated("symbol_error", 65534)
    assert saturated("port_xmit_data", 4294967295) and not saturated("port_xmit_data", 4294967296)
    assert not saturated("port_xmit_data", 4294967295, wide=True)


def test_the_node_exporter_exports_roce_ports_throughput_wait_and_saturation(tmp_path):
    from slurmadm.exporter.node import NodeCollector
    from slurmadm.exporter.exposition import render

    _port(tmp_path, "mlx5_0", "1", "4: ACTIVE", "5: LinkUp", "400 Gb/sec (4X NDR)", port_xmit_data=10,
          port_xmit_wait=3, link_downed=255)
    _port(tmp_path, "mlx5_bond_0", "1", "4: ACTIVE", "5: LinkUp", "200 Gb/sec (4X HDR)", port_rcv_data=5)
    (tmp_path / "class" / "infiniband" / "mlx5_bond_0" / "ports" / "1" / "link_layer").write_text("Ethernet\n")

    class Empty:
        def read(self):
            return []

    class Reg:
        def __init__(self, c):
            self.c = c

        def collect(self):
            return self.c.collect()

    class Nothing:
        def read(self):
            return None

    c = NodeCollector(node="n1", gpus=Nothing(), ib=SysfsInfiniband(str(tmp_path)), host=Nothing(),
                      health=Empty(), xids=Empty(), job_map_dir=str(tmp_path / "j"), cache_s=0, deadline_s=2,
                      idle_util_percent=0)
    text = render(Reg(c)).decode()
    assert value(text, "slurmadm_ib_port_data_bytes_total", hca="mlx5_0", direction="transmit") == 40  # 4-byte words
    assert value(text, "slurmadm_ib_port_data_bytes_total", hca="mlx5_bond_0", direction="receive") == 20
    assert value(text, "slurmadm_ib_port_info", hca="mlx5_bond_0", link_layer="Ethernet") == 1
    assert value(text, "slurmadm_ib_port_transmit_wait_total", hca="mlx5_0") == 3
    assert value(text, "slurmadm_ib_port_saturated", hca="mlx5_0", counter="link_downed") == 1  # 8 bits
    assert value(text, "slurmadm_ib_port_saturated", hca="mlx5_0", counter="port_xmit_data") == 0


def test_the_stand_in_fabric_has_a_roce_port_and_moving_counters(tmp_path):
    from slurmadm.devcluster import ibsysfs

    hcas = ibsysfs.write_healthy(tmp_path, "b200-001", BUILTIN_PROFILES["hgx-b200"])
    ports = {p.hca: p for p in SysfsInfiniband(str(ibsysfs.root_of(tmp_path, "b200-001"))).read()}
    assert set(ports) == {*hcas, ibsysfs.ROCE_HCA} and ports[ibsysfs.ROCE_HCA].link_layer == "Ethernet"
    assert ports[hcas[0]].counters["port_xmit_data"] == 0
    ibsysfs.ib_fault(tmp_path, "b200-001", hcas[1], "down")
    assert ibsysfs.tick(tmp_path, ["b200-001"], 2.0) == len(hcas)  # the down port does not move
    after = {p.hca: p for p in SysfsInfiniband(str(ibsysfs.root_of(tmp_path, "b200-001"))).read()}
    for h in (hcas[0], ibsysfs.ROCE_HCA):
        assert after[h].counters["port_xmit_data"] > 2**30 and after[h].counters["port_xmit_wait"] > 0
    assert after[hcas[1]].counters["port_xmit_data"] == 0
