"""Accounts: per-project GPU quotas, budgets, fairshare and QOS declared in site.toml, reconciled
into slurmdbd (`slurmadm accounts plan|apply|report`).

desired.py  the site as slurmdbd records       plan.py    diff -> ordered, typed operations
apply.py    lock, backup, batched sacctmgr,     report.py  quota, GPUs in use, GPU-hours, fairshare
            audit events, re-read and confirm
"""

from .apply import (
    ApplyResult,
    NotConverged,
    apply_lock,
    apply_site,
    batches,
    load_text,
    lock_path,
    plan_for,
)
from .desired import Desired, desired_state
from .plan import KINDS, Change, Op, Plan, make_plan, mark_blocked
from .report import ProjectReport, build_report

__all__ = [
    "KINDS",
    "ApplyResult",
    "Change",
    "Desired",
    "NotConverged",
    "Op",
    "Plan",
    "ProjectReport",
    "apply_lock",
    "apply_site",
    "batches",
    "build_report",
    "desired_state",
    "load_text",
    "lock_path",
    "make_plan",
    "mark_blocked",
    "plan_for",
]
