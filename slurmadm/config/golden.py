"""Golden files: the full rendering of site.example.toml for Slurm 22.05, pinned in
tests/golden/config/ of a source checkout (tests compare byte for byte).

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


def reference() -> dict[str, str]:
    return render(load_site(example_site()), RELEASE, source=str(example_site()))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m slurmadm.config.golden", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--update", action="store_true", help=f"rewrite the files in {GOLDEN_DIR}")
    args = parser.parse_args(argv)
    files = reference()
    stale = sorted(p.name for p in GOLDEN_DIR.glob("*.conf") if p.name not in files)
    changed = [name for name, text in files.items()
               if not (GOLDEN_DIR / name).exists() or (GOLDEN_DIR / name).read_text() != text]
    if not args.update:
        for name in changed + stale:
            print(f"differs: {name}")
        return 1 if changed or stale else 0
    GOLDEN_DIR.mkdir(parents=True, exist_ok=True)
    for name in changed:
        (GOLDEN_DIR / name).write_text(files[name])
        print(f"updated {GOLDEN_DIR / name}")
    for name in stale:
        (GOLDEN_DIR / name).unlink()
        print(f"removed {GOLDEN_DIR / name}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
