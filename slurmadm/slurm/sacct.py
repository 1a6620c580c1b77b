"""Job runs from Slurm's accounting: `sacct -a --duplicates -P -n -o <fields>`, allocations with
their steps, each run of a requeued job on its own (issue 36).

Columns are read by name (`accounting._table`): a release that lacks one reads as "". `SLUID`
(26.05: one id per job run, the same in every daemon's records) is asked for only where sacct
has it (`fields_for`); elsewhere a run is named by `<JobID>@<start>`. Times are sacct's local
wall-clock times (`2026-11-29T18:21:20`, no zone), read as local time.

What the text shapes are: `tests/fixtures/slurm/<release>/sacct-failures.txt` (captured from
22.05.8, 24.11 and 26.05 dev clusters; the commands in each COMMANDS.txt).
"""

from __future__ import annotations

import datetime as dt
import re
import time
from collections.abc import Mapping

from ..errors import UnreachableError
from ..proc import run
from ..record import record
from .accounting import _failure, _table, gpus_of, parse_tres

BASE_FIELDS = ("JobID,JobIDRaw,JobName,User,Account,Partition,QOS,State,ExitCode,DerivedExitCode,Reason,"
               "Submit,Start,End,ElapsedRaw,NodeList,AllocTRES")
SLUID_SINCE = (26, 5)

# States a run's accounting record may end in (sacct's job_state_string, long form).
FAILED_STATES = frozenset({"NODE_FAIL", "FAILED", "OUT_OF_MEMORY", "REQUEUED", "BOOT_FAIL"})
DONE_STATES = frozenset({"COMPLETED", "FAILED", "NODE_FAIL", "OUT_OF_MEMORY", "REQUEUED", "BOOT_FAIL",
                         "CANCELLED", "TIMEOUT", "PREEMPTED", "DEADLINE", "REVOKED"})
_UNSET = ("", "Unknown", "None", "N/A")


def fields_for(version: tuple[int, int, int] | None) -> str:
    return BASE_FIELDS + (",SLUID" if version and version[:2] >= SLUID_SINCE else "")


def parse_time(text: str) -> float | None:
    """sacct's local time (2026-11-29T18:21:20) -> epoch seconds; None when unset."""
    text = (text or "").strip()
    if text in _UNSET:
        return None
    try:
        return time.mktime(dt.datetime.fromisoformat(text).timetuple())
    except ValueError:
        return None


def sacct_time(ts: float) -> str:
    return dt.datetime.fromtimestamp(ts).strftime("%Y-%m-%dT%H:%M:%S")


def parse_exit(text: str) -> tuple[int, int]:
    """"1:0" -> (exit status, signal)."""
    code, _, sig = (text or "0:0").partition(":")
    try:
        return int(code or 0), int(sig or 0)
    except ValueError:
        return 0, 0


@record
class Step:
    step_id: str  # batch | extern | 0 | 1 ...
    name: str
    state: str
    exit_code: int
    signal: int
    nodes: str


@record
class JobRun:
    """One run of one job: a requeued job has one per start."""

    job_id: str
    name: str
    user: str
    account: str
    partition: str
    qos: str
    state: str          # base word: FAILED, NODE_FAIL, CANCELLED, ...
    cancelled_by: str   # the uid in "CANCELLED by 0"; '' otherwise
    exit_code: int
    signal: int
    derived_exit: int
    reason: str
    submit: float | None
    start: float | None
    end: float | None
    elapsed_s: float
    nodes: str          # hostlist as sacct prints it
    gpus: int
    sluid: str = ""
    steps: list[Step] = None  # type: ignore[assignment]

    def __post_init__(self) -> None:
        if self.steps is None:
            self.steps = []

    @property
    def key(self) -> str:
        return self.sluid or f"{self.job_id}@{int(self.start or 0)}"

    @property
    def gpu_hours(self) -> float:
        return self.gpus * self.elapsed_s / 3600.0

    @property
    def finished(self) -> bool:
        return self.state in DONE_STATES and self.end is not None

    def to_json(self) -> dict:
        return {"job_id": self.job_id, "sluid": self.sluid, "name": self.name, "user": self.user,
                "account": self.account, "partition": self.partition, "qos": self.qos, "state": self.state,
                "cancelled_by": self.cancelled_by, "exit_code": self.exit_code, "signal": self.signal,
                "derived_exit": self.derived_exit, "reason": self.reason, "submit": self.submit,
                "start": self.start, "end": self.end, "elapsed_s": self.elapsed_s, "nodes": self.nodes,
                "gpus": self.gpus, "gpu_hours": round(self.gpu_hours, 4),
                "steps": [{"step": s.step_id, "name": s.name, "state": s.state, "exit_code": s.exit_code,
                           "signal": s.signal, "nodes": s.nodes} for s in self.steps]}


_CANCELLED = re.compile(r"^CANCELLED(?: by (\S+))?")


def _state(text: str) -> tuple[str, str]:
    """"CANCELLED by 0" -> ("CANCELLED", "0"); "NODE_FAIL" -> ("NODE_FAIL", "")."""
    text = (text or "").strip()
    m = _CANCELLED.match(text)
    if m:
        return "CANCELLED", m.group(1) or ""
    return (text.split() or [""])[0].rstrip("+"), ""


