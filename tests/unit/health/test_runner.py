"""Time limits: a hung check is abandoned within its limit, later NVML checks do not wait on it,
the run's deadline holds; the policy table turns statuses into actions."""

from __future__ import annotations

import threading
import time

import pytest

from slurmadm.health import checks as C
from slurmadm.health.config import GpuExpect, HealthConfig, Thresholds
from slurmadm.health import runner
from slurmadm.health.runner import TimedOut, call_with_deadline, run_checks, verdict
from slurmadm.health.nvml import Nvml

pytestmark = pytest.mark.unit


def cfg(**over) -> HealthConfig:
    base = dict(
        node="b200-001", site_path="", site_sha256="",
        gpu=GpuExpect(8, "b200", "NVIDIA B200", 18, 5, 16, 1000),
        thresholds=Thresholds(300.0, 87, 95, 50_000_000, 10, 1.1, 100), driver_version="570.133.20",
        store_path="/nonexistent/x.db", audit_log=None, check_timeout_s=0.3,
        timeouts={"prolog": 5, "epilog": 5, "periodic": 5, "run": 5}, on_error="fail", nccl_fresh_hours=24,
        nccl_timeout_s=1, nccl_size_mib=1, nccl_iters=1, xid_window_minutes=60, xid_source="/nonexistent",
        xid_actions={}, resume_after_clean_runs=3, drain_cap_fraction=0.1, results_log="", policies={},
    )
    base.update(over)
    return HealthConfig(**base)


RELEASE = threading.Event()


def hangs(ctx):
    RELEASE.wait(30)
    return C.Outcome()


def finds(ctx):
    out = C.Outcome()
    out.fail("GPU5 broken")
    return out


def spec(cid, fn, needs_nvml=True, **kw):
    return C.CheckSpec(cid, cid, fn, needs_nvml=needs_nvml, **kw)


def test_hung_check_is_abandoned_and_later_nvml_checks_do_not_wait():
    c = cfg()
    pols = [C.policy(spec("a-hangs", hangs), c), C.policy(spec("b-nvml", finds), c),
            C.policy(spec("c-plain", finds, needs_nvml=False), c)]
    t0 = time.monotonic()
    results = run_checks(pols, C.Ctx(cfg=c, context="prolog", now=time.time()), deadline=t0 + 5,
                         open_nvml=lambda: Nvml())
    elapsed = time.monotonic() - t0
    RELEASE.set()
    # the hung check would hold the run for 30 s: far less shows it was abandoned at its limit
    # (the bound is loose so that a loaded machine passes)
    assert elapsed < 10, elapsed
    assert [(r.check_id, r.status) for r in results] == [("a-hangs", "error"), ("b-nvml", "error"), ("c-plain", "fail")]
    assert "timed out after 0.3 s" in results[0].detail
    assert "NVML hung in a-hangs" in results[1].detail
    assert results[0].action == "drain"  # on_error=fail: fail-safe for the job


def test_hung_nvml_init_errors_every_nvml_check_quickly():
    c = cfg()
    gate = threading.Event()
    pols = [C.policy(spec("a", finds), c), C.policy(spec("b", finds), c)]
    t0 = time.monotonic()
    results = run_checks(pols, C.Ctx(cfg=c, context="prolog", now=time.time()), deadline=t0 + 5,
                         open_nvml=lambda: gate.wait(30))
    gate.set()
    assert time.monotonic() - t0 < 10  # not the 30 s the hung init would take
    assert all(r.status == "error" and "NVML did not answer" in r.detail for r in results)


def test_run_deadline_stops_starting_checks():
    """The first check runs past the run's deadline (however fast or slow the machine is): it is
    abandoned at the deadline, no later check starts, each is an error naming the time limit."""
    c = cfg(check_timeout_s=30)
    # room for the first check to start on a loaded machine (with 0.3 s it sometimes never did:
    # then it is "the time limit was reached first", not the abandoned check this test is about)
    deadline = time.monotonic() + 2.0
    c0_started = []

    def outlasts_the_deadline(ctx):
        c0_started.append(1)
        while time.monotonic() < deadline + 0.05:
            time.sleep(0.01)
        return C.Outcome()

    started = []

    def quick(ctx):
        started.append(1)
        return C.Outcome()

    pols = [C.policy(spec("c0", outlasts_the_deadline, needs_nvml=False), c)] + [
        C.policy(spec(f"c{i}", quick, needs_nvml=False), c) for i in range(1, 10)]
    results = run_checks(pols, C.Ctx(cfg=c, context="prolog", now=time.time()), deadline=deadline)
    assert c0_started, results[0]
    assert results[0].status == "error" and "timed out" in results[0].detail, results[0]
    assert started == []
    assert all(r.status == "error" and "time limit" in r.detail for r in results[1:]), results


def starved_clock(release_at: int | None = None, release: threading.Event | None = None):
    """A stand-in for the kernel's run delay of a worker that waits for a CPU all the time (its
    run delay grows as fast as the clock); on its `release_at`-th reading the call returns."""
    reads = []

    def run_delay(tid):
        reads.append(tid)
        if release is not None and len(reads) == release_at:
            release.set()
        return time.monotonic()
    return run_delay, reads


def test_time_a_starved_worker_waits_for_a_cpu_is_granted_back(monkeypatch):
    """The 128-node replay on 2 CPUs (issue 37): a health run that got no CPU read as a hung GPU.
    A worker whose run delay grew all along gets more time, up to `until`, and its answer counts."""
    release = threading.Event()
    run_delay, reads = starved_clock(release_at=3, release=release)
    monkeypatch.setattr(runner, "run_delay_s", run_delay)
    assert call_with_deadline(lambda: release.wait(30) and "answered", 0.05, until=time.monotonic() + 30) == "answered"
    assert len(reads) >= 3 and all(isinstance(t, int) for t in reads)  # the worker thread's own id


