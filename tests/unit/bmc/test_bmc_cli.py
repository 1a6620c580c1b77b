"""The `slurmadm bmc` CLI without BMCs or Slurm: progress bars for people (a terminal on stderr)
and none for scripts (--json, pipes); `bmc recover install-sweep` (systemd timer or cron entry,
--dry-run, one audit event per written file, a second run a no-op, bad input refused)."""

from __future__ import annotations

import io
import json
import shutil
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console

from slurmadm.bmc.creds import Credentials, Secret
from slurmadm.bmc.fanout import Conn, Fleet
from slurmadm.cli import cli
from slurmadm.site import load_site
from slurmadm.store import Store

pytestmark = pytest.mark.unit

EXAMPLE = Path(__file__).resolve().parents[3] / "site.example.toml"
NODES = "b200-[001-006]"


def site_copy(tmp_path: Path, name: str = "site.toml") -> Path:
    text = EXAMPLE.read_text().replace('path = "/var/lib/slurmadm/slurmadm.db"', f'path = "{tmp_path}/s.db"')
    text = text.replace('audit_log = "/var/log/slurmadm/audit.jsonl"', f'audit_log = "{tmp_path}/audit.jsonl"')
    path = tmp_path / name
    path.write_text(text)
    return path


# ---------------------------------------------------------------------- progress bars
class FakeBmc:
    def power_state(self) -> str:
        return "on"


@pytest.fixture()
def fake_bmcs(monkeypatch):
    """Real Fleet.run (threads, deadlines, the bar's callbacks) over BMCs that answer at once."""
    fleets = []

    def make(site):
        fleets.append(Fleet(site, Credentials("admin", Secret("pw-unit-123"))))
        return fleets[-1]

    monkeypatch.setattr("slurmadm.cli.bmc._fleet", make)
    monkeypatch.setattr(Conn, "bmc", property(lambda self: FakeBmc()))
    return fleets


@pytest.fixture()
def terminal(monkeypatch):
    """stderr as a terminal (what a person at the head node has)."""
    buf = io.StringIO()
    monkeypatch.setattr("slurmadm.cli.common.err_console",
                        Console(file=buf, force_terminal=True, width=100, highlight=False, markup=False))
    return buf


def test_progress_bar_on_a_terminal(tmp_path, fake_bmcs, terminal):
    r = CliRunner().invoke(cli, ["bmc", "power", "status", NODES, "--site", str(site_copy(tmp_path))])
    assert r.exit_code == 0, r.output
    shown = terminal.getvalue()
    assert "power status" in shown and "6/6" in shown and "━" in shown  # the bar, complete
    assert "\x1b[" in shown  # drawn with terminal control codes (and erased at the end: transient)
    assert fake_bmcs[0].bar is None  # detached after the command
    assert "b200-[001-006]" in r.stdout and "━" not in r.stdout  # the table (one folded row) on stdout, no bar


def test_no_progress_bar_with_json_even_on_a_terminal(tmp_path, fake_bmcs, terminal):
    r = CliRunner().invoke(cli, ["bmc", "power", "status", NODES, "--json", "--site", str(site_copy(tmp_path))])
    assert r.exit_code == 0, r.output
    assert terminal.getvalue() == ""
    assert [x["power"] for x in json.loads(r.stdout)] == ["on"] * 6  # stdout is only the JSON


def test_no_progress_bar_when_stderr_is_not_a_terminal(tmp_path, fake_bmcs):
    r = CliRunner().invoke(cli, ["bmc", "power", "status", NODES, "--site", str(site_copy(tmp_path))])
    assert r.exit_code == 0, r.output
    assert "━" not in r.output and "\x1b[" not in r.output and "6/6" not in r.output


