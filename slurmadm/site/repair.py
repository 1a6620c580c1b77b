"""Site model: `[repair]` (`slurmadm repair`, issue 34): overrides of the ladder per class,
the lemon thresholds, the breaker, the timer and the in-repair alert.

The defaults live with their sources in slurmadm/repair/data/ladder.toml; what a site sets here
replaces that class's window or rungs. Class names are checked against
slurmadm/repair/data/classes.toml (a data file; the site package imports no capability).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, field_validator

from .profiles import Strict
from .rma import RmaSettings

Step = Literal["reset", "reboot", "qualify", "resume", "rma"]


class RepairClass(Strict):
    """One class's ladder (`[repair.classes.RESET_GPU]`): unset keys keep the defaults."""

    # incidents of the same part and class opened within this many days pick the next rung
    window_days: Annotated[int, Field(ge=1, le=365)] | None = None
    # one list of steps per rung; a failed step moves to the next rung
    rungs: Annotated[list[Annotated[list[Step], Field(min_length=1, max_length=8)]],
                     Field(min_length=1, max_length=8)] | None = None


class RepairSection(Strict):
    # class name (`slurmadm repair ladder`) -> its override
    classes: dict[str, RepairClass] = {}  # noqa: RUF012 - pydantic copies defaults
    # a node or GPU serial with at least `lemon_incidents` incidents in `lemon_window_days`, or
    # `lemon_failed_qualifications` failed qualifications, is a lemon: never resumed automatically
    lemon_incidents: Annotated[int, Field(ge=2, le=1000)] = 3
    lemon_window_days: Annotated[int, Field(ge=1, le=3650)] = 28
    lemon_failed_qualifications: Annotated[int, Field(ge=1, le=100)] = 2
    # the breaker: at most this share of any partition in repair (reset, reboot, qualify) at once
    breaker_fraction: Annotated[float, Field(gt=0, le=1)] = 0.1
    # `repair install-timer`: how often `repair run` runs, seconds (1 minute to 1 day)
    interval_s: Annotated[int, Field(ge=60, le=86400)] = 300
    # the RepairTooLong alert: a node in repair (an incident not closed) longer than this, hours
    alert_after_h: Annotated[float, Field(gt=0, le=8760)] = 72.0
    # how long a reboot `repair run` asked for may take before the BMC power cycle, seconds
    # (HGX boards take tens of minutes to boot)
    reboot_timeout_s: Annotated[float, Field(ge=60, le=86400)] = 1800.0
    # the qualification job's GPU stress, seconds (unset: [burnin] stress_seconds, at most 120)
    qualify_stress_seconds: Annotated[int, Field(ge=10, le=3600)] | None = None
    # the qualification of a node repaired for an HCA (a link down or flapping) watches its links
    # at least this long, seconds: any link down meanwhile fails it (0: as long as its tests take)
    link_watch_s: Annotated[float, Field(ge=0, le=86400)] = 600.0
    # RMA cases (`slurmadm repair rma`): where their evidence bundles go and how long the node's
    # nvidia-bug-report.sh may take
    rma: RmaSettings = RmaSettings()

    @field_validator("classes")
    @classmethod
    def _known_classes(cls, value: dict[str, RepairClass]) -> dict[str, RepairClass]:
        from ..repair.classes import (
            incident_classes,  # data only (tomllib + the data file)
        )

        known = incident_classes()
        unknown = sorted(set(value) - set(known))
        if unknown:
            raise ValueError(f"unknown repair class {', '.join(map(repr, unknown))} "
                             f"(known: {', '.join(known)})")
        return value
