"""The per-node burn-in job. `burnin run` starts one per node (srun, whole node) and reads its
JSON lines from stdout:

    {"event": "started", "node": ..., "job_id": ...}      first, at once
    {"event": "test", "test": "health", "status": ...}     one per test as it finishes
    {"event": "result", "node": ..., "tests": [...]}       last

    python -m slurmadm.burnin.node --spec '{"stress_seconds": 600, ...}'

Tests, in order: the GPU stress, DCGM's diagnostic where installed, the single-node all-reduce,
the known-answer compute test (`kat`, burnin.known_answer: repair/kat.py, a disagreeing GPU named
`GPU<index>` so that its drain opens an incident on that GPU), the HCA ports' rates (`fabric`),
the link watch (`links`: any compute HCA port down while the job ran fails it, NVIDIA's flap
threshold of 1 under load; before the health suite, whose infiniband check counts flaps in its
window, so that the drain names the port and opens an HCA incident on it), then the health suite
(`slurmadm health run --dry-run --json`) on the node that has just been under load (Slurm's prolog checked it idle before the job began).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

from ..errors import SlurmadmError, UsageError
from ..proc import run
from ..health import allreduce
from ..health.hook import local_node
from . import stress
from .model import TestResult

# The health suite through the health capability's CLI (one narrow boundary): every check of its
# `run` context, reported but not acted on (--dry-run): the sweep drains, with a burnin- reason.
# Its own all-reduce check is left out: the burn-in measures that itself (allreduce-node), with
# the site's collective.
HEALTH_ARGV = ["-m", "slurmadm", "health", "run", "--dry-run", "--json"]
HEALTH_CHECKS_ARGV = ["-m", "slurmadm", "health", "checks", "--json"]
HEALTH_CONTEXT = "run"
MEASURED_HERE = {"nccl-allreduce"}
# The dev cluster's stand-in straggler (`dev-cluster gpu-fault NODE --gpu N --kind slow --value PCT`):
# its stand-in GPU state (SLURMADM_FAKE_NVML_DIR, set only there) carries gpu.N.<key>=PCT.
STANDIN_SLOWDOWN_KEY = "burnin_slowdown_pct"
SLOWED = ("stress", "allreduce-node")


# The stand-in GPU's matmul rate in the dev cluster's stress (burnin.collective = "gloo": the CPU
# stand-in runs the load): a round figure, not a B200's, since fleet verdicts judge shares of a
# median. Unlike the CPU stand-in's own rate it does not vary with the machine's load, so a
# sweep of one node can be judged against a baseline (the fleet replay's nightly burn-in).
STANDIN_TFLOPS = 1000.0


def stand_in_gpus(node: str, env: dict[str, str] | None = None) -> dict[int, float] | None:
    """GPU index -> percent slower, for each stand-in GPU NVML enumerates on this node (None: not a
    dev cluster node, or no stand-in state for it). Read as the stand-in keeps it
    (devcluster/gpus.py, imported only on a dev cluster node)."""
    env = os.environ if env is None else env
    d = env.get("SLURMADM_FAKE_NVML_DIR")
    if not d:
        return None
    from ..devcluster import gpus as standin

    try:
        effective = standin.effective_gpus(standin.read_state(d, os.path.basename(node)))
    except UsageError:
        return None
    return {i: min(max(float(g.get(STANDIN_SLOWDOWN_KEY) or 0), 0.0), 95.0)
            for i, g in enumerate(effective) if g.get("present")}


def stand_in_slowdown(node: str, env: dict[str, str] | None = None) -> float:
    """Percent slower the dev cluster's stand-in makes this node (0: none, or not a dev cluster)."""
    return max((stand_in_gpus(node, env) or {}).values(), default=0.0)


def as_stand_in(result: TestResult, gpus: dict[int, float] | None) -> TestResult:
    """What the dev cluster's stand-in makes of a test's result (stand_in_gpus: None elsewhere, and
    the result is left as it is): slowed by its straggler, with its GPUs' rates. The burn-in's node
    job and the repair ladder's qualification job both report through it."""
    return stand_in_rates(slow_down(result, max((gpus or {}).values(), default=0.0)), gpus)


