"""What people see from the CLI: text from data printed as it is (rich markup never eats a
`[prolog]` tag), plain aligned text when piped, tables that read well in an 80-column terminal
(a real pseudo-terminal of that size), and `health status` showing whole drain reasons."""

from __future__ import annotations

import fcntl
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
import time
import tomllib
from pathlib import Path

import pytest
import tomli_w
from click.testing import CliRunner

from slurmadm.cli import cli
from slurmadm.cli import health as health_cli
from slurmadm.slurm.model import NodeInfo
from slurmadm.store import Store

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[3]
REASON = "slurmadm: ecc-uncorrected: GPU5 volatile uncorrected ECC=2 [prolog]"
ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")


@pytest.fixture()
def site(tmp_path, monkeypatch) -> Path:
    data = tomllib.loads((REPO / "site.example.toml").read_text())
    data["store"] = {"path": str(tmp_path / "slurmadm.db")}
    path = tmp_path / "site.toml"
    path.write_text(tomli_w.dumps(data))
    monkeypatch.setenv("SLURMADM_SITE", str(path))
    monkeypatch.setenv("SLURMADM_CACHE_DIR", str(tmp_path / "cache"))
    with Store(data["store"]["path"]) as store:
        store.audit("node.drain", "b200-003", REASON, by="prolog")
        with store.transaction() as db:
            db.execute("INSERT INTO check_results (ts, run_id, node, context, check_id, status, severity, detail, "
                       "value, duration_ms) VALUES (?,?,?,?,?,?,?,?,?,?)",
                       (time.time(), "r", "b200-003", "prolog", "ecc-uncorrected", "fail", "critical",
                        "GPU5 volatile uncorrected ECC=2 [bold]x[/bold]", 2.0, 1.0))
    return path