def test_progress_bar_follows_each_fleet_pass():
    """begin() per pass (the plan's read, then the change) resets the bar to that pass."""
    from slurmadm.cli import common

    buf = io.StringIO()
    old = common.err_console
    common.err_console = Console(file=buf, force_terminal=True, width=100)
    try:
        with common.ProgressBar("power status") as bar:
            assert bar.shown
            bar.begin(3)
            for _ in range(3):
                bar.advance()
            bar.what = "power cycle"
            bar.begin(2)
            bar.advance()
            task = bar._progress.tasks[0]
            assert (task.description, task.total, task.completed) == ("power cycle", 2, 1)
    finally:
        common.err_console = old
    assert "power status" in buf.getvalue() and "power cycle" in buf.getvalue()
    with common.ProgressBar("x", enabled=False) as off:
        off.begin(5)
        off.advance()
        assert not off.shown


def test_recovery_advances_its_bar_once_per_node_it_ends(tmp_path):
    """`bmc recover`'s bar: one pass over the nodes acted on, advanced when each is given up on
    (a second failure in the window, an unreachable BMC) or recovered."""
    from slurmadm.bmc.fanout import Row
    from slurmadm.bmc.recover import Candidate, Recovery

    class Bar:
        def __init__(self):
            self.calls = []

        def begin(self, total, what=None):
            self.calls.append(("begin", total))

        def advance(self, row=None):
            self.calls.append(("advance",))

    class FakeFleet:
        def run(self, nodes, fn, **kw):
            return [Row(n, False, error=f"{n}: BMC did not answer within 6 s") if n == "b200-002"
                    else Row(n, True, ([], "on")) for n in nodes]

    class Backend:
        drained = []

        def drain(self, nodes, reason):
            self.drained.append((tuple(nodes), reason))

    site = load_site(str(site_copy(tmp_path)))
    bar = Bar()
    with Store(tmp_path / "s.db") as store:
        rec = Recovery(site, FakeFleet(), Backend(), store, bar=bar)
        report = rec.run([Candidate("b200-001", "drain-again", "down again"),
                          Candidate("b200-002", "cycle", "DOWN for 400 s"),
                          Candidate("b200-003", "skip", "an admin's")], "test")
    assert bar.calls == [("begin", 2), ("advance",), ("advance",)]
    assert set(report.failed) == {"b200-001", "b200-002"} and not report.recovered


# ---------------------------------------------------------------------- install-sweep
def sweep(site: Path, dest: Path, *args: str):
    return CliRunner().invoke(cli, ["bmc", "recover", "install-sweep", "--site", str(site), "--dest", str(dest),
                                    *args])


def test_install_sweep_systemd_plan_write_once_audit(tmp_path, monkeypatch):
    monkeypatch.setenv("SLURM_CONF", "/etc/slurm/slurm.conf")
    site = site_copy(tmp_path)
    dest = tmp_path / "systemd"
    dry = sweep(site, dest, "--dry-run")
    assert dry.exit_code == 0, dry.output
    assert "slurmadm-bmc-recover.timer (new)" in dry.output and "OnUnitActiveSec=5min" in dry.output
    assert not dest.exists()

    first = sweep(site, dest, "--reason", "sweep for dead nodes")
    assert first.exit_code == 0, first.output
    service = (dest / "slurmadm-bmc-recover.service").read_text()
    timer = (dest / "slurmadm-bmc-recover.timer").read_text()
    exec_start = [ln for ln in service.splitlines() if ln.startswith("ExecStart=")][0]
    assert exec_start.endswith(f'bmc recover --sweep --site {site} --reason "bmc recover sweep"')
    assert "Type=oneshot" in service and "Environment=SLURM_CONF=/etc/slurm/slurm.conf" in service
    assert f"TimeoutStartSec={600 + 600}" in service  # bmc.recover.boot_timeout_s + 10 minutes
    assert "OnBootSec=5min" in timer and "OnUnitActiveSec=5min" in timer and "WantedBy=timers.target" in timer
    assert "systemctl enable --now slurmadm-bmc-recover.timer" in first.output

    again = sweep(site, dest, "--reason", "sweep for dead nodes", "--json")
    assert [x["status"] for x in json.loads(again.stdout)] == ["unchanged", "unchanged"]
    other = sweep(site, dest, "--interval", "10m")
    assert other.exit_code == 0 and "slurmadm-bmc-recover.timer: changed" in other.output
    assert "slurmadm-bmc-recover.service: unchanged" in other.output
    with Store(tmp_path / "s.db") as store:
        events = store.events(action="bmc.recover.install-sweep")
    assert sorted((Path(e.target).name, e.reason) for e in events) == [
        ("slurmadm-bmc-recover.service", "sweep for dead nodes"),
        ("slurmadm-bmc-recover.timer", "slurmadm bmc recover install-sweep"),
        ("slurmadm-bmc-recover.timer", "sweep for dead nodes")]
    assert sorted(p.name for p in dest.iterdir()) == ["slurmadm-bmc-recover.service", "slurmadm-bmc-recover.timer"]
    if shutil.which("systemd-analyze"):  # systemd's own lint of both units
        proc = subprocess.run(["systemd-analyze", "verify", str(dest / "slurmadm-bmc-recover.service"),
                               str(dest / "slurmadm-bmc-recover.timer")], capture_output=True, text=True, timeout=30)
        assert "slurmadm-bmc-recover" not in proc.stderr, proc.stderr


