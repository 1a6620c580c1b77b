"""The [burnin] section: time limits Slurm will accept, and SlurmTime arithmetic."""

from __future__ import annotations

from pathlib import Path

import pytest

from slurmadm.errors import SiteError
from slurmadm.site import load_site, parse_site
from slurmadm.site.accounts import slurm_time_seconds

pytestmark = pytest.mark.unit

EXAMPLE = Path(__file__).resolve().parents[3] / "site.example.toml"


@pytest.mark.parametrize("text,seconds", [
    ("90", 5400), ("30:00", 1800), ("02:00:00", 7200), ("1-12", 129600), ("1-12:30", 131400),
    ("1-12:30:05", 131405), ("7-00:00:00", 604800), ("INFINITE", None), ("UNLIMITED", None),
])
def test_slurm_time_seconds(text, seconds):
    assert slurm_time_seconds(text) == seconds


def test_example_burnin_section():
    b = load_site(EXAMPLE).burnin
    assert (b.reservation, b.collective, b.qos, b.account) == ("slurmadm_burnin", "nccl", "burnin", "ops-burnin")
    assert slurm_time_seconds(b.job_time_limit) <= slurm_time_seconds(b.sweep_time_limit)


def replace_line(key: str, value: str) -> str:
    lines = EXAMPLE.read_text().splitlines()
    start = lines.index("[burnin]")
    for i in range(start, len(lines)):
        if lines[i].startswith(f"{key} ="):
            lines[i] = f"{key} = {value}"
            return "\n".join(lines) + "\n"
    # not set in the example: add it at the end of the [burnin] table (before [burnin.straggler])
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("[")), len(lines))
    lines.insert(end, f"{key} = {value}")
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("key,value,expected", [
    ("job_time_limit", '"INFINITE"', "burnin.job_time_limit: 'INFINITE' must be a finite, non-zero time"),
    ("sweep_time_limit", '"0"', "burnin.sweep_time_limit: '0' must be a finite, non-zero time"),
    ("job_time_limit", '"05:00:00"', "burnin.job_time_limit: 05:00:00 is longer than burnin.sweep_time_limit"),
    ("sweep_time_limit", '"06:00:00"', None),  # valid: the jobs' limit still fits
    ("collective", '"mpi"', "burnin.collective"),
    ("reservation", '"has space"', "burnin.reservation: 'has space' is not allowed"),
    ("python", '"python3"', "burnin.python: 'python3' is not allowed"),
    ("dcgm_level", "1", "burnin.dcgm_level"),
])
def test_bad_burnin_values_name_the_key(key, value, expected):
    text = replace_line(key, value)
    if expected is None:
        assert parse_site(text).burnin
        return
    with pytest.raises(SiteError) as err:
        parse_site(text)
    assert any(expected in line for line in err.value.lines()), err.value.lines()


def test_job_limit_above_the_qos_max_wall():
    text = replace_line("job_time_limit", '"03:00:00"').replace('max_wall = "04:00:00"', 'max_wall = "02:30:00"')
    with pytest.raises(SiteError) as err:
        parse_site(text)
    assert any("burnin.job_time_limit: 03:00:00 is above the max_wall 02:30:00 of QOS 'burnin'" in line
               for line in err.value.lines())


def test_a_link_watch_longer_than_the_qualification_jobs_limit_is_refused():
    """repair.link_watch_s runs inside the qualification job (burnin.job_time_limit): a watch
    that does not fit would be killed by Slurm and fail every HCA qualification."""
    text = replace_line("job_time_limit", '"00:10:00"')
    assert parse_site(text).repair.link_watch_s == 600.0  # the default: cut to fit where it is used
    with pytest.raises(SiteError) as err:
        parse_site(text + "\n[repair]\nlink_watch_s = 600\n")
    assert any("repair.link_watch_s: 600 s does not fit in burnin.job_time_limit 00:10:00" in line
               for line in err.value.lines()), err.value.lines()
    assert parse_site(text + "\n[repair]\nlink_watch_s = 300\n").repair.link_watch_s == 300