def stand_in_rates(result: TestResult, gpus: dict[int, float] | None) -> TestResult:
    """The CPU stand-in's stress with the stand-in GPUs' rates beside it (`per_gpu` tflops:
    STANDIN_TFLOPS, less each GPU's stand-in slowdown), as a GPU stress reports them."""
    if not gpus or result.test != "stress" or result.data.get("device") != "cpu":
        return result
    result.data["per_gpu"] = {str(i): {"tflops": round(STANDIN_TFLOPS * (1 - pct / 100), 3), "stand_in": True}
                              for i, pct in gpus.items()}
    return result


def slow_down(result: TestResult, pct: float) -> TestResult:
    """The stand-in straggler: the measured rate scaled down by `pct` percent, and said so."""
    if not pct or result.test not in SLOWED or result.value is None:
        return result
    factor = 1 - pct / 100
    result.value *= factor
    for key in ("busbw_gbps", "algbw_gbps"):
        if isinstance(result.data.get(key), (int, float)):
            result.data[key] *= factor
    result.data["stand_in_slowdown_pct"] = pct
    result.detail += f" [dev-cluster stand-in straggler: reported {pct:g}% slower]"
    return result


def _emit(obj: dict[str, Any]) -> None:
    print(json.dumps(obj, sort_keys=True, default=str), flush=True)


def parse_health(stdout: str) -> TestResult | None:
    """The health suite's JSON -> one `health` result naming each failed check. Accepts a list of
    check results or an object holding one under `results`/`checks`; None when not JSON. A check
    whose `action` (the site's action table) is not "drain" only warns, as it would in a prolog."""
    try:
        data = json.loads(stdout)
    except json.JSONDecodeError:
        return None
    rows = data
    if isinstance(data, dict):
        rows = next((data[k] for k in ("results", "checks") if isinstance(data.get(k), list)), None)
    if not isinstance(rows, list):
        return None
    checks = [r for r in rows if isinstance(r, dict)]
    by_status: dict[str, list[str]] = {}
    for r in checks:
        cid = str(r.get("check_id") or r.get("check") or r.get("id") or "?")
        status = str(r.get("status", "error")).lower()
        if status in ("fail", "error") and r.get("action", "drain") != "drain":
            status = "warn"
        detail = " ".join(str(r.get("detail") or r.get("message") or "").split())
        by_status.setdefault(status, []).append(f"{cid}: {detail}" if detail else cid)
    for status in ("fail", "error", "warn"):
        if by_status.get(status):
            return TestResult("health", status, "; ".join(by_status[status]), data={"checks": checks})
    return TestResult("health", "pass", f"{len(checks)} checks passed", data={"checks": checks})


def health_check_ids(timeout: float) -> list[str] | None:
    """The health checks of the `run` context on this site, minus those burn-in measures itself;
    None when the health CLI cannot list them (then its own default selection applies)."""
    try:
        proc = run([sys.executable, *HEALTH_CHECKS_ARGV], timeout=timeout, check=False)
        rows = json.loads(proc.stdout)
        return [r["id"] for r in rows if HEALTH_CONTEXT in r["contexts"] and r["id"] not in MEASURED_HERE]
    except (SlurmadmError, json.JSONDecodeError, KeyError, TypeError):
        return None


def health_suite(timeout: float) -> TestResult:
    argv = [sys.executable, *HEALTH_ARGV]
    ids = health_check_ids(timeout)
    if ids:
        argv += ["--checks", ",".join(ids)]
    try:
        proc = run(argv, timeout=timeout, check=False)
    except SlurmadmError as exc:
        return TestResult("health", "error", str(exc))
    parsed = parse_health(proc.stdout)
    if parsed is not None:
        return parsed
    last = ((proc.stderr or proc.stdout).strip().splitlines() or ["no output"])[-1]
    if proc.returncode == 2:  # usage: this installation has no `health run --context burnin`
        return TestResult("health", "skip", f"health suite unavailable ({last})")
    return TestResult("health", "error", f"`slurmadm health run` exited {proc.returncode}: {last}")


