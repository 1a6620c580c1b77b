"""Read commands on a corrupt store: one line naming the store, exit 3, no traceback (issue 15)."""

from __future__ import annotations

import sqlite3
import tomllib
from pathlib import Path

import pytest
import tomli_w
from click.testing import CliRunner

from slurmadm.cli import cli
from slurmadm.store import Store

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[3]
READS = [["health", "status"], ["health", "history"], ["audit", "log"], ["burnin", "status"],
         ["health", "status", "--json"], ["audit", "log", "--json"]]


@pytest.fixture()
def site(tmp_path, monkeypatch) -> tuple[Path, Path]:
    data = tomllib.loads((REPO / "site.example.toml").read_text())
    db = tmp_path / "slurmadm.db"
    data["store"] = {"path": str(db)}
    data["health"]["results_log"] = str(tmp_path / "health.jsonl")
    path = tmp_path / "site.toml"
    path.write_text(tomli_w.dumps(data))
    monkeypatch.setenv("SLURMADM_SITE", str(path))
    monkeypatch.setenv("SLURMADM_CACHE_DIR", str(tmp_path / "cache"))
    return path, db


def not_a_database(db: Path) -> None:
    db.write_bytes(b"this is not an SQLite file\n" * 200)


def malformed_pages(db: Path) -> None:
    """A real store whose table pages were overwritten (a torn copy, a bad disk)."""
    with Store(db) as store:
        for i in range(300):
            store.audit("node.drain", f"b200-{i:03d}", "x" * 200)
        store.db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    raw = bytearray(db.read_bytes())
    page = int.from_bytes(raw[16:18], "big") or 65536
    for off in range(page, len(raw), page):  # every page after the first: header and schema survive
        raw[off:off + 64] = b"\xa5" * 64
    db.write_bytes(bytes(raw))
    for side in (db.with_name(db.name + "-wal"), db.with_name(db.name + "-shm")):
        side.unlink(missing_ok=True)


@pytest.mark.parametrize("damage", [not_a_database, malformed_pages])
@pytest.mark.parametrize("argv", READS, ids=[" ".join(a) for a in READS])
def test_read_commands_on_a_corrupt_store(site, damage, argv):
    _path, db = site
    damage(db)
    r = CliRunner().invoke(cli, argv)
    assert r.exit_code == 3, (r.output, r.exception)
    assert "Traceback" not in r.output and not isinstance(r.exception, sqlite3.Error)
    lines = [x for x in r.output.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("slurmadm: error: store ") and str(db) in lines[0], r.output
