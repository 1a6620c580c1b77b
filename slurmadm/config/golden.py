"""Golden files: the full rendering of site.example.toml for Slurm 22.05, pinned in
tests/golden/config/ of a source checkout, and for 26.05 (Slurm's own metrics, HealthCheckTimeout)
in tests/golden/config/26.05/ (tests compare byte for byte).

Regenerate them only on purpose, after checking the new output:

    python -m slurmadm.config.golden --update
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..resources import example_site
from ..site import load_site
from .render import render

RELEASE = (22, 5)
GOLDEN_DIR = Path(__file__).resolve().parents[2] / "tests" / "golden" / "config"
# every pinned release: the oldest at GOLDEN_DIR, the others in GOLDEN_DIR/<release>
RELEASES = ((22, 5), (26, 5))


def golden_dir(release=RELEASE) -> Path:
    return GOLDEN_DIR if release == RELEASE else GOLDEN_DIR / f"{release[0]}.{release[1]:02d}"


def reference(release=RELEASE) -> dict[str, str]:
    return render(load_site(example_site()), release, source=str(example_site()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m slurmadm.config.golden", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--update", action="store_true", help=f"rewrite the files in {GOLDEN_DIR}")
    args = parser.parse_args(argv)
    rc = 0
    for release in RELEASES:
        rc = max(rc, _one(release, args.update))
    return rc


def _one(release, update: bool) -> int:
    where = golden_dir(release)
    files = reference(release)
    stale = sorted(p.name for p in where.glob("*.conf") if p.name not in files)
    changed = [name for name, text in files.items()
               if not (where / name).exists() or (where / name).read_text() != text]
    if not update:
        for name in changed + stale:
            print(f"differs: {where / name}")
        return 1 if changed or stale else 0
    where.mkdir(parents=True, exist_ok=True)
    for name in changed:
        (where / name).write_text(files[name])
        print(f"updated {where / name}")
    for name in stale:
        (where / name).unlink()
        print(f"removed {where / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
