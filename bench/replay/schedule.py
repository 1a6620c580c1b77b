"""Fault and job schedules for bench/fleet_replay.py: drawn from data with a seed, or read from CSV.

A schedule is a list of rows, each at a time in *replay* seconds (site time divided by the
compression). The same (mix, nodes, days, seed, compression) always gives the same schedule, and a
schedule written with `write_*` and read back with `read_*` is the same list, so any run can be
replayed exactly.

Fault CSV columns: t_s,node,kind,injector,part,value,duration_s,cls
  t_s        replay seconds from the start at which the fault is injected
  node       a node name of the site
  kind       the dev-cluster fault kind (gpu-fault / ib-fault / bmc-fault kinds, `down`, `exit`)
  injector   gpu | ib | bmc | node | user
  part       the GPU index (gpu), the HCA name (ib), empty otherwise
  value      the kind's value (an XID, a temperature, ...), may be empty
  duration_s replay seconds until the part is repaired (the fault cleared); 0 = until the ladder acts
             (the replay never clears it; the measure counts it in its part until the node's
             first return to service after it). For a class no hook sees (fault_mix.csv signal
             `none`: a straggler, silent data corruption), counted from when the fault is found
             (its active test's drain): it stays until then, as at a site, and is never
             repaired where nothing finds it
  cls        the fault class of fault_mix.csv
Job CSV columns: t_s,name,nodes,duration_s
"""

from __future__ import annotations

import csv
import io
import math
import random
import re
from dataclasses import dataclass, field, fields
from pathlib import Path

HERE = Path(__file__).resolve().parent
DEFAULT_MIX = HERE / "fault_mix.csv"

INJECTORS = ("gpu", "ib", "bmc", "node", "user")
# Repeat offenders: in StepFun's trace the top 5% of nodes hold 24.5% of faults. With a share s of
# nodes weighted w against 1 for the rest, their share of faults is s*w / (s*w + 1 - s); solved for
# 24.5% at s = 5%: w = 0.245 * 0.95 / (0.05 * 0.755) = 6.17 [derived].
LEMON_SHARE = 0.05
LEMON_WEIGHT = 0.245 * 0.95 / (0.05 * 0.755)

# Job sizes in nodes (8 GPUs each) and their weights, and durations: [ESTIMATE] shaped on what the
# anchor's sources say of research clusters: most jobs are small (Kokolis HPCA'25: an 8-GPU job's
# MTTF is 47.7 d against 7.9 h for 1,024 GPUs, so both sizes run), AcmeTrace Kalos' largest job is
# 1,024 GPUs. Sizes past the site are dropped.
JOB_SIZES = ((1, 0.55), (2, 0.15), (4, 0.12), (8, 0.08), (16, 0.05), (32, 0.03), (64, 0.015), (128, 0.005))
JOB_HOURS_MEDIAN = 2.0   # lognormal median of a job's duration in site hours [ESTIMATE]
JOB_HOURS_SIGMA = 1.2
JOB_LOAD = 0.85          # share of the site's node-hours the stream asks for (Kokolis: 83-85% utilisation)


class ScheduleError(ValueError):
    """A bad mix file or schedule file: the message names the file, the line and the column."""


@dataclass(frozen=True)
class MixRow:
    cls: str
    injector: str
    kind: str
    value: str
    rate: float      # per 1,000 node-days, for the whole class
    split: float     # this kind's share of the class
    repair_h: float
    signal: str      # node | none
    source: str


@dataclass(frozen=True)
class Fault:
    t_s: float
    node: str
    kind: str
    injector: str
    part: str
    value: str
    duration_s: float
    cls: str
    # not a CSV column: in a run, when its injection began (fleet_replay.as_observed; t_s is when
    # it returned). The injector writes the fault before it returns, so a check may see it from here.
    asked_s: float | None = field(default=None, compare=False)


FAULT_COLUMNS = ("t_s", "node", "kind", "injector", "part", "value", "duration_s", "cls")


@dataclass(frozen=True)
class Job:
    t_s: float
    name: str
    nodes: int
    duration_s: float


_NAME = re.compile(r"^[A-Za-z0-9_.\-]{1,64}$")
_VALUE = re.compile(r"^[A-Za-z0-9_.:\-]{0,64}$")


