"""Failed job runs attributed (slurmadm/jobs/failures.py) on REAL sacct output published by
others, for the shapes our dev cluster cannot produce (no memory enforcement: never an
OUT_OF_MEMORY run). The samples are in tests/fixtures/slurm/public/, copied unedited; where each
comes from (repository, path, commit, command, which lines) is in tests/fixtures/slurm/SOURCES.md.

How a sample reaches slurmadm's parser (`slurm/sacct.py` runs_from_text, the function
`SacctReader.runs` calls): slurmadm asks `sacct -n -P -o <its fields>`; the public samples are
sacct's default fixed-width table (`sacct -j <id> [--format=...]`) and one `--parsable2` table with
another field list. `_parsable` below cuts each fixed-width line at the column boundaries sacct's
dashed line gives, strips the padding and joins the cells with '|'; the column names are the
sample's own header, handed over as the `-o` list (the header is not passed: `-n`). NO VALUE IS
CHANGED: a cell sacct truncated keeps its '+' (`OUT_OF_ME+`, `569966.exte+`). runs_from_text
needs an AllocTRES column; a sample without one gets an EMPTY AllocTRES column (what sacct prints
for a row without TRES; it reads as 0 GPUs). Nothing else is added, except in the one test that
says so (NodeList/Start/End from the same source's `scontrol show job` of the same job).

With no store signal, the verdicts are Slurm's side alone (failures.py module docstring):
`unknown` where the store has no record of the run's nodes (or sacct names none), `user: out of
memory` / `user: exit <n>` where the store watched the nodes and saw nothing, NODE_FAIL
`infrastructure` (Slurm's word, "no slurmadm signal").
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from slurmadm.errors import UnreachableError
from slurmadm.jobs import failures as f
from slurmadm.slurm.sacct import BASE_FIELDS, parse_time, runs_from_text
from slurmadm.store import Store

pytestmark = pytest.mark.unit

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "slurm"
PUBLIC = FIX / "public"


def _parsable(name: str, *, add_alloctres: bool = True) -> tuple[str, str]:
    """A public fixed-width sample -> (`sacct -n -P` text, its `-o` field list): cells cut at the
    dashed line's column boundaries, padding stripped, values untouched."""
    lines = (PUBLIC / name).read_text().splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.strip() and set(ln.strip()) <= {"-", " "})
    spans = [m.span() for m in re.finditer(r"-+", lines[at])]

    def cells(line: str) -> list[str]:
        return [line[a:b].strip() for a, b in spans]

    names = cells(lines[at - 1])
    rows = [cells(ln) for ln in lines[at + 1:] if ln.strip()]
    if add_alloctres and "alloctres" not in [n.lower() for n in names]:
        names.append("AllocTRES")
        rows = [r + [""] for r in rows]
    return "\n".join("|".join(r) for r in rows) + "\n", ",".join(names)


def _runs(name: str):
    text, fields = _parsable(name)
    return {r.job_id: r for r in runs_from_text(text, fields)}


def _watch(store, node: str, lo: float, hi: float) -> None:
    """The store watched `node` over [lo, hi]: a passing health run every 30 minutes (slurmadm's
    own records, not Slurm's: the coverage attribution needs before it says `user`)."""
    for ts in range(int(lo) - 3600, int(hi) + 600, 1800):
        store.db.execute("INSERT INTO check_results (ts, run_id, node, context, check_id, status, severity,"
                         " detail, value, duration_ms) VALUES (?,?,?,?,?,?,?,?,?,?)",
                         (ts, "r", node, "periodic", "xid", "pass", "drain", "", None, 1.0))
    store.db.commit()


@pytest.fixture
def store(tmp_path):
    with Store(tmp_path / "s.db") as s:
        yield s


# ------------------------------------------------ UC Merced Pinnacles: an OUT_OF_MEMORY run, in full


def test_a_real_out_of_memory_run_parses_with_its_oom_step():
    """`sacct -j 569966 --format=...,state%20,...`: State wide enough for OUT_OF_MEMORY."""
    runs = _runs("ucmerced-pinnacles-sacct-oom.txt")
    assert list(runs) == ["569966"]
    r = runs["569966"]
    assert (r.name, r.state, r.exit_code, r.signal) == ("testjob", "OUT_OF_MEMORY", 0, 125)
    assert [(s.step_id, s.name, s.state, s.exit_code, s.signal) for s in r.steps] == [
        ("batch", "batch", "OUT_OF_MEMORY", 0, 125),
        ("exte+", "extern", "COMPLETED", 0, 0),  # sacct truncated the step id (JobID is 12 wide)
    ]
    assert f.failed(r)
    # no AllocTRES, Start, End, NodeList in this --format: no GPUs, no times, no nodes
    assert (r.gpus, r.gpu_hours, r.start, r.end, r.nodes) == (0, 0.0, None, None, "")


