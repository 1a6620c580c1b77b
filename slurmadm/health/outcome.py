"""What a check is given and what it returns (`Ctx`, `Outcome`, `CannotRun`): the observation
vocabulary, below every module that holds checks (checks.py, nodechecks.py, nccl.py) and the
runner, so that none of them imports another to learn it."""

from __future__ import annotations

from dataclasses import field

from ..record import record
from .config import HealthConfig
from .nvml import Nvml

TYPE_CHECKING = False  # typing.TYPE_CHECKING without importing typing (a few ms of every prolog)
if TYPE_CHECKING:
    from typing import Any


class CannotRun(Exception):
    """The check could not reach a verdict (missing library, unsupported, timed out)."""


class MissingTool(CannotRun):
    """A tool the check needs is not installed: the site's configuration, not the node's fault.
    Reported (status "error", action "warn"), never a reason to drain, whatever on_error says."""


@record
class Finding:
    """One problem a check found."""

    level: str  # "fail" or "warn"
    text: str


@record
class Outcome:
    """What one check returns: its findings and what it measured."""

    findings: list[Finding] = field(default_factory=list)
    note: str = ""  # what was looked at, for a pass
    value: float | None = None
    skip: str | None = None  # not applicable here, and why

    def fail(self, text: str) -> None:
        self.findings.append(Finding("fail", text))

    def warn(self, text: str) -> None:
        self.findings.append(Finding("warn", text))


@record
class Ctx:
    """What a check may use. `nvml` is None for checks that do not need it."""

    cfg: HealthConfig
    context: str
    now: float
    nvml: Nvml | None = None
    state: Any = None  # slurmadm.health.record.NodeState, or None without a store
    nccl_last_pass: float | None = None  # when nccl-allreduce last passed here (from the store)
    nvml_broken: str = ""  # set by the runner once NVML hung or failed: checks that only use it opportunistically skip it
