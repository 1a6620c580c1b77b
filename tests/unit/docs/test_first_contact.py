"""First contact: the README is short, keeps the two set-up commands, and every link in it
resolves; the demo and the test script print one line per set-up stage and keep the whole output
in a log file that they name when a stage fails."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit
REPO = Path(__file__).resolve().parents[3]


def test_readme_is_short_and_keeps_the_two_commands():
    text = (REPO / "README.md").read_text()
    assert len(text.splitlines()) < 150
    assert "git clone <this repository> slurmadm && cd slurmadm && scripts/demo.sh" in text
    assert "git clone <this repository> slurmadm && cd slurmadm && scripts/test.sh" in text


def test_readme_links_resolve():
    text = (REPO / "README.md").read_text()
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    assert len(links) > 10
    for link in links:
        if link.startswith("http"):
            continue
        path = REPO / link.split("#", 1)[0]
        assert path.exists(), link


def run_stages(tmp_path: Path, body: str) -> subprocess.CompletedProcess:
    script = f"set -euo pipefail\nSTAGE_LOG={tmp_path}/logs/setup.log\n. {REPO}/scripts/stages.sh\n{body}\n"
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, timeout=60)


def test_one_line_per_stage_and_the_whole_output_in_the_log(tmp_path):
    p = run_stages(tmp_path, 'stage "installing system packages" sh -c "seq 1 500"\n'
                             'stage "installing slurmadm" true')
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert len(lines) == 2
    assert re.fullmatch(r"installing system packages \.\.\. done, \d+s", lines[0])
    assert re.fullmatch(r"installing slurmadm \.\.\. done, \d+s", lines[1])
    log = (tmp_path / "logs" / "setup.log").read_text()
    assert "\n500\n" in log and "==== installing slurmadm" in log


def test_a_failing_stage_says_so_and_names_the_log(tmp_path):
    p = run_stages(tmp_path, 'stage "first" sh -c "echo early"\n'
                             'stage "installing system packages" sh -c "echo E: Unable to locate package x >&2; exit 100"\n'
                             'echo never')
    assert p.returncode == 100
    out = p.stdout
    assert "installing system packages ... FAILED after" in out and "(exit 100)" in out
    assert "E: Unable to locate package x" in out
    assert "early" not in out  # only the failed stage's own lines
    assert f"the whole output is in {tmp_path}/logs/setup.log" in out
    assert "never" not in out


def test_stage_durations_read_like_1m40s():
    p = subprocess.run(["bash", "-c", f"STAGE_LOG=/dev/null; . {REPO}/scripts/stages.sh; "
                                      "stage_took 8; echo; stage_took 100; echo; stage_took 3720"],
                       capture_output=True, text=True, timeout=30)
    assert p.stdout.split() == ["8s", "1m40s", "1h02m"]


@pytest.mark.parametrize("script", ["demo.sh", "test.sh"])
def test_demo_and_test_set_up_in_stages(script):
    text = (REPO / "scripts" / script).read_text()
    assert ". scripts/stages.sh" in text
    assert 'stage "installing system packages" scripts/install-system-deps.sh' in text
    # nothing of the set-up prints outside a stage (pytest's own output is not set-up)
    assert not re.search(r"^scripts/(setup|install-system-deps|install-torch-cpu)\.sh", text, re.M)
