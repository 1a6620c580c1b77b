"""Hooks never wait on the central store: a prolog only writes locally (its rows queued in the
outbox); the periodic run starts a detached shipper and returns."""

from __future__ import annotations

import pytest

from slurmadm.health import engine
from slurmadm.health.runner import Plan, Result
from slurmadm.store import Store, central
from slurmadm.store import ship as ship_mod
from tests.unit.health.test_runner import cfg

pytestmark = pytest.mark.unit

RESULTS = [Result("gpu-count", "pass", "critical", "drain", "8 GPUs", 8.0, 1.0),
           Result("ecc-uncorrected", "pass", "critical", "drain", "", None, 1.0)]


@pytest.fixture()
def hooked(monkeypatch, tmp_path):
    spawned: list[tuple[str, str]] = []
    monkeypatch.setattr(engine, "select", lambda *a, **k: [])
    monkeypatch.setattr(engine, "run_checks", lambda *a, **k: list(RESULTS))
    monkeypatch.setattr(engine, "_act", lambda *a, **k: (Plan("none", "clean"), False))
    monkeypatch.setattr(ship_mod, "spawn", lambda site, node: spawned.append((site, node)))

    def no_network(*a, **k):
        raise AssertionError("a hook connected to the central store")

    monkeypatch.setattr(central, "connect", no_network)
    return spawned, str(tmp_path / "b200-001.db")


def test_prolog_with_shipping_on_writes_locally_and_ships_nothing(hooked):
    spawned, path = hooked
    report = engine.execute(cfg(ship=True, store_path=path, site_path="/etc/slurmadm/site.toml"), "prolog",
                            use_syslog=False)
    assert report.exit_code == 0 and not report.problems
    assert spawned == []
    with Store(path) as s:
        queued = s.query("SELECT tbl, count(*) AS n FROM outbox GROUP BY tbl")
    assert queued == [{"tbl": "check_results", "n": 2}]


def test_periodic_run_starts_one_detached_shipper(hooked):
    spawned, path = hooked
    engine.execute(cfg(ship=True, store_path=path, site_path="/etc/slurmadm/site.toml"), "periodic",
                   use_syslog=False)
    assert spawned == [("/etc/slurmadm/site.toml", "b200-001")]


def test_without_a_central_store_nothing_is_queued_or_shipped(hooked):
    spawned, path = hooked
    engine.execute(cfg(store_path=path), "periodic", use_syslog=False)
    assert spawned == []
    with Store(path) as s:
        assert s.query("SELECT count(*) AS n FROM outbox") == [{"n": 0}]
        assert s.query("SELECT count(*) AS n FROM check_results") == [{"n": 2}]


def test_turning_shipping_off_stops_queueing(hooked):
    spawned, path = hooked
    engine.execute(cfg(ship=True, store_path=path), "prolog", use_syslog=False)
    engine.execute(cfg(ship=False, store_path=path), "prolog", use_syslog=False)
    with Store(path) as s:
        assert s.query("SELECT count(*) AS n FROM outbox") == [{"n": 2}]
        assert s.query("SELECT count(*) AS n FROM check_results") == [{"n": 4}]


def test_a_shipping_prolog_never_imports_the_database_driver(tmp_path):
    """The hook in a fresh interpreter, shipping on: PyMySQL (and the shipper) stay unloaded."""
    import subprocess
    import sys

    code = (
        "import json, sys\n"
        "from slurmadm.health import engine\n"
        "from slurmadm.health.runner import Plan\n"
        "from tests.unit.health.test_runner import cfg\n"
        "engine.select = lambda *a, **k: []\n"
        "engine.run_checks = lambda *a, **k: []\n"
        "engine._act = lambda *a, **k: (Plan('none', 'clean'), False)\n"
        f"engine.execute(cfg(ship=True, store_path={str(tmp_path / 'n.db')!r}), 'prolog', use_syslog=False)\n"
        "print(json.dumps(sorted(m for m in sys.modules if m.startswith(('pymysql', 'slurmadm.store.')))))\n"
    )
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
                       cwd=str(__import__("pathlib").Path(__file__).resolve().parents[3]))
    assert p.returncode == 0, p.stderr
    assert __import__("json").loads(p.stdout) == ["slurmadm.store.schema"]
