"""scripts/trixie-chroot.sh takes its Debian mirror from the host's apt sources (it names no
mirror host itself): one-line sources.list and *.list entries, deb822 *.sources stanzas."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "trixie-chroot.sh"


def mirror(apt: Path, **env) -> subprocess.CompletedProcess[str]:
    e = {k: v for k, v in os.environ.items() if k != "TRIXIE_MIRROR"}
    return subprocess.run(["bash", str(SCRIPT), "mirror"], env={**e, "TRIXIE_APT_ETC": str(apt), **env},
                          capture_output=True, text=True, timeout=30)


def test_the_script_names_no_mirror_host():
    text = SCRIPT.read_text()
    assert "debian.org" not in text and "http://" not in text.replace("(https?|ftp|file)", "")


def test_one_line_sources_list_skips_comments_options_and_security(tmp_path):
    (tmp_path / "sources.list.d").mkdir()
    (tmp_path / "sources.list").write_text(
        "# deb http://commented.example.invalid/debian bookworm main\n"
        "deb-src http://src.example.invalid/debian bookworm main\n"
        "deb [signed-by=/usr/share/keyrings/k.gpg] http://security.example.invalid/debian-security bookworm-security main\n"
        "deb [ arch=amd64 ] http://mirror.example.invalid/debian/ bookworm main contrib\n"
        "deb http://later.example.invalid/debian bookworm main\n")
    p = mirror(tmp_path)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["http://mirror.example.invalid/debian/", str(tmp_path / "sources.list")]


def test_deb822_sources(tmp_path):
    d = tmp_path / "sources.list.d"
    d.mkdir()
    (d / "other.list.disabled").write_text("deb http://disabled.example.invalid/debian bookworm main\n")
    (d / "debian.sources").write_text(
        "Types: deb\n# a comment\nURIs: http://sec.example.invalid/debian-security\nSuites: bookworm-security\n"
        "Components: main\n\n"
        "Types: deb deb-src\nURIs: http://off.example.invalid/debian\nSuites: bookworm\nEnabled: no\n\n"
        "Types: deb\nURIs: mirror+file:///etc/apt/mirrors.txt http://deb822.example.invalid/debian\n"
        "Suites: bookworm bookworm-updates\nComponents: main\n")
    p = mirror(tmp_path)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["http://deb822.example.invalid/debian", str(d / "debian.sources")]


def test_no_source_is_a_clear_error_and_the_override_wins(tmp_path):
    (tmp_path / "sources.list").write_text("deb http://security.example.invalid/d bookworm-security main\n")
    p = mirror(tmp_path)
    assert p.returncode == 2 and "set TRIXIE_MIRROR" in p.stderr
    p = mirror(tmp_path, TRIXIE_MIRROR="http://override.example.invalid/debian")
    assert p.stdout.split()[0] == "http://override.example.invalid/debian"


def _debootstrap(tmp_path: Path, suite: str | None, scripts: list[str]) -> subprocess.CompletedProcess[str]:
    sdir = tmp_path / "scripts"
    sdir.mkdir(parents=True, exist_ok=True)
    for name in scripts:
        (sdir / name).write_text("# debootstrap suite script\n")
    e = {k: v for k, v in os.environ.items() if k not in ("TRIXIE_SUITE", "TRIXIE_ROOT")}
    env = {**e, "TRIXIE_MIRROR": "http://mirror.example.invalid/debian", "TRIXIE_DEBOOTSTRAP_SCRIPTS": str(sdir)}
    if suite:
        env["TRIXIE_SUITE"] = suite
    return subprocess.run(["bash", str(SCRIPT), "debootstrap"], env=env, capture_output=True, text=True, timeout=30)


def test_the_suite_is_a_choice_and_bookworms_debootstrap_builds_forky_with_its_sid_script(tmp_path):
    """Bookworm's debootstrap has scripts up to trixie and sid, none for forky (Debian testing,
    Slurm 26.05): `create` then passes the sid script."""
    bookworm = ["bookworm", "trixie", "sid"]
    p = _debootstrap(tmp_path, None, bookworm)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["debootstrap", "--variant=minbase", "trixie", "/srv/trixie",
                                "http://mirror.example.invalid/debian"]
    p = _debootstrap(tmp_path, "forky", bookworm)
    assert p.returncode == 0, p.stderr
    assert p.stdout.split() == ["debootstrap", "--variant=minbase", "forky", "/srv/forky",
                                "http://mirror.example.invalid/debian", str(tmp_path / "scripts" / "sid")]
    p = _debootstrap(tmp_path / "new", "forky", ["forky", "sid"])  # a debootstrap that knows forky
    assert p.stdout.split()[-1] == "http://mirror.example.invalid/debian"
    bad = _debootstrap(tmp_path, "Forky;rm", bookworm)
    assert bad.returncode == 2 and "not a Debian suite name" in bad.stderr


def test_testing_and_unstable_chroots_do_not_check_valid_until():
    text = SCRIPT.read_text()
    assert 'Acquire::Check-Valid-Until "false";' in text and "SHORT_LIVED=yes" in text
