"""Every check id against the stand-in NVML (compiled from C, loaded by the real pynvml in a
child process, as on a node): healthy passes, each fault fails the right check with a detail
naming the GPU, and nothing else fails."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import tomllib
from pathlib import Path

import pytest
import tomli_w

from slurmadm.devcluster import gpus, ibsysfs
from slurmadm.health.deferred import INSPECT_AT_CLASS_CREATION
from slurmadm.site import BUILTIN_PROFILES
from tests.unit.siteedit import standin_node_data

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[3]
NODE = "b200-003"
B200 = BUILTIN_PROFILES["hgx-b200"]
DRIVER = "570.133.20"


@pytest.fixture()
def node(tmp_path, fake_nvml_lib):
    """A site file, a store, and healthy stand-in GPUs for NODE; returns a runner."""
    data = standin_node_data(tmp_path, check_timeout_s=1.0)
    data["health"]["checks"]["nccl-allreduce"] = {"contexts": ["epilog"]}  # no GPUs to all-reduce on here
    site = tmp_path / "site.toml"
    site.write_text(tomli_w.dumps(data))
    gdir = tmp_path / "gpus"
    gpus.write_healthy(gdir, NODE, B200, driver_version=DRIVER)
    ibsysfs.write_healthy(gdir, NODE, B200)
    env = {"PATH": "/usr/bin:/bin", "SLURMADM_SITE": str(site), "SLURMADM_CACHE_DIR": str(tmp_path / "cache"),
           **gpus.env_for(gdir, fake_nvml_lib)}

    def run(*checks: str, context: str = "run", dry_run: bool = True, extra_env: dict | None = None) -> dict:
        argv = [sys.executable, "-I", "-m", "slurmadm.health", context, "--node", NODE, "--json"]
        if checks:
            argv += ["--checks", ",".join(checks)]
        if dry_run:
            argv.append("--dry-run")
        p = subprocess.run(argv, env={**env, **(extra_env or {})}, capture_output=True, text=True, timeout=60,
                           cwd=tmp_path)
        assert p.stdout, p.stderr
        report = json.loads(p.stdout)
        report["rc"] = p.returncode
        report["by_id"] = {r["check_id"]: r for r in report["results"]}
        return report

    run.gdir = gdir
    run.tmp = tmp_path
    run.env = env
    return run


def test_a_healthy_prolog_imports_only_what_it_needs(node):
    """Every job start pays for the prolog's imports (issue 10: under 60 ms): none of the modules
    cut from its path may come back through a new import (bench/prolog_vs_gcm.py has the times)."""
    node()  # the first run parses the site (pydantic) and caches the node's settings; a prolog reads the cache
    listing = node.tmp / "modules.txt"
    # the health run leaves with os._exit: the listing is written on the way out, by the run's
    # process (the supervising parent, which leaves after it, finds the file there)
    probe = ("import os, runpy, sys\n"
             "out = sys.argv[1]\n"
             "real_exit = os._exit\n"
             "def listing_then_exit(code):\n"
             "    if not os.path.exists(out):\n"
             "        open(out, 'w').write('\\n'.join(\n"
             "            sorted(k for k, m in sys.modules.items() if type(m).__name__ != 'DeferredModule')))\n"
             "    real_exit(code)\n"
             "os._exit = listing_then_exit\n"
             "sys.argv = ['slurmadm.health', 'prolog']\n"
             "runpy.run_module('slurmadm.health', run_name='__main__', alter_sys=True)\n")
    p = subprocess.run([sys.executable, "-I", "-c", probe, str(listing)], env={**node.env, "SLURMD_NODENAME": NODE},
                       capture_output=True, text=True, timeout=60, cwd=node.tmp)
    assert p.returncode == 0 and "all clean" in p.stderr, p.stderr
    loaded = set(listing.read_text().split())
    assert {"pynvml", "sqlite3", "slurmadm.health.engine"} <= loaded  # it did run the checks
    heavy = {"inspect", "pathlib", "tempfile", "getpass", "argparse", "subprocess", "uuid", "_hashlib",
             "pydantic", "shutil", "ipaddress", "urllib.parse", "random", "typing", "signal"}
    if INSPECT_AT_CLASS_CREATION:  # 3.12/3.13's dataclasses need it for every class (deferred.py)
        heavy.discard("inspect")
    assert not heavy & loaded, sorted(heavy & loaded)


def test_dataclasses_need_inspect_only_where_deferred_py_says():
    """The rule the import test relies on, checked on the Python that runs it: with `inspect`
    deferred, making a dataclass imports the real one exactly on 3.12 and 3.13."""
    probe = ("import sys\n"
             "from slurmadm.health.deferred import defer\n"
             "defer('inspect')\n"
             "import dataclasses\n"
             "@dataclasses.dataclass\n"
             "class A:\n"
             "    'doc'\n"
             "    x: int = 0\n"
             "print(type(sys.modules['inspect']).__name__)\n")
    p = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert p.returncode == 0, p.stderr
    assert (p.stdout.strip() != "DeferredModule") == INSPECT_AT_CLASS_CREATION, (sys.version, p.stdout)


def test_healthy_node_passes_every_fast_check(node):
    report = node()  # `run`: the fast checks, as periodic, but no Slurm needed when all is well
    statuses = {cid: r["status"] for cid, r in report["by_id"].items()}
    drift = statuses.pop("software-drift")  # reads this machine's own stack (fleet/collector.py)
    assert drift == "skip" or os.path.exists("/proc/driver/nvidia/version")
    assert statuses == {
        "gpu-count": "pass", "ecc-uncorrected": "pass", "row-remap": "pass", "xid": "pass", "nvlink": "pass",
        "pcie-link": "pass", "thermal": "pass", "ecc-corrected": "pass", "retired-pages": "pass", "power": "pass",
        "driver-version": "pass", "persistence-mode": "pass", "clock-events": "pass", "fabric": "pass",
        "infiniband": "pass", "host-memory": "pass", "mounts": "skip",
    }
    assert report["by_id"]["gpu-count"]["detail"] == "8 x NVIDIA B200"
    assert report["by_id"]["thermal"]["value"] > 0 and report["by_id"]["power"]["value"] > 0  # really read
    assert report["rc"] == 0 and report["plan"]["action"] == "none"


FAULTS = [
    # (kind, value, check id, status, substring of the detail)
    ("ecc-uncorrected", "2", "ecc-uncorrected", "fail", "GPU5 volatile uncorrected ECC=2"),
    ("ecc-corrected", None, "ecc-corrected", "fail", "GPU5 volatile corrected ECC=60000000 > 50000000"),
    ("row-remap-pending", None, "row-remap", "fail", "GPU5 row remap pending"),
    ("row-remap-failed", None, "row-remap", "fail", "GPU5 row remapping failed"),
    ("retired-pages", "11", "retired-pages", "fail", "GPU5 11 retired pages > 10"),
    ("xid", "79", "xid", "fail", "GPU5 XID 79 ROBUST_CHANNEL_GPU_HAS_FALLEN_OFF_THE_BUS (RESTART_BM)"),
    ("xid", "48", "xid", "fail", "GPU5 XID 48"),
    ("xid", "63", "xid", "warn", "GPU5 XID 63"),
    ("xid", "92", "xid", "warn", "GPU5 XID 92"),
    ("xid", "13", "xid", "pass", "1 XID line(s) in the log"),  # the example site ignores 13
    ("pcie-degraded", "3x8", "pcie-link", "fail", "GPU5 PCIe x8 < x16"),
    ("nvlink-down", "2", "nvlink", "fail", "GPU5 2/18 NVLinks inactive (links 0,1)"),
    ("thermal", "95", "thermal", "fail", "GPU5 95 C > 87 C"),
    ("memory-thermal", "100", "thermal", "fail", "GPU5 HBM 100 C > 95 C"),
    ("clocks-throttle", None, "clock-events", "fail", "GPU5 clock events: HW slowdown"),
    ("power", "1200", "power", "fail", "GPU5 draws 1200 W > 1.1 x limit 1000 W"),
    ("persistence-off", None, "persistence-mode", "fail", "GPU5 persistence mode off"),
    ("missing-gpu", None, "gpu-count", "fail", "found 7 GPUs, profile expects 8"),
    ("leftover-process", "4242", "gpu-processes", "fail", "GPU5 held by pid 4242"),
    # issue 10: the new faults, through the real pynvml
    ("ecc-aggregate", "3", "ecc-uncorrected", "warn", "GPU5 aggregate (lifetime) uncorrected ECC=3 > 0"),
    ("fabric", "not-started", "fabric", "fail", "GPU5 fabric NOT_STARTED"),
    ("fabric", "in-progress", "fabric", "warn", "GPU5 fabric registration IN_PROGRESS"),
    ("fabric", "failed", "fabric", "fail", "GPU5 fabric COMPLETED with error (NVML status 999)"),
    ("fabric", "degraded", "fabric", "fail", "GPU5 fabric health: degraded bandwidth"),
    ("fabric", "route-recovery", "fabric", "warn", "GPU5 fabric health: route recovery in progress"),
    ("clock-event", "power-brake", "clock-events", "fail", "GPU5 clock events: HW power brake"),
    ("clock-event", "sw-power-cap", "clock-events", "pass", "ok"),
    ("recovery-action", "2", "xid", "fail", "GPU5 NVML recovery action: Node Reboot Required"),
    ("xid", "94:mig", "xid", "warn", "GPU5 (MIG GI 1 CI 0) XID 94 ROBUST_CHANNEL_CONTAINED_ERROR"),
    ("xid", "144:SAW_MVB:0x8", "xid", "pass", "1 XID line(s) in the log"),
    ("xid", "144:SAW_MVB:0x10:fatal", "xid", "fail", "GPU5 XID 144 NVLINK_SAW_ERROR SAW_MVB status 0x00000010"),
    ("xid", "154:reboot", "xid", "fail", "GPU5 XID 154 GPU_RECOVERY_ACTION_CHANGED: Node Reboot Required"),
]


@pytest.mark.parametrize("kind,value,check_id,status,detail", FAULTS, ids=[f"{f[0]}-{f[1]}" for f in FAULTS])
def test_fault_fails_its_check_only(node, kind, value, check_id, status, detail):
    gpus.inject(node.gdir, NODE, 5, kind, value)
    report = node(*(["gpu-processes"] if check_id == "gpu-processes" else []))
    r = report["by_id"][check_id]
    assert r["status"] == status and detail in r["detail"], r
    others = {cid: x["status"] for cid, x in report["by_id"].items() if cid != check_id}
    also = {"thermal": {"clock-events"}}.get(kind, set())  # an overheated GPU also slows its clocks
    if kind != "missing-gpu":  # a GPU off the bus is also absent from every per-GPU check
        assert all(s in ("pass", "skip") for c, s in others.items() if c not in also), others


def test_thermal_fault_also_reports_slowdown(node):
    gpus.inject(node.gdir, NODE, 2, "thermal", "95")
    report = node("thermal", "clock-events")["by_id"]
    assert "GPU2 95 C > 87 C" in report["thermal"]["detail"]
    assert "HW thermal slowdown" in report["clock-events"]["detail"]


def test_old_app_xids_age_out_but_reset_class_ones_wait_for_the_reset(node):
    from datetime import datetime, timedelta, timezone

    # a 1-minute window and XIDs 90 s old: outside the window, but after this machine booted
    # (a reboot since would clear them), so wait for 100 s of uptime on a freshly booted machine
    site = node.tmp / "site.toml"
    data = tomllib.loads(site.read_text())
    data["health"]["xid_window_minutes"] = 1
    site.write_text(tomli_w.dumps(data))
    deadline = time.monotonic() + 120
    while time.clock_gettime(time.CLOCK_BOOTTIME) < 100 and time.monotonic() < deadline:
        time.sleep(1)
    before = datetime.now(timezone.utc) - timedelta(seconds=90)
    gpus.inject(node.gdir, NODE, 1, "xid", "31", now=before)  # RESTART_APP: ages out of the window
    r = node("xid")["by_id"]["xid"]
    assert r["status"] == "pass" and "1 XID line(s) in the log" in r["detail"], r
    gpus.inject(node.gdir, NODE, 2, "xid", "95", now=before)  # RESET_GPU: stays until the GPU is reset
    r = node("xid")["by_id"]["xid"]
    assert r["status"] == "fail" and "GPU2 XID 95" in r["detail"] and "no GPU reset seen since" in r["detail"], r
    assert "GPU2 NVML recovery action: GPU Reset Required" in r["detail"]
    gpus.inject(node.gdir, NODE, 2, "xid", "154:none")  # the driver logs the reset: recovery action none
    r = node("xid")["by_id"]["xid"]
    assert r["status"] == "pass", r


def test_nvml_recovery_none_counts_only_from_the_linkage_release(node):
    """Issue 25.6: on a driver older than the catalog's "Xid 154 linkage" release (R565 for 95)
    NVML's recovery-action field stays 0 whatever happened: an old reset-class XID must not read
    as "reset done" there. The stand-in plays a 560 driver (its field 230 then stays 0)."""
    from datetime import datetime, timedelta, timezone

    site = node.tmp / "site.toml"
    data = tomllib.loads(site.read_text())
    data["health"]["xid_window_minutes"] = 1
    site.write_text(tomli_w.dumps(data))
    deadline = time.monotonic() + 120
    while time.clock_gettime(time.CLOCK_BOOTTIME) < 100 and time.monotonic() < deadline:
        time.sleep(1)
    gpus.set_versions(node.gdir, NODE, driver_version="560.35.03", cuda_version="12.6")
    gpus.inject(node.gdir, NODE, 2, "xid", "95", now=datetime.now(timezone.utc) - timedelta(seconds=90))
    r = node("xid")["by_id"]["xid"]
    assert r["status"] == "fail" and "GPU2 XID 95" in r["detail"] and "no GPU reset seen since" in r["detail"], r
    assert "NVML recovery action" not in r["detail"]  # the old driver's field reads 0
    gpus.set_versions(node.gdir, NODE, driver_version=DRIVER, cuda_version="12.8")  # R570: linked
    gpus.clear(node.gdir, NODE, 2, "xid")  # and the field back at 0: as after a reset
    r = node("xid")["by_id"]["xid"]
    assert r["status"] == "pass", r


def test_repeated_xid_is_reported_once_with_a_count(node):
    for _ in range(3):
        gpus.inject(node.gdir, NODE, 4, "xid", "119")
    r = node("xid")["by_id"]["xid"]
    assert r["status"] == "fail" and r["detail"].count("XID 119") == 1 and "XID 119 x3 GSP_RPC_TIMEOUT" in r["detail"]


def test_nvlink_error_counters_rising_between_runs(node):
    first = node("nvlink", dry_run=False)  # records the counters' baseline in the store
    assert first["by_id"]["nvlink"]["status"] == "pass"
    gpus.inject(node.gdir, NODE, 6, "nvlink-errors", "60")  # replay +60 and CRC +60: rise 120 > 100
    r = node("nvlink", dry_run=False)["by_id"]["nvlink"]
    assert r["status"] == "fail" and "GPU6 NVLink errors rose by 120 (> 100)" in r["detail"], r
    again = node("nvlink", dry_run=False)["by_id"]["nvlink"]
    assert again["status"] == "pass"  # no further rise since the last run


def test_driver_version_against_the_site_baseline(node):
    gpus.write_healthy(node.gdir, NODE, B200, driver_version="565.57.01")
    r = node("driver-version")["by_id"]["driver-version"]
    assert r["status"] == "fail" and r["detail"] == "driver 565.57.01, site baseline 570.133.20"


def test_hung_gpu_is_reported_as_cannot_run_within_the_check_limit(node):
    gpus.inject(node.gdir, NODE, 3, "hang")
    report = node("gpu-count", "ecc-uncorrected", "xid")
    # one check limit (1 s), not one per check: NVML's start waits out the limit once and no NVML
    # check is started after it (each says why at once instead of timing out on its own; no
    # wall-clock bound here: a loaded machine only slows the process start)
    assert "NVML did not answer within 1 s" in report["by_id"]["ecc-uncorrected"]["detail"]
    assert all(r["duration_ms"] < 500 for cid, r in report["by_id"].items() if cid != "xid")
    assert report["by_id"]["gpu-count"]["status"] == "error"
    assert "cannot run: NVML did not answer within 1 s" in report["by_id"]["gpu-count"]["detail"]
    assert report["by_id"]["ecc-uncorrected"]["status"] == "error"
    assert report["by_id"]["xid"]["status"] == "pass"  # the kernel log does not need NVML
    assert report["rc"] == 1


def test_missing_library_is_cannot_run_not_a_fault(node, tmp_path):
    env_lib = os.environ.get("LD_LIBRARY_PATH")  # the machine's own, without the stand-in
    site = node.tmp / "site.toml"
    p = subprocess.run([sys.executable, "-I", "-m", "slurmadm.health", "run", "--node", NODE, "--json", "--dry-run",
                        "--checks", "gpu-count", "--site", str(site)],
                       env={"PATH": "/usr/bin:/bin", "SLURMADM_CACHE_DIR": str(tmp_path / "c"),
                            **({"LD_LIBRARY_PATH": env_lib} if env_lib else {})},
                       capture_output=True, text=True, timeout=60)
    r = json.loads(p.stdout)["results"][0]
    assert r["status"] == "error" and "NVML Shared Library Not Found" in r["detail"]


def test_concurrent_prologs_share_one_store(node, fake_nvml_lib):
    """Eight nodes' prologs at the same moment, one store file and one JSON-lines file (as on the
    dev cluster): every run succeeds and every result lands, none interleaved."""
    names = [f"b200-{i:03d}" for i in range(1, 9)]
    # what is under test is the shared store, not speed: eight runs on a loaded 2-core machine
    # may take long, so the run's limit is out of the way
    site = node.tmp / "site.toml"
    data = tomllib.loads(site.read_text())
    data["health"].update(prolog_timeout_s=300.0, check_timeout_s=120.0)
    site.write_text(tomli_w.dumps(data))
    for n in names:
        gpus.write_healthy(node.gdir, n, B200, driver_version=DRIVER)
        ibsysfs.write_healthy(node.gdir, n, B200)
    env = {"PATH": "/usr/bin:/bin", "SLURMADM_SITE": str(node.tmp / "site.toml"),
           "SLURMADM_CACHE_DIR": str(node.tmp / "cache"), **gpus.env_for(node.gdir, fake_nvml_lib)}
    procs = [subprocess.Popen([sys.executable, "-I", "-m", "slurmadm.health", "prolog"],
                              env={**env, "SLURMD_NODENAME": n}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True) for n in names]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0] * 8, outs
    lines = [json.loads(x) for x in (node.tmp / "health.jsonl").read_text().splitlines()]
    per_node = {n: sum(1 for x in lines if x["node"] == n) for n in names}
    assert len(set(per_node.values())) == 1 and per_node[names[0]] >= 10, per_node
    from slurmadm.store import Store

    with Store(node.tmp / "slurmadm.db") as store:
        rows = store.db.execute("SELECT node, COUNT(*) AS n FROM check_results GROUP BY node").fetchall()
    assert {r["node"]: r["n"] for r in rows} == per_node


# ------------------------------------------------------------------------------ InfiniBand, host


@pytest.mark.parametrize("fault,detail", [
    ("down", "mlx5_3:1 state 1: DOWN, phys_state 3: Disabled"),
    ("rate", "mlx5_3:1 rate 200 Gb/sec (4X HDR) (want 400 Gb/sec)"),
    ("missing", "mlx5_3 missing"),
    ("flap", "mlx5_3 link flapped 2 times in 6 h"),
])
def test_infiniband_faults_through_the_sysfs_root(node, fault, detail):
    assert node("infiniband")["by_id"]["infiniband"]["status"] == "pass"
    ibsysfs.ib_fault(node.gdir, NODE, "mlx5_3", fault, kmsg=gpus.kmsg_path(node.gdir, NODE))
    r = node("infiniband")["by_id"]["infiniband"]
    assert r["status"] == "fail" and detail in r["detail"], r
    assert "mlx5_2" not in r["detail"]


def test_infiniband_error_counters_are_deltas_between_runs(node):
    assert node("infiniband", dry_run=False)["by_id"]["infiniband"]["status"] == "pass"  # baseline stored
    ibsysfs.ib_fault(node.gdir, NODE, "mlx5_1", "errors")
    r = node("infiniband", dry_run=False)["by_id"]["infiniband"]
    assert r["status"] == "fail" and "mlx5_1:1 symbol_error rose by 5000 (> 100)" in r["detail"], r
    assert "mlx5_1:1 link_downed rose by 3 (> 0)" in r["detail"]
    again = node("infiniband", dry_run=False)["by_id"]["infiniband"]  # no new errors since: a delta of 0
    assert again["status"] == "pass", again
    for _ in range(15):  # symbol_error is 16 bits wide: stuck at 65535 reads as "many"
        ibsysfs.ib_fault(node.gdir, NODE, "mlx5_1", "errors")
    r = node("infiniband", dry_run=False)["by_id"]["infiniband"]
    assert "symbol_error rose to its maximum 65535 (many" in r["detail"], r


def test_host_memory_against_the_profile(node):
    assert node("host-memory")["by_id"]["host-memory"]["status"] == "pass"
    site = node.tmp / "site.toml"
    data = tomllib.loads(site.read_text())
    data["profiles"]["hgx-b200"]["memory_gib"] *= 4  # as if DIMMs were missing
    site.write_text(tomli_w.dumps(data))
    r = node("host-memory")["by_id"]["host-memory"]
    assert r["status"] == "fail" and "< profile" in r["detail"], r


def test_mounts_missing_unmounted_and_full(node, tmp_path):
    site = node.tmp / "site.toml"
    data = tomllib.loads(site.read_text())
    data["health"]["mounts"] = [{"path": "/"}, {"path": str(tmp_path)}, {"path": str(tmp_path / "nope")},
                                {"path": "/proc", "min_free_gib": 1.0}]
    site.write_text(tomli_w.dumps(data))
    r = node("mounts")["by_id"]["mounts"]
    assert r["status"] == "fail", r
    assert f"{tmp_path} is not mounted" in r["detail"] and f"{tmp_path / 'nope'} missing" in r["detail"]
    assert "/proc has 0.0 GiB free < 1 GiB" in r["detail"] and "/ is" not in r["detail"]


def test_leftover_processes_of_the_jobs_user_in_the_epilog(node):
    import shutil

    setpriv = shutil.which("setpriv")
    assert setpriv and os.geteuid() == 0, "needs root and util-linux setpriv (the test suite runs as root)"
    site = node.tmp / "site.toml"
    data = tomllib.loads(site.read_text())
    data["health"]["leftover_outside_jobs"] = True  # the test's process is in no Slurm job
    site.write_text(tomli_w.dumps(data))
    child = subprocess.Popen([setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "sleep", "60"])
    try:
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:  # until the child runs as the user
            status = Path(f"/proc/{child.pid}/status").read_text()
            if "\nUid:\t65534" in status and "sleep" in Path(f"/proc/{child.pid}/comm").read_text():
                break
            time.sleep(0.05)
        r = node("leftover-processes", extra_env={"SLURM_JOB_UID": "65534"})["by_id"]["leftover-processes"]
        data["health"]["leftover_outside_jobs"] = False  # by default only the job's own cgroup counts
        site.write_text(tomli_w.dumps(data))
        quiet = node("leftover-processes", extra_env={"SLURM_JOB_UID": "65534", "SLURM_JOB_ID": "77"})
        assert quiet["by_id"]["leftover-processes"]["status"] == "pass", quiet["by_id"]
        assert r["status"] == "fail" and f"{child.pid}" in r["detail"] and "(sleep" in r["detail"], r
    finally:
        child.kill()
        child.wait()


def test_dimm_count_and_uncorrected_memory_errors_from_edac(node):
    site = node.tmp / "site.toml"
    data = tomllib.loads(site.read_text())
    data["profiles"]["hgx-b200"]["dimms"] = 8
    site.write_text(tomli_w.dumps(data))
    r = node("host-memory")["by_id"]["host-memory"]
    assert r["status"] == "warn" and "no EDAC memory controllers" in r["detail"], r  # cannot count: says so
    mc = node.gdir / f"{NODE}.sysfs" / "devices" / "system" / "edac" / "mc" / "mc0"  # the sysfs_root of the fixture
    for i in range(6):  # two of eight DIMMs gone; an empty slot reads size 0
        (mc / f"dimm{i}").mkdir(parents=True)
        (mc / f"dimm{i}" / "size").write_text("65536\n" if i < 6 else "0\n")
    (mc / "ue_count").write_text("1\n")
    r = node("host-memory")["by_id"]["host-memory"]
    assert r["status"] == "fail", r
    assert "6 DIMMs populated, profile expects 8" in r["detail"] and "1 uncorrected memory error(s) in EDAC" in r["detail"]


def test_a_deferred_module_is_the_real_one_on_first_use():
    """The prolog defers `inspect` (slurmadm/health/deferred.py): whoever uses it gets the real
    module, and `dataclasses` still works for a class without a docstring."""
    probe = ("import sys\n"
             "from slurmadm.health.deferred import DeferredModule, defer\n"
             "defer('inspect')\n"
             "assert type(sys.modules['inspect']) is DeferredModule\n"
             "import dataclasses, inspect\n"
             "@dataclasses.dataclass\n"
             "class A:\n"
             "    x: int\n"
             "assert A.__doc__ == 'A(x: int)', A.__doc__\n"
             "assert inspect.signature(A).parameters['x'].name == 'x'\n"
             "assert type(sys.modules['inspect']) is not DeferredModule\n"
             "print('ok')\n")
    p = subprocess.run([sys.executable, "-I", "-c", probe], capture_output=True, text=True, timeout=60, cwd="/",
                       env={"PATH": "/usr/bin:/bin"})
    assert p.stdout.strip() == "ok", p.stderr


# ------------------------------------------------------------------ issue 25.5: a hook that cannot run


def _hook(node, context: str) -> subprocess.CompletedProcess:
    argv = [sys.executable, "-I", "-m", "slurmadm.health", context, "--node", NODE]
    return subprocess.run(argv, env=node.env, capture_output=True, text=True, timeout=60, cwd=node.tmp)


@pytest.mark.parametrize("breakage,reason", [
    (b"\xff", "site-invalid"),  # a non-UTF-8 byte
    (b"\n[health\n", "site-invalid"),  # a TOML syntax error
])
def test_a_broken_site_lets_the_job_run_and_leaves_a_trace(node, breakage, reason):
    """The hooks let every job run on a broken site (right), but nothing but stderr and syslog
    said health enforcement was off: no /dev/log in containers, slurmd does not log a hook that
    exits 0. Now: a line in the results log, the node's store (audit event, node_state), and
    what `health status`, `doctor` and the exporter read from there."""
    from slurmadm.health import hookerror
    from slurmadm.store import Store

    node()  # a good run first: the node's settings cache knows where the store and results log are
    site = node.tmp / "site.toml"
    site.write_bytes(site.read_bytes() + breakage)
    p = _hook(node, "prolog")
    assert p.returncode == 0, p.stderr  # the job runs
    assert "cannot load the site" in p.stderr and "the job runs" in p.stderr
    lines = [json.loads(x) for x in (node.tmp / "health.jsonl").read_text().splitlines()]
    errs = [x for x in lines if x.get("event") == "hook_error"]
    assert errs and errs[-1]["node"] == NODE and errs[-1]["context"] == "prolog"
    assert errs[-1]["error_kind"] == reason and "cannot load the site" in errs[-1]["reason"]
    periodic = _hook(node, "periodic")
    assert periodic.returncode == 0
    assert "the job runs" not in periodic.stderr and "health enforcement is off" in periodic.stderr
    with Store(node.tmp / "slurmadm.db") as store:
        rows = store.query("SELECT node, key, value FROM node_state WHERE node=?", (NODE,))
        assert hookerror.counts(rows) == {(NODE, reason): 2}
        last = [r for r in rows if r["key"] == hookerror.STATE_KEY]
        newest = {NODE: store.query("SELECT MAX(ts) AS ts FROM check_results WHERE node=?", (NODE,))[0]["ts"]}
        [cur] = hookerror.current(last, newest)
        assert (cur["node"], cur["context"], cur["reason"]) == (NODE, "periodic", reason)
        assert store.query("SELECT COUNT(*) AS n FROM events WHERE action=?", (hookerror.AUDIT_ACTION,))[0]["n"] == 2
    # the site fixed: the next good run ends it (nothing written on the healthy path for that)
    site.write_bytes(site.read_bytes()[:-len(breakage)])
    node()
    with Store(node.tmp / "slurmadm.db") as store:
        last = store.query("SELECT node, value FROM node_state WHERE key=?", (hookerror.STATE_KEY,))
        newest = {NODE: store.query("SELECT MAX(ts) AS ts FROM check_results WHERE node=?", (NODE,))[0]["ts"]}
        assert hookerror.current(last, newest) == []


def test_a_broken_site_on_a_node_that_never_loaded_it_goes_to_the_defaults(tmp_path, monkeypatch):
    from slurmadm.health import hookerror

    monkeypatch.setenv("SLURMADM_CACHE_DIR", str(tmp_path / "no-cache"))
    monkeypatch.setattr(hookerror, "DEFAULT_RESULTS_LOG", str(tmp_path / "log" / "health.jsonl"))
    monkeypatch.setattr(hookerror, "DEFAULT_STORE", str(tmp_path / "lib" / "slurmadm.db"))
    # the defaults' directories do not exist: nothing is created for them, and it says so
    assert hookerror.last_good_paths("b200-009") == ("", "", None)
    assert len(hookerror.record("b200-009", "prolog", "site-invalid", "x")) == 2
    assert not (tmp_path / "log").exists() and not (tmp_path / "lib").exists()
    (tmp_path / "log").mkdir()
    (tmp_path / "lib").mkdir()
    assert hookerror.last_good_paths("b200-009") == (hookerror.DEFAULT_RESULTS_LOG, hookerror.DEFAULT_STORE, None)
    assert hookerror.record("b200-009", "prolog", "site-invalid", "x") == []
    assert "hook_error" in (tmp_path / "log" / "health.jsonl").read_text()


def test_a_link_that_keeps_flapping_is_counted_by_its_downs(node):
    """The stand-in's flapping link (`ib-fault --kind flap --every S`, ibsysfs.flap_once) logs
    "Link down" and "Link up" as mlx5_core does, stamped to the microsecond: the check counts the
    downs only, and the port's link_downed moves with them."""
    port = node.gdir / f"{NODE}.sysfs" / "class" / "infiniband" / "mlx5_4" / "ports" / "1"
    kmsg = gpus.kmsg_path(node.gdir, NODE)
    ibsysfs.flap_once(kmsg, NODE, "mlx5_4", port)
    r = node("infiniband")["by_id"]["infiniband"]
    assert r["status"] == "pass", r  # one down (and its up): within health.ib_flaps_max 2
    ibsysfs.flap_once(kmsg, NODE, "mlx5_4", port)
    r = node("infiniband")["by_id"]["infiniband"]
    assert r["status"] == "fail" and "mlx5_4 link flapped 2 times in 6 h" in r["detail"], r
    assert (port / "counters" / "link_downed").read_text().strip() == "2"
