"""`slurmadm doctor`: what slurmadm will use here and whether it works, one line per check with
ok / warn / fail and the fix.

A check is a plain function `(Context) -> Finding | list[Finding]` in the ordered `CHECKS`
list; a capability adds its own with `register()` (e.g. `slurmadm bmc`, `slurmadm fleet`), so
`doctor` grows with slurmadm without this package knowing every capability. A check that raises
is reported as a failed check, never a traceback; each one bounds its own outside calls (the
`slurmadm.proc.run` time limits, socket timeouts). Checks only read: doctor changes nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from ..errors import SlurmadmError

STATUSES = ("ok", "warn", "fail", "skip")


@dataclass
class Finding:
    check: str  # stable id: site, slurm, slurmctld, ...
    status: str  # ok | warn | fail | skip
    summary: str  # what was found (one line)
    fix: str = ""  # what to do about a warn/fail (one line)
    data: dict[str, Any] = field(default_factory=dict)  # machine-readable details for --json

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Context:
    """What the checks share: the site file as given, the loaded site (None when it did not
    load), the node to act as (`--node`), and a cache for values several checks need."""

    site_file: str | None
    node: str | None = None
    site: Any = None
    cache: dict[str, Any] = field(default_factory=dict)

    def remember(self, key: str, compute: Callable[[], Any]) -> Any:
        if key not in self.cache:
            self.cache[key] = compute()
        return self.cache[key]


Check = Callable[[Context], "Finding | list[Finding]"]


@dataclass(frozen=True)
class CheckSpec:
    id: str
    title: str
    fn: Check
    needs_site: bool = True  # skipped when the site file did not load


CHECKS: list[CheckSpec] = []


def register(check_id: str, title: str, *, needs_site: bool = True, after: str | None = None) -> Callable[[Check], Check]:
    """Decorator: add a check (at the end, or right after check `after`). Registering an id
    again replaces it in place (a module imported twice)."""
    def deco(fn: Check) -> Check:
        spec = CheckSpec(check_id, title, fn, needs_site)
        for i, old in enumerate(CHECKS):
            if old.id == check_id:
                CHECKS[i] = spec
                return fn
        pos = next((i + 1 for i, s in enumerate(CHECKS) if s.id == after), len(CHECKS)) if after else len(CHECKS)
        CHECKS.insert(pos, spec)
        return fn

    return deco


def run(ctx: Context, only: list[str] | None = None) -> list[Finding]:
    from . import checks  # noqa: F401  (the built-in checks register themselves)

    out: list[Finding] = []
    for spec in CHECKS:
        if only and spec.id not in only:
            # the site is loaded for the checks asked for, and shown only when it did not load
            if spec.id == "site" and any(s.needs_site for s in CHECKS if s.id in only):
                found = spec.fn(ctx)
                out.extend(f for f in (found if isinstance(found, list) else [found]) if f.status == "fail")
            continue
        if spec.needs_site and ctx.site is None:
            out.append(Finding(spec.id, "skip", f"{spec.title}: not checked (the site file did not load)"))
            continue
        started = time.monotonic()
        try:
            res = spec.fn(ctx)
        except SlurmadmError as exc:
            res = Finding(spec.id, "fail", f"{spec.title}: {exc}", "see the message")
        except Exception as exc:  # a broken check is a finding, not a traceback
            res = Finding(spec.id, "fail", f"{spec.title}: the check itself failed: {type(exc).__name__}: {exc}",
                          "report this as a slurmadm bug")
        found = res if isinstance(res, list) else [res]
        for f in found:
            f.data.setdefault("seconds", round(time.monotonic() - started, 2))
        out.extend(found)
    return out


def exit_code(findings: list[Finding]) -> int:
    return 1 if any(f.status == "fail" for f in findings) else 0