def runs_from_text(text: str, fields: str = BASE_FIELDS) -> list[JobRun]:
    """`sacct -n -P --duplicates -o <fields>` (with or without the header line) -> runs in the
    order sacct printed them, steps attached to the run printed last before them (sacct prints a
    run's steps right after it, every run of a requeued job with its own steps). Steps are kept
    only for runs that did not complete (what attribution reads); 50,000 runs with 100,000 steps
    parse in about a second: columns by position once their names are known, times and TRES
    strings parsed once each."""
    lines = text.splitlines()
    # the header (if any) and the column names exactly as accounting._table reads them
    head = next((ln for ln in lines if ln.strip()), "")
    names = [c["name"] for c in _names_of(head, fields)]
    if _has_header(head):
        lines = lines[lines.index(head) + 1:]
    for need in ("jobid", "state", "alloctres"):
        if need not in names:
            _table(head, fields, "sacct", need=("jobid", "state", "alloctres"))  # raises the one-line error
    col = {n: i for i, n in enumerate(names)}
    width = len(names)
    times: dict[str, float | None] = {}
    tres: dict[str, int] = {}

    def get(cols: list[str], name: str) -> str:
        i = col.get(name)
        return cols[i].strip() if i is not None else ""

    def when(value: str) -> float | None:
        if value not in times:
            times[value] = parse_time(value)
        return times[value]

    def gpus(value: str) -> int:
        if value not in tres:
            tres[value] = gpus_of(parse_tres(value))
        return tres[value]

    runs: list[JobRun] = []
    last: dict[str, JobRun] = {}
    for line in lines:
        if not line.strip():
            continue
        cols = line.split("|")
        if len(cols) != width:
            _table(line, fields, "sacct")  # raises AmbiguousOutput naming the line
            continue
        job_id = get(cols, "jobid")
        base, dot, step = job_id.partition(".")
        if dot:
            owner = last.get(base)
            if owner is not None and owner.state != "COMPLETED":
                code, sig = parse_exit(get(cols, "exitcode"))
                owner.steps.append(Step(step, get(cols, "jobname"), _state(get(cols, "state"))[0], code, sig,
                                        get(cols, "nodelist")))
            continue
        state, by = _state(get(cols, "state"))
        code, sig = parse_exit(get(cols, "exitcode"))
        start, end = when(get(cols, "start")), when(get(cols, "end"))
        raw = get(cols, "elapsedraw")
        wall = _elapsed(get(cols, "elapsed")) if not raw.isdigit() else None
        if raw.isdigit():
            elapsed = float(raw)
        elif wall is not None:  # sacct's own [D-]HH:MM:SS where ElapsedRaw was not asked for
            elapsed = float(wall)
        else:
            elapsed = max(0.0, (end or time.time()) - start) if start is not None else 0.0
        nodes = get(cols, "nodelist")
        reason = get(cols, "reason")
        run_ = JobRun(job_id=job_id, name=get(cols, "jobname"), user=get(cols, "user"), account=get(cols, "account"),
                      partition=get(cols, "partition"), qos=get(cols, "qos"), state=state, cancelled_by=by,
                      exit_code=code, signal=sig, derived_exit=parse_exit(get(cols, "derivedexitcode"))[0],
                      reason="" if reason in _UNSET else reason, submit=when(get(cols, "submit")), start=start,
                      end=end, elapsed_s=elapsed, nodes="" if nodes in ("None assigned", "(null)") else nodes,
                      gpus=gpus(get(cols, "alloctres")), sluid=get(cols, "sluid"))
        runs.append(run_)
        last[job_id] = run_
        raw_id = get(cols, "jobidraw")
        if raw_id and raw_id != job_id:  # array tasks: steps are printed under either id
            last[raw_id] = run_
    return runs


def _elapsed(text: str) -> int | None:
    """Seconds of sacct's Elapsed (`00:00:06`, `1-02:03:04`); None when absent or unreadable."""
    from ..site.accounts import slurm_time_seconds

    if not text:
        return None
    try:
        return slurm_time_seconds(text)
    except (ValueError, KeyError):
        return None


def _has_header(line: str) -> bool:
    from .accounting import _KNOWN_COLUMNS, _column

    first = [_column(c) for c in line.split("|")]
    return len(first) > 1 and all(c in _KNOWN_COLUMNS for c in first)


def _names_of(head: str, fields: str) -> list[dict[str, str]]:
    from .accounting import _column

    if _has_header(head):
        return [{"name": _column(c)} for c in head.split("|")]
    return [{"name": _column(f)} for f in fields.split(",")]


class SacctReader:
    """Reads job runs that ended or ran in [start, end]."""

    def __init__(self, *, env: Mapping[str, str] | None = None, timeout: float = 120.0, sacct: str = "sacct"):
        self.env = dict(env) if env is not None else None
        self.timeout = timeout
        self.sacct = sacct

    def version(self) -> tuple[int, int, int] | None:
        from .parse import parse_version

        proc = run([self.sacct, "--version"], timeout=self.timeout, env=self.env, check=False)
        if proc.returncode != 0:
            return None
        try:
            return parse_version(proc.stdout)
        except Exception:  # noqa: BLE001 - an unreadable version: ask for no SLUID
            return None

    def runs(self, start: float, end: float | None = None) -> list[JobRun]:
        fields = fields_for(self.version())
        argv = [self.sacct, "-a", "--duplicates", "-n", "-P", "-S", sacct_time(start),
                "-E", sacct_time(end) if end is not None else "now", "-o", fields]
        proc = run(argv, timeout=self.timeout, env=self.env, check=False)
        if proc.returncode != 0:
            raise _unreachable(argv, proc)
        return runs_from_text(proc.stdout, fields)


def _unreachable(argv: list[str], proc) -> UnreachableError:
    """sacct with slurmdbd down exits 1 ("Problem talking to the database"): one line, exit 3."""
    failure = _failure(argv, proc)
    return UnreachableError(f"sacct: Slurm's accounting could not be read ({failure.output.splitlines()[-1] if failure.output else 'no output'})")