def in_terminal(args: list[str], columns: int, env: dict[str, str]) -> str:
    """Run `python -m slurmadm ARGS` with its output on a pseudo-terminal `columns` wide."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, columns, 0, 0))
    full = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "FORCE_COLOR", "NO_COLOR")}
    full.update(env, TERM="xterm-256color")
    proc = subprocess.Popen([sys.executable, "-m", "slurmadm", *args], stdin=slave, stdout=slave, stderr=slave,
                            env=full, close_fds=True)
    os.close(slave)
    chunks = []
    deadline = time.monotonic() + 120  # a hang guard, not a speed requirement
    while time.monotonic() < deadline:
        ready, _, _ = select.select([master], [], [], 1.0)
        if not ready:
            if proc.poll() is not None:
                break
            continue
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=30)
    os.close(master)
    return ANSI.sub("", b"".join(chunks).decode()).replace("\r\n", "\n")


def test_piped_tables_are_plain_aligned_text_one_row_per_line(site):
    r = CliRunner().invoke(cli, ["health", "checks"])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert lines[0].split() == ["check", "severity", "contexts", "on", "fail", "on", "error", "limit", "s", "what"]
    assert not any(ch in r.output for ch in "│┃━─┏")  # no box drawing when piped
    rows = {ln.split()[0]: ln for ln in lines[1:]}
    assert "ecc-uncorrected" in rows and "nccl-allreduce" in rows
    # columns align: every row's severity starts where the header's does
    col = lines[0].index("severity")
    assert all(ln[col - 2:col] == "  " and ln[col] != " " for ln in lines[1:])


def test_audit_log_keeps_bracketed_tags_piped_and_in_a_terminal(site):
    r = CliRunner().invoke(cli, ["audit", "log"])
    assert r.exit_code == 0 and REASON in r.output
    out = in_terminal(["audit", "log"], 200, {"SLURMADM_SITE": str(site)})
    assert REASON in out, out


def test_markup_like_text_from_the_store_is_printed_as_is(site, monkeypatch):
    monkeypatch.setattr(health_cli, "slurm_nodes", lambda: [])
    r = CliRunner().invoke(cli, ["health", "status"])
    assert "ECC=2 [bold]x[/bold]" in r.output


def test_80_columns_keep_ids_whole_and_lines_inside_the_terminal(site):
    out = in_terminal(["health", "checks"], 80, {"SLURMADM_SITE": str(site)})
    lines = [ln for ln in out.splitlines() if ln.strip()]
    assert max(len(ln) for ln in lines) <= 80, "\n".join(lines)
    ids = ["gpu-count", "ecc-uncorrected", "row-remap", "persistence-mode", "nccl-allreduce", "driver-version"]
    for cid in ids:  # a check id never breaks across lines
        assert any(re.search(rf"[│ ]{re.escape(cid)}[ │]", ln) for ln in lines), (cid, out)
    out = in_terminal(["audit", "log"], 80, {"SLURMADM_SITE": str(site)})
    assert max(len(ln) for ln in out.splitlines()) <= 80
    assert "node.drain" in out and "b200-003" in out  # short columns stay whole


def test_health_status_shows_the_whole_drain_reason(site, monkeypatch):
    node = NodeInfo("b200-003", "IDLE", frozenset({"DRAIN"}), reason=REASON, reason_user="root")
    monkeypatch.setattr(health_cli, "slurm_nodes", lambda: [node, NodeInfo("b200-001", "IDLE")])
    r = CliRunner().invoke(cli, ["health", "status"])
    assert r.exit_code == 1  # the failing check
    assert "drained nodes (whole reason)" in r.output
    line = next(ln for ln in r.output.splitlines() if ln.startswith("b200-003") and "IDLE+DRAIN" in ln)
    assert line.endswith(REASON)
    r = CliRunner().invoke(cli, ["health", "status", "--json"])
    import json
    rows = json.loads(r.stdout)
    assert rows[0]["slurm_reason"] == REASON


def test_health_status_says_when_slurm_does_not_answer(site, monkeypatch):
    from slurmadm.errors import UnreachableError

    def down():
        raise UnreachableError("scontrol: no answer within 30 s")

    monkeypatch.setattr(health_cli, "slurm_nodes", down)
    r = CliRunner().invoke(cli, ["health", "status"])
    assert "drain reasons: Slurm did not answer (scontrol: no answer within 30 s)" in r.output


def test_health_status_of_128_nodes_in_80_columns_stays_inside_with_its_hostlists_whole(site):
    """Folded rows (tests/unit/cli/test_fold_at_128.py) in a real 80-column terminal: the long
    hostlist wraps inside its column, the optional columns go first, nothing runs past 80."""
    with Store(tomllib.loads(site.read_text())["store"]["path"]) as store, store.transaction() as db:
        for i in range(1, 129):
            status = "fail" if i in (7, 64, 100) else "pass"
            db.execute("INSERT INTO check_results (ts, run_id, node, context, check_id, status, severity, detail, "
                       "value, duration_ms) VALUES (?,?,?,?,?,?,?,?,?,?)",
                       (time.time() - i, "r", f"b200-{i:03d}", "periodic", "gpu-count", status, "critical",
                        "7 of 8 GPUs" if status == "fail" else f"8 GPUs, {i}", None, 1.0))
    out = in_terminal(["health", "status"], 80, {"SLURMADM_SITE": str(site)})
    lines = [ln for ln in out.splitlines() if ln[:1] in "┏┃┡│└"]  # the table (a long warning wraps as text)
    assert len(lines) == 10 and max(len(ln) for ln in lines) <= 80, out
    assert sum(1 for ln in lines if "│ fail" in ln) == 2, out  # b200-003's ecc row and the 3 gpu-count nodes
    joined = "".join(ln.split("│")[1].strip() for ln in lines if ln.startswith("│"))
    assert "b200-[007,064,100]" in joined, out  # the hostlist, read back across its wrapped lines
    assert "not shown at this width" in out
