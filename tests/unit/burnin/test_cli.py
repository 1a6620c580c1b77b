"""The burnin CLI without Slurm: install-schedule (cron and systemd files from burnin.schedule,
written atomically, idempotent, audited) and `run` refusing bad arguments before Slurm is asked."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

from slurmadm.burnin.schedule import cron_to_oncalendar
from slurmadm.cli import cli
from slurmadm.errors import UsageError
from slurmadm.store import Store

pytestmark = pytest.mark.unit

EXAMPLE = Path(__file__).resolve().parents[3] / "site.example.toml"


@pytest.mark.parametrize("cron,calendar", [
    ("30 1 * * *", "*-*-* 1:30:00"),
    ("0 2 * * 1-5", "Mon..Fri *-*-* 2:0:00"),
    ("*/15 * * * *", "*-*-* *:0/15:00"),
    ("5 2,14 * * 0,6", "Sun,Sat *-*-* 2,14:5:00"),
    ("0 3 1 */2 *", "*-1/2-1 3:0:00"),
    ("0 3 * * 7", "Sun *-*-* 3:0:00"),
])
def test_cron_to_oncalendar(cron, calendar):
    assert cron_to_oncalendar(cron) == calendar
    if shutil.which("systemd-analyze"):  # systemd itself agrees that it is a valid calendar
        proc = subprocess.run(["systemd-analyze", "calendar", calendar], capture_output=True, text=True, timeout=20)
        assert proc.returncode == 0, proc.stderr


@pytest.mark.parametrize("cron,why", [
    ("0 2 1 * 1", "day-of-month OR weekday"),
    ("0 25 * * *", "outside 0-23"),
    ("0 2 * * mon", "not plain cron"),
    ("0 2 * * */2", "steps over weekdays"),
])
def test_cron_that_systemd_cannot_express_is_refused(cron, why):
    with pytest.raises(UsageError, match=why):
        cron_to_oncalendar(cron)


def site_copy(tmp_path: Path) -> Path:
    text = EXAMPLE.read_text().replace('path = "/var/lib/slurmadm/slurmadm.db"', f'path = "{tmp_path}/s.db"')
    text = text.replace('audit_log = "/var/log/slurmadm/audit.jsonl"', f'audit_log = "{tmp_path}/audit.jsonl"')
    path = tmp_path / "site.toml"
    path.write_text(text)
    return path


def test_cron_file_is_written_once_and_audited(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURM_CONF", "/etc/slurm/slurm.conf")
    site = site_copy(tmp_path)
    dest = tmp_path / "cron.d"
    runner = CliRunner()
    dry = runner.invoke(cli, ["burnin", "install-schedule", "--site", str(site), "--dest", str(dest), "--dry-run"])
    assert dry.exit_code == 0, dry.output
    assert "30 1 * * * root" in dry.output and not dest.exists()

    first = runner.invoke(cli, ["burnin", "install-schedule", "--site", str(site), "--dest", str(dest)])
    assert first.exit_code == 0, first.output
    text = (dest / "slurmadm-burnin").read_text()
    line = [ln for ln in text.splitlines() if ln.startswith("30 1 * * * root ")][0]
    assert f"burnin run --site {site}" in line and line.endswith(">> /var/lib/slurmadm/burnin/cron.log 2>&1")
    assert "SLURM_CONF=/etc/slurm/slurm.conf" in text
    assert (dest / "slurmadm-burnin").stat().st_mode & 0o777 == 0o644
    again = runner.invoke(cli, ["burnin", "install-schedule", "--site", str(site), "--dest", str(dest)])
    assert "unchanged" in again.output
    with Store(tmp_path / "s.db") as store:
        events = store.events(action="burnin.install-schedule")
    assert [e.target for e in events] == [str(dest / "slurmadm-burnin")]  # one change, one event
    assert list(dest.iterdir()) == [dest / "slurmadm-burnin"]  # no temp file left behind


def test_systemd_units(tmp_path):
    site = site_copy(tmp_path)
    dest = tmp_path / "units"
    result = CliRunner().invoke(cli, ["burnin", "install-schedule", "--systemd", "--site", str(site),
                                      "--dest", str(dest), "--json"])
    assert result.exit_code == 0, result.output
    timer = (dest / "slurmadm-burnin.timer").read_text()
    service = (dest / "slurmadm-burnin.service").read_text()
    assert "OnCalendar=*-*-* 1:30:00" in timer and "Persistent=false" in timer
    assert "Type=oneshot" in service and "KillMode=mixed" in service
    assert "TimeoutStartSec=13200" in service  # sweep_time_limit 03:30:00 + 10 minutes
    assert f"burnin run --site {site}" in service
    if shutil.which("systemd-analyze"):  # systemd's own lint of both units
        proc = subprocess.run(["systemd-analyze", "verify", str(dest / "slurmadm-burnin.service"),
                               str(dest / "slurmadm-burnin.timer")], capture_output=True, text=True, timeout=30)
        assert proc.returncode == 0 and "slurmadm-burnin" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("args,expected", [
    (["--nodes", "b200-[001-"], "--nodes: 'b200-[001-' is not a valid hostlist"),
    (["--nodes", "b200-[001-009]"], "--nodes: 9 nodes is more than burnin.max_nodes (8)"),
    (["--nodes", "gpu-001"], "--nodes: gpu-001 not in the site's nodes"),
])
def test_bad_run_arguments_are_one_line_exit_2_before_slurm_is_asked(tmp_path, args, expected):
    site = site_copy(tmp_path)
    result = CliRunner().invoke(cli, ["burnin", "run", "--site", str(site), *args])
    assert result.exit_code == 2, result.output
    assert expected in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) == 1
