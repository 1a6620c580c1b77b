"""A burn-in sweep of the example site's 128 nodes through the real sweep logic (fake Slurm, real
store, the real pair plan over its four scalable units: 64 pairs a round), for the report at the
reference size (tests/unit/burnin/test_report_at_128.py)."""

from __future__ import annotations

import datetime as dt

from slurmadm.burnin import history
from slurmadm.burnin.model import PairResult, TestResult
from slurmadm.burnin.pairs import PairPlan
from slurmadm.burnin.sweep import NodeRun, Sweep
from slurmadm.store import Store

from tests.unit.burnin.test_fleet import gpu_node
from tests.unit.burnin.test_sweep_logic import EXAMPLE

NODES = [f"b200-{i:03d}" for i in range(1, 129)]


def big_sweep(site, tmp_path, slurm, day: int, *, slow: dict[str, float], fails: dict[str, str],
              bad_link: str | None = None, prior: dict[str, str] | None = None):
    """A sweep of NODES: `slow` node -> its slowest GPU's TFLOPS, `fails` node -> the health
    failure that fails it in phase 1; `bad_link` a node whose pairs run at a tenth of the rest;
    `prior` node -> the drain reason it is re-qualified from (resumed by the caller, as _prepare does)."""
    prior = prior or {}
    sw = Sweep(site, backend=slurm, store=Store(site.store.path), site_file=str(EXAMPLE),
               report_dir=str(tmp_path / "reports"), now=dt.datetime(2026, 12, day, 1, 30))
    history.start_sweep(sw.store, sw.id, pid=1, host="h", actor="root", nodes="b200-[001-128]")
    sw.status = "done"
    for i, n in enumerate(NODES):
        entry = gpu_node(n, tflops=slow.get(n, 1000.0 + i % 7), busbw=480.0 - (i * 13 + day) % 23)
        tests = [TestResult.from_json(t) for t in entry["tests"]]
        if n in fails:
            tests[-1] = TestResult("health", "fail", fails[n])
            sw.runs[n] = NodeRun(n, "idle", verdict="fail", failed_test="health", detail=fails[n], tests=tests,
                                 job_id=str(1000 + i), output=f"jobs/slurmadm-burnin.{sw.id}.{n}.out")
        else:
            sw.runs[n] = NodeRun(n, "requalify" if n in prior else "idle", prior_reason=prior.get(n, ""),
                                 verdict="pass", tests=tests, job_id=str(1000 + i),
                                 output=f"jobs/slurmadm-burnin.{sw.id}.{n}.out")
    ready = [n for n in NODES if n not in fails]
    floor = site.burnin.pair_busbw_floor_gbps
    sw.plan = PairPlan([(name, [n for n in members if n in ready]) for name, members in site.scalable_units], floor)
    job = 5000
    while pairs := sw.plan.next_round():
        for p in pairs:
            job += 1
            bw = 38.0 if bad_link in (p.a, p.b) else 390.0 - (job * 7 + day) % 31
            ok = bw >= floor
            sw.plan.record(PairResult(p.a, p.b, p.kind, p.round, "pass" if ok else "fail", busbw_gbps=bw,
                                      algbw_gbps=bw, detail=f"nccl 16 ranks on cuda: busbw {bw:.3g} GB/s "
                                      f"({'>=' if ok else '<'} floor {floor:g})", job_id=str(job),
                                      output=f"jobs/slurmadm-burnin.{sw.id}.r{p.round}.{p.a}+{p.b}.out"))
    sw._conclude()
    return sw, sw._finish()