def _rows(text: str, where: str) -> list[tuple[int, dict[str, str]]]:
    lines = [(n, line) for n, line in enumerate(text.splitlines(), 1) if line.strip() and not line.startswith("#")]
    if not lines:
        raise ScheduleError(f"{where}: empty")
    reader = csv.DictReader(io.StringIO("\n".join(line for _, line in lines)))
    out = []
    for (n, _), row in zip(lines[1:], reader):
        if None in row or any(v is None for v in row.values()):
            raise ScheduleError(f"{where}:{n}: expected {len(reader.fieldnames or [])} columns")
        out.append((n, row))
    return out


def _num(row: dict[str, str], col: str, where: str, lo: float, hi: float) -> float:
    try:
        v = float(row[col])
    except (KeyError, ValueError):
        raise ScheduleError(f"{where}: {col}: not a number: {row.get(col)!r}") from None
    if not (lo <= v <= hi) or math.isnan(v):
        raise ScheduleError(f"{where}: {col}: {v} is out of range [{lo}, {hi}]")
    return v


def _check_columns(rows: list[tuple[int, dict[str, str]]], want: list[str], where: str) -> None:
    if rows and list(rows[0][1]) != want:
        raise ScheduleError(f"{where}: columns are {','.join(rows[0][1])}; expected {','.join(want)}")


def load_mix(path: Path = DEFAULT_MIX) -> list[MixRow]:
    where = str(path)
    try:
        text = Path(path).read_text()
    except OSError as e:
        raise ScheduleError(f"{where}: {e.strerror}") from None
    rows = _rows(text, where)
    _check_columns(rows, [f.name for f in fields(MixRow)], where)
    out = []
    for n, row in rows:
        at = f"{where}:{n}"
        if row["injector"] not in INJECTORS:
            raise ScheduleError(f"{at}: injector: {row['injector']!r} is not one of {', '.join(INJECTORS)}")
        if row["signal"] not in ("node", "none"):
            raise ScheduleError(f"{at}: signal: {row['signal']!r} is not node or none")
        for col in ("cls", "kind"):
            if not _NAME.match(row[col]):
                raise ScheduleError(f"{at}: {col}: {row[col]!r} is not a plain name")
        if not _VALUE.match(row["value"]):
            raise ScheduleError(f"{at}: value: {row['value']!r} has characters a fault value never has")
        if not row["source"].strip():
            raise ScheduleError(f"{at}: source: every rate names its source")
        out.append(MixRow(row["cls"], row["injector"], row["kind"], row["value"],
                          _num(row, "rate", at, 0, 1000), _num(row, "split", at, 0, 1),
                          _num(row, "repair_h", at, 0, 10_000), row["signal"], row["source"]))
    for cls in {r.cls for r in out}:
        total = sum(r.split for r in out if r.cls == cls)
        if abs(total - 1.0) > 1e-6:
            raise ScheduleError(f"{where}: class {cls}: splits add up to {total:g}, not 1")
    return out


def _part(rng: random.Random, injector: str, gpus: int, hcas: list[str]) -> str:
    if injector == "gpu":
        return str(rng.randrange(gpus))
    if injector == "ib":
        return rng.choice(hcas)
    return ""


def fault_schedule(mix: list[MixRow], nodes: list[str], *, days: float, seed: int, compression: float,
                   gpus: int = 8, hcas: list[str] | None = None, rate_scale: float = 1.0,
                   lemon_share: float = LEMON_SHARE, lemon_weight: float = LEMON_WEIGHT) -> list[Fault]:
    """Poisson arrivals per mix row over `days` site days on `nodes`, repeat offenders weighted;
    times and repairs divided by `compression`. `rate_scale` multiplies every rate (a short replay
    that should still see each class)."""
    if not nodes:
        raise ScheduleError("fault schedule: no nodes")
    if days <= 0 or compression <= 0 or rate_scale <= 0:
        raise ScheduleError("fault schedule: days, compression and rate scale must be positive")
    hcas = hcas or ["mlx5_0"]
    rng = random.Random(seed)
    lemons = set(rng.sample(nodes, max(1, round(len(nodes) * lemon_share)))) if lemon_share > 0 else set()
    weights = [lemon_weight if n in lemons else 1.0 for n in nodes]
    out: list[Fault] = []
    for row in mix:
        per_day = row.rate * row.split * rate_scale * len(nodes) / 1000.0
        if per_day <= 0:
            continue
        t = 0.0
        while True:
            t += rng.expovariate(per_day)
            if t >= days:
                break
            node = rng.choices(nodes, weights)[0]
            out.append(Fault(round(t * 86400 / compression, 3), node, row.kind, row.injector,
                             _part(rng, row.injector, gpus, hcas), row.value,
                             round(row.repair_h * 3600 / compression, 3), row.cls))
    out.sort(key=lambda f: (f.t_s, f.node, f.kind))
    return out