# Error counters whose rise over the job is a fleet metric (burnin/fleet.py COUNTER_OF).
ERROR_COUNTERS = ("symbol_error", "link_error_recovery", "link_downed", "port_rcv_errors")


def read_counters(spec: dict[str, Any]) -> dict[str, dict[str, int]]:
    """hca -> counter -> value of each compute HCA port's error counters (sysfs
    `<root>/class/infiniband/<hca>/ports/<port>/counters/<counter>`); unreadable ones left out."""
    root = os.path.join(spec.get("sysfs_root") or "/sys", "class", "infiniband")
    port = spec.get("hca_port", 1)
    out: dict[str, dict[str, int]] = {}
    for hca in spec.get("hcas") or []:
        for counter in ERROR_COUNTERS:
            try:
                with open(os.path.join(root, hca, "ports", str(port), "counters", counter), encoding="utf-8") as fh:
                    out.setdefault(hca, {})[counter] = int(fh.read().strip())
            except (OSError, ValueError):
                continue
    return out


def counter_rise(before: dict[str, dict[str, int]], after: dict[str, dict[str, int]]) -> dict[str, dict[str, int]]:
    """hca -> counter -> rise between two reads; a counter that went down was cleared in
    between (perfquery -x, a driver reload): its rise is at least its new value."""
    out: dict[str, dict[str, int]] = {}
    for hca, now in after.items():
        for counter, value in now.items():
            was = (before.get(hca) or {}).get(counter)
            if was is None:
                continue
            out.setdefault(hca, {})[counter] = value - was if value >= was else value
    return out


# Any link down while a burn-in or qualification job runs fails it: NVIDIA's Health-Validation
# counts link flaps at `fatal_flap_threshold` = 1 (shared/anchors/fault-taxonomy-2026-12.md); the
# health check's own rule (health.ib_flaps_max in health.ib_flap_window_hours) is for a node in
# service, between jobs.
LINK_FLAPS_MAX = 0


def links_test(spec: dict[str, Any], started: float, before: dict[str, dict[str, int]], *,
               clock: Callable[[], float] = time.time, sleep: Callable[[float], None] = time.sleep):
    """The link watch, the last of burn-in's and the repair qualification's tests: waits until
    `spec["link_watch_s"]` (0: none) have passed since the job `started` (wall clock; the other
    tests' time counts), then fails when a compute HCA port went down meanwhile: a "Link down"
    line of it in the kernel log (`spec["xid_source"]`, as the health check reads it) logged since
    `started`, or its link_downed counter risen since `before`."""
    from ..health.nodechecks import link_downs

    watch = float(spec.get("link_watch_s") or 0)
    hcas = list(spec.get("hcas") or [])
    if not hcas:
        return TestResult("links", "skip", "no compute HCAs in the profile")
    left = started + watch - clock()
    if left > 0:
        sleep(left)
    now = clock()
    try:
        downs = link_downs(str(spec.get("xid_source") or "kmsg"), spec.get("node") or "", now, hcas, started)
        unread = ""
    except (OSError, ValueError) as exc:
        downs, unread = {}, f"; kernel log unreadable ({type(exc).__name__})"
    rise = counter_rise(before, read_counters(spec))
    for hca, counters in rise.items():
        downs[hca] = max(downs.get(hca, 0), counters.get("link_downed", 0))
    bad = {h: n for h, n in sorted(downs.items()) if n > LINK_FLAPS_MAX}
    watched = f"{len(hcas)} port(s) watched {now - started:.0f} s"
    data = {"watched_s": round(now - started, 1), "downs": bad}
    if bad:
        what = ", ".join(f"{h} {n}x" for h, n in bad.items())
        return TestResult("links", "fail", f"link down while watched: {what} ({watched}){unread}",
                          value=float(sum(bad.values())), unit="downs", data=data)
    return TestResult("links", "pass", f"no link down ({watched}){unread}", value=0.0, unit="downs", data=data)