def test_a_sleeping_call_gets_no_time_back_and_is_hung_at_its_limit(monkeypatch):
    release = threading.Event()
    monkeypatch.setattr(runner, "run_delay_s", lambda tid: 0.25)  # never waited for a CPU
    try:
        with pytest.raises(TimedOut) as exc:
            call_with_deadline(lambda: release.wait(30), 0.05, until=time.monotonic() + 30)
        assert not exc.value.starved(0.05) and exc.value.starved_s == 0
    finally:
        release.set()


@pytest.fixture()
def starved(monkeypatch):
    """The worker always waiting for a CPU; the event its hung call waits on, set at the end."""
    release = threading.Event()
    monkeypatch.setattr(runner, "run_delay_s", starved_clock()[0])
    yield release
    release.set()


def test_no_time_is_granted_past_until_or_without_it(starved):
    until = time.monotonic() + 0.2
    with pytest.raises(TimedOut) as exc:
        call_with_deadline(lambda: starved.wait(30), 0.05, until=until)
    assert exc.value.starved(0.05) and exc.value.elapsed_s >= 0.2 - 0.01
    with pytest.raises(TimedOut) as exc:  # no `until` (config's NVML read): the limit as before
        call_with_deadline(lambda: starved.wait(30), 0.05)
    assert not exc.value.starved(0.05)


def test_a_starved_nvml_start_is_not_called_a_hung_gpu(starved):
    c = cfg(check_timeout_s=0.05)
    pols = [C.policy(spec("gpu-count", finds), c)]
    results = run_checks(pols, C.Ctx(cfg=c, context="prolog", now=time.time()), deadline=time.monotonic() + 0.3,
                         open_nvml=lambda: starved.wait(30) and Nvml())
    assert results[0].status == "error", results
    assert "waiting for a CPU (the node's CPUs are overloaded; not judged a hung GPU)" in results[0].detail
    assert "hung driver" not in results[0].detail


def test_run_delay_of_a_real_thread_is_read_from_the_kernel():
    """Linux says how long a thread waited for a CPU (schedstat): a number, never negative."""
    v = runner.run_delay_s(threading.get_native_id())
    assert v is not None and v >= 0
    assert runner.run_delay_s(None) is None and runner.run_delay_s(2 ** 31 - 1) is None


@pytest.mark.parametrize("on_fail,on_error,status,action", [
    ("drain", "fail", "fail", "drain"), ("warn", "fail", "fail", "warn"), ("ignore", "fail", "fail", "none"),
    ("drain", "fail", "error", "drain"), ("drain", "warn", "error", "warn"), ("warn", "fail", "error", "warn"),
    ("drain", "fail", "warn", "warn"), ("drain", "fail", "pass", "none"), ("drain", "fail", "skip", "none"),
    # observe mode (health/observe.py): recorded as it is, acted on as a warning
    ("observe", "fail", "fail", "warn"), ("observe", "fail", "error", "warn"), ("observe", "fail", "warn", "warn"),
])
def test_policy_table(on_fail, on_error, status, action):
    c = cfg(policies={"ecc-uncorrected": {"on_fail": on_fail, "on_error": on_error}})
    assert verdict(C.policy(C.BY_ID["ecc-uncorrected"], c), status) == action


def test_contexts_select_checks_and_overrides_apply():
    c = cfg(policies={"persistence-mode": {"contexts": ["periodic"]}})
    prolog = [p.spec.id for p in C.select(c, "prolog")]
    assert "persistence-mode" not in prolog and "gpu-processes" not in prolog and "nccl-allreduce" in prolog
    assert "gpu-processes" in [p.spec.id for p in C.select(c, "epilog")]
    periodic = [p.spec.id for p in C.select(c, "periodic")]
    assert "nccl-allreduce" not in periodic and "persistence-mode" in periodic
    assert [p.spec.id for p in C.select(c, "run", ["xid", "gpu-count"])] == ["gpu-count", "xid"]
    with pytest.raises(Exception, match="unknown check id"):
        C.select(c, "run", ["ecc"])


def test_check_ids_are_stable_kebab_case():
    import re

    assert all(re.fullmatch(r"[a-z][a-z0-9]*(-[a-z0-9]+)*", c.id) for c in C.CHECKS)
    assert len(C.BY_ID) == len(C.CHECKS)


def test_a_missing_tool_is_reported_never_drained_for():
    """issue 15: `health run` drained a healthy node because all_reduce_perf was not installed and
    on_error is fail. A missing tool is the site's configuration, not the node's fault."""
    def missing(ctx):
        raise C.MissingTool("no all_reduce_perf on PATH")

    def broken(ctx):
        raise C.CannotRun("all-reduce failed: NCCL error")

    c = cfg(on_error="fail")
    pols = [C.policy(spec("nccl-allreduce", missing, needs_nvml=False), c),
            C.policy(spec("other", broken, needs_nvml=False), c)]
    results = run_checks(pols, C.Ctx(cfg=c, context="run", now=time.time()), deadline=time.monotonic() + 5)
    assert (results[0].status, results[0].action) == ("error", "warn")
    assert "not installed" in results[0].detail
    assert (results[1].status, results[1].action) == ("error", "drain")  # a real failure to run still fails safe
