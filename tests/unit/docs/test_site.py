"""The documentation site builds with `mkdocs build --strict` (a broken link, a missing page or a
nav entry without its file fails), and reads in a browser: headless Chromium renders its home page
and a generated reference page, and the screenshots show the theme's header, the navigation and
the page's text (not a blank or unstyled page).

Needs the `docs` extra (mkdocs, mkdocs-material) and Debian's chromium: scripts/test.sh installs
both and sets SLURMADM_REQUIRE_DOCS=1, so CI fails rather than skips when either is missing."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.burnin.test_report_page import png_pixels

pytestmark = pytest.mark.unit
REPO = Path(__file__).resolve().parents[3]
REQUIRED = os.environ.get("SLURMADM_REQUIRE_DOCS") == "1"


def need(ok: bool, what: str) -> None:
    if ok:
        return
    if REQUIRED:
        pytest.fail(f"{what} is missing (scripts/setup.sh test,docs and scripts/install-system-deps.sh install it)")
    pytest.skip(f"{what} is missing: pip install -e '.[docs]'")


@pytest.fixture(scope="module")
def site(tmp_path_factory) -> Path:
    need(importlib.util.find_spec("mkdocs") is not None and importlib.util.find_spec("material") is not None,
         "mkdocs / mkdocs-material")
    out = tmp_path_factory.mktemp("site") / "site"
    p = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--config-file", str(REPO / "mkdocs.yml"),
                        "--site-dir", str(out)], capture_output=True, text=True, timeout=300, cwd=REPO,
                       env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert p.returncode == 0, (p.stdout + p.stderr)[-4000:]
    return out


def test_mkdocs_build_strict_has_every_page(site):
    for page in ("index.html", "tutorial.html", "contributing.html", "DESIGN.html", "SECURITY.html",
                 "reference/site.html", "reference/metrics.html", "reference/alerts.html",
                 "reference/drain-reasons.html", "reference/exit-codes.html", "reference/cli/index.html",
                 "reference/cli/health.html", "runbooks/GpuXidFatal.html",
                 *[f"how-to/{n}.html" for n in ("install", "slurm-hooks", "bmc", "central-store", "monitoring",
                                                 "driver-rollout", "burn-in", "rma", "upgrade", "repair",
                                                 "fault-cost", "slurm-metrics")]):
        assert (site / page).is_file(), page
    home = (site / "index.html").read_text()
    assert 'href="reference/cli/health.html"' in home  # the hook put every command group in the nav
    assert "fonts.googleapis.com" not in home  # builds and reads offline


def chromium(tmp: Path, url: str, *args: str) -> subprocess.CompletedProcess:
    exe = shutil.which("chromium") or shutil.which("chromium-browser")
    need(exe is not None, "chromium")
    argv = [exe, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--hide-scrollbars", f"--user-data-dir={tmp / 'profile'}", *args, url]
    p = subprocess.run(argv, capture_output=True, text=True, timeout=180, env={**os.environ, "HOME": str(tmp)})
    assert p.returncode == 0, p.stderr[-2000:]
    return p


def screenshot(tmp: Path, page: Path, name: str) -> tuple[int, int, list[list[bytes]]]:
    shot = tmp / f"{name}.png"
    chromium(tmp, page.as_uri(), "--window-size=1280,900", f"--screenshot={shot}")
    return png_pixels(shot, 900)


def near(px: bytes, rgb: tuple[int, int, int], tol: int = 24) -> bool:
    return all(abs(a - b) <= tol for a, b in zip(px, rgb))


INDIGO = (0x3F, 0x51, 0xB5)  # Material's "indigo" primary: the header bar


def check_rendered(rows: list[list[bytes]], width: int) -> None:
    header = rows[10]
    assert sum(near(px, INDIGO) for px in header) > width * 0.6, "no themed header bar (CSS not loaded?)"
    body = [px for row in rows[120:800:4] for px in row[::2]]
    dark = sum(1 for px in body if max(px) < 110)
    white = sum(1 for px in body if min(px) > 235)
    assert dark > 500, "hardly any text on the page"
    assert white > len(body) * 0.4, "the page is not a light page with text on it"


def test_home_page_in_chromium(site, tmp_path):
    width, _, rows = screenshot(tmp_path, site / "index.html", "home")
    assert width == 1280
    check_rendered(rows, width)
    dom = chromium(tmp_path, (site / "index.html").as_uri(), "--dump-dom").stdout
    assert "Slurm-integrated admin toolkit" in dom and "Tutorial" in dom and "How-to guides" in dom


def test_reference_page_in_chromium(site, tmp_path):
    page = site / "reference" / "cli" / "health.html"
    width, _, rows = screenshot(tmp_path, page, "health")
    check_rendered(rows, width)
    dom = chromium(tmp_path, page.as_uri(), "--dump-dom").stdout
    assert "slurmadm health run" in dom and "<table>" in dom and "--dry-run" in dom


def test_a_new_how_to_page_joins_the_nav_by_itself(tmp_path):
    """A how-to page someone adds without editing mkdocs.yml still gets its nav entry (a page
    outside the nav fails `mkdocs build --strict`)."""
    need(importlib.util.find_spec("mkdocs") is not None, "mkdocs")
    from slurmadm.docgen import mkdocs_hook

    (tmp_path / "how-to").mkdir()
    for name, title in (("install.md", "Install"), ("new-thing.md", "Do a new thing")):
        (tmp_path / "how-to" / name).write_text(f"# {title}\n\ntext\n")
    nav = [{"Home": "index.md"}, {"How-to guides": [{"Install": "how-to/install.md"}]},
           {"Reference": [{"Commands": ["reference/cli/index.md"]}]}]
    config = {"nav": nav, "docs_dir": str(tmp_path)}
    mkdocs_hook._add_howtos(config)
    assert nav[1]["How-to guides"] == [{"Install": "how-to/install.md"}, {"Do a new thing": "how-to/new-thing.md"}]
    mkdocs_hook._add_howtos(config)  # listed now: not twice
    assert len(nav[1]["How-to guides"]) == 2
    mkdocs_hook._fill_nav(nav, [{"slurmadm health": "reference/cli/health.md"}])
    assert nav[2]["Reference"][0]["Commands"] == ["reference/cli/index.md", {"slurmadm health": "reference/cli/health.md"}]