def fabric_rates(spec: dict[str, Any], before: dict[str, dict[str, int]] | None = None) -> TestResult:
    """Each compute HCA port's link rate from sysfs (`<root>/class/infiniband/<hca>/ports/<port>/rate`,
    e.g. "400 Gb/sec (4X NDR)"), for the fleet-relative verdict `hca-rate`. The health suite's
    `infiniband` check judges the rate against the profile; this only measures."""
    hcas = spec.get("hcas") or []
    if not hcas:
        return TestResult("fabric", "skip", "the profile lists no compute HCAs")
    root = os.path.join(spec.get("sysfs_root") or "/sys", "class", "infiniband")
    port = spec.get("hca_port", 1)
    rates: dict[str, float] = {}
    for hca in hcas:
        try:
            with open(os.path.join(root, hca, "ports", str(port), "rate"), encoding="utf-8") as fh:
                text = fh.read().strip()
            rates[hca] = float(text.split()[0])
        except (OSError, ValueError, IndexError):
            continue
    if not rates:
        return TestResult("fabric", "skip", f"no port rate readable under {root}")
    low = min(rates.values())
    missing = [h for h in hcas if h not in rates]
    detail = f"{len(rates)} HCA port(s): >= {low:g} Gb/s" + (f"; unreadable: {', '.join(missing)}" if missing else "")
    data: dict[str, Any] = {"per_hca": rates, "port": port}
    if before is not None:  # error counters' rise since the job began (before the stress)
        rise = counter_rise(before, read_counters(spec))
        data["counter_rise"] = rise
        risen = sorted(f"{h} {c} +{n}" for h, cs in rise.items() for c, n in cs.items() if n)
        detail += "; error counters over the job: " + (", ".join(risen) if risen else "none rose")
    return TestResult("fabric", "pass", detail, value=low, unit="Gb/s", data=data)


def name_gpus(detail: str, bad: Sequence[str]) -> str:
    """kat.py's "<device>: differs ..." findings with the GPU's index in front, the way health and
    burn-in name a GPU ("GPU5 (cuda:5): differs from the majority (...)"): the drain reason then
    names the part, and repair's incidents key it by that GPU's serial."""
    from ..repair.blame import DEVICE_RE  # kat's device names with NVML's index: cuda:5, standin:<node>:gpu5

    for device in bad:
        m = DEVICE_RE.search(device)
        if m:
            named = f"GPU{m.group(1)} ({device}): "
            detail = re.sub(rf"(^|; ){re.escape(device)}: ", lambda g, named=named: g.group(1) + named, detail)
    return detail


def kat_test() -> TestResult:
    """The known-answer test (repair/kat.py) on this node's devices: the stand-in's in the dev
    cluster, torch's on a GPU node. Skipped, and said so, where there is nothing to compute on."""
    from ..repair import kat

    try:
        verdict = kat.known_answer()
    except (SlurmadmError, ImportError) as exc:  # no torch, no stand-in: nothing to compute on
        return TestResult("kat", "skip", str(exc))
    if verdict.ok:
        detail = verdict.detail or (f"{len(verdict.results)} device(s) agree bit for bit ({verdict.basis}, "
                                    f"sha256 {(verdict.reference or '')[:12]})")
    else:
        # a drain reason with "|" breaks every `sinfo -o "%N|%E"` reader: none in this one
        detail = name_gpus(verdict.detail, verdict.bad).replace("|", "/") or "one device: no other to compare with"
    return TestResult("kat", "pass" if verdict.ok else "fail", detail, data=verdict.as_dict())