def test_an_oom_run_sacct_names_no_node_for_is_unknown_never_the_user(store):
    """The sample has no NodeList: nothing to look a cause up on, so never a guess (and a run
    without End is not among attribute_all's finished failures at all)."""
    r = _runs("ucmerced-pinnacles-sacct-oom.txt")["569966"]
    assert f.attribute_all(store, [r]) == []
    a = f.attribute(r, f.Signals(store, 0.0, 1.0))
    assert a.line == "unknown: no nodes in sacct"


def test_an_oom_run_on_a_watched_node_is_the_users_out_of_memory(store):
    """The one test that adds columns: NodeList, Start and End of job 569966 are taken, unchanged,
    from the same source's `scontrol show job 569966` (ucmerced-pinnacles-scontrol-show-job-oom.txt),
    because the published sacct table of that job has no such columns. Nothing is changed in the
    sacct rows; the steps keep empty ones (scontrol speaks of the job only)."""
    scontrol = (PUBLIC / "ucmerced-pinnacles-scontrol-show-job-oom.txt").read_text()
    kv = dict(re.findall(r"(\w+)=(\S*)", scontrol))
    assert (kv["JobId"], kv["JobState"], kv["ExitCode"]) == ("569966", "OUT_OF_MEMORY", "0:125")
    text, fields = _parsable("ucmerced-pinnacles-sacct-oom.txt")
    rows = [ln.split("|") for ln in text.splitlines()]
    rows = [r + ([kv["NodeList"], kv["StartTime"], kv["EndTime"]] if r[0] == "569966" else ["", "", ""])
            for r in rows]
    runs = runs_from_text("\n".join("|".join(r) for r in rows), fields + ",NodeList,Start,End")
    (r,) = runs
    assert (r.nodes, r.start, r.end) == ("gnode009", parse_time("2023-07-19T15:54:37"),
                                          parse_time("2023-07-19T15:54:42"))
    # no ElapsedRaw: sacct's own Elapsed (00:00:06) before End - Start (5 s, as scontrol's RunTime)
    assert r.elapsed_s == 6.0 and r.gpu_hours == 0.0
    # a store that never saw gnode009: unknown, never a guess
    (a,) = f.attribute_all(store, runs)
    assert a.verdict == "unknown" and "gnode009" in a.why
    # the store watched gnode009 and saw nothing: the user's, the OOM named with its step
    _watch(store, "gnode009", r.start, r.end)
    (a,) = f.attribute_all(store, runs)
    assert a.line == "user: out of memory (step batch), no node signal"
    assert f.summary([a]) == {"user": {"runs": 1, "gpu_hours": 0.0}}


def test_elapsed_is_read_as_the_sample_shows_it():
    """Only `Elapsed` (00:00:06), no ElapsedRaw, Start or End: sacct's own figure is read."""
    r = _runs("ucmerced-pinnacles-sacct-oom.txt")["569966"]
    assert r.elapsed_s == 6.0


def test_a_real_timeout_is_not_a_failure_issue_36_attributes():
    """TIMEOUT (the job's own limit): not among the attributed states; its batch step was
    CANCELLED 0:15 and a srun step CANCELLED 0:15, as Slurm ends a timed-out job."""
    r = _runs("ucmerced-pinnacles-sacct-timeout.txt")["569330"]
    assert (r.state, r.exit_code, r.signal) == ("TIMEOUT", 0, 0)
    assert [(s.step_id, s.state, s.signal) for s in r.steps] == [
        ("batch", "CANCELLED", 15), ("exte+", "COMPLETED", 0), ("0", "COMPLETED", 0), ("1", "CANCELLED", 15)]
    assert not f.failed(r)


# ------------------------------------------------ default-width tables: what truncation does


@pytest.mark.parametrize("name, ids", [
    ("vt-arc-sacct-default-oom.txt", ["4574632", "4574752"]),
    ("eriqande-alpine-sacct-oom.txt", ["2321682", "2322604", "2330469", "2337276", "2337861"]),
])
def test_a_state_sacct_truncated_to_out_of_me_plus_is_not_read_as_oom(name, ids):
    """sacct's default State column is 10 wide: OUT_OF_MEMORY prints as `OUT_OF_ME+`, and the
    word is lost; slurmadm reads `OUT_OF_ME` (an unknown state), attributes nothing, and guesses
    nothing. This is why slurmadm asks `-P` (no widths, no truncation)."""
    runs = _runs(name)
    assert list(runs) == ids
    for r in runs.values():
        assert (r.state, r.exit_code, r.signal) == ("OUT_OF_ME", 0, 125)
        assert not f.failed(r)
    # the shapes under an OOM-killed job: VT's 4574752 ran three srun steps, one FAILED 127:0
    if name.startswith("vt-arc"):
        assert [(s.step_id, s.state, s.exit_code) for s in runs["4574752"].steps] == [
            ("bat+", "OUT_OF_ME", 0), ("ext+", "COMPLETED", 0), ("0", "COMPLETED", 0),
            ("1", "FAILED", 127), ("2", "COMPLETED", 0)]
    else:  # on Alpine the extern step of two of them also ended OUT_OF_ME+
        assert [s.state for s in runs["2321682"].steps] == ["OUT_OF_ME", "OUT_OF_ME"]