def test_install_sweep_cron(tmp_path):
    site = site_copy(tmp_path)
    dest = tmp_path / "cron.d"
    r = sweep(site, dest, "--cron", "--interval", "10m", "--log", str(tmp_path / "recover.log"))
    assert r.exit_code == 0, r.output
    text = (dest / "slurmadm-bmc-recover").read_text()
    line = [ln for ln in text.splitlines() if ln.startswith("*/10 * * * * root ")][0]
    assert f"bmc recover --sweep --site {site}" in line and line.endswith(f">> {tmp_path}/recover.log 2>&1")
    assert (dest / "slurmadm-bmc-recover").stat().st_mode & 0o777 == 0o644
    hourly = sweep(site, dest, "--cron", "--interval", "2h", "--dry-run")
    assert "0 */2 * * * root" in hourly.output


@pytest.mark.parametrize("args,message", [
    (["--interval", "soon"], "--interval: 'soon' is not a duration"),
    (["--interval", "10s"], "outside 1 minute to 1 day"),
    (["--cron", "--interval", "7m"], "cron cannot run every 420 s evenly"),
])
def test_install_sweep_bad_input_is_one_line_and_writes_nothing(tmp_path, args, message):
    dest = tmp_path / "out"
    r = sweep(site_copy(tmp_path), dest, *args)
    assert r.exit_code == 2 and message in r.output and r.output.count("\n") == 1, r.output
    assert not dest.exists()


def test_install_sweep_refuses_a_site_path_a_unit_would_split(tmp_path):
    (tmp_path / "my site").mkdir()
    site = tmp_path / "my site" / "site.toml"
    site.write_text(site_copy(tmp_path).read_text())
    dest = tmp_path / "out"
    r = sweep(site, dest)
    assert r.exit_code == 2 and "--site:" in r.output and "cannot go into a systemd unit" in r.output
    assert not dest.exists()


def test_sweep_leaves_nodes_to_a_running_recovery(tmp_path, monkeypatch):
    """--sweep: another recovery holds the lock -> exit 0, nothing done (a trigger's run is busy)."""
    from slurmadm.files import exclusive_lock

    site_file = site_copy(tmp_path)
    site = load_site(str(site_file))

    class Backend:
        def nodes(self, names=None):
            return []

    monkeypatch.setattr("slurmadm.cli.bmc._backend", lambda: Backend())
    monkeypatch.setattr("slurmadm.cli.bmc._fleet", lambda s: Fleet(s, Credentials("admin", Secret("pw-unit-123"))))
    with exclusive_lock(Path(f"{site.store.path}.bmc-recover.lock"), lambda h: h):
        busy = CliRunner().invoke(cli, ["bmc", "recover", "--sweep", "--site", str(site_file)])
        plain = CliRunner().invoke(cli, ["bmc", "recover", "--site", str(site_file)])
    assert busy.exit_code == 0 and "this sweep leaves the nodes to it" in busy.output, busy.output
    assert plain.exit_code == 1 and "another recovery runs" in plain.output