def single_node_allreduce(spec: dict[str, Any]) -> TestResult:
    backend = spec["collective"]
    torch = allreduce.import_torch()
    if torch is None:
        return TestResult("allreduce-node", "skip", "torch is not installed (pip install 'slurmadm[burnin]')")
    if backend == "nccl":
        ranks = torch.cuda.device_count() if torch.cuda.is_available() else 0
        if ranks == 0:
            return TestResult("allreduce-node", "fail" if torch.version.cuda else "skip",
                              "no CUDA device for NCCL" + ("" if torch.version.cuda else " (torch is a CPU build)"))
    else:
        ranks = 2  # gloo on the CPU: two local ranks exercise the path; numbers are CPU numbers
    if ranks < 2:
        return TestResult("allreduce-node", "skip", "one GPU: nothing to all-reduce between")
    port = spec["rendezvous_port"] + int(os.environ.get("SLURM_JOB_ID", "0")) % spec.get("rendezvous_ports", 100)
    start = time.monotonic()
    res = allreduce.run_local(backend, ranks, mib=spec["allreduce_mib"], iters=spec["allreduce_iters"],
                               port=port, timeout=spec["step_timeout"])
    took = time.monotonic() - start
    if "error" in res:
        return TestResult("allreduce-node", "error", res["error"], duration_s=took)
    floor = spec["node_floor_gbps"]
    bw = res["busbw_gbps"]
    label = f"{backend} {ranks} ranks on {res['device']}"
    if res["wrong_elements"]:
        return TestResult("allreduce-node", "fail", f"{label}: {res['wrong_elements']} wrong elements after all-reduce",
                          value=bw, unit="GB/s", duration_s=took, data=res)
    status = "pass" if bw >= floor else "fail"
    relation = ">=" if status == "pass" else "<"
    return TestResult("allreduce-node", status, f"{label}: busbw {bw:.3g} GB/s ({relation} floor {floor:g})",
                      value=bw, unit="GB/s", duration_s=took, data=res)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m slurmadm.burnin.node")
    ap.add_argument("--spec", required=True, help="JSON: what to run (written by `burnin run`)")
    spec = json.loads(ap.parse_args(argv).spec)
    node = local_node(None)
    _emit({"event": "started", "node": node, "job_id": os.environ.get("SLURM_JOB_ID", ""), "pid": os.getpid()})
    started, counters_before = time.time(), read_counters(spec)  # before the load: their rise over it is a fleet metric
    spec.setdefault("node", node)
    # Load first, then the health suite: the prolog already checked the idle node before this job
    # started; what burn-in adds is whether the node is still healthy after hours-long load.
    steps = [
        ("stress", lambda: stress.stress(spec["stress_seconds"], cpu_only=spec["collective"] == "gloo")),
        ("dcgm", lambda: stress.dcgm_diag(spec["dcgm_level"], spec["dcgm_timeout"], spec.get("gpu_model", ""),
                                          spec.get("ignore_known_issues", ()))),
        ("allreduce-node", lambda: single_node_allreduce(spec)),
        ("kat", kat_test),
        ("fabric", lambda: fabric_rates(spec, counters_before)),
        ("links", lambda: links_test(spec, started, counters_before)),
        ("health", lambda: health_suite(spec["step_timeout"])),
    ]
    tests = []
    standin = stand_in_gpus(node)
    for name, step in steps:
        if (name == "dcgm" and not spec["dcgm_level"]) or (name == "kat" and not spec.get("kat")):
            continue
        start = time.monotonic()
        try:
            result = step()
        except Exception as exc:  # an unexpected failure is reported as this test's error
            result = TestResult(name, "error", f"{type(exc).__name__}: {' '.join(str(exc).split())}"[:400])
        result.duration_s = result.duration_s or time.monotonic() - start
        result = as_stand_in(result, standin)
        tests.append(result)
        _emit({"event": "test", **result.to_json()})
    _emit({"event": "result", "node": node, "tests": [t.to_json() for t in tests]})
    return 0


if __name__ == "__main__":
    sys.exit(main())
