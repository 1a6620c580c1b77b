"""Running checks under time limits: each check in a worker thread with its own deadline, and a
deadline for all of them. A check that does not answer in time is abandoned (its thread is a
daemon; ctypes released the GIL, so nothing here waits on it) and reported as status "error".
Once an NVML call has hung, later NVML checks are not started (they would hang on the same
driver lock): they report "error" at once.

A limit counts the time the worker could run: time it spent runnable but waiting for a CPU (the
kernel's run delay, /proc/self/task/TID/schedstat) is granted back, up to the run's deadline. A
call blocked in the driver sleeps and is not granted anything, so a hung GPU is still found at
its limit; a health run starved by a loaded node (a job's data loaders on every core, the fleet
replay's 128 nodes on 2 CPUs at load 90) is no longer read as a hung GPU (issue 37).
"""

from __future__ import annotations

import queue
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, replace

from ..record import record
from .checks import Policy
from .nvml import Nvml, NvmlUnavailable
from .outcome import CannotRun, Ctx, MissingTool, Outcome

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (a few ms of every prolog)
if TYPE_CHECKING:
    from typing import Any

SEVERITY_RANK = {"critical": 0, "warning": 1, "info": 2}


class TimedOut(Exception):
    """`elapsed_s`: wall time waited; `starved_s`: of it, the worker's time waiting for a CPU."""

    def __init__(self, message: str, *, elapsed_s: float = 0.0, starved_s: float = 0.0) -> None:
        super().__init__(message)
        self.elapsed_s, self.starved_s = elapsed_s, starved_s

    def starved(self, limit: float) -> bool:
        """Whether the call was stopped by the run's deadline before it had `limit` s of time it
        could run, having waited for a CPU a real share (STARVED_SHARE) of the time."""
        return (self.starved_s >= STARVED_SHARE * self.elapsed_s
                and self.elapsed_s - self.starved_s < limit - LIMIT_SLACK_S)


LIMIT_SLACK_S = 0.01  # a remainder under this is not waited for
STARVED_SHARE = 0.25  # a hung call sleeps in the driver: its run delay stays near 0