def test_failed_by_signal_53_reads_as_a_signal():
    """Alpine: FAILED 0:53 with the batch step CANCELLED 0:53 (the author: cancelled before
    running). No NodeList in the table: unknown, never the user's."""
    runs = _runs("eriqande-alpine-sacct-failed-0-53.txt")
    assert list(runs) == ["2325408", "2325418"]
    r = runs["2325408"]
    assert (r.state, r.exit_code, r.signal) == ("FAILED", 0, 53)
    assert [(s.step_id, s.state, s.signal) for s in r.steps] == [("bat+", "CANCELLED", 53), ("ext+", "COMPLETED", 0)]
    assert f.failed(r)


def test_alloctres_cancelled_plus_and_a_failed_run_without_end(store):
    """VT ARC `sacct -X -o jobid,start,state,alloctres%45`: CPU-only TRES (0 GPUs, 0 GPU-hours);
    `CANCELLED+` is `CANCELLED by <uid>` cut at 10 characters: no uid, so never a system cancel;
    the FAILED run has no End in this table, so it is not among the finished failures."""
    runs = _runs("vt-arc-sacct-X-alloctres.txt")
    assert len(runs) == 15
    assert all(r.gpus == 0 for r in runs.values())
    assert (runs["290856"].state, runs["290856"].cancelled_by) == ("CANCELLED", "")
    assert not f.failed(runs["290856"])
    assert runs["290971"].state == "TIMEOUT" and not f.failed(runs["290971"])
    failed = runs["299333"]
    assert failed.state == "FAILED" and failed.start == parse_time("2026-02-06T12:50:47") and failed.end is None
    assert f.failed(failed) and f.attribute_all(store, list(runs.values())) == []


# ------------------------------------------------ a real --parsable2 table with another field list


def test_a_real_parsable2_table_with_its_header_is_read_by_column_name():
    """Its header (with AllocCPUS) is read as a header: the one-line error names the missing
    AllocTRES, not a field count."""
    text = (PUBLIC / "eriqande-alpine-sacct-parsable2-failed.txt").read_text()
    with pytest.raises(UnreachableError, match="no 'alloctres' column"):
        runs_from_text(text, BASE_FIELDS)


def test_a_real_parsable2_failed_run_reads_with_its_own_field_list(store):
    """The same table with its header as the `-o` list (and an empty AllocTRES): FAILED 1:0, a job
    name with ',' and '=' intact, the steps' FAILED 1:0 and COMPLETED."""
    lines = (PUBLIC / "eriqande-alpine-sacct-parsable2-failed.txt").read_text().splitlines()
    fields = lines[0].replace("|", ",") + ",AllocTRES"
    (r,) = runs_from_text("\n".join(ln + "|" for ln in lines[1:]), fields)
    assert r.job_id == "2355542" and r.name == "smk-genomics_db2vcf_scattered-bqsr_round=0,scatter=scat_0020,sg_or_chrom=NC_046222.1"
    assert (r.state, r.exit_code, r.account, r.partition) == ("FAILED", 1, "csu-general", "amilan")
    assert [(s.step_id, s.state, s.exit_code) for s in r.steps] == [("batch", "FAILED", 1), ("extern", "COMPLETED", 0)]
    assert f.attribute(r, f.Signals(store, 0.0, 1.0)).line == "unknown: no nodes in sacct"


# ------------------------------------------------ NODE_FAIL: our own 24.11 capture (no public one found)


def test_node_fail_is_never_the_users(store):
    """No public sacct table with a NODE_FAIL run was found; this is OUR capture
    (tests/fixtures/slurm/24.11/sacct-failures.txt, Slurm 24.11.5, slurmadm's own `-o` list):
    job 3 `victim` NODE_FAIL on b200-002, 8 GPUs, ElapsedRaw 0. The store has no record of
    b200-002: unknown; the store watched it and saw nothing: infrastructure on Slurm's word."""
    runs = {r.name: r for r in runs_from_text((FIX / "24.11" / "sacct-failures.txt").read_text(), BASE_FIELDS)}
    r = runs["victim"]
    assert (r.state, r.nodes, r.gpus, r.elapsed_s, r.gpu_hours) == ("NODE_FAIL", "b200-002", 8, 0.0, 0.0)
    verdicts = {a.run.name: a for a in f.attribute_all(store, list(runs.values()))}
    assert verdicts["victim"].verdict == "unknown"
    _watch(store, "b200-002", r.start, r.end)
    verdicts = {a.run.name: a for a in f.attribute_all(store, list(runs.values()))}
    assert verdicts["victim"].line == "infrastructure: b200-002 NODE_FAIL (Slurm), no slurmadm signal"
