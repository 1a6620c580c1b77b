"""sacct job runs (slurmadm/slurm/sacct.py): columns by name on real output of every release."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurmadm.errors import UnreachableError
from slurmadm.slurm import sacct
from slurmadm.slurm.sacct import BASE_FIELDS, fields_for, parse_exit, runs_from_text

pytestmark = pytest.mark.unit

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "slurm"
OLD_FIELDS = "JobID,JobName,User,Account,QOS,Partition,State,ExitCode,Submit,Start,End,Elapsed,NodeList,AllocTRES,Reason"


@pytest.mark.parametrize("release", ["22.05", "24.11", "26.05"])
def test_the_captured_sacct_of_every_release_reads_by_column_name(release):
    path = FIX / release / "sacct.txt"
    if not path.exists():
        pytest.skip(f"no {release} sacct.txt")
    runs = runs_from_text(path.read_text(), OLD_FIELDS)
    by_id = {r.job_id: r for r in runs}
    assert by_id["1"].state == "COMPLETED" and by_id["1"].gpus == 8 and by_id["1"].nodes == "b200-001"
    assert by_id["2"].state == "FAILED" and by_id["2"].exit_code == 3
    assert [s.step_id for s in by_id["2"].steps] == ["batch"]
    assert by_id["2"].steps[0].state == "FAILED"
    assert by_id["1"].end is not None and by_id["1"].end >= by_id["1"].start


def test_sluid_only_where_sacct_has_it():
    assert "SLUID" not in fields_for((22, 5, 8)) and "SLUID" not in fields_for((24, 11, 5))
    assert fields_for((26, 5, 5)).endswith(",SLUID") and fields_for(None) == BASE_FIELDS


def test_requeued_runs_are_separate_runs_with_their_own_steps():
    lines = [
        ("7|7|train|alice|ml|gpu|normal|NODE_FAIL|0:0|0:0|None|2026-12-01T10:00:00|2026-12-01T10:00:01|"
        "2026-12-01T11:00:01|3600|b200-[001-002]|billing=16,cpu=16,gres/gpu=16,mem=2G,node=2|sA"),
        ("7.batch|7.batch|batch||ml|||CANCELLED|0:15|||2026-12-01T10:00:01|2026-12-01T10:00:01|2026-12-01T11:00:01|"
        "3600|b200-001|"
        "cpu=8,gres/gpu=8,mem=1G,node=1|sA"),
        ("7|7|train|alice|ml|gpu|normal|OUT_OF_MEMORY|0:125|0:0|None|2026-12-01T10:00:00|2026-12-01T11:05:00|"
        "2026-12-01T11:35:00|1800|b200-[003-004]|billing=16,cpu=16,gres/gpu=16,mem=2G,node=2|sB"),
        ("7.0|7.0|python||ml|||OUT_OF_MEMORY|0:125|||2026-12-01T11:05:02|2026-12-01T11:05:02|2026-12-01T11:35:00|"
        "1798|b200-[003-004]|"
        "cpu=16,gres/gpu=16,mem=2G,node=2|sB"),
        ("8|8|x|bob|bio|gpu|normal|CANCELLED by 0|0:15|0:0|None|2026-12-01T10:00:00|2026-12-01T10:00:00|"
        "2026-12-01T10:30:00|1800|b200-005|billing=1,cpu=1,gres/gpu=2,mem=1G,node=1|sC"),
    ]
    text = "\n".join(lines)
    runs = runs_from_text(text, BASE_FIELDS + ",SLUID")
    assert [(r.job_id, r.state, r.sluid) for r in runs] == [("7", "NODE_FAIL", "sA"), ("7", "OUT_OF_MEMORY", "sB"),
                                                            ("8", "CANCELLED", "sC")]
    assert [s.step_id for s in runs[0].steps] == ["batch"] and runs[0].steps[0].signal == 15
    assert runs[1].steps[0].state == "OUT_OF_MEMORY" and runs[1].nodes == "b200-[003-004]"
    assert runs[0].gpu_hours == pytest.approx(16.0) and runs[1].gpu_hours == pytest.approx(8.0)
    assert runs[2].cancelled_by == "0" and runs[0].key == "sA"
    assert parse_exit("1:0") == (1, 0) and parse_exit("0:9") == (0, 9)


def test_slurmdbd_down_is_one_line_exit_3(tmp_path):
    fake = tmp_path / "sacct"
    fake.write_text("#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'slurm 22.05.8'; exit 0; fi\n"
                    "echo 'sacct: error: Problem talking to the database: Connection refused' >&2; exit 1\n")
    fake.chmod(0o755)
    with pytest.raises(UnreachableError) as e:
        sacct.SacctReader(sacct=str(fake)).runs(0.0)
    assert e.value.exit_code == 3 and "\n" not in str(e.value)
    assert "Connection refused" in str(e.value)
    with pytest.raises(UnreachableError) as e:
        sacct.SacctReader(sacct=str(tmp_path / "missing")).runs(0.0)
    assert "not found" in str(e.value)


@pytest.mark.parametrize("release", ["22.05", "24.11", "26.05"])
def test_captured_failures_of_every_release(release):
    """capture-failures.sh on a dev cluster of each release: a completed job, a user's failed step,
    a node killed under a requeueable job, an admin's requeue, a cancel by root."""
    path = FIX / release / "sacct-failures.txt"
    if not path.exists():
        pytest.skip(f"no {release} capture (tests/fixtures/slurm/capture-failures.sh)")
    fields = BASE_FIELDS + (",SLUID" if release >= "26.05" else "")
    runs = {r.name: r for r in runs_from_text(path.read_text(), fields)}
    assert runs["ok"].state == "COMPLETED" and runs["ok"].gpus == 2 and runs["ok"].steps == []  # not kept
    assert [s.step_id for s in runs["buggy"].steps] == ["batch", "0"]
    assert runs["buggy"].state == "FAILED" and runs["buggy"].exit_code == 1 and runs["buggy"].gpus == 4
    assert runs["buggy"].steps[-1].state == "FAILED" and runs["buggy"].steps[-1].exit_code == 1
    assert runs["victim"].state == "NODE_FAIL" and runs["victim"].nodes == "b200-002" and runs["victim"].gpus == 8
    assert runs["again"].state == "REQUEUED"
    assert runs["killed"].state == "CANCELLED" and runs["killed"].cancelled_by == "0"
    from slurmadm.jobs.failures import failed

    assert sorted(n for n, r in runs.items() if failed(r)) == ["again", "buggy", "killed", "victim"]
    if release >= "26.05":
        assert all(r.sluid for r in runs.values()) and len({r.sluid for r in runs.values()}) == len(runs)
