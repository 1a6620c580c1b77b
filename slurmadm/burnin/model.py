"""What a burn-in sweep produces: plain data, JSON in and out (the per-node job prints it, the
store and the report read it)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

# pass: fine. fail: the node (or link) is faulty. warn: worth a look, not a fault.
# skip: did not run (tool absent, nothing to test). error: could not run though it should have
# (crash, timeout); treated as a failure when health.on_error is "fail" (the default).
STATUSES = ("pass", "fail", "warn", "skip", "error")

# Test ids: stable, they appear in drain reasons as `slurmadm: burnin-<test>: ...`.
TESTS = ("health", "stress", "dcgm", "allreduce-node", "allreduce-pair", "kat", "fabric", "links", "job")


@dataclass
class TestResult:
    __test__ = False  # not a pytest test class

    test: str
    status: str
    detail: str = ""
    value: float | None = None  # the headline number (bus bandwidth GB/s, TFLOPS, ...)
    unit: str = ""
    duration_s: float = 0.0
    data: dict[str, Any] = field(default_factory=dict)  # per GPU / per check details

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, obj: dict[str, Any]) -> "TestResult":
        status = obj.get("status")
        return cls(
            test=str(obj.get("test", "?")),
            status=status if status in STATUSES else "error",
            detail=str(obj.get("detail", "")),
            value=obj.get("value") if isinstance(obj.get("value"), (int, float)) else None,
            unit=str(obj.get("unit", "")),
            duration_s=float(obj.get("duration_s") or 0.0),
            data=obj.get("data") if isinstance(obj.get("data"), dict) else {},
        )


def is_failure(status: str, on_error: str) -> bool:
    return status == "fail" or (status == "error" and on_error == "fail")


@dataclass
class PairResult:
    a: str
    b: str
    kind: str  # intra-unit | cross-unit | bisect | partner
    round: int
    status: str  # pass | fail | error | skip
    busbw_gbps: float | None = None
    algbw_gbps: float | None = None
    detail: str = ""
    job_id: str = ""
    output: str = ""  # the job's stdout file, relative to the sweep's report directory

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @property
    def label(self) -> str:
        return f"{self.a}+{self.b}"
