"""Running checks under time limits: each check in a worker thread with its own deadline, and a
deadline for all of them. A check that does not answer in time is abandoned (its thread is a
daemon; ctypes released the GIL, so nothing here waits on it) and reported as status "error".
Once an NVML call has hung, later NVML checks are not started (they would hang on the same
driver lock): they report "error" at once.
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
    pass


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


def call_with_deadline(fn: Callable[[], Any], timeout_s: float) -> Any:
    """fn() in the worker thread; TimedOut if it has not returned within `timeout_s`."""
    global _worker
    if _worker is None:
        _worker = _Worker()
    box: dict[str, Any] = {}
    done = threading.Event()
    _worker.jobs.put((fn, box, done))
    if not done.wait(max(timeout_s, 0.0)):
        stuck_threads.append(_worker.thread)
        _worker = None
        raise TimedOut(f"no answer within {timeout_s:.3g} s")
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
        return {"drain": "drain", "warn": "warn"}.get(policy.on_fail, "none")
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
            ctx.nvml = call_with_deadline(open_nvml, limit)
        except TimedOut:
            nvml_error = f"NVML did not answer within {limit:.3g} s (hung driver or GPU)"
        except NvmlUnavailable as exc:
            nvml_error = str(exc)
        except Exception as exc:  # noqa: BLE001 - e.g. an NVMLError from nvmlDeviceGetCount
            nvml_error = f"NVML: {exc}"
    for p in policies:
        ctx.nvml_broken = nvml_error
        started = time.monotonic()
        remaining = deadline - started
        if remaining <= 0:
            results.append(_result(p, "error", "cannot run: the run's time limit was reached first", None, started))
            continue
        if p.spec.needs_nvml and nvml_error:
            results.append(_result(p, "error", f"cannot run: {nvml_error}", None, started))
            continue
        limit = min(p.timeout_s, remaining)
        try:
            out = call_with_deadline(lambda p=p: p.spec.fn(ctx), limit)
        except TimedOut:
            results.append(_result(p, "error", f"cannot run: timed out after {limit:.3g} s", None, started))
            if p.spec.needs_nvml:
                nvml_error = f"NVML hung in {p.spec.id} earlier in this run"
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


def first_drain(results: list[Result]) -> Result | None:
    """The result a drain reason names: the most severe drain-worthy result, in check order."""
    worthy = [r for r in results if r.action == "drain"]
    if not worthy:
        return None
    return min(worthy, key=lambda r: (SEVERITY_RANK.get(r.severity, 9), r.status != "fail", results.index(r)))