def job_schedule(nodes: int, *, days: float, seed: int, compression: float, load: float = JOB_LOAD) -> list[Job]:
    """Jobs whose node-hours add up to `load` of the site's over `days`; sizes and durations from
    JOB_SIZES and the lognormal above; arrivals uniform over the span."""
    if nodes <= 0 or days <= 0 or compression <= 0:
        raise ScheduleError("job schedule: nodes, days and compression must be positive")
    rng = random.Random(seed ^ 0x5EED)
    sizes = [(s, w) for s, w in JOB_SIZES if s <= nodes]
    budget = nodes * days * 24 * load
    jobs: list[Job] = []
    used = 0.0
    while used < budget:
        size = rng.choices([s for s, _ in sizes], [w for _, w in sizes])[0]
        hours = min(rng.lognormvariate(math.log(JOB_HOURS_MEDIAN), JOB_HOURS_SIGMA), 48.0)
        used += size * hours
        jobs.append(Job(round(rng.uniform(0, days * 86400) / compression, 3), "", size,
                        round(hours * 3600 / compression, 3)))
    jobs.sort(key=lambda j: (j.t_s, -j.nodes))
    return [Job(j.t_s, f"replay-{i:05d}", j.nodes, j.duration_s) for i, j in enumerate(jobs)]


def write_faults(faults: list[Fault]) -> str:
    return _write(faults, list(FAULT_COLUMNS))


def write_jobs(jobs: list[Job]) -> str:
    return _write(jobs, [f.name for f in fields(Job)])


def _write(items, cols: list[str]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, cols, lineterminator="\n")
    w.writeheader()
    for it in items:
        w.writerow({c: getattr(it, c) for c in cols})
    return buf.getvalue()


def read_faults(text: str, where: str, site_nodes: set[str]) -> list[Fault]:
    rows = _rows(text, where)
    _check_columns(rows, list(FAULT_COLUMNS), where)
    out = []
    for n, row in rows:
        at = f"{where}:{n}"
        if row["node"] not in site_nodes:
            raise ScheduleError(f"{at}: node: {row['node']!r} is not a node of the site")
        if row["injector"] not in INJECTORS:
            raise ScheduleError(f"{at}: injector: {row['injector']!r} is not one of {', '.join(INJECTORS)}")
        for col in ("kind", "cls"):
            if not _NAME.match(row[col]):
                raise ScheduleError(f"{at}: {col}: {row[col]!r} is not a plain name")
        for col in ("part", "value"):
            if not _VALUE.match(row[col]):
                raise ScheduleError(f"{at}: {col}: {row[col]!r} has characters a fault never has")
        out.append(Fault(_num(row, "t_s", at, 0, 1e7), row["node"], row["kind"], row["injector"], row["part"],
                         row["value"], _num(row, "duration_s", at, 0, 1e7), row["cls"]))
    return sorted(out, key=lambda f: (f.t_s, f.node, f.kind))


def read_jobs(text: str, where: str, max_nodes: int) -> list[Job]:
    rows = _rows(text, where)
    _check_columns(rows, [f.name for f in fields(Job)], where)
    out = []
    for n, row in rows:
        at = f"{where}:{n}"
        if not _NAME.match(row["name"]):
            raise ScheduleError(f"{at}: name: {row['name']!r} is not a plain job name")
        out.append(Job(_num(row, "t_s", at, 0, 1e7), row["name"], int(_num(row, "nodes", at, 1, max_nodes)),
                       _num(row, "duration_s", at, 0.001, 1e7)))
    return sorted(out, key=lambda j: (j.t_s, -j.nodes))