# ---------------------------------------------------------------------- README
def test_how_to_documents_every_bmc_command_and_option():
    """The BMC how-to (docs/how-to/bmc.md, once the README's BMC section) names every `slurmadm
    bmc` command and each of its options (but the ones every command has: --site, --json, --help);
    the generated reference has them all anyway (tests/unit/docs/)."""
    import click

    from slurmadm.cli.bmc import bmc

    section = (EXAMPLE.parent / "docs" / "how-to" / "bmc.md").read_text()

    def walk(group, path):
        for name, cmd in group.commands.items():
            yield [*path, name], cmd
            if isinstance(cmd, click.Group):
                yield from walk(cmd, [*path, name])

    missing = []
    for path, cmd in walk(bmc, []):
        if f"slurmadm bmc {' '.join(path)}" not in section:
            missing.append(" ".join(path))
        for p in cmd.params:
            for opt in getattr(p, "opts", []) + getattr(p, "secondary_opts", []):
                if opt.startswith("--") and opt not in ("--site", "--json", "--help") and opt not in section:
                    missing.append(f"{' '.join(path)} {opt}")
    assert not missing, missing


# ---------------------------------------------------------------------- out-of-band power without Slurm
class _PowerBmc:
    calls: list[str] = []

    def power_state(self) -> str:
        return "on"

    def power(self, action: str) -> None:
        type(self).calls.append(action)


class _DeadSlurm:
    def nodes(self, names=None):
        from slurmadm.errors import CommandFailed

        raise CommandFailed(["sinfo", "--json"], 1, "sinfo: fatal: Unable to contact slurm controller (connect failure)")


@pytest.fixture()
def no_slurm(monkeypatch):
    _PowerBmc.calls = []
    monkeypatch.setattr("slurmadm.cli.bmc._fleet", lambda site: Fleet(site, Credentials("admin", Secret("pw-unit-123"))))
    monkeypatch.setattr(Conn, "bmc", property(lambda self: _PowerBmc()))
    monkeypatch.setattr("slurmadm.cli.bmc._backend", lambda: _DeadSlurm())


def test_power_off_force_without_slurm_acts_warns_once_and_audits(tmp_path, no_slurm):
    site = site_copy(tmp_path)
    r = CliRunner().invoke(cli, ["bmc", "power", "off", "b200-[001-002]", "--force", "--json", "--site", str(site),
                                 "--reason", "head slurmctld down"])
    assert r.exit_code == 0, r.output
    assert _PowerBmc.calls == ["off", "off"]
    assert r.stderr.count("Slurm did not answer") == 1 and "sinfo: fatal" in r.stderr
    steps = json.loads(r.stdout)["steps"]
    assert [s["no_slurm"] for s in steps] == [True, True] and all(s["do"] for s in steps)
    audit = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    offs = [a for a in audit if a.get("action") == "bmc.power.off"]
    assert len(offs) == 2 and all(a["detail"]["slurm_unreachable"] and a["detail"]["forced"] for a in offs), audit


def test_power_off_without_force_and_without_slurm_is_refused(tmp_path, no_slurm):
    r = CliRunner().invoke(cli, ["bmc", "power", "off", "b200-001", "--site", str(site_copy(tmp_path))])
    assert r.exit_code == 1, r.output
    assert _PowerBmc.calls == []
    assert "refused" in r.stdout and "--force" in r.stdout
    assert "Traceback" not in r.output
