"""Site model: QOS, organisations and projects (Slurm accounts), and accounting settings.

Limits use untyped `gres/gpu` throughout: a typed limit (`gres/gpu:b200`) is bypassed by untyped
requests (Slurm resource_limits.shtml).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, NonNegativeInt, PositiveInt

from .profiles import Strict

# Slurm lowercases account/QOS names; keep them to what sacctmgr accepts unquoted.
SlurmName = Annotated[str, Field(pattern=r"^[a-z][a-z0-9_\-]{0,63}$")]
UserName = Annotated[str, Field(pattern=r"^[a-z_][a-z0-9_\-.]{0,31}$")]
# Slurm time: minutes, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS, or UNLIMITED/INFINITE.
SlurmTime = Annotated[
    str,
    Field(pattern=r"^(INFINITE|UNLIMITED|\d+|\d+:\d{2}|\d+:\d{2}:\d{2}|\d+-\d{1,2}(:\d{2}(:\d{2})?)?)$"),
]
Fairshare = PositiveInt | Literal["parent"]


def slurm_time_seconds(text: str) -> int | None:
    """Seconds of a SlurmTime (`90`, `30:00`, `02:00:00`, `1-12`, `1-12:30:00`); None for
    INFINITE/UNLIMITED. Plain numbers are minutes and MM:SS is minutes:seconds, as in Slurm."""
    if text in ("INFINITE", "UNLIMITED"):
        return None
    days = 0
    if "-" in text:  # D-HH, D-HH:MM, D-HH:MM:SS
        day_text, text = text.split("-", 1)
        days = int(day_text)
        h, m, s = ([int(x) for x in text.split(":")] + [0, 0])[:3]
    else:
        parts = [int(x) for x in text.split(":")]
        h, m, s = {1: (0, parts[0], 0), 2: (0, *parts), 3: tuple(parts)}[len(parts)]
    return days * 86400 + h * 3600 + m * 60 + s

QosFlag = Literal[
    "DenyOnLimit",
    "EnforceUsageThreshold",
    "NoDecay",
    "NoReserve",
    "OverPartQOS",
    "PartitionMaxNodes",
    "PartitionMinNodes",
    "PartitionTimeLimit",
    "RequiresReservation",
    "UsageFactorSafe",
]


class Qos(Strict):
    name: SlurmName
    description: str = ""
    priority: NonNegativeInt = 0
    # QOS names this QOS may preempt (PreemptType=preempt/qos).
    preempt: list[SlurmName] = []
    preempt_mode: Literal["cluster", "cancel", "requeue", "suspend"] = "cluster"
    usage_factor: Annotated[float, Field(ge=0.0)] = 1.0
    flags: list[QosFlag] = []
    max_gpus_per_user: PositiveInt | None = None  # MaxTRESPerUser=gres/gpu=N
    max_gpus_per_job: PositiveInt | None = None  # MaxTRESPerJob=gres/gpu=N
    grp_gpus: PositiveInt | None = None  # GrpTRES=gres/gpu=N (all jobs in the QOS)
    max_wall: SlurmTime | None = None  # MaxWall


class Organization(Strict):
    """A parent account (a department, an institute). Projects hang under it."""

    name: SlurmName
    description: str = ""
    fairshare: Fairshare = 1
    gpu_quota: PositiveInt | None = None  # GrpTRES=gres/gpu=N for the whole organisation


class Project(Strict):
    """A Slurm account whose members run jobs. GPU limits are untyped gres/gpu."""

    name: SlurmName
    organization: SlurmName
    description: str = ""
    fairshare: Fairshare = 1
    gpu_quota: PositiveInt | None = None  # concurrent GPUs: GrpTRES=gres/gpu=N
    gpu_hours: PositiveInt | None = None  # budget: GrpTRESMins=gres/gpu=(hours*60)
    user_gpu_cap: PositiveInt | None = None  # per member: user association GrpTRES=gres/gpu=N
    default_qos: SlurmName = "normal"
    qos: list[SlurmName] = ["normal"]
    members: list[UserName] = []


class AccountingSettings(Strict):
    # How GPU-hour budgets (GrpTRESMins) behave. "decay": usage decays with
    # PriorityDecayHalfLife, so a budget refills slowly by itself. "reset": no decay
    # (PriorityDecayHalfLife=0) and usage is reset every `budget_reset_period`, so a budget is
    # a hard allowance per period.
    budget_mode: Literal["decay", "reset"] = "decay"
    budget_reset_period: Literal["NONE", "NOW", "DAILY", "WEEKLY", "MONTHLY", "QUARTERLY", "YEARLY"] = (
        "MONTHLY"
    )
    # Delete accounts/users that the site no longer declares, only with `accounts apply --prune`.
    protected_accounts: list[SlurmName] = ["root"]
    protected_users: list[UserName] = ["root"]