def run_delay_s(tid: int | None) -> float | None:
    """Seconds thread `tid` of this process has spent runnable, waiting for a CPU (schedstat's
    second field); None where the kernel does not say."""
    if tid is None:
        return None
    try:
        with open(f"/proc/self/task/{tid}/schedstat", encoding="ascii") as fh:
            return int(fh.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return None


# Worker threads still stuck in a call: the process must leave with os._exit.
stuck_threads: list[threading.Thread] = []


class _Worker:
    """One daemon thread that runs calls in order (starting a thread per check would cost more
    than the checks). Abandoned, and replaced, when a call overruns its deadline."""

    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue = queue.SimpleQueue()
        self.thread = threading.Thread(target=self._loop, daemon=True, name="slurmadm-check")
        self.thread.start()

    def _loop(self) -> None:
        while True:
            fn, box, done = self.jobs.get()
            try:
                box["value"] = fn()
            except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
                box["error"] = exc
            done.set()


_worker: _Worker | None = None


def call_with_deadline(fn: Callable[[], Any], timeout_s: float, *, until: float | None = None) -> Any:
    """fn() in the worker thread; TimedOut if it has not returned within `timeout_s`. `until`
    (time.monotonic()): the time the worker spent waiting for a CPU meanwhile is granted back, up
    to then (None: none is)."""
    global _worker
    if _worker is None:
        _worker = _Worker()
    box: dict[str, Any] = {}
    done = threading.Event()
    tid = _worker.thread.native_id
    start, delay0 = time.monotonic(), run_delay_s(tid) if until is not None else None
    _worker.jobs.put((fn, box, done))
    wait = max(timeout_s, 0.0)
    while not done.wait(wait):
        now = time.monotonic()
        delay = run_delay_s(tid) if delay0 is not None else None
        starved = max(delay - delay0, 0.0) if delay is not None and delay0 is not None else 0.0
        left = timeout_s - (now - start - starved)
        if until is None or left < LIMIT_SLACK_S or now >= until:
            stuck_threads.append(_worker.thread)
            _worker = None
            raise TimedOut(f"no answer within {timeout_s:.3g} s", elapsed_s=now - start, starved_s=starved)
        wait = min(left, until - now)
    if "error" in box:
        raise box["error"]
    return box.get("value")


@record
class Result:
    """One check's result in one run (a row of check_results)."""

    check_id: str
    status: str  # pass | fail | warn | error | skip
    severity: str
    action: str  # drain | warn | none: what the site's policy says this result calls for
    detail: str
    value: float | None
    duration_ms: float

    def to_dict(self) -> dict:
        return asdict(self)


@record(frozen=True)
class Plan:
    """What a run does about its results (slurmadm.health.actions.decide)."""

    action: str  # drain | resume | alert | none
    reason: str  # the drain reason, or why (alert / none)
    blocks_job: bool = False
    clean_runs: int | None = None  # the new consecutive-clean count to store (None: leave it)
    check_id: str = ""


def verdict(policy: Policy, status: str) -> str:
    """The action a result calls for under the site's policy."""
    if status == "fail":
        # observe: a check tried on the fleet before it may drain (health/observe.py) acts as a warning
        return {"drain": "drain", "warn": "warn", "observe": "warn"}.get(policy.on_fail, "none")
    if status == "warn":
        return "none" if policy.on_fail == "ignore" else "warn"
    if status == "error":
        if policy.on_fail == "ignore":
            return "none"
        return "drain" if policy.on_error == "fail" and policy.on_fail == "drain" else "warn"
    return "none"


def _result(policy: Policy, status: str, detail: str, value: float | None, started: float) -> Result:
    return Result(policy.spec.id, status, policy.severity, verdict(policy, status), detail, value,
                  round((time.monotonic() - started) * 1000, 3))


def _from_outcome(policy: Policy, out: Outcome, started: float) -> Result:
    if out.skip:
        return _result(policy, "skip", out.skip, out.value, started)
    fails = [f.text for f in out.findings if f.level == "fail"]
    warns = [f.text for f in out.findings if f.level == "warn"]
    if fails:
        detail = "; ".join(fails + warns)
        return _result(policy, "fail", detail, out.value, started)
    if warns:
        return _result(policy, "warn", "; ".join(warns), out.value, started)
    return _result(policy, "pass", out.note or "ok", out.value, started)


def run_checks(policies: list[Policy], ctx: Ctx, *, deadline: float,
               open_nvml: Callable[[], Nvml] = Nvml.open) -> list[Result]:
    """Run `policies` in order until `deadline` (time.monotonic()). Never raises for a check."""
    results: list[Result] = []
    nvml_error = ""
    if any(p.spec.needs_nvml for p in policies) or any(p.spec.id == "xid" for p in policies):
        started = time.monotonic()
        limit = min(ctx.cfg.check_timeout_s, deadline - started)
        try:
            ctx.nvml = call_with_deadline(open_nvml, limit, until=deadline)
        except TimedOut as exc:
            nvml_error = starved_text("NVML", exc, limit) or f"NVML did not answer within {limit:.3g} s (hung driver or GPU)"
        except NvmlUnavailable as exc:
            nvml_error = str(exc)
        except Exception as exc:  # noqa: BLE001 - e.g. an NVMLError from nvmlDeviceGetCount
            nvml_error = f"NVML: {exc}"
    for p in policies:
        ctx.nvml_broken = nvml_error
        started = time.monotonic()
        remaining = deadline - started
        if p.spec.needs_nvml and nvml_error:  # NVML's own trouble says more than the time left
            results.append(_result(p, "error", f"cannot run: {nvml_error}", None, started))
            continue
        if remaining <= 0:
            results.append(_result(p, "error", "cannot run: the run's time limit was reached first", None, started))
            continue
        limit = min(p.timeout_s, remaining)
        try:
            out = call_with_deadline(lambda p=p: p.spec.fn(ctx), limit, until=deadline)
        except TimedOut as exc:
            starved = starved_text("the check", exc, limit)
            results.append(_result(p, "error", f"cannot run: {starved or f'timed out after {limit:.3g} s'}", None,
                                   started))
            if p.spec.needs_nvml:
                nvml_error = (f"{p.spec.id} earlier in this run could not finish (the node's CPUs are overloaded)"
                              if starved else f"NVML hung in {p.spec.id} earlier in this run")
            continue
        except MissingTool as exc:  # a configuration problem: report it, never drain for it
            r = _result(p, "error", f"cannot run (not installed): {exc}", None, started)
            results.append(r if r.action == "none" else replace(r, action="warn"))
            continue
        except CannotRun as exc:
            results.append(_result(p, "error", f"cannot run: {exc}", None, started))
            continue
        except Exception as exc:  # noqa: BLE001 - a driver error in the middle of a check
            results.append(_result(p, "error", f"cannot run: {type(exc).__name__}: {exc}", None, started))
            continue
        results.append(_from_outcome(p, out, started))
    return results


def starved_text(what: str, exc: TimedOut, limit: float) -> str:
    """What to say of a call the run's deadline stopped while it waited for a CPU, or ""."""
    if not exc.starved(limit):
        return ""
    return (f"{what} did not answer in {exc.elapsed_s:.3g} s, {exc.starved_s:.3g} s of it waiting for a CPU "
            f"(the node's CPUs are overloaded; not judged a hung GPU)")


def first_drain(results: list[Result]) -> Result | None:
    """The result a drain reason names: the most severe drain-worthy result, in check order."""
    worthy = [r for r in results if r.action == "drain"]
    if not worthy:
        return None
    return min(worthy, key=lambda r: (SEVERITY_RANK.get(r.severity, 9), r.status != "fail", results.index(r)))
